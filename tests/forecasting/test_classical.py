"""attnx's own classical methods (attnx.forecasting._classical), the candidates (attnx.forecasting._candidates)
and their rolling-origin choice and conformal intervals (attnx.forecasting._selection)."""
import numpy as np
import pytest

from attnx.forecasting import _candidates as cand
from attnx.forecasting import _classical as cl
from attnx.forecasting import _selection as sel


def _seasonal(n, period=12, seed=0, level=10.0, amp=3.0, noise=0.3, trend=0.0):
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return level + trend * t + amp * np.sin(2 * np.pi * t / period) + rng.normal(0, noise, n)


def test_naive_seasonal_naive_and_drift_follow_their_definitions():
    y = np.array([3.0, 5.0, 4.0, 8.0, 6.0, 7.0])
    np.testing.assert_array_equal(cl.run("naive", y, 3).mean, [7.0, 7.0, 7.0])
    # the value one period before: the last cycle repeated
    np.testing.assert_array_equal(cl.run("seasonal_naive", y, 5, (3,)).mean,
                                  [8.0, 6.0, 7.0, 8.0, 6.0])
    line = 2.0 + 0.5 * np.arange(10)
    np.testing.assert_allclose(cl.run("drift", line, 4).mean, 2.0 + 0.5 * np.arange(10, 14))


def test_error_scales_are_positive_and_grow_along_the_horizon():
    y = _seasonal(60, noise=1.0)
    for name in cl.METHODS:
        s = cl.run(name, y, 24, (12,)).sigma
        assert np.all(s > 0) and np.all(np.diff(s) >= -1e-12), name
    # seasonal naive's error grows once per period
    s = cl.run("seasonal_naive", y, 24, (12,)).sigma
    assert np.allclose(s[:12], s[0]) and np.allclose(s[12:], s[0] * np.sqrt(2))


def test_ses_is_flat_and_exact_on_a_constant_series():
    f = cl.run("ses", np.full(20, 4.5), 5)
    np.testing.assert_allclose(f.mean, 4.5)
    assert np.all(f.sigma > 0)


def test_theta_on_a_line_extrapolates_half_the_slope():
    # SES on a line takes alpha = 1 (the last value): theta adds half the slope per step
    line = 1.0 + 2.0 * np.arange(30)
    f = cl.run("theta", line, 4)
    np.testing.assert_allclose(f.mean, line[-1] + 1.0 * np.arange(1, 5), rtol=1e-9)


def test_seasonal_indices_recover_a_pattern_under_a_trend():
    pattern = np.array([1.0, -2.0, 0.5, 0.5])
    t = np.arange(40)
    y = 3.0 + 0.2 * t + pattern[t % 4]
    idx = cl.seasonal_indices(y, 4)
    np.testing.assert_allclose(idx, pattern - pattern.mean(), atol=1e-9)
    assert cl.seasonal_indices(y[:7], 4) is None          # fewer than two cycles


def test_seasonality_test_tells_a_cycle_from_noise():
    assert cl.seasonal(_seasonal(120), 12)
    noise = np.random.default_rng(3).normal(size=120)
    assert not cl.seasonal(noise, 12)


def test_deseasonalised_methods_forecast_the_cycle():
    y = _seasonal(120, noise=0.05)
    truth = 10.0 + 3.0 * np.sin(2 * np.pi * np.arange(120, 132) / 12)
    for name in ("naive", "ses", "theta", "drift"):
        assert np.max(np.abs(cl.run(name, y, 12, (12,)).mean - truth)) < 0.5, name
        # without the period the cycle is lost
        assert np.max(np.abs(cl.run(name, y, 12).mean - truth)) > 1.0, name


def test_multiplicative_detection_and_the_log_variant():
    t = np.arange(96)
    level = 10.0 * 1.03 ** t
    mult = level * (1 + 0.3 * np.sin(2 * np.pi * t / 12))
    add = 10.0 + 0.3 * t + 3.0 * np.sin(2 * np.pi * t / 12)
    assert cl.multiplicative(mult, 12)
    assert not cl.multiplicative(add, 12)
    assert not cl.multiplicative(mult - 200.0, 12)        # not positive
    truth = (10.0 * 1.03 ** np.arange(96, 108)) * (1 + 0.3 * np.sin(2 * np.pi * np.arange(96, 108) / 12))
    err_log = np.abs(cl.run("drift", mult, 12, (12,), log=True).mean - truth).mean()
    err_raw = np.abs(cl.run("drift", mult, 12, (12,)).mean - truth).mean()
    assert err_log < 0.25 * err_raw
    with pytest.raises(ValueError, match="positive"):
        cl.run("ses", mult - 200.0, 3, log=True)


