"""The estimators' training recipe: LR schedules, clipping, decay groups, label
smoothing, standardisation folded into the model, history_."""
import numpy as np
import pytest

import attnx
from attnx.estimators import _scaling
from attnx.layers import schedules
from bare_settings import BARE_CLS as OLD_CLS, merged


def _cls_data(seed=0, n=48, t=8):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, t, 3)) * [1.0, 50.0, 0.02] + [3.0, -200.0, 0.0]
    y = (X[:, :, 0].mean(axis=1) > 3.0).astype(int)
    return X, y


# the previous release's recipe (every option off), small: each test turns one option on
KW = merged(OLD_CLS, n_heads=2, d_model=8, n_layers=1, epochs=4, batch_size=16, random_state=0,
          dtype=np.float64)
KW_REG = {**KW, "options": {k: v for k, v in KW["options"].items() if k != "label_smoothing"}}


def clf(**kw):
    return attnx.TransformerClassifier(**merged(KW, kw))


def reg(**kw):
    return attnx.TransformerRegressor(**merged(KW_REG, kw))


def test_schedule_drives_each_step_and_is_recorded():
    X, y = _cls_data()
    est = clf(lr=0.01, options={"lr_schedule": "warmup_cosine", "warmup": 0.25}).fit(X, y)
    total = 4 * 3   # 48 samples / 16 per batch, 4 epochs
    w = 3           # 25% of 12 steps
    want = [0.01 * schedules.warmup_cosine_factor(t, total, w) for t in range(total)]
    # lr_curve_ holds the lr of the last step of each epoch
    np.testing.assert_allclose(est.lr_curve_, [want[3 * e + 2] for e in range(4)], rtol=1e-12)
    assert est.history_["lr"] == est.lr_curve_ and est.history_["loss"] == est.loss_curve_
    oc = clf(lr=0.01, options={"lr_schedule": "one_cycle"}).fit(X, y)
    assert max(oc.lr_curve_) <= 0.01 and oc.lr_curve_[-1] < 1e-4
    const = clf(lr=0.01).fit(X, y)
    assert const.lr_curve_ == [0.01] * 4


def test_clipping_changes_training_only_when_the_norm_exceeds_it():
    X, y = _cls_data()
    plain = clf().fit(X, y)
    loose = clf(options={"max_grad_norm": 1e9}).fit(X, y)
    tight = clf(options={"max_grad_norm": 1e-3}).fit(X, y)
    np.testing.assert_array_equal(plain.model_.params.flat, loose.model_.params.flat)
    assert not np.array_equal(plain.model_.params.flat, tight.model_.params.flat)


def test_decay_matrices_leaves_biases_and_norms_undecayed():
    X, y = _cls_data()
    # lr 0 except through decay: p <- p (1 - lr wd) is the only change with zero gradient
    est = clf(weight_decay=0.5, norm="pre", options={"decay": "matrices"})
    est.fit(X, y)
    assert est.optimizer_.decay == "matrices"
    runs = est.optimizer_._runs[0]
    names = {k: v for k, v in est.model_.params.items()}
    base = est.model_.params.flat.__array_interface__["data"][0]
    for k, v in names.items():
        off = (v.__array_interface__["data"][0] - base) // v.itemsize
        decayed = next(d for a, z, d in runs if a <= off < z)
        assert decayed == (v.ndim >= 2 and not k.startswith("pos.")), k


def test_label_smoothing_changes_the_fit_and_is_checked():
    X, y = _cls_data()
    a = clf().fit(X, y)
    b = clf(options={"label_smoothing": 0.2}).fit(X, y)
    assert not np.array_equal(a.model_.params.flat, b.model_.params.flat)
    with pytest.raises(ValueError, match="label_smoothing"):
        clf(options={"label_smoothing": 1.0}).fit(X, y)


