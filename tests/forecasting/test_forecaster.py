"""TransformerForecaster: shapes, global models, covariates, conformal intervals, errors."""
import pickle

import numpy as np
import pytest

import attnx
from attnx.forecasting import mase

FAST = dict(d_model=16, n_heads=2, n_layers=1, steps=300, random_state=0, method="network")


def _seasonal(n=160, period=12, seed=0, level=10.0, noise=0.3):
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return level + np.sin(2 * np.pi * t / period) + noise * rng.normal(size=n)


def test_forecasts_a_seasonal_series_better_than_seasonal_naive():
    y = _seasonal(240)
    h = 12
    f = attnx.TransformerForecaster(h, **dict(FAST, steps=800)).fit(y[:-h])
    p = f.predict()
    assert p.shape == (h,)
    snaive = y[-2 * h:-h]
    signal = 10.0 + np.sin(2 * np.pi * np.arange(240 - h, 240) / 12)   # noise-free truth
    got = mase(y[-h:], p, y[:-h], 12)
    # the noise-free signal itself scores 0.73 of seasonal naive here
    assert got < 0.85 * mase(y[-h:], snaive, y[:-h], 12)
    assert got < 1.15 * mase(y[-h:], signal, y[:-h], 12)
    lo, hi = f.predict_interval(coverage=0.9)
    assert lo.shape == hi.shape == (h,) and np.all(lo < p) and np.all(p < hi)
    q = f.predict_quantiles(quantiles=(0.9, 0.1, 0.5))
    assert q.shape == (h, 3) and np.all(np.diff(q, axis=1) > 0)   # sorted, no crossing
    np.testing.assert_allclose(q[:, 1], p)
    # predict(y=...) forecasts after another history; pickling keeps the model
    p2 = f.predict(y=y[:-h] + 100.0)
    np.testing.assert_allclose(p2, p + 100.0, rtol=1e-4)   # instance scaling: level-free
    back = pickle.loads(pickle.dumps(f))
    np.testing.assert_array_equal(back.predict(), p)


def test_global_model_multichannel_and_covariates():
    series = [_seasonal(120 + 10 * i, seed=i, level=5.0 * (i + 1)) for i in range(3)]
    f = attnx.TransformerForecaster(6, **FAST).fit(series)
    out = f.predict()
    assert isinstance(out, list) and [o.shape for o in out] == [(6,)] * 3
    iv = f.predict_interval(coverage=0.8)
    assert len(iv) == 3 and all(lo.shape == (6,) for lo, _ in iv)
    two = np.stack([series[0], 2 * series[0]], axis=1)
    g = attnx.TransformerForecaster(6, **FAST).fit(two)
    assert g.predict().shape == (6, 2) and g.predict_quantiles().shape == (6, 2, 3)
    X = np.cos(np.arange(len(series[0])))[:, None]
    c = attnx.TransformerForecaster(6, **FAST, intervals=None).fit(
        series[0], X=X, X_future=X, static=[1.0, 2.0])
    assert c.predict(X=X, X_future=np.ones((6, 1))).shape == (6,)
    with pytest.raises(ValueError, match="X_future must give"):
        c.predict(X=X)
    with pytest.raises(ValueError, match="intervals=None"):
        c.predict_interval()


@pytest.mark.parametrize("kw,y,msg", [
    (dict(horizon=0), None, "horizon"),
    (dict(horizon=5), np.ones(6), "at least 7"),
    (dict(horizon=3), np.r_[np.ones(30), np.inf], "infinity"),
    (dict(horizon=3), np.r_[np.full(30, np.nan), 1.0, 2.0], "2 observed value"),
    (dict(horizon=3, intervals="bootstrap"), None, "intervals"),
    (dict(horizon=3, intervals="quantile", quantile_levels=(0.0, 0.5)), None, "quantile_levels"),
    (dict(horizon=3, intervals="quantile", quantile_levels=(0.2, 1.5)), None, "quantile_levels"),
    (dict(horizon=3, patch_len=80), None, "patch_len"),
])
def test_bad_input(kw, y, msg):
    y = _seasonal(60) if y is None else y
    with pytest.raises(ValueError, match=msg):
        attnx.TransformerForecaster(**{**FAST, **kw}).fit(y)
    f = attnx.TransformerForecaster(3, **FAST)
    with pytest.raises(ValueError, match="X for series 0 must have 60 rows"):
        f.fit(_seasonal(60), X=np.ones((59, 1)))
    with pytest.raises(ValueError, match="coverage"):
        attnx.TransformerForecaster(3, **FAST).fit(_seasonal(60)).predict_interval(coverage=1.2)
    with pytest.raises(ValueError, match="quantiles"):
        attnx.TransformerForecaster(3, **FAST).fit(_seasonal(60)).predict_quantiles(
            quantiles=(0.0, 0.5))