def test_run_rejects_unknown_methods_and_too_short_series():
    with pytest.raises(ValueError, match="unknown method"):
        cl.run("prophet", np.ones(10), 2)
    with pytest.raises(ValueError, match="at least 3"):
        cl.run("theta", np.ones(2), 2)


def test_origins_end_a_horizon_before_the_end_and_keep_the_training_length():
    o = sel.origins(200, 12, 8)
    assert o[0] == 188 and len(o) == sel.N_ORIGINS and o == sorted(o, reverse=True)
    assert np.all(np.diff(o) == -6)                       # h // 2 apart
    o = sel.origins(30, 12, 8)                            # little room: closer origins
    assert o[0] == 18 and min(o) >= 8 and len(o) == sel.N_ORIGINS
    o = sel.origins(14, 12, 2)                            # h + 2 values: partly observed ones
    assert o[0] > o[-1] >= 2 and 2 in o and max(o) <= 13 and len(o) >= sel.MIN_FULL


def test_conformal_quantile_levels():
    scores = np.arange(1.0, 20.0)                         # 19 scores
    assert sel.quantile(scores, 0.9) == 18.0              # ceil(20 * 0.9) / 19 -> the 18th
    few = np.array([0.1, 0.2])
    assert sel.quantile(few, 0.9) == pytest.approx(1.6448536, rel=1e-6)   # normal floor
    assert sel.quantile(np.array([5.0, 1.0]), 0.9) == 5.0
    assert sel.quantile(np.array([np.nan, 5.0, np.nan, 1.0]), 0.9) == 5.0   # NaN left out
    # intervals take the quantile at c + MARGIN (1 - c): 0.94 -> ceil(20 * 0.94) = 19th
    assert sel.MARGIN == pytest.approx(0.4)
    np.testing.assert_allclose(sel.half_width(np.array([1.0, 2.0]), scores, 0.9), [19, 38])
    np.testing.assert_allclose(sel.half_width(np.array([1.0]), np.arange(1.0, 101.0), 0.5),
                               [71.0])   # 0.7: ceil(101 * 0.7) = 71st


def test_each_step_gets_its_quantile_shrunk_toward_that_of_all_steps():
    rng = np.random.default_rng(3)
    s = np.abs(rng.normal(size=(60, 3))) * np.array([1.0, 2.0, 4.0])   # errors grow
    s[50:, 2] = np.nan                                                   # step 3: 50 scores
    lv = 0.9
    q_all = sel.quantile(s.ravel(), lv)
    q = sel.step_quantiles(s, 3, lv)
    for j, n_j in enumerate((60, 60, 50)):
        q_j = sel.quantile(s[:, j], lv)
        assert q[j] == pytest.approx((n_j * q_j + sel.STEP_SHRINK * q_all)
                                     / (n_j + sel.STEP_SHRINK))
    assert q[0] < q_all < q[2] and np.all(np.diff(q) > 0)
    # a step without scores, and 1-D scores (no steps known): the quantile of all
    s[:, 1] = np.nan
    assert sel.step_quantiles(s, 3, lv)[1] == pytest.approx(sel.quantile(s.ravel(), lv))
    np.testing.assert_allclose(sel.step_quantiles(s[:, 0].copy(), 4, lv),
                               sel.quantile(s[:, 0], lv))
    # the half-width at step j is the step's quantile (at the margin's level) times sigma
    sigma = np.array([1.0, 2.0, 3.0])
    lv = 0.9 + sel.MARGIN * 0.1
    np.testing.assert_allclose(sel.half_width(sigma, s, 0.9), sel.step_quantiles(s, 3, lv) * sigma)


