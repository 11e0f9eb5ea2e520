"""The seasonal autoregression of the seasonally differenced series (candidate "sar",
attnx.forecasting._seasonal_ar): estimation, forecast, error scale, and its place among
the candidates of method="auto"."""
import numpy as np
import pytest

from attnx.forecasting import _candidates as cand
from attnx.forecasting import _seasonal_ar as sar
from attnx.forecasting import _selection as sel


def _reverting(n, m, phi_s=-0.5, phi=0.0, seed=0, mu=0.0):
    """y with z_t = y_t - y_{t-m} following (1 - phi B)(1 - phi_s B^m)(z - mu) = e,
    on top of a fixed daily shape."""
    rng = np.random.default_rng(seed)
    e = rng.normal(size=n + 10 * m)
    d = np.zeros_like(e)
    for t in range(e.shape[0]):
        d[t] = e[t] + (phi * d[t - 1] if t >= 1 else 0.0) + (phi_s * d[t - m] if t >= m else 0.0) \
            - (phi * phi_s * d[t - m - 1] if t >= m + 1 else 0.0)
    z = (d + mu)[10 * m:]
    shape = 5.0 * np.sin(2 * np.pi * np.arange(m) / m)
    y = np.empty(n)
    y[:m] = shape
    for t in range(m, n):
        y[t] = y[t - m] + z[t]
    return y


@pytest.mark.parametrize("m,phi_s,phi", [(12, -0.5, 0.0), (24, 0.4, 0.6), (7, -0.3, 0.5)])
def test_coefficients_are_recovered_from_a_long_series(m, phi_s, phi):
    y = _reverting(4000, m, phi_s, phi, seed=m)
    _, est_s, est, _ = sar._coefficients(y, m, 1, False)
    assert abs(est_s - phi_s) < 0.08, est_s
    assert abs(est[0] - phi) < 0.08, est


def test_forecast_is_the_weighted_mean_of_the_last_two_cycles_without_short_lags():
    m, h = 12, 30
    y = _reverting(200, m, -0.6, seed=1)
    mu, phi_s, phi, _ = sar._coefficients(y, m, 0, False)
    f = sar.refit({"p": 0, "mean": False}, y, h, m)
    ext = list(y)
    for j in range(h):   # y_t = y_{t-m} + Phi (y_{t-m} - y_{t-2m})
        ext.append(ext[-m] + phi_s * (ext[-m] - ext[-2 * m]))
    np.testing.assert_allclose(f.mean, ext[200:], rtol=1e-10, atol=1e-10)
    # psi weights: 1 for the first cycle, then 1 + Phi at lag m, so the scale steps up
    assert np.allclose(f.sigma[:m], f.sigma[0])
    np.testing.assert_allclose(f.sigma[m] / f.sigma[0], np.sqrt(1 + (1 + phi_s) ** 2),
                               rtol=1e-10)


def test_error_scale_matches_simulated_paths():
    m, h, n = 6, 14, 300
    y = _reverting(n, m, -0.4, 0.5, seed=3)
    f, spec = sar.fit(y, h, m)
    mu, phi_s, phi, resid = sar._coefficients(y, m, spec["p"], spec["mean"])
    s = float(np.sqrt(np.mean(resid ** 2)))
    rng = np.random.default_rng(0)
    paths = np.empty((4000, h))
    p = phi.shape[0]
    for i in range(paths.shape[0]):   # simulate the fitted model forward from y
        ext = list(y)
        d = list(y[m:] - y[:-m] - mu)
        u = [d[t] - (phi_s * d[t - m] if t >= m else 0.0) for t in range(len(d))]
        for j in range(h):
            un = sum(phi[k] * u[-1 - k] for k in range(p)) + s * rng.normal()
            dn = un + phi_s * d[-m]
            u.append(un)
            d.append(dn)
            ext.append(ext[-m] + dn + mu)
        paths[i] = ext[n:]
    np.testing.assert_allclose(paths.mean(axis=0), f.mean, atol=0.15 * s * np.sqrt(h))
    np.testing.assert_allclose(paths.std(axis=0), f.sigma, rtol=0.08)


