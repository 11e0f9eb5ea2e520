"""TransformerForecaster's baselines and the network's weight on top of them: the seasonal
profile (attnx.forecasting._season.profile), the choice of baseline="auto" on the held-out windows,
the blend weight that reaches 0 (the baseline alone), the significance rule that keeps
the default baseline, and the too-few-windows rule."""
import numpy as np
import pytest

import attnx
from attnx.forecasting import _season
from attnx.forecasting import _windows as win
from attnx.forecasting import _forecaster_stats as fstats

TINY = dict(d_model=8, n_heads=2, n_layers=1, steps=60, random_state=0, dtype=np.float64,
            method="network")


def test_profile_is_the_per_phase_mean_of_the_real_steps():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 30, 2))
    mask = np.zeros((3, 30), bool)
    mask[1, :11] = True            # padding: left out of every mean
    h, m = 9, 4
    got = _season.profile(x, mask, h, m)
    for n in range(3):
        for j in range(h):
            # horizon step j repeats the phase of step W - m + j % m
            idx = [t for t in range(30) if (t - (30 - m + j % m)) % m == 0 and not mask[n, t]]
            np.testing.assert_allclose(got[n, j], x[n, idx].mean(axis=0), rtol=0, atol=1e-12)
    # whole seasons and no padding: the same as the unmasked seasonal mean
    np.testing.assert_allclose(_season.profile(x[:, 2:], np.zeros((3, 28), bool), h, m),
                               win.seasonal_mean(x[:, 2:], h, m), rtol=0, atol=1e-12)
    # season 1: the real context's mean
    np.testing.assert_allclose(_season.profile(x, mask, 2, 1)[1, 0], x[1, 11:].mean(axis=0),
                               rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="season must be in"):
        _season.profile(x, mask, 3, 31)


def test_exact_seasonal_series_gets_blend_zero_and_the_exact_continuation():
    """A pattern that repeats exactly: seasonal naive (and the profile) are exact on the
    held-out windows, so no network weight can beat them there: blend_ is 0 and the
    forecast is the exact continuation (a network weight > 0 would add its output)."""
    rng = np.random.default_rng(3)
    pattern = rng.normal(size=7) * 3.0 + 10.0
    y = np.tile(pattern, 30)          # 210 values, period 7
    h = 5
    f = attnx.TransformerForecaster(h, **TINY).fit(y)
    assert f.season_ == 7 and f.blend_ == 0.0
    assert f.baseline_ == "seasonal_naive"        # a tie keeps seasonal naive
    truth = np.tile(pattern, 31)[210:210 + h]
    np.testing.assert_allclose(f.predict(), truth, rtol=0, atol=1e-9)
    lo, hi = f.predict_interval(coverage=0.9)
    np.testing.assert_allclose(hi - lo, 0.0, atol=1e-9)   # no held-out error at all


def test_blend_zero_means_the_baseline_alone():
    rng = np.random.default_rng(1)
    t = np.arange(200)
    y = 5.0 + np.sin(2 * np.pi * t / 12) + 0.4 * rng.normal(size=200)
    f = attnx.TransformerForecaster(6, **TINY).fit(y)
    assert f.evidence_ >= fstats.MIN_EVIDENCE
    assert 0.0 <= f.blend_ <= 1.0
    p = f.predict()
    f.blend_ = 0.0
    ctx = y[-f.window_:][None, :, None]
    mu, sd = ctx.mean(), ctx.std()
    base = f._baseline(f.baseline_, (ctx - mu) / sd, np.zeros((1, f.window_), bool))
    np.testing.assert_allclose(f.predict(), base[0, :, 0] * sd + mu, rtol=0, atol=1e-9)
    assert p.shape == (6,) and np.all(np.isfinite(p))


