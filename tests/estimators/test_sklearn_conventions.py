"""scikit-learn's estimator conventions, checked on all four estimators.

scikit-learn's own check_estimator feeds 2-D arrays only; these are the checks
that matter for sequence estimators, written for 3-D and ragged input.
"""
import inspect
import pickle
import warnings

import numpy as np
import pytest

from bare_settings import BARE as OLD, BARE_CLS as OLD_CLS, merged  # noqa: F401
import attnx

ALL = [attnx.AttentionRegressor, attnx.TransformerRegressor, attnx.AttentionClassifier,
       attnx.TransformerClassifier]


def is_clf(cls):
    return cls in (attnx.AttentionClassifier, attnx.TransformerClassifier)


def make(cls, **kw):
    opts = dict(n_heads=2, d_model=8, epochs=3, batch_size=16, lr=1e-2, random_state=0)
    if "Transformer" in cls.__name__:   # the previous release's recipe: these tests compare exact fits
        old = OLD_CLS if "Classifier" in cls.__name__ else OLD
        opts = merged(old, opts, n_layers=1, d_hidden=16)
    return cls(**merged(opts, kw))


def data(cls, n=40, t=5, f=3, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, t, f)).astype(dtype)
    s = X[:, :, 0].mean(axis=1)
    y = np.where(s > 0, "b", "a") if is_clf(cls) else s * 3
    return X, y


def params(est):
    return est.model_.params.flat


@pytest.mark.parametrize("cls", ALL)
def test_fit_never_modifies_its_inputs(cls):
    X, y = data(cls)
    sw = np.linspace(0.5, 1.5, len(y))
    copies = [X.copy(), y.copy(), sw.copy()]
    make(cls).fit(X, y, sample_weight=sw)
    Xl = [x[:3 + i % 2].copy() for i, x in enumerate(X)]
    before = [x.copy() for x in Xl]
    est = make(cls).fit(Xl, y)
    est.predict(Xl)
    est.score(Xl, y, sample_weight=sw)
    for a, b in zip([X, y, sw], copies):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(Xl, before):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("cls", ALL)
def test_fit_is_idempotent_and_clone_is_unfitted(cls):
    from sklearn.base import clone

    X, y = data(cls)
    est = make(cls)
    first = params(est.fit(X, y)).copy()
    p1 = est.predict(X)
    est.fit(X, y)   # the same seed: the same model, from scratch
    np.testing.assert_array_equal(params(est), first)
    np.testing.assert_array_equal(est.predict(X), p1)
    c = clone(est)
    assert c.get_params() == est.get_params() and not hasattr(c, "model_")
    assert type(c) is cls


@pytest.mark.parametrize("cls", ALL)
def test_pickle_round_trip_and_n_features_in(cls):
    X, y = data(cls)
    est = make(cls, options={"validation_fraction": 0.2}).fit(X, y)
    assert est.n_features_in_ == 3
    back = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(back.predict(X), est.predict(X))
    assert back.validation_loss_curve_ == est.validation_loss_curve_
    assert back.get_params() == est.get_params()
    est.partial_fit(X, y)
    back.partial_fit(X, y)
    np.testing.assert_array_equal(params(back), params(est))


@pytest.mark.parametrize("cls", ALL)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_predictions_keep_the_model_dtype(cls, dtype):
    X, y = data(cls)
    est = make(cls, dtype=dtype).fit(X.astype(np.float32), y)   # input dtype is irrelevant
    out = est.predict_proba(X) if is_clf(cls) else est.predict(X)
    assert out.dtype == dtype
    assert params(est).dtype == dtype