def test_aic_picks_the_mean_of_a_seasonal_drift_and_the_order():
    y = _reverting(600, 12, 0.3, 0.7, seed=5, mu=2.0)
    _, spec = sar.fit(y, 12, 12)
    assert spec["mean"] and spec["p"] >= 1, spec
    y0 = _reverting(600, 12, 0.3, 0.0, seed=6)
    _, spec0 = sar.fit(y0, 12, 12)
    assert spec0["p"] <= 1, spec0


def test_bad_input_and_short_series():
    with pytest.raises(ValueError, match="period of at least 2"):
        sar.fit(np.arange(30.0), 4, 1)
    with pytest.raises(ValueError, match="at least 16 values"):
        sar.fit(np.arange(15.0), 4, 12)
    f, _ = sar.fit(np.arange(16.0) % 12, 4, 12)   # z has 4 values: Phi = 0, p lowered
    assert f.mean.shape == (4,) and np.all(np.isfinite(f.mean)) and np.all(f.sigma > 0)


def test_sar_is_a_candidate_only_with_a_season_and_enough_values():
    y = _reverting(120, 12, seed=2)
    assert "sar" in cand.available(y, (12,), use_statsforecast=False)
    assert "sar" not in cand.available(y, (), use_statsforecast=False)
    assert "sar" not in cand.available(y[:15], (12,), use_statsforecast=False)
    assert cand.is_candidate("sar") and cand.min_length("sar", (12,)) == 16
    f, spec = cand.fit("sar", y, 6, (12,))
    np.testing.assert_allclose(cand.refit("sar", spec, y, 6, (12,)).mean, f.mean)


def test_a_long_period_whose_cycles_revert_is_forecast_by_sar():
    """Half-hourly-like data (m = 48, six cycles) whose day-to-day changes revert:
    seasonal naive copies the last day's noise, sar halves it; method="auto" (attnx's own
    candidates, which had only seasonal naive for such a period) now does better."""
    m, h = 48, 48
    wins = []
    for seed in range(6):
        y = _reverting(6 * m + h, m, -0.6, 0.8, seed=seed)
        train, test = y[:-h], y[-h:]
        c = sel.choose(train, h, (m,), use_statsforecast=False)
        assert c.name == "sar" or "sar" in [p[0] for p in c.spec.get("parts", [])], c.name
        sn = np.mean(np.abs(train[-m:] - test))
        wins.append(np.mean(np.abs(c.forecast.mean - test)) < sn)
    assert np.mean(wins) >= 5 / 6, wins


def test_a_longer_period_is_removed_first_and_added_back():
    """A daily cycle (m = 6) on top of a weekly one (42): sar at the daily period alone
    cannot carry the weekly shape forward; run() with both periods can."""
    m, w, h = 6, 42, 42
    errs_one, errs_both = [], []
    for seed in range(5):
        rng = np.random.default_rng(seed)
        t = np.arange(8 * w + h)
        y = (np.sin(2 * np.pi * t / m) + 2.0 * (t % w >= 30)
             + 0.2 * rng.normal(size=t.shape[0]))
        train, test = y[:-h], y[-h:]
        one, _ = sar.run(train, h, (m,))
        both, spec = sar.run(train, h, (m, w))
        np.testing.assert_allclose(sar.run(train, h, (m, w), spec)[0].mean, both.mean)
        errs_one.append(np.mean(np.abs(one.mean - test)))
        errs_both.append(np.mean(np.abs(both.mean - test)))
    assert np.mean(errs_both) < 0.5 * np.mean(errs_one), (errs_both, errs_one)


def test_with_statsforecast_sar_stands_in_where_the_seasonal_search_is_not_run():
    pytest.importorskip("statsforecast")
    cheap = _reverting(200, 4, seed=4)     # 200 * 4 <= ARIMA_MAX_COST: seasonal AutoARIMA
    long_ = _reverting(400, 12, seed=4)    # too costly for it: arima1 and sar
    short = _reverting(cand.ARIMA_MIN_LENGTH, 12, seed=4)   # too short for it: sar
    assert "arima" in cand.available(cheap, (4,)) and "sar" not in cand.available(cheap, (4,))
    names = cand.available(long_, (12,))
    assert "sar" in names and "arima1" in names
    names = cand.available(short, (12,))
    assert "sar" in names and not {"arima", "arima1"} & set(names) and "ets" in names
    one_more = cand.available(_reverting(cand.ARIMA_MIN_LENGTH + 1, 1, seed=4), (1,))
    assert "arima" in one_more
