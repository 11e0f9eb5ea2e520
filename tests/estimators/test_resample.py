"""Ragged univariate series resampled to one length (attnx.estimators._resample),
tokenizer="auto" of the classifiers: the interpolation against np.interp, when the
fit resamples, and that predict resamples alike."""
import pickle

import numpy as np
import pytest

import attnx
from attnx import io as ax_io
from attnx.estimators import _resample as R
from attnx.layers import _stem

TC = attnx.TransformerClassifier
SMALL = dict(n_heads=2, n_layers=1, d_model=16, batch_size=8, epochs=4, random_state=0)


def _ragged(n=24, lo=15, hi=40, c=1, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    X = []
    for i in range(n):
        t = int(rng.integers(lo, hi + 1))
        x = rng.standard_normal((t, c)) * 0.3
        x[t // 4:t // 2] += (y[i] - 1) * 2.0
        X.append(x.astype(np.float32))
    return X, y


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_to_length_is_linear_interpolation_over_each_series_own_steps(dtype):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 9, 2)).astype(dtype)
    lengths = np.array([9, 5, 1, 0])
    out = R.to_length(x, lengths, 13)
    assert out.shape == (4, 13, 2) and out.dtype == dtype
    for i, t in enumerate(lengths[:2]):
        grid = np.linspace(0, t - 1, 13)
        for ch in range(2):
            want = np.interp(grid, np.arange(t), x[i, :t, ch].astype(np.float64))
            np.testing.assert_allclose(out[i, :, ch], want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(out[2], np.repeat(x[2, :1], 13, axis=0))   # one step
    np.testing.assert_array_equal(out[3], 0)                                   # none
    # the ends are the series' own first and last steps; downsampling works too
    short = R.to_length(x, None, 3)
    np.testing.assert_array_equal(short[:, 0], x[:, 0])
    np.testing.assert_array_equal(short[:, -1], x[:, -1])
    np.testing.assert_allclose(short[:, 1], x[:, 4], rtol=1e-6)


def test_classifier_resamples_ragged_univariate_series_to_the_longest():
    X, y = _ragged()
    est = TC(**SMALL).fit(X, y)
    t_max = max(len(x) for x in X)
    assert est.resample_length_ == t_max
    assert est.model_.stem == _stem.short(t_max, t_max) and est.plan_.ppv is None
    # predict resamples every series alike: the same as the resampled dense array
    dense = np.concatenate([R.to_length(x[None], None, t_max) for x in X])
    np.testing.assert_array_equal(est.predict_proba(X), est.predict_proba(dense))
    with pytest.raises(NotImplementedError, match="resamples each series"):
        est.export_spec()   # the ONNX export covers the network only
    # a series longer than at fit is resampled down
    long = [np.repeat(x, 3, axis=0) for x in X[:4]]
    assert est.predict(long).shape == (4,)


def test_long_ragged_series_are_resampled_then_take_ppv_tokens():
    X, y = _ragged(lo=30, hi=90)
    est = TC(**SMALL).fit(X, y)
    assert est.resample_length_ == max(len(x) for x in X) >= 64
    assert "reference_length" not in est.plan_.ppv.to_spec() and est.model_.stem is None   # fixed PPV


def test_no_resampling_where_the_rule_does_not_apply():
    X, y = _ragged()
    for kw in ({"tokenizer": "patch"}, {"tokenizer": "ppv"}, {"patch_len": 2},
               {"stem": ((3, 1),)}, {"instance_norm": "input"}):
        assert not hasattr(TC(**SMALL, **kw).fit(X, y), "resample_length_"), kw
    X2, _ = _ragged(c=2)   # two channels: raw patches, as before
    assert not hasattr(TC(**SMALL).fit(X2, y), "resample_length_")
    dense = np.stack([x[:15] for x in X])   # equal lengths: nothing to resample
    assert not hasattr(TC(**SMALL).fit(dense, y), "resample_length_")
    reg = attnx.TransformerRegressor(**SMALL).fit(X, y.astype(float))
    assert not hasattr(reg, "resample_length_")


def test_resampling_persists_and_refuses_missing_steps_at_predict(tmp_path):
    X, y = _ragged()
    est = TC(**SMALL, missing="mask").fit(X, y)   # no NaN at fit: resampled
    assert est.resample_length_ == max(len(x) for x in X)
    ax_io.save(est, tmp_path / "m")
    back = ax_io.load(tmp_path / "m")
    np.testing.assert_array_equal(back.predict_proba(X), est.predict_proba(X))
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(again.predict_proba(X), est.predict_proba(X))
    bad = [x.copy() for x in X[:3]]
    bad[1][2] = np.nan
    with pytest.raises(ValueError, match="resamples each series"):
        est.predict(bad)
    # a warm start keeps the fitted length
    est.set_params(warm_start=True, epochs=1)
    est.fit(X[:12], y[:12])
    assert est.resample_length_ == max(len(x) for x in X)
