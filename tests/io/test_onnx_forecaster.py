"""ONNX export of TransformerForecaster: onnxruntime runs the graph on the last window of
each series and agrees with predict / predict_interval, for seasonal and global models,
several channels, covariates, static features and series shorter than the window."""
import numpy as np
import onnxruntime as ort
import pytest

import attnx
import attnx.io.onnx as aonnx

FAST = dict(d_model=16, n_heads=2, n_layers=1, steps=200, random_state=0, method="network")


def _seasonal(n=160, period=12, seed=0, level=10.0, noise=0.3):
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return level + 3 * np.sin(2 * np.pi * t / period) + noise * rng.normal(size=n)


def _session(f, tmp_path, **kw):
    path = tmp_path / "f.onnx"
    aonnx.export(f, path, **kw)
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _windows(f, series, dtype):
    """The graph's inputs for a list of series (T_i, k): their last window_ steps,
    left-padded (with garbage: the graph must not read it) and the padding mask."""
    w = f.window_
    y = np.full((len(series), w, series[0].shape[1]), 1e6)
    mask = np.zeros((len(series), w), bool)
    for i, s in enumerate(series):
        tail = s[-w:]
        y[i, w - len(tail):] = tail
        mask[i, :w - len(tail)] = True
    return y.astype(dtype), mask


def _rel(a, b):
    return np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30)


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-9), (np.float32, 2e-5)])
@pytest.mark.parametrize("baseline", ["auto", "seasonal_mean", "combined", "none"])
def test_seasonal_series_and_intervals_match_predict(tmp_path, dtype, tol, baseline):
    y = _seasonal(150)
    f = attnx.TransformerForecaster(12, **FAST, season=12, baseline=baseline,
                                    dtype=dtype).fit(y)
    sess = _session(f, tmp_path, coverage=0.8)
    # the fitted series and two others, one shorter than the window (padded)
    others = [y, _seasonal(140, seed=3, level=20.0), _seasonal(f.window_ - 7, seed=4)]
    want = f.predict(y=others)
    iv = f.predict_interval(y=others, coverage=0.8)
    yy, mask = _windows(f, [o[:, None] for o in others], dtype)
    got, lo, hi = sess.run(None, {"y": yy, "key_padding_mask": mask})
    assert got.shape == (3, 12, 1) and got.dtype == dtype
    assert _rel(got[:, :, 0], np.stack(want)) < tol
    assert _rel(lo[:, :, 0], np.stack([a for a, _ in iv])) < tol
    assert _rel(hi[:, :, 0], np.stack([b for _, b in iv])) < tol


def test_global_multichannel_covariates_and_static(tmp_path):
    rng = np.random.default_rng(1)
    series = [np.stack([_seasonal(100 + 9 * i, seed=i), _seasonal(100 + 9 * i, seed=9 + i,
                                                                   level=-4.0)], axis=1)
              for i in range(3)]
    X = [rng.normal(size=(len(s), 2)) for s in series]
    F = [rng.normal(size=(len(s), 1)) for s in series]
    static = [[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]
    f = attnx.TransformerForecaster(5, **FAST, dtype=np.float64).fit(
        series, X=X, X_future=F, static=static)
    assert f.export_spec().channel_independent
    sess = _session(f, tmp_path, coverage=0.9)
    fut = [rng.normal(size=(5, 1)) for _ in series]
    want = f.predict(y=series, X=X, X_future=fut)
    iv = f.predict_interval(y=series, X=X, X_future=fut, coverage=0.9)
    yy, mask = _windows(f, series, np.float64)
    xx, _ = _windows(f, X, np.float64)
    got, lo, hi = sess.run(None, {"y": yy, "key_padding_mask": mask, "X": xx,
                                  "X_future": np.stack(fut), "static": np.array(static)})
    assert got.shape == (3, 5, 2)
    assert _rel(got, np.stack(want)) < 1e-9
    assert _rel(lo, np.stack([a for a, _ in iv])) < 1e-9
    assert _rel(hi, np.stack([b for _, b in iv])) < 1e-9


def test_without_mask_and_without_intervals(tmp_path):
    y = _seasonal(120)
    f = attnx.TransformerForecaster(6, **FAST, intervals=None, dtype=np.float64).fit(y)
    sess = _session(f, tmp_path, key_padding_mask=False)
    assert [i.name for i in sess.get_inputs()] == ["y"]
    assert [o.name for o in sess.get_outputs()] == ["forecast"]
    got, = sess.run(None, {"y": y[-f.window_:][None, :, None]})
    assert _rel(got[0, :, 0], f.predict()) < 1e-9


def test_export_errors(tmp_path):
    y = _seasonal(120)
    with pytest.raises(ValueError, match="not fitted|fit"):
        aonnx.export(attnx.TransformerForecaster(6), tmp_path / "a.onnx")
    f = attnx.TransformerForecaster(6, **FAST, intervals=None).fit(y)
    with pytest.raises(ValueError, match="intervals=None"):
        aonnx.export(f, tmp_path / "a.onnx", coverage=0.9)
    g = attnx.TransformerForecaster(6, **FAST).fit(y)
    with pytest.raises(ValueError, match="coverage must be in"):
        aonnx.export(g, tmp_path / "a.onnx", coverage=1.5)
    with pytest.raises(ValueError, match="coverage applies to a forecaster"):
        aonnx.export(attnx.SequenceModel(2, 8, 2, 1, 1), tmp_path / "a.onnx", coverage=0.9)


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-9), (np.float32, 2e-5)])
@pytest.mark.parametrize("coverage", [0.9, 0.7])
def test_quantile_intervals_match_predict(tmp_path, dtype, tol, coverage):
    """intervals="quantile": the graph sorts the learned levels (TopK), interpolates
    the two the coverage needs (0.7: between learned levels), adds the conformal
    half-width and keeps each end on its side of the point forecast; a joint
    two-channel model checks the (value, level) layout of the network's outputs."""
    y = np.stack([_seasonal(150), _seasonal(150, seed=5, level=-3.0)], axis=1)
    f = attnx.TransformerForecaster(6, **FAST, season=12, dtype=dtype, intervals="quantile",
                                    channel_independent=False).fit(y)
    assert f.export_spec().n_levels == 7 and f.export_spec().k_out == 2
    sess = _session(f, tmp_path, coverage=coverage)
    others = [y, np.stack([_seasonal(f.window_ - 5, seed=8), _seasonal(f.window_ - 5, seed=9)],
                          axis=1)]
    want = f.predict(y=others)
    iv = f.predict_interval(y=others, coverage=coverage)
    yy, mask = _windows(f, others, dtype)
    got, lo, hi = sess.run(None, {"y": yy, "key_padding_mask": mask})
    assert got.shape == (2, 6, 2)
    assert _rel(got, np.stack(want)) < tol
    assert _rel(lo, np.stack([a for a, _ in iv])) < tol
    assert _rel(hi, np.stack([b for _, b in iv])) < tol
    with pytest.raises(ValueError, match="learned the levels"):
        aonnx.export(f, tmp_path / "g.onnx", coverage=0.95)
