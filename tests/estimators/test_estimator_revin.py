"""The estimators' instance normalisation (instance_norm "input" / "revin", RevIN): fit,
predict, how it composes with standardize and patches, save / load / pickle / clone,
ONNX against predict, bad input."""
import pickle

import numpy as np
import onnxruntime as ort
import pytest
from sklearn.base import clone

import attnx
import attnx.io.onnx as aonnx
from numeric_checks import rel_err

TC, TR = attnx.TransformerClassifier, attnx.TransformerRegressor
SMALL = dict(n_heads=2, n_layers=1, d_model=8, batch_size=8, random_state=0)


def _forecast(n=40, t=12, f=1, seed=0):
    """Series at their own level and scale; y: the next value of each channel."""
    rng = np.random.default_rng(seed)
    level = rng.normal(size=(n, 1, f)) * 50
    scale = np.exp(rng.normal(size=(n, 1, f)))
    walk = np.cumsum(rng.normal(size=(n, t + 1, f)), axis=1)
    s = level + scale * walk
    return s[:, :t], s[:, t]


@pytest.mark.parametrize("mode", ["input", "revin"])
def test_regressor_fits_and_standardises_as_documented(mode):
    X, y = _forecast()
    est = TR(**SMALL, instance_norm=mode, epochs=3).fit(X, y[:, 0])
    m = est.model_
    assert m.instance_norm == mode and m.instance_steps == est.patch_len_ == 1
    np.testing.assert_array_equal(est.input_mean_, 0)   # X: left to the instance norm
    np.testing.assert_array_equal(est.input_scale_, 1)
    # y: standardised with "input", in the channels' own units with "revin"
    assert ("target_mean_" in est.__dict__) == (mode == "input")
    assert est.predict(X).shape == (40,)


@pytest.mark.parametrize("mode", ["input", "revin"])
def test_predictions_follow_each_series_level_and_scale(mode):
    """"input": predict ignores a per-series shift and scale of X; "revin": the
    predictions move with them (up to the 1e-5 of the variance)."""
    X, y = _forecast(f=2)
    X, y = X * 10, y * 10   # series variances >= 1: eps moves the std by < 1e-5
    est = TR(**SMALL, instance_norm=mode, epochs=2, dtype=np.float64).fit(X, y)
    rng = np.random.default_rng(1)
    a, s = rng.normal(size=(40, 1, 2)) * 10, rng.uniform(1, 3, size=(40, 1, 2))
    p0, p1 = est.predict(X), est.predict(a + s * X)
    want = p0 if mode == "input" else a[:, 0] + s[:, 0] * p0
    np.testing.assert_allclose(p1, want, rtol=1e-4, atol=1e-4)
    if mode == "revin":
        assert rel_err(p1, p0) > 0.1


def test_patches_are_series_steps_and_affine_trains():
    X, y = _forecast(t=40)   # auto patches: ceil(40 / 16) = 3 steps per token
    est = TR(**SMALL, instance_norm="revin", epochs=2, options={"instance_affine": True}).fit(X, y[:, 0])
    assert est.patch_len_ == 3 and est.model_.instance_steps == 3
    assert est.model_.n_features == 3
    g = est.model_.params["revin.g"]
    assert g.shape == (1,) and g[0] != 1   # trained (the estimator skips dL/dX)


def test_classifier_input_norm_and_no_revin():
    X, y = _forecast()
    lab = (y[:, 0] > X[:, -1, 0]).astype(int)
    est = TC(**SMALL, instance_norm="input", epochs=2, options={"instance_affine": True}).fit(X, lab)
    assert est.predict_proba(X).shape == (40, 2) and "revin.g" in est.model_.params
    with pytest.raises(ValueError, match="instance_norm='revin'.*classifier"):
        TC(**SMALL, instance_norm="revin").fit(X, lab)


@pytest.mark.parametrize("kw, err, match", [
    (dict(instance_norm="batch"), ValueError, "instance_norm must be one of"),
    (dict(instance_norm=None, options={"instance_affine": True}), ValueError,
         r"instance_affine'\]=True needs instance_norm"),
    (dict(instance_norm="input", options={"instance_affine": 1}), TypeError, r"options\['instance_affine'\] must be"),
])
def test_bad_parameters(kw, err, match):
    X, y = _forecast()
    with pytest.raises(err, match=match):
        TR(**SMALL, **kw).fit(X, y[:, 0])


def test_revin_needs_outputs_that_match_the_channels():
    X, y = _forecast(f=2)
    with pytest.raises(ValueError, match="n_outputs=1 and 2 channels"):
        TR(**SMALL, instance_norm="revin").fit(X, y[:, 0])
    TR(**SMALL, instance_norm="input", epochs=1).fit(X, y[:, 0])   # no de-normalisation
    assert TR(**SMALL, instance_norm="revin", epochs=1).fit(X, y).predict(X).shape == (40, 2)
    X1, y1 = _forecast(f=1)   # one channel: every output de-normalised by it
    y3 = np.concatenate([y1, y1 + 1, y1 - 1], axis=1)
    assert TR(**SMALL, instance_norm="revin", epochs=1).fit(X1, y3).predict(X1).shape == (40, 3)