def test_few_held_out_windows_average_the_baselines_without_the_network():
    """A short series with a long horizon leaves held-out windows that cover less than
    MIN_EVIDENCE horizons of distinct steps: the forecast is then the mean of seasonal
    naive and the seasonal profile (blend_ 0), calibrated on that baseline's errors."""
    rng = np.random.default_rng(2)
    t = np.arange(110)
    y = 3.0 + 2.0 * np.sin(2 * np.pi * t / 12) + 0.3 * rng.normal(size=110)
    h = 24
    f = attnx.TransformerForecaster(h, season=12, **TINY).fit(y)
    assert f.evidence_ < fstats.MIN_EVIDENCE
    assert f.baseline_ == "combined" and f.blend_ == 0.0
    ctx = y[-f.window_:]
    sn = ctx[f.window_ - 12 + np.arange(h) % 12]
    prof = np.array([ctx[[i for i in range(f.window_) if (i - (f.window_ - 12 + j % 12)) % 12 == 0]]
                     .mean() for j in range(h)])
    np.testing.assert_allclose(f.predict(), 0.5 * (sn + prof), rtol=0, atol=1e-9)
    # its intervals come from the baseline's own held-out errors
    lo, hi = f.predict_interval(coverage=0.9)
    assert np.all(hi > lo)
    # with enough history the same data gets a choice and the network
    g = attnx.TransformerForecaster(6, season=12, **TINY).fit(y)
    assert g.evidence_ >= fstats.MIN_EVIDENCE and g.baseline_ in ("seasonal_naive",
                                                                "seasonal_mean")


def test_auto_picks_the_profile_under_noise_and_seasonal_naive_on_a_trend():
    rng = np.random.default_rng(0)
    t = np.arange(200)
    trend = attnx.TransformerForecaster(6, **TINY).fit(0.5 * t + 3.0 * np.sin(2 * np.pi * t / 12))
    assert trend.season_ == 12 and trend.baseline_ == "seasonal_naive"
    noisy = attnx.TransformerForecaster(6, season=12, **TINY).fit(
        5.0 + np.sin(2 * np.pi * t / 12) + 0.8 * rng.normal(size=200))
    assert noisy.baseline_ == "seasonal_mean"


@pytest.mark.parametrize("name", ["seasonal_mean", "combined"])
def test_explicit_baselines_forecast_exactly_with_a_zeroed_network(name):
    rng = np.random.default_rng(4)
    t = np.arange(150)
    y = 4.0 + np.sin(2 * np.pi * t / 10) + 0.2 * rng.normal(size=150)
    f = attnx.TransformerForecaster(5, season=10, baseline=name, **TINY).fit(y)
    assert f.baseline_ == name
    params = f.regressor_.model_.params
    params["head.W"][...] = 0.0
    params["head.b"][...] = 0.0
    ctx = y[-f.window_:]
    w = f.window_
    sn = ctx[w - 10 + np.arange(5) % 10]
    prof = np.array([ctx[[i for i in range(w) if (i - (w - 10 + j)) % 10 == 0]].mean()
                     for j in range(5)])
    want = prof if name == "seasonal_mean" else 0.5 * (sn + prof)
    np.testing.assert_allclose(f.predict(), want, rtol=0, atol=1e-9)


def test_l1_weight_minimises_the_absolute_error_on_0_1():
    rng = np.random.default_rng(5)
    grid = np.linspace(0.0, 1.0, 2001)
    for scale in (0.4, -0.5, 3.0):   # inside, below (clipped to 0), above (clipped to 1)
        p = rng.normal(size=(40, 6))
        t = scale * p + 0.5 * rng.laplace(size=(40, 6))
        c = fstats.l1_weight(p, t)
        brute = grid[np.argmin([np.abs(t - g * p).sum() for g in grid])]
        assert 0.0 <= c <= 1.0 and abs(c - brute) <= 1e-3
        # no grid point does better than the weight found
        assert np.abs(t - c * p).sum() <= min(np.abs(t - g * p).sum() for g in grid) + 1e-9
    assert fstats.l1_weight(np.zeros((3, 2)), np.ones((3, 2))) == 0.0
    # targets the baseline hits exactly on most entries: weight exactly 0
    p = rng.normal(size=(30, 4))
    t = np.zeros((30, 4))
    t[:5] = p[:5]
    assert fstats.l1_weight(p, t) == 0.0


def test_significance_counts_the_independent_forecasts():
    d = np.array([0.3, -0.1, 0.2, 0.0, 0.25, -0.05, 0.15, 0.1])   # mean 0.106, sd 0.14
    assert not fstats.significantly_positive(d, 2.0)     # 2 forecasts: could be chance
    assert fstats.significantly_positive(d, 50.0)        # the same gap over 50: not chance
    assert not fstats.significantly_positive(-d, 50.0)
    assert fstats.significantly_positive(np.full(4, 0.01), 2.0)     # constant: its sign
    assert not fstats.significantly_positive(np.zeros(4), 100.0)