def test_series_with_few_scores_borrow_the_pooled_ones():
    a, b = np.ones(5), np.arange(40.0)
    out = sel.borrow([a, b])
    assert out[0].shape[0] == 45 and out[1] is b
    # (origins, h) scores: stacked, NaN (steps past the end) not counted
    a = np.full((5, 4), np.nan)
    a[:, 0] = 1.0
    b = np.arange(40.0).reshape(10, 4)
    out = sel.borrow([a, b])
    assert out[0].shape == (15, 4) and out[1] is b and sel.count(out[0]) == 45
    c = np.arange(12.0).reshape(4, 3)                  # another horizon: flattened
    assert sel.pool([a, c]).shape == (32,)


def test_the_choice_uses_the_period_and_its_rolling_origin_errors():
    y = _seasonal(150, noise=0.5)
    c = sel.choose(y, 12, (12,), use_statsforecast=False)
    blind = sel.choose(y, 12, (), use_statsforecast=False)   # no period given
    _check_rule(c)
    assert c.errors[c.name] < 0.5 * blind.errors["naive"]
    rw = np.cumsum(np.random.default_rng(1).normal(size=150)) + 50
    c = sel.choose(rw, 6, (), use_statsforecast=False)
    assert c.name in c.errors and c.forecast.mean.shape == (6,)
    _check_rule(c)


def _check_rule(c):
    """The choice follows pick's rule: a single candidate has the smallest error and
    beats the second best clearly (or no other is within RATIO); else the combination."""
    singles = sorted(v for k, v in c.errors.items() if k != sel.COMBO)
    if c.name == sel.COMBO:
        assert not singles[0] < sel.DOMINANCE * singles[1]
        assert singles[1] <= sel.RATIO * singles[0]
    else:
        assert c.errors[c.name] == singles[0]
        assert (len(singles) == 1 or singles[0] < sel.DOMINANCE * singles[1]
                or singles[1] > sel.RATIO * singles[0])


def _evaluation(errors, h=3):
    """An Evaluation whose candidates' origin forecasts miss a zero truth by `errors`."""
    truth = np.zeros((2, h))
    obs = np.ones((2, h), bool)
    final, pred = {}, {}
    for k, e in errors.items():
        final[k] = (cl.Forecast(np.full(h, e), np.ones(h)), {})
        pred[k] = (np.full((2, h), e), np.ones((2, h)))
    return sel.Evaluation(final, pred, truth, obs)


def test_a_clear_winner_forecasts_alone_and_a_close_race_is_combined():
    c = sel.pick(_evaluation({"a": 1.0, "b": 1.3, "c": 3.0}))    # 1 < 0.8 * 1.3
    assert c.name == "a" and np.all(c.forecast.mean == 1.0)
    np.testing.assert_allclose(c.scores, 1.0)                     # |error| / scale
    assert c.scores.shape == (2, 3)                               # (origins, h)
    # 1 >= 0.8 * 1.2; c (3.0) is further than RATIO (1.5) behind: left out
    c = sel.pick(_evaluation({"a": 1.0, "b": 1.2, "c": 3.0, "d": 1.45}))
    w = np.array([1.0, 1 / 1.2 ** 2, 1 / 1.45 ** 2])
    assert c.name == sel.COMBO and [p[0] for p in c.spec["parts"]] == ["a", "b", "d"]
    np.testing.assert_allclose(c.forecast.mean, (w @ [1.0, 1.2, 1.45]) / w.sum())
    assert c.errors[sel.COMBO] == pytest.approx((w @ [1.0, 1.2, 1.45]) / w.sum())
    # no other candidate within RATIO: the best alone even in a close race of the rest
    c = sel.pick(_evaluation({"a": 1.0, "b": 1.6, "c": 1.7}))
    assert c.name == "a"
    # white noise: the flat methods tie, so the best few are weighted 1 / error^2
    z = np.random.default_rng(5).normal(10.0, 1.0, 120)
    ev = sel.evaluate(z, 6, (), use_statsforecast=False)
    c = sel.pick(ev)
    assert c.name == sel.COMBO
    parts = c.spec["parts"]
    errs = {k: ev.error(ev.pred[k][0]) for k in ev.pred}
    best = min(errs.values())
    assert [p[0] for p in parts] == [k for k in sorted(errs, key=lambda k: (errs[k], k))[:sel.TOP]
                                     if errs[k] <= sel.RATIO * best]
    w = np.array([1 / errs[p[0]] ** 2 for p in parts])
    np.testing.assert_allclose([p[2] for p in parts], w / w.sum())
    np.testing.assert_allclose(c.forecast.mean, sum(
        p[2] * ev.final[p[0]][0].mean for p in parts))
    # rerun on the same series reproduces the forecast
    np.testing.assert_allclose(sel.rerun(c.to_dict(), z, 6, ()).mean, c.forecast.mean)