def test_interval_half_widths_are_the_running_maximum_of_the_conformal_quantiles():
    import math
    f = attnx.TransformerForecaster(6, **FAST).fit(_seasonal(120))
    s = f.calibration_scores_
    n = s.shape[0]
    q = np.quantile(s, min(1.0, math.ceil((n + 1) * 0.8) / n), axis=0, method="higher")
    w_lo, w_hi, half = f._interval(0.8)
    assert w_lo.tolist() == w_hi.tolist() == [1.0]   # one level: the point forecast
    half = half.reshape(-1)
    np.testing.assert_array_equal(half, np.maximum.accumulate(q))
    assert np.all(np.diff(half) >= 0) and np.all(half >= q)
    p = f.predict()
    lo, hi = f.predict_interval(coverage=0.8)
    np.testing.assert_allclose(hi - p, p - lo, rtol=1e-12)          # symmetric
    assert np.all(np.diff(hi - lo) >= -1e-9 * np.abs(hi - lo).max())  # widths from half


def test_quantile_intervals_learn_levels_and_calibrate_them():
    """intervals="quantile": the network learns the levels with the pinball loss
    (0.5 added), its outputs are sorted, predict is the median level, the intervals
    and quantiles never cross, a coverage between learned levels interpolates them,
    and on the calibration windows each horizon step's interval covers at least the
    coverage's share (the split-conformal construction)."""
    y = _seasonal(200, noise=1.0)
    f = attnx.TransformerForecaster(6, **FAST, intervals="quantile",
                                    quantile_levels=(0.1, 0.25, 0.75, 0.9)).fit(y)
    assert f.levels_ == (0.1, 0.25, 0.5, 0.75, 0.9)
    assert f.regressor_.loss == "pinball" and len(f.regressor_.options["quantiles"]) == 6 * 5
    s = f.calibration_scores_
    assert s.ndim == 3 and s.shape[1:] == (6, 5)
    p = f.predict()
    qs = f.predict_quantiles(quantiles=(0.1, 0.2, 0.5, 0.8, 0.9))
    assert qs.shape == (6, 5)
    np.testing.assert_array_equal(qs[:, 2], p)
    assert np.all(np.diff(qs, axis=1) >= 0)
    for cov in (0.8, 0.6, 0.5):
        w_lo, w_hi, half = f._interval(cov)
        assert w_lo.sum() == pytest.approx(1) and w_hi.sum() == pytest.approx(1)
        # the levels (1 -+ cov) / 2 as weights of the sorted learned levels
        lv = np.asarray(f.levels_)
        assert lv @ w_lo == pytest.approx((1 - cov) / 2)
        assert lv @ w_hi == pytest.approx((1 + cov) / 2)
        e = np.maximum(-(s @ w_lo), s @ w_hi)          # (n_cal, 6): outside by
        assert np.all((e <= half.reshape(1, -1)).mean(axis=0) >= cov)
        lo, hi = f.predict_interval(coverage=cov)
        assert np.all(lo <= p) and np.all(p <= hi) and np.all(lo < hi)
    with pytest.raises(ValueError, match="learned the levels"):
        f.predict_interval(coverage=0.9)
    with pytest.raises(ValueError, match="learned the levels"):
        f.predict_quantiles(quantiles=(0.05, 0.5))


def test_quantile_intervals_save_load_and_clone(tmp_path):
    y = _seasonal(120)
    f = attnx.TransformerForecaster(4, **FAST, intervals="quantile").fit(y)
    path = tmp_path / "q.safetensors"
    f.save(path)
    g = attnx.load(path)
    assert g.levels_ == f.levels_ and g.regressor_.loss == "pinball"
    np.testing.assert_array_equal(g.predict_interval(), f.predict_interval())
    np.testing.assert_array_equal(g.predict_quantiles(), f.predict_quantiles())
    from sklearn.base import clone
    c = clone(f)
    assert c.get_params() == f.get_params() and not hasattr(c, "levels_")