def test_save_load_pickle_clone(tmp_path):
    X, y = _forecast(t=20)
    kw = dict(SMALL, instance_norm="revin", options={"instance_affine": True, "lr_schedule": "constant"})
    full = TR(**kw, epochs=4).fit(X, y[:, 0])
    half = TR(**kw, epochs=2).fit(X, y[:, 0])
    half.save(tmp_path / "m.safetensors")
    back = attnx.load(tmp_path / "m.safetensors")
    assert back.get_params()["instance_norm"] == "revin" and back.options["instance_affine"] is True
    np.testing.assert_array_equal(back.predict(X), half.predict(X))
    back.partial_fit(X, y[:, 0])
    back.partial_fit(X, y[:, 0])
    assert back.model_.params.flat.tobytes() == full.model_.params.flat.tobytes()
    p = pickle.loads(pickle.dumps(full))
    np.testing.assert_array_equal(p.predict(X), full.predict(X))
    c = clone(full)
    assert c.get_params()["instance_norm"] == "revin" and "model_" not in c.__dict__


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode, affine, t, extra", [
    ("revin", True, 40, {}),                          # patches of 3 steps, a fill step
    ("revin", False, 12, dict(pooling="last")),
    ("input", True, 12, dict(stem=((3, 1),))),
], ids=["revin-patches", "revin-last", "input-stem"])
def test_onnx_matches_predict(dtype, mode, affine, t, extra, tmp_path):
    X, y = _forecast(t=t)
    est = TR(**SMALL, instance_norm=mode, epochs=2, dtype=dtype,
             **extra, options={"instance_affine": affine}).fit(X, y[:, 0])
    if affine:   # away from the initial gain 1 and bias 0
        est.model_.params["revin.g"][...] = 1.3
        est.model_.params["revin.b"][...] = -0.2
    aonnx.export(est, tmp_path / "r.onnx")
    sess = ort.InferenceSession(str(tmp_path / "r.onnx"), providers=["CPUExecutionProvider"])
    tol = 1e-5 if dtype == np.float32 else 1e-10
    Xt = (X[:7] * 1.5 + 3).astype(dtype)
    (out,) = sess.run(None, {"x": Xt, "key_padding_mask": np.zeros(Xt.shape[:2], bool)})
    assert rel_err(out, est.predict(Xt), floor=1.0) < tol
    # ragged: a right-padded batch through the graph, against predict on the list
    ragged = [Xt[i, :n] for i, n in enumerate((t, t - 1, t // 2, 4, t - 5, t, 6))]
    xp = np.zeros_like(Xt)
    mask = np.ones(Xt.shape[:2], bool)
    for i, s in enumerate(ragged):
        xp[i, :len(s)], mask[i, :len(s)] = s, False
    (out,) = sess.run(None, {"x": xp, "key_padding_mask": mask})
    assert rel_err(out, np.asarray(est.predict(ragged)), floor=1.0) < tol


def test_same_units_rule():
    from attnx.estimators._scaling import same_units
    X, y = _forecast(n=60)
    valid = np.ones(X.shape[:2], bool)
    assert same_units(X, valid, y)                       # the next values of the series
    assert not same_units(X, valid, y * 1e-3)            # a rate of them: other units
    assert not same_units(X, valid, y + 1e4)             # outside the series' range
    X2, y2 = _forecast(n=60, f=2)
    assert same_units(X2, valid, y2)                     # one target per channel
    assert not same_units(X2, valid, y2[:, :1])          # one target, two channels
    valid[:, 6:] = False                                 # only the valid steps count
    Xp = X.copy()
    Xp[:, 6:] = 1e6
    assert same_units(Xp, valid, y) == same_units(X[:, :6], valid[:, :6], y)


def test_auto_instance_norm_picks_revin_for_targets_in_the_series_units():
    X, y = _forecast()
    est = TR(**SMALL, epochs=2).fit(X, y[:, 0])
    assert TR().instance_norm == "auto" and est.instance_norm == "auto"
    assert est.model_.instance_norm == "revin"
    assert "target_mean_" not in est.__dict__
    assert TR(**SMALL, epochs=2).fit(X, y[:, 0] * 1e-3).model_.instance_norm is None
    assert TR(**SMALL, epochs=2, instance_norm=None).fit(X, y[:, 0]).model_.instance_norm \
        is None
    # a resumed fit keeps the model's choice; classifiers and the bare model: none
    est.set_params(warm_start=True).fit(X, y[:, 0] * 1e-3)
    assert est.model_.instance_norm == "revin"
    clf = TC(**SMALL, epochs=2, instance_norm="auto").fit(X, (y[:, 0] > 0).astype(int))
    assert clf.model_.instance_norm is None
    bare = TR(n_heads=1, d_model=None, positional="none", norm=None, dropout=0.0, epochs=2,
              random_state=0).fit(X, X * 2)
    assert type(bare.model_).__name__ == "Transformer"