def test_candidates_without_statsforecast(monkeypatch):
    monkeypatch.setattr(cand, "have_statsforecast", lambda: False)
    y = _seasonal(80)
    names = cand.available(y, (12,))
    assert {"naive", "drift", "ses", "theta", "seasonal_naive12"} <= set(names)
    assert not set(names) & {"ets", "atheta", "arima", "mstl"}
    assert sel.choose(y, 6, (12,)).name in set(names) | {sel.COMBO}


def test_statsforecast_candidates_refit_with_their_chosen_model():
    pytest.importorskip("statsforecast")
    y = _seasonal(120, trend=0.05)
    for name in ("ets", "atheta", "arima"):
        f, spec = cand.fit(name, y, 12, (12,))
        g = cand.refit(name, spec, y, 12, (12,))
        assert f.mean.shape == (12,) and np.all(f.sigma > 0)
        np.testing.assert_allclose(g.mean, f.mean, rtol=1e-6, atol=1e-6)


def test_normalised_conformal_intervals_cover_about_90_percent():
    """Pooled over 150 simulated series (random walks, AR(1), seasonal), the 90%
    intervals of attnx's own candidates cover 82-97% of the held-out values."""
    rng = np.random.default_rng(7)
    inside = total = 0
    for i in range(150):
        h, n = 8, int(rng.integers(30, 120))
        kind = i % 3
        e = rng.normal(size=n + h)
        if kind == 0:
            y = 20 + np.cumsum(e)
        elif kind == 1:
            y = np.zeros(n + h)
            for t in range(1, n + h):
                y[t] = 0.7 * y[t - 1] + e[t]
        else:
            y = _seasonal(n + h, seed=i, noise=1.0)
        periods = (12,) if kind == 2 else ()
        c = sel.choose(y[:n], h, periods, use_statsforecast=False)
        half = sel.half_width(c.forecast.sigma, c.scores, 0.9)
        inside += int(np.sum(np.abs(y[n:] - c.forecast.mean) <= half))
        total += h
    assert 0.82 <= inside / total <= 0.97


def test_a_flat_stretch_before_a_jump_keeps_the_intervals_finite_and_sane():
    # origins on the flat zeros have a near-zero error scale; the floor (a share of
    # the mean absolute step) keeps the scores, and so the intervals, bounded
    y = np.r_[np.zeros(30), 1000.0, np.zeros(5)]
    c = sel.choose(y, 6, (), use_statsforecast=False)
    half = sel.half_width(c.forecast.sigma, c.scores, 0.9)
    assert np.all(np.isfinite(half)) and np.all(half > 0)
    assert np.all(half < 1e3 * 1000.0)
    assert np.all(c.forecast.sigma >= sel.scale_floor(y))
    assert sel.scale_floor(y) == pytest.approx(sel.SCALE_FLOOR * 2000.0 / 35)
    constant = sel.choose(np.full(20, 3.0), 4, (), use_statsforecast=False)
    np.testing.assert_allclose(constant.forecast.mean, 3.0)


def test_a_degenerate_statsforecast_fit_drops_out_instead_of_failing():
    pytest.importorskip("statsforecast")
    c = sel.choose(np.full(30, 5.0), 6, (12,))
    np.testing.assert_allclose(c.forecast.mean, 5.0)


def test_arima1_searches_the_seasonally_adjusted_series():
    """The non-seasonal AutoARIMA (for series too long for the seasonal search) runs
    on the series without its seasonal indices and adds them back: it follows the
    season the same search on the raw series cannot."""
    pytest.importorskip("statsforecast")
    y = _seasonal(144, trend=0.05, noise=0.3)
    truth = _seasonal(156, trend=0.05, noise=0.0)[144:]
    f, spec = cand.fit("arima1", y, 12, (12,))
    raw, _ = cand.fit("arima1", y, 12, ())
    assert np.mean(np.abs(f.mean - truth)) < 0.5 * np.mean(np.abs(raw.mean - truth))
    np.testing.assert_allclose(cand.refit("arima1", spec, y, 12, (12,)).mean, f.mean,
                               rtol=1e-6, atol=1e-6)