def _chooser(season: int, h: int = 6, window: int = 48, evidence: float = 3.0):
    f = attnx.TransformerForecaster(h)
    f.horizon_, f.season_, f.window_, f.evidence_ = h, season, window, evidence
    return f


@pytest.mark.parametrize("season", [1, 12])
def test_auto_keeps_the_default_unless_the_other_is_significantly_better(season):
    """The held-out windows' errors where the other baseline is better on average
    but not significantly (a few forecasts' worth, widely spread): the default stays
    (seasonal naive with a season, the context's mean without); with many forecasts'
    worth of the same errors, the other baseline is taken."""
    rng = np.random.default_rng(6)
    n, h, w = 40, 6, 48
    x = rng.normal(size=(n, w, 1))
    mask = np.zeros((n, w), bool)
    f = _chooser(season)
    default, other = (("seasonal_naive", "seasonal_mean") if season > 1
                      else ("seasonal_mean", "seasonal_naive"))
    b_def = f._baseline(default, x, mask)
    b_oth = f._baseline(other, x, mask)
    # targets a share a of the way from the other baseline to the default: errors
    # a |gap| and (1 - a) |gap|; a spread over [0.1, 0.75], so the other is better on
    # average while a third of the windows favour the default
    a = rng.uniform(0.1, 0.75, size=(n, 1, 1))
    target = b_oth + a * (b_def - b_oth)
    e_def = np.abs(target - b_def).mean(axis=(1, 2))
    e_oth = np.abs(target - b_oth).mean(axis=(1, 2))
    assert e_oth.mean() < e_def.mean()          # the old rule would switch
    assert 0.5 < (e_oth < e_def).mean() < 1.0
    assert f._auto_baseline(target, x, mask) == default
    f.evidence_ = 400.0
    assert f._auto_baseline(target, x, mask) == other
    f.evidence_ = fstats.MIN_EVIDENCE / 2         # too little evidence: the combination
    assert f._auto_baseline(target, x, mask) == "combined"


def test_series_that_fell_to_zeros_is_forecast_exactly_as_seasonal_naive():
    """A seasonal count series that ends in several cycles of zeros: seasonal naive is
    exact on most held-out windows, so the network gets weight 0 (its least-squares
    weight was positive) and the forecast is seasonal naive's, exactly zero."""
    for seed in range(3):
        rng = np.random.default_rng(seed)
        t = np.arange(200)
        y = rng.poisson(3.0 + 2.0 * np.sin(2 * np.pi * t / 12)).astype(float)
        y[150:] = 0.0
        f = attnx.TransformerForecaster(6, season=12, **TINY).fit(y)
        assert f.baseline_ == "seasonal_naive" and f.blend_ == 0.0
        np.testing.assert_allclose(f.predict(), 0.0, rtol=0, atol=1e-9)


def test_level_collapse_one_cycle_before_the_end_keeps_seasonal_naive():
    """A stable seasonal pattern whose level drops 14 steps before the end: on the
    held-out windows (mostly before the drop) the profile is not significantly better,
    so seasonal naive stays, and the forecast is about as good as seasonal naive's
    (a profile of the old cycles forecasts the old level, ~100 times its error)."""
    for seed in range(3):
        rng = np.random.default_rng(seed)
        t = np.arange(212)
        level = np.where(t < 186, 6.0, 0.5)
        y = level * (1 + 0.8 * np.sin(2 * np.pi * t / 12) + 0.05 * rng.normal(size=212))
        train, future = y[:200], y[200:]
        f = attnx.TransformerForecaster(12, season=12, **TINY).fit(train)
        assert f.baseline_ == "seasonal_naive"
        err = np.abs(f.predict() - future).mean()
        naive = np.abs(train[-12:] - future).mean()
        profile = np.abs(np.mean(train[-60:].reshape(5, 12), axis=0) - future).mean()
        assert err <= 3.0 * naive and err < 0.05 * profile
