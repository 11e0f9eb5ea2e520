"""EnsembleClassifier / EnsembleRegressor: members, seeds, averaging, validation."""
import pickle

import numpy as np
import pytest

import attnx

SMALL = dict(d_model=8, n_heads=2, n_layers=1, epochs=3, batch_size=8, dropout=0.0)


def _data(seed=0, n=24, t=6, f=2):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, t, f)).astype(np.float32)
    y = (X[:, :, 0].mean(axis=1) > 0).astype(int)
    return X, y


def test_classifier_is_soft_vote_of_members_with_their_own_seeds():
    X, y = _data()
    ens = attnx.EnsembleClassifier(attnx.TransformerClassifier(**SMALL), n_members=3,
                                   random_state=7).fit(X, y)
    assert len(ens.estimators_) == 3 and len(set(ens.seeds_)) == 3
    for m, s in zip(ens.estimators_, ens.seeds_):
        single = attnx.TransformerClassifier(**SMALL, random_state=s).fit(X, y)
        np.testing.assert_array_equal(m.predict_proba(X), single.predict_proba(X))
    probs = [m.predict_proba(X) for m in ens.estimators_]
    np.testing.assert_allclose(ens.predict_proba(X), np.mean(probs, axis=0), rtol=1e-6)
    assert not np.allclose(probs[0], probs[1])     # the members differ
    np.testing.assert_array_equal(ens.predict(X), ens.classes_[np.argmax(np.mean(probs, 0), 1)])
    assert ens.score(X, y) == np.mean(ens.predict(X) == y)


def test_same_root_seed_same_members_and_estimator_untouched():
    X, y = _data()
    base = attnx.TransformerClassifier(**SMALL)
    before = base.get_params()
    a = attnx.EnsembleClassifier(base, n_members=2, random_state=3).fit(X, y)
    b = attnx.EnsembleClassifier(base, n_members=2, random_state=3).fit(X, y)
    assert a.seeds_ == b.seeds_
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
    assert base.get_params() == before and not hasattr(base, "classes_")
    c = attnx.EnsembleClassifier(base, n_members=2, random_state=4).fit(X, y)
    assert c.seeds_ != a.seeds_


def test_regressor_mean_and_r2_and_pickle():
    X, _ = _data(1)
    y = X[:, :, 1].mean(axis=1).astype(np.float64)
    ens = attnx.EnsembleRegressor(attnx.TransformerRegressor(**SMALL), n_members=2,
                                  random_state=0).fit(X, y)
    preds = [m.predict(X) for m in ens.estimators_]
    np.testing.assert_allclose(ens.predict(X), (preds[0].astype(np.float64) + preds[1]) / 2,
                               rtol=1e-6)
    p = ens.predict(X)
    r2 = 1 - np.sum((y - p) ** 2) / np.sum((y - y.mean()) ** 2)
    assert ens.score(X, y) == pytest.approx(r2, rel=1e-6)
    again = pickle.loads(pickle.dumps(ens))
    np.testing.assert_array_equal(again.predict(X), ens.predict(X))


def test_ragged_per_sequence_input():
    rng = np.random.default_rng(2)
    X = [rng.standard_normal((t, 1)).astype(np.float32) for t in (3, 5, 4, 6, 5, 3, 6, 4)]
    y = np.array([0, 1] * 4)
    ens = attnx.EnsembleClassifier(attnx.TransformerClassifier(**SMALL), n_members=2,
                                   random_state=0).fit(X, y)
    assert ens.predict_proba(X).shape == (8, 2)


def test_sklearn_clone_and_params():
    sklearn = pytest.importorskip("sklearn")
    from sklearn.base import clone, is_classifier, is_regressor
    ens = attnx.EnsembleClassifier(attnx.TransformerClassifier(**SMALL), n_members=2)
    c = clone(ens)
    assert c.get_params(deep=False)["n_members"] == 2 and c.estimator is not ens.estimator
    assert is_classifier(ens) and is_regressor(attnx.EnsembleRegressor())
    del sklearn


@pytest.mark.parametrize("n", [0, -1, 1.5, True, "3"])
def test_bad_n_members(n):
    X, y = _data()
    with pytest.raises(ValueError, match="n_members must be an int >= 1"):
        attnx.EnsembleClassifier(n_members=n).fit(X, y)


def test_bad_estimator_and_not_fitted():
    X, y = _data()
    with pytest.raises(TypeError, match="estimator must be an estimator"):
        attnx.EnsembleClassifier(estimator="TransformerClassifier").fit(X, y)
    with pytest.raises(ValueError, match="not fitted"):
        attnx.EnsembleRegressor().predict(X)
