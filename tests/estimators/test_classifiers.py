"""AttentionClassifier / TransformerClassifier: labels, probabilities, weights, partial_fit."""
import pickle

import numpy as np
import pytest

from bare_settings import BARE as OLD, BARE_CLS as OLD_CLS, merged  # noqa: F401
import attnx

CLASSIFIERS = [attnx.AttentionClassifier, attnx.TransformerClassifier]


def sign_task(n, t=8, f=3, seed=0, labels=("neg", "pos")):
    """Label = sign of the mean of feature 0 over the sequence (string labels)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, t, f)).astype(np.float32)
    y = np.where(X[:, :, 0].mean(axis=1) > 0, labels[1], labels[0])
    return X, y


def small(cls=attnx.AttentionClassifier, **kw):
    opts = dict(n_heads=2, d_model=8, epochs=15, batch_size=32, lr=1e-2, random_state=0)
    if cls is attnx.TransformerClassifier:   # with the previous release's recipe
        opts = merged(OLD_CLS, opts, n_layers=1, d_hidden=16)
    return cls(**merged(opts, kw))


@pytest.fixture(scope="module")
def task():
    X, y = sign_task(300, seed=0)
    Xt, yt = sign_task(200, seed=1)
    return X, y, Xt, yt


@pytest.mark.parametrize("cls", CLASSIFIERS)
def test_string_labels_probabilities_and_accuracy(cls, task):
    from sklearn.metrics import accuracy_score

    X, y, Xt, yt = task
    est = small(cls).fit(X, y)
    assert list(est.classes_) == ["neg", "pos"] and est.n_features_in_ == 3
    pred = est.predict(Xt)
    assert pred.shape == (200,) and set(pred) <= {"neg", "pos"}
    proba = est.predict_proba(Xt)
    assert proba.shape == (200, 2) and proba.dtype == np.float32
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-5)
    assert (proba >= 0).all()
    np.testing.assert_allclose(np.log(proba), est.predict_log_proba(Xt), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(pred, est.classes_[np.argmax(proba, axis=1)])
    acc = est.score(Xt, yt)
    assert acc == pytest.approx(accuracy_score(yt, pred))
    # learns: clearly better than always answering the training majority class
    majority = max(np.mean(yt == "neg"), np.mean(yt == "pos"))
    assert acc > majority + 0.15, (acc, majority)


def test_integer_labels_and_more_classes():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(240, 6, 2))
    y = np.argmax(X.mean(axis=1) @ np.array([[1.0, -1.0, 0.0], [0.0, 1.0, -1.0]]), axis=1) * 10
    est = small(epochs=25, dtype=np.float64, options={"n_iter_no_change": 25}).fit(X, y)
    assert est.classes_.tolist() == [0, 10, 20] and est.classes_.dtype.kind == "i"
    assert est.predict_proba(X).shape == (240, 3) and est.predict_proba(X).dtype == np.float64
    chance = np.bincount(y // 10).max() / len(y)
    assert est.score(X, y) > chance + 0.2


def test_per_position_labels():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 7, 2)).astype(np.float32)
    y = (np.cumsum(X[:, :, 0], axis=1) > 0).astype(int)   # needs the past: causal
    est = small(attnx.TransformerClassifier, epochs=30, options={"causal": True}).fit(X, y)
    assert est.predict(X).shape == (120, 7)
    assert est.predict_proba(X).shape == (120, 7, 2)
    assert est.model_.pooling is None
    acc = est.score(X, y)
    assert acc == pytest.approx(np.mean(est.predict(X) == y))
    assert acc > max(np.mean(y), 1 - np.mean(y)) + 0.1


def test_class_weight_dict_equals_sample_weight_and_balanced(task):
    X, y, _, _ = task
    X, y = X[:90], y[:90]
    a = small(class_weight={"pos": 3.0}, epochs=3).fit(X, y)
    b = small(epochs=3).fit(X, y, sample_weight=np.where(y == "pos", 3.0, 1.0))
    np.testing.assert_array_equal(a.model_.params.flat, b.model_.params.flat)
    counts = {c: np.sum(y == c) for c in ("neg", "pos")}
    balanced = {c: len(y) / (2 * k) for c, k in counts.items()}
    c = small(class_weight="balanced", epochs=3).fit(X, y)
    d = small(class_weight=balanced, epochs=3).fit(X, y)
    np.testing.assert_array_equal(c.model_.params.flat, d.model_.params.flat)
    assert not np.array_equal(c.model_.params.flat, small(epochs=3).fit(X, y).model_.params.flat)
    with pytest.raises(ValueError, match="class_weight names the label 'maybe'"):
        small(class_weight={"maybe": 2.0}).fit(X, y)
    with pytest.raises(ValueError, match="class_weight must be None, 'balanced' or a dict"):
        small(class_weight="auto").fit(X, y)


def test_partial_fit_needs_classes_and_refuses_unseen_labels(task):
    X, y, _, _ = task
    est = small()
    with pytest.raises(ValueError, match="classes must be given to the first partial_fit"):
        est.partial_fit(X, y)
    est.partial_fit(X[:50], y[:50], classes=["neg", "pos", "zero"])
    assert est.classes_.tolist() == ["neg", "pos", "zero"] and est.n_iter_ == 1
    assert est.predict_proba(X[:4]).shape == (4, 3)
    est.partial_fit(X[50:100], y[50:100])  # classes not needed again
    assert est.n_iter_ == 2
    with pytest.raises(ValueError, match=r"y holds labels not among classes_.*'maybe'"):
        est.partial_fit(X[:3], np.array(["neg", "maybe", "pos"]))
    with pytest.raises(ValueError, match="differ from classes_"):
        est.partial_fit(X[:3], y[:3], classes=["neg", "pos"])
    # "balanced" counts the labels of each call: one partial_fit == one epoch of fit
    bal = small(class_weight="balanced").partial_fit(X, y, classes=["neg", "pos"])
    np.testing.assert_array_equal(bal.model_.params.flat,
                                  small(class_weight="balanced", epochs=1).fit(X, y)
                                  .model_.params.flat)
    with pytest.raises(ValueError, match="must have 3 features"):
        est.partial_fit(X[:3, :, :2], y[:3])
    with pytest.raises(ValueError, match="labels per sequence"):
        est.partial_fit(X[:3], np.array([["neg"] * 8] * 3))


def test_bad_labels_raise_naming_y(task):
    X, y, _, _ = task
    with pytest.raises(ValueError, match="single class"):
        small().fit(X[:10], np.array(["a"] * 10))
    with pytest.raises(ValueError, match=r"y must have shape \(10,\)"):
        small().fit(X[:10], y[:9])
    with pytest.raises(ValueError, match="y contains NaN"):
        small().fit(X[:4], np.array([0.0, 1.0, np.nan, 1.0]))
    bad = X[:10].copy()
    bad[2, 3, 1] = np.inf
    with pytest.raises(ValueError, match="X contains NaN or infinity"):
        small().fit(bad, y[:10])
    with pytest.raises(ValueError, match="every label a weight of zero"):
        small(class_weight={"neg": 0.0, "pos": 0.0}).fit(X[:10], y[:10])


@pytest.mark.parametrize("cls", CLASSIFIERS)
def test_save_load_and_pickle_keep_labels_and_weights(cls, task, tmp_path):
    X, y, Xt, _ = task
    est = small(cls, epochs=2, class_weight={"pos": 2.0}, positional="learned",
                pooling="last", norm="pre").fit(X, y)
    est.save(tmp_path / "c.npz")
    back = attnx.load(tmp_path / "c.npz")
    assert back.class_weight == {"pos": 2.0} and back.classes_.tolist() == ["neg", "pos"]
    np.testing.assert_array_equal(back.predict_proba(Xt), est.predict_proba(Xt))
    np.testing.assert_array_equal(back.predict(Xt), est.predict(Xt))
    pk = pickle.loads(pickle.dumps(est))
    for e in (est, back, pk):
        e.partial_fit(X, y)
    np.testing.assert_array_equal(back.model_.params.flat, est.model_.params.flat)
    np.testing.assert_array_equal(pk.model_.params.flat, est.model_.params.flat)
    # labels of Python objects survive pickling, but not a model file
    obj = small(cls, epochs=1).fit(X[:20], y[:20].astype(object))
    assert pickle.loads(pickle.dumps(obj)).classes_.tolist() == ["neg", "pos"]
    with pytest.raises(TypeError, match=r"Python objects .*model file cannot store .*classes_"):
        obj.save(tmp_path / "o.npz")


def test_sklearn_sees_a_classifier(task):
    from sklearn.base import clone, is_classifier
    from sklearn.model_selection import cross_val_score

    X, y, _, _ = task
    est = small(epochs=5)
    assert is_classifier(est) and is_classifier(attnx.TransformerClassifier())
    scores = cross_val_score(est, X, y, cv=3)   # stratified folds, accuracy
    assert scores.shape == (3,) and np.all((0 <= scores) & (scores <= 1))
    assert clone(est).get_params() == est.get_params()