@pytest.mark.parametrize("cls", ALL)
def test_sample_weight_equivalences(cls):
    """Full-batch training: weight 2 == the sample given twice, weight 0 == the sample
    left out, and scaling every weight changes nothing (all to rounding)."""
    X, y = data(cls, n=24)
    kw = dict(batch_size=64, dtype=np.float64, epochs=4)
    w = np.ones(24)
    w[[3, 10]] = 2.0
    w[5] = 0.0
    a = make(cls, **kw).fit(X, y, sample_weight=w)
    keep = [i for i in range(24) if i != 5] + [3, 10]
    b = make(cls, **kw).fit(X[keep], y[keep])
    np.testing.assert_allclose(params(a), params(b), rtol=1e-8, atol=1e-10)
    c = make(cls, **kw).fit(X, y, sample_weight=7.5 * w)
    np.testing.assert_allclose(params(c), params(a), rtol=1e-8, atol=1e-10)
    d = make(cls, **kw).fit(X, y, sample_weight=np.ones(24))
    e = make(cls, **kw).fit(X, y)
    np.testing.assert_allclose(params(d), params(e), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("cls", ALL)
def test_bad_sample_weights_raise(cls):
    X, y = data(cls, n=10)
    with pytest.raises(ValueError, match="sample_weight is zero for every sample"):
        make(cls).fit(X, y, sample_weight=np.zeros(10))
    with pytest.raises(ValueError, match="sample_weight must be >= 0"):
        make(cls).fit(X, y, sample_weight=-np.ones(10))
    with pytest.raises(ValueError, match=r"sample_weight must have shape \(10,\)"):
        make(cls).fit(X, y, sample_weight=np.ones(9))
    with pytest.raises(ValueError, match="sample_weight contains NaN"):
        make(cls).fit(X, y, sample_weight=np.full(10, np.nan))


@pytest.mark.parametrize("cls", ALL)
def test_weighted_score_is_sklearns_metric(cls):
    from sklearn.metrics import accuracy_score, r2_score

    X, y = data(cls)
    est = make(cls).fit(X, y)
    sw = np.random.default_rng(1).uniform(0, 2, size=len(y))
    metric = accuracy_score if is_clf(cls) else r2_score
    assert est.score(X, y, sample_weight=sw) == pytest.approx(
        metric(y, est.predict(X), sample_weight=sw), rel=1e-6)
    assert est.score(X, y) == pytest.approx(metric(y, est.predict(X)), rel=1e-6)


@pytest.mark.parametrize("cls", ALL)
def test_keyword_names_are_sklearns(cls):
    def names(f):
        return list(inspect.signature(f).parameters)

    # comm: attnx's own extra (an MPI communicator for data-parallel training);
    # X_unlabelled (keyword only): more series for pretrain="masked"
    assert names(cls.fit) == ["self", "X", "y", "sample_weight", "comm", "X_unlabelled"]
    assert names(cls.score) == ["self", "X", "y", "sample_weight"]
    assert names(cls.partial_fit) == (["self", "X", "y", "classes", "sample_weight", "comm"]
                                      if is_clf(cls) else
                                      ["self", "X", "y", "sample_weight", "comm"])


@pytest.mark.parametrize("cls", ALL)
def test_not_fitted_error_is_sklearns(cls):
    from sklearn.exceptions import NotFittedError

    X, _ = data(cls)
    assert attnx.estimators.NotFittedError is NotFittedError
    with pytest.raises(NotFittedError, match="not fitted"):
        make(cls).predict(X)
    assert issubclass(NotFittedError, ValueError) and issubclass(NotFittedError, AttributeError)


def test_without_sklearn_not_fitted_error_is_attnxs_own(tmp_path):
    import subprocess
    import sys

    code = ("import sys; sys.modules['sklearn'] = None\n"
            "import numpy as np, attnx\n"
            "from attnx.estimators import NotFittedError as E\n"
            "assert issubclass(E, ValueError) and issubclass(E, AttributeError)\n"
            "try:\n    attnx.AttentionRegressor().predict(np.zeros((1, 2, 2)))\n"
            "except E as e:\n    print('raised', type(e).__module__)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "raised attnx.estimators._base"


@pytest.mark.parametrize("cls", ALL)
def test_random_state_takes_int_generator_and_random_state(cls):
    X, y = data(cls)
    a = make(cls, random_state=np.random.RandomState(5)).fit(X, y)
    b = make(cls, random_state=np.random.RandomState(5)).fit(X, y)
    np.testing.assert_array_equal(params(a), params(b))
    g = make(cls, random_state=np.random.default_rng(5)).fit(X, y)
    h = make(cls, random_state=np.random.default_rng(5)).fit(X, y)
    np.testing.assert_array_equal(params(g), params(h))
    assert not np.array_equal(params(a), params(g))
    with pytest.raises(TypeError, match="random_state must be"):
        make(cls, random_state="seed").fit(X, y)


@pytest.mark.parametrize("cls", ALL)
def test_warm_start_continues_where_fit_stopped(cls):
    X, y = data(cls)
    full = make(cls, epochs=4).fit(X, y)
    warm = make(cls, epochs=2, warm_start=True).fit(X, y)
    model = warm.model_
    warm.fit(X, y)                         # two more epochs on the same model
    assert warm.model_ is model and warm.n_iter_ == 4 and len(warm.loss_curve_) == 4
    np.testing.assert_array_equal(params(warm), params(full))
    cold = make(cls, epochs=2).fit(X, y)
    cold.fit(X, y)                          # warm_start=False: from scratch again
    assert cold.n_iter_ == 2


@pytest.mark.parametrize("cls", ALL)
def test_training_loss_plateau_stops_with_a_convergence_warning(cls):
    from sklearn.exceptions import ConvergenceWarning

    X, y = data(cls)
    est = make(cls, epochs=50, options={"tol": 1e6, "n_iter_no_change": 3})   # nothing counts as progress
    with pytest.warns(ConvergenceWarning, match="did not improve by more than tol=1000000.0 "
                                                "for 3 consecutive epochs: stopped after "
                                                "epoch 4 of 50"):
        est.fit(X, y)
    assert est.n_iter_ == 4
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make(cls, epochs=3, options={"tol": 1e6, "n_iter_no_change": 3}).fit(X, y)   # too short to stall
        # early_stopping=True: the same rule stops quietly, keeping the best weights
        e = make(cls, epochs=50, options={"tol": 1e6, "n_iter_no_change": 3, "early_stopping": True, "validation_fraction": 0.2}).fit(X, y)
    assert e.n_iter_ == 4


@pytest.mark.parametrize("cls", ALL)
def test_grid_search_and_cross_val_score(cls):
    from sklearn.model_selection import GridSearchCV, KFold, cross_val_score

    X, y = data(cls, n=60)
    scores = cross_val_score(make(cls), X, y, cv=KFold(3))
    assert scores.shape == (3,) and np.isfinite(scores).all()
    grid = GridSearchCV(make(cls), {"d_model": [4, 8], "norm": [None, "pre"]}, cv=KFold(2))
    grid.fit(X, y)
    assert grid.best_estimator_.model_.d_model == grid.best_params_["d_model"]
    assert grid.score(X, y) == pytest.approx(grid.best_estimator_.score(X, y))
