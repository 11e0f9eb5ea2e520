"""TransformerForecaster on series with missing values: gaps are handled, not refused."""
import numpy as np
import pytest

import attnx
from attnx.forecasting.metrics import mase


def _seasonal(n=156, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return 10 + 0.01 * t + 2 * np.sin(2 * np.pi * t / 12) + rng.normal(0, 0.3, n)


def _fit(y, **kw):
    return attnx.TransformerForecaster(horizon=12, random_state=0, **kw).fit(y)


def test_leading_missing_values_are_dropped():
    y = _seasonal()
    assert np.array_equal(_fit(np.r_[np.full(7, np.nan), y]).predict(), _fit(y).predict())


def test_interior_gaps_cost_little_accuracy():
    y = _seasonal(seed=3)
    train, test = y[:-12], y[-12:]
    gappy = train.copy()
    rng = np.random.default_rng(1)
    gappy[rng.choice(np.arange(1, len(train) - 1), size=len(train) // 20, replace=False)] = np.nan
    full = mase(test, _fit(train).predict(), train, season=12)
    missing = mase(test, _fit(gappy).predict(), train, season=12)
    assert np.isfinite(missing)
    assert missing <= 1.25 * full + 0.05, (missing, full)


def test_interior_gaps_keep_intervals_finite_and_ordered():
    y = _seasonal(seed=5)
    y[[20, 21, 22, 60, 100]] = np.nan
    f = _fit(y)
    lo, hi = f.predict_interval(coverage=0.9)
    point = f.predict()
    assert np.isfinite(lo).all() and np.isfinite(hi).all()
    assert (lo <= point).all() and (point <= hi).all()


def test_trailing_missing_values_keep_the_forecast_origin_at_the_end_of_the_index():
    pd = pytest.importorskip("pandas")
    y = _seasonal()
    y[-3:] = np.nan
    s = pd.Series(y, index=pd.date_range("2000-01-01", periods=len(y), freq="MS"))
    pred = _fit(s).predict()
    assert len(pred) == 12 and np.isfinite(pred.to_numpy()).all()
    assert pred.index[0] == s.index[-1] + pd.offsets.MonthBegin(1)


def test_infinity_is_still_refused_with_its_position():
    y = _seasonal()
    y[7] = np.inf
    with pytest.raises(ValueError, match="infinity.*time step 7"):
        _fit(y)


def test_a_series_without_enough_observed_values_is_refused():
    with pytest.raises(ValueError, match="observed value"):
        _fit(np.r_[np.full(40, np.nan), 1.0, 2.0, 3.0])
