"""missing="mask": time steps holding NaN are masked as padding is.

The oracle: a sequence whose last steps hold NaN is the shorter sequence without
them (masking keeps the positions of the steps before, so the equality is exact
for trailing NaN only); interior NaN steps are checked against the model's own
masked forward with arbitrary finite values under the mask, and against the ONNX
graph, which masks NaN steps on its own."""
import pickle

import numpy as np
import pytest

import attnx
from numeric_checks import rel_err

TINY = dict(d_model=8, n_heads=2, n_layers=1, epochs=3, batch_size=8, dropout=0.0,
            random_state=0, dtype=np.float64)


def _data(n=24, t=10, c=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, t, c))
    y = (X[:, :, 0].mean(axis=1) > 0).astype(int)
    return X, y


def _trailing(X, seed=1):
    """X with NaN in the last steps of some sequences (one channel or all), and the
    same sequences with those steps removed (a ragged list)."""
    rng = np.random.default_rng(seed)
    Xn = X.copy()
    keep = rng.integers(2, X.shape[1] + 1, size=X.shape[0])
    keep[0] = X.shape[1]             # one full-length sequence
    for i, k in enumerate(keep):
        if k < X.shape[1]:
            if i % 2:
                Xn[i, k:] = np.nan
            else:   # a step is missing when any channel is
                Xn[i, k:, i % X.shape[2]] = np.nan
    return Xn, [X[i, :k] for i, k in enumerate(keep)]


def _interior(X, seed=2):
    """X with NaN in some interior steps (never all of a sequence) and their mask."""
    rng = np.random.default_rng(seed)
    mask = rng.random(X.shape[:2]) < 0.3
    mask[:, 0] = False
    Xn = X.copy()
    chan = rng.integers(0, X.shape[2], size=X.shape[:2])
    for i, j in zip(*np.nonzero(mask)):
        Xn[i, j, chan[i, j]] = np.nan
    return Xn, mask


# ---- the oracle: trailing NaN == the shorter sequence ------------------------------
ARCHS = [dict(pooling="mean"), dict(pooling="max"), dict(pooling="cls"),
         dict(pooling="last"), dict(pooling="mean", positional="learned"),
         dict(pooling="mean", positional="rope"), dict(pooling="mean", patch_len=3),
         dict(pooling="max", stem=((3, 1), (3, 2)))]


@pytest.mark.parametrize("arch", ARCHS, ids=str)
def test_trailing_nan_predicts_as_the_shorter_sequence(arch):
    X, y = _data()
    Xn, short = _trailing(X)
    clf = attnx.TransformerClassifier(**{**TINY, **arch}, missing="mask").fit(Xn, y)
    masked = clf.predict_proba(Xn)
    assert np.isfinite(masked).all()
    assert rel_err(masked, clf.predict_proba(short)) < 1e-12
    reg = attnx.TransformerRegressor(**{**TINY, **arch}, missing="mask").fit(Xn, y * 1.0)
    assert rel_err(reg.predict(Xn), reg.predict(short)) < 1e-12
    # ragged input with trailing NaN: the same again
    ragged_nan = [Xn[i, :X.shape[1] - i % 3] for i in range(len(Xn))]
    ragged_short = [s[:X.shape[1] - i % 3] for i, s in enumerate(short)]
    assert rel_err(clf.predict_proba(ragged_nan), clf.predict_proba(ragged_short)) < 1e-12


@pytest.mark.parametrize("arch", [dict(pooling="mean"), dict(pooling="cls"),
                                  dict(pooling="max", positional="learned")], ids=str)
def test_fit_on_trailing_nan_is_the_fit_on_the_shorter_sequences(arch):
    """One batch, no shuffling: the masked fit sees exactly the data of the ragged fit
    (positions, standardisation statistics, pooling), so both train the same weights."""
    X, y = _data()
    Xn, short = _trailing(X)
    kw = {**TINY, **arch, "batch_size": len(X), "epochs": 4}
    kw["options"] = {**kw.get("options", {}), "shuffle": False}
    a = attnx.TransformerClassifier(**kw, missing="mask").fit(Xn, y)
    b = attnx.TransformerClassifier(**kw).fit(short, y)
    np.testing.assert_allclose(a.input_mean_, b.input_mean_, rtol=1e-13, atol=1e-15)
    assert rel_err(a.model_.params.flat, b.model_.params.flat) < 1e-10
    assert rel_err(a.predict_proba(Xn), b.predict_proba(short)) < 1e-10


# ---- interior NaN ----------------------------------------------------------------
@pytest.mark.parametrize("arch", [dict(pooling="mean"), dict(pooling="max"),
                                  dict(pooling="cls"), dict(stem=((3, 1), (2, 2)))],
                         ids=str)