def test_standardize_folds_into_the_model_exactly():
    """Training on standardised X and y, then folding: the fitted model on raw X gives
    what the unfolded model gives on standardised X, destandardised."""
    X, _ = _cls_data()
    t = X[:, :, 1].mean(axis=1) * 3.0 + 1000.0
    est = reg(options={"standardize": True}).fit(X, t)
    assert est.input_mean_.shape == (3,) and est.target_scale_.shape == (1,)
    X0 = X.copy()
    pred = est.predict(X)
    assert np.array_equal(X, X0)   # the caller's X is untouched
    m = est.model_
    raw = m.params.flat.copy()
    _scaling.unfold(est)
    xs = (X - est.input_mean_) / est.input_scale_
    std = m.forward(xs, grad=False)[:, 0] * est.target_scale_[0] + est.target_mean_[0]
    _scaling.fold(est)
    np.testing.assert_allclose(m.params.flat, raw, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(pred, std, rtol=1e-10)
    # and it helps: raw units hundreds apart train badly in 4 epochs
    r2_std = est.score(X, t)
    r2_raw = reg().fit(X, t).score(X, t)
    assert r2_std > r2_raw


def test_standardize_survives_save_warm_start_and_partial_fit(tmp_path):
    X, y = _cls_data()
    est = clf(options={"standardize": True}).fit(X, y)
    est.save(tmp_path / "m.safetensors")
    back = attnx.load(tmp_path / "m.safetensors")
    np.testing.assert_array_equal(back.predict_proba(X), est.predict_proba(X))
    np.testing.assert_array_equal(back.input_mean_, est.input_mean_)
    mean0 = est.input_mean_.copy()
    est.set_params(warm_start=True, epochs=1).fit(X[:20] + 100.0, y[:20])
    np.testing.assert_array_equal(est.input_mean_, mean0)   # warm start keeps the stats
    assert est.score(X, y) > 0.5
    p = clf(options={"standardize": True})
    for _ in range(3):
        p.partial_fit(X, y, classes=[0, 1])
    assert p.input_mean_.shape == (3,) and np.isfinite(p.predict_proba(X)).all()


@pytest.mark.parametrize("bad,err", [(dict(options={"lr_schedule": "cosine"}), ValueError),
                                     (dict(options={"warmup": 1.0}), ValueError),
                                     (dict(options={"max_grad_norm": 0.0}), ValueError),
                                     (dict(options={"max_grad_norm": "1"}), TypeError),
                                     (dict(options={"decay": "weights"}), ValueError),
                                     (dict(options={"standardize": 1}), TypeError)])
def test_recipe_arguments_are_checked(bad, err):
    X, y = _cls_data()
    with pytest.raises(err, match=next(iter(bad))):
        clf(**bad).fit(X, y)


def test_patches_as_tokens_dense_ragged_and_rules():
    X, y = _cls_data(n=32, t=23)
    est = clf(patch_len=None).fit(X, y)
    assert est.patch_len_ == 2 and est.model_.n_features == 6 and est.n_features_in_ == 3
    # predict patches the same way: the model on hand-made tokens (the last patch's
    # missing step repeats the series' last step) agrees
    xp = np.concatenate([X, X[:, -1:]], axis=1).reshape(32, 12, 6)
    raw = est.model_.forward(xp, grad=False)
    np.testing.assert_allclose(est.predict_proba(X), np.exp(raw - raw.max(1, keepdims=True))
                               / np.exp(raw - raw.max(1, keepdims=True)).sum(1, keepdims=True),
                               rtol=1e-10)
    ragged = [X[i, :10 + i % 13] for i in range(32)]
    r = clf(patch_len=4).fit(ragged, y)
    assert r.patch_len_ == 4 and r.predict(ragged).shape == (32,)
    one = clf().fit(X, y)
    assert one.patch_len_ == 1 and one.model_.n_features == 3
    with pytest.raises(ValueError, match="patch_len=11 is longer than the shortest"):
        clf(patch_len=11).fit(ragged, y)
    Yp = X[:, :, :1] * 2.0   # per-position targets keep one token per step
    with pytest.raises(ValueError, match="per-position"):
        reg(patch_len=2).fit(X, Yp)
    assert reg(patch_len=None).fit(X, Yp).patch_len_ == 1


def test_patched_standardized_estimator_exports_to_onnx(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from attnx.io import onnx as ax
    X, y = _cls_data(n=24, t=19)
    X = X.astype(np.float32)
    est = clf(dtype=np.float32, patch_len=4, options={"standardize": True}).fit(X, y)
    ax.export(est, tmp_path / "m.onnx")
    s = ort.InferenceSession(str(tmp_path / "m.onnx"))
    out = s.run(None, {"x": X, "key_padding_mask": np.zeros(X.shape[:2], bool)})[0]
    np.testing.assert_allclose(out, est.predict_proba(X), atol=2e-6)
    ragged = [X[i, :9 + i % 10] for i in range(24)]
    xp = np.full_like(X, 77.0)
    m = np.ones(X.shape[:2], bool)
    for i, a in enumerate(ragged):
        xp[i, :len(a)], m[i, :len(a)] = a, False
    out = s.run(None, {"x": xp, "key_padding_mask": m})[0]
    np.testing.assert_allclose(out, est.predict_proba(ragged), atol=2e-6)


def test_attention_weights_of_sequence_estimators():
    X, y = _cls_data(n=20, t=12)
    est = clf(n_layers=2, patch_len=3, dropout=0.3).fit(X, y)
    w = est.attention_weights(X[:4])
    assert len(w) == 2 and w[0].shape == (4, 2, 4, 4)
    np.testing.assert_allclose(w[1].sum(axis=-1), 1.0, rtol=1e-12)
    np.testing.assert_array_equal(est.attention_weights(X[:4])[0], w[0])   # no dropout
    assert est.model_.dropout == 0.3                                      # restored
    ragged = [X[i, :6 + i % 6] for i in range(6)]
    wr = est.attention_weights(ragged)[0]
    n_tok = [-(-(6 + i % 6) // 3) for i in range(6)]
    for i, k in enumerate(n_tok):
        assert np.all(wr[i, :, :, k:] == 0) and np.all(wr[i, :, k:, :] == 0)
        np.testing.assert_allclose(wr[i, :, :k].sum(axis=-1), 1.0, rtol=1e-12)