def test_interior_nan_is_the_explicitly_masked_forward(arch):
    """predict on NaN steps == the fitted network's forward with those steps masked
    and arbitrary finite values under the mask (a stem reads masked steps as 0)."""
    X, y = _data()
    Xn, mask = _interior(X)
    clf = attnx.TransformerClassifier(**{**TINY, **arch}, missing="mask").fit(Xn, y)
    assert clf.patch_len_ == 1
    proba = clf.predict_proba(Xn)
    assert np.isfinite(proba).all()
    for seed in (3, 4):
        filled = np.where(np.isnan(Xn), 1e3 * np.random.default_rng(seed).standard_normal(
            X.shape), Xn)
        raw = clf.model_.forward(filled, key_padding_mask=mask, grad=False)
        assert rel_err(proba, np.exp(attnx.layers.losses.log_softmax(raw))) < 1e-12
    # unmasked, those values would change the prediction: the mask is doing the work
    assert rel_err(proba, clf.predict_proba(np.nan_to_num(Xn))) > 1e-6


def test_attention_weights_leave_masked_steps_out():
    X, y = _data()
    Xn, mask = _interior(X)
    clf = attnx.TransformerClassifier(**TINY, missing="mask").fit(Xn, y)
    (w,) = clf.attention_weights(Xn)
    keys = np.broadcast_to(mask[:, None, None, :], w.shape)
    queries = np.broadcast_to(mask[:, None, :, None], w.shape)
    assert np.all(w[keys] == 0) and np.all(w[queries] == 0)
    rows = w.sum(axis=-1)
    np.testing.assert_allclose(rows[~queries[..., 0]], 1.0, rtol=1e-12)


def test_standardisation_statistics_skip_missing_steps():
    X, y = _data()
    Xn, mask = _interior(X)
    clf = attnx.TransformerClassifier(**TINY, missing="mask").fit(Xn, y)
    np.testing.assert_allclose(clf.input_mean_, X[~mask].mean(axis=0), rtol=1e-12)


def test_mask_mode_without_nan_is_the_default_fit():
    X, y = _data()
    a = attnx.TransformerClassifier(**TINY).fit(X, y)
    b = attnx.TransformerClassifier(**TINY, missing="mask").fit(X, y)
    np.testing.assert_array_equal(a.model_.params.flat, b.model_.params.flat)


# ---- the other ways in -------------------------------------------------------------
def test_nct_layout_ragged_lists_partial_fit_and_score():
    X, y = _data()
    Xn, _ = _interior(X)
    kw = {**TINY, "missing": "mask"}
    a = attnx.TransformerClassifier(**kw).fit(Xn, y)
    b = attnx.TransformerClassifier(**kw, layout="nct").fit(Xn.transpose(0, 2, 1), y)
    np.testing.assert_array_equal(a.predict_proba(Xn),
                                  b.predict_proba(Xn.transpose(0, 2, 1)))
    assert a.score(Xn, y) == b.score(Xn.transpose(0, 2, 1), y)
    ragged = [Xn[i, :7 + i % 4] for i in range(len(Xn))]
    assert np.isfinite(a.predict_proba(ragged)).all()
    b.fit([s.T for s in ragged], y)  # ragged nct with NaN steps
    c = attnx.TransformerClassifier(**kw).partial_fit(Xn, y, classes=[0, 1])
    c.partial_fit(ragged, y)
    assert np.isfinite(c.predict_proba(Xn)).all() and c.n_iter_ == 2
    reg = attnx.TransformerRegressor(**kw, options={"validation_fraction": 0.25}).fit(ragged, y * 2.0)
    assert np.isfinite(reg.score(ragged, y * 2.0))


def test_the_callers_arrays_are_not_modified():
    X, y = _data()
    Xn, _ = _interior(X)
    ragged = [Xn[i, :6 + i % 5] for i in range(len(Xn))]
    before = Xn.copy(), [s.copy() for s in ragged]
    clf = attnx.TransformerClassifier(**TINY, missing="mask").fit(Xn, y)
    clf.predict(Xn), clf.fit(ragged, y).predict(ragged), clf.attention_weights(Xn)
    np.testing.assert_array_equal(Xn, before[0])   # NaN compare equal here
    for s, k in zip(ragged, before[1]):
        np.testing.assert_array_equal(s, k)


def test_save_load_pickle_clone_and_get_params(tmp_path):
    sklearn = pytest.importorskip("sklearn")
    X, y = _data()
    Xn, _ = _interior(X)
    clf = attnx.TransformerClassifier(**TINY, missing="mask").fit(Xn, y)
    assert clf.get_params()["missing"] == "mask"
    assert sklearn.base.clone(clf).get_params()["missing"] == "mask"
    assert "missing='mask'" in repr(clf)
    clf.save(tmp_path / "m.attnx")
    again = attnx.load(tmp_path / "m.attnx")
    assert again.missing == "mask"
    np.testing.assert_array_equal(again.predict_proba(Xn), clf.predict_proba(Xn))
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(clf)).predict_proba(Xn),
                                  clf.predict_proba(Xn))
    assert attnx.TransformerRegressor().missing == "error"


def test_ensemble_members_mask_too():
    """Members trained on sequences with NaN steps predict held-out ones better than the
    constant predictors fitted on the same training labels."""
    X, y = _data(n=240, seed=3)
    Xn, _ = _interior(X)
    tr, te = slice(0, 160), slice(160, None)
    kw = {**TINY, "epochs": 20}
    ens = attnx.EnsembleClassifier(attnx.TransformerClassifier(**kw, missing="mask"),
                                   n_members=2, random_state=0).fit(Xn[tr], y[tr])
    proba = ens.predict_proba(Xn[te])
    np.testing.assert_array_equal(
        proba, np.mean([m.predict_proba(Xn[te]) for m in ens.estimators_], axis=0))
    majority = np.mean(y[te] == np.bincount(y[tr]).argmax())   # 0.51 here
    assert ens.score(Xn[te], y[te]) >= majority + 0.15          # 0.76 when written
    target = np.nanmean(Xn[:, :, 0], axis=1) * 2.0
    reg = attnx.EnsembleRegressor(attnx.TransformerRegressor(**kw, missing="mask"),
                                  n_members=2, random_state=0).fit(Xn[tr], target[tr])
    constant = 1 - (np.mean((target[te] - target[tr].mean()) ** 2)
                    / np.var(target[te]))                      # -0.02 here
    assert reg.score(Xn[te], target[te]) >= constant + 0.3     # 0.65 when written


# ---- bad input ---------------------------------------------------------------------
def test_default_mode_still_refuses_nan():
    X, y = _data()
    Xn, _ = _interior(X)
    with pytest.raises(ValueError, match=r"X contains NaN.*missing='mask'"):
        attnx.TransformerClassifier(**TINY).fit(Xn, y)
    clf = attnx.TransformerClassifier(**TINY).fit(X, y)
    with pytest.raises(ValueError, match="X contains NaN"):
        clf.predict(Xn)
    with pytest.raises(ValueError, match="X contains NaN"):
        clf.predict([Xn[0], Xn[1, :4]])


def test_bad_input_errors_name_the_argument():
    X, y = _data()
    Xn, _ = _interior(X)
    with pytest.raises(ValueError, match=r"missing must be one of \('error', 'mask'\).*"
                                         r"got 'drop'"):
        attnx.TransformerClassifier(**TINY, missing="drop").fit(X, y)
    est = attnx.TransformerClassifier(**TINY, missing="mask")
    Xi = Xn.copy()
    Xi[2, 3, 0] = np.inf
    with pytest.raises(ValueError, match="X contains infinity.*stays an error"):
        est.fit(Xi, y)
    Xa = Xn.copy()
    Xa[5, :, 1] = np.nan
    with pytest.raises(ValueError, match=r"X\[5\] holds NaN at every time step"):
        est.fit(Xa, y)
    ragged = [X[0], np.full((3, 2), np.nan), X[1, :4]]
    with pytest.raises(ValueError, match=r"X\[1\] holds NaN at every time step"):
        est.fit(ragged, [0, 1, 0])
    with pytest.raises(ValueError, match="y contains NaN"):
        attnx.TransformerRegressor(**TINY, missing="mask").fit(Xn, np.where(y, np.nan, 1.0))
    with pytest.raises(ValueError, match="missing='mask' needs targets per sequence"):
        attnx.TransformerRegressor(**TINY, missing="mask").fit(Xn, X[:, :, :1])
    fitted = est.fit(Xn, y)
    with pytest.raises(ValueError, match=r"X\[5\] holds NaN at every time step"):
        fitted.predict(Xa)
    # a stem whose kernel is shorter than its stride skips steps: refused, not silent
    Xs = X.copy()
    Xs[4, ::2] = np.nan
    with pytest.raises(ValueError, match=r"X\[4\] has no token left after stem"):
        attnx.TransformerClassifier(**TINY, stem=((1, 2),), missing="mask").fit(Xs, y)


# ---- ONNX --------------------------------------------------------------------------
@pytest.mark.parametrize("arch", [dict(pooling="mean"), dict(pooling="cls", patch_len=3),
                                  dict(pooling="max", stem=((3, 1), (3, 2)))], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_onnx_graph_masks_nan_steps_as_predict(arch, dtype, tmp_path):
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from attnx.io import onnx as aonnx

    X, y = _data(t=12)
    Xn, _ = _interior(X)
    Xn[3, 8:] = np.nan   # trailing too
    Xn = Xn.astype(dtype)
    clf = attnx.TransformerClassifier(**{**TINY, **arch, "dtype": dtype},
                                      missing="mask").fit(Xn, y)
    want = clf.predict_proba(Xn)
    tol = 1e-5 if dtype == np.float32 else 1e-10
    for with_mask in (True, False):
        path = tmp_path / f"m{with_mask}.onnx"
        proto = aonnx.export(clf, path, key_padding_mask=with_mask)
        assert {p.key: p.value for p in proto.metadata_props}["missing"] == "mask"
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feed = {"x": Xn}
        if with_mask:
            feed["key_padding_mask"] = np.zeros(Xn.shape[:2], bool)
        (got,) = sess.run(None, feed)
        assert rel_err(got, want) < tol
