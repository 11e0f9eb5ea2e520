"""TransformerForecaster's classical path: method="auto", and the network's fallback
when the series are too short for its windows (always an answer)."""
import pickle
import warnings

import numpy as np
import pytest

import attnx
from attnx.forecasting import _candidates as cand
from attnx.forecasting import _selection as sel

TINY = dict(d_model=8, n_heads=2, n_layers=1, epochs=2, random_state=0)
NAMES = ("naive", "drift", "ses", "theta", "drift_log", "ses_log", "theta_log", "ets",
         "atheta", "arima", "arima1", "mstl", "pretrained", "sar", "combination")


def _seasonal(n, period=12, seed=0, level=10.0, amp=3.0, noise=0.3):
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return level + amp * np.sin(2 * np.pi * t / period) + rng.normal(0, noise, n)


def _is_method(name):
    return name in NAMES or name.startswith("seasonal_naive")


@pytest.mark.parametrize("h", [1, 4, 8, 12, 18])
def test_short_series_always_get_a_forecast_and_an_interval(h):
    rng = np.random.default_rng(h)
    fell_back = 0
    for n in range(h + 2, 41):
        y = _seasonal(n, seed=n) + np.cumsum(rng.normal(0, 0.2, n))
        for method in ("network", "auto"):
            f = attnx.TransformerForecaster(h, method=method, **TINY)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                f.fit(y)
            p = f.predict()
            lo, hi = f.predict_interval(coverage=0.9)
            assert p.shape == (h,) and np.all(np.isfinite(p))
            assert np.all(np.isfinite(lo)) and np.all(lo <= p) and np.all(p <= hi)
            assert f.method_ == "network" or _is_method(f.method_)
            fallback = [w for w in caught if "classical methods instead" in str(w.message)]
            if method == "network":
                # a warning exactly when the network path did not run
                assert bool(fallback) == (f.method_ != "network")
                fell_back += f.method_ != "network"
            else:
                assert not fallback and f.method_ != "network"
    if h >= 8:
        assert fell_back > 0     # the shortest series are too short for the network


@pytest.mark.parametrize("h", [4, 8])
def test_every_series_of_a_mixed_panel_gets_a_forecast_and_an_interval(h):
    """One fit over series of h + 2 to 60 values of every kind (seasonal, random walk,
    constant, intermittent zeros, a jump, a positive trend times a season): each gets
    a finite forecast and a proper interval whose width is positive at every step."""
    rng = np.random.default_rng(h)
    t = np.arange(60.0)
    kinds = [_seasonal(60, seed=1), 50 + np.cumsum(rng.normal(0, 1, 60)), np.full(60, 7.0),
             (rng.random(60) < 0.3) * rng.poisson(4, 60).astype(float),
             np.r_[np.zeros(50), np.full(10, 100.0)],
             (10 + t) * (1 + 0.3 * np.sin(2 * np.pi * t / 12))]
    panel = [k[-n:] for k in kinds for n in (h + 2, h + 5, 30)]
    f = attnx.TransformerForecaster(h, method="auto")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f.fit(panel)
    points = f.predict()
    bounds = f.predict_interval(coverage=0.9)
    assert len(points) == len(bounds) == len(panel) == len(f.methods_)
    for y, p, (lo, hi) in zip(panel, points, bounds):
        assert p.shape == lo.shape == hi.shape == (h,)
        assert np.all(np.isfinite(p)) and np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))
        assert np.all(lo < p) and np.all(p < hi)
    for s in f.scores_:                         # per-step scores, NaN past the end
        assert s.ndim == 2 and s.shape[1] == h and sel.count(s) > 0


def test_too_short_or_invalid_input_still_raises():
    f = attnx.TransformerForecaster(6, method="auto")
    with pytest.raises(ValueError, match="at least 8"):
        f.fit(np.arange(7.0))                              # fewer than h + 2 values
    y = _seasonal(40)
    y[5] = np.inf
    with pytest.raises(ValueError, match="infinity"):
        f.fit(y)
    with pytest.raises(ValueError, match="method must be"):
        attnx.TransformerForecaster(3, method="prophet").fit(_seasonal(40))


def test_auto_on_a_long_series_is_fast_and_chooses_on_rolling_origins():
    f = attnx.TransformerForecaster(12, method="auto").fit(_seasonal(300))
    c = f.choices_[0]
    assert f.method_ == c["name"] == f.methods_[0]
    singles = sorted(v for k, v in c["errors"].items() if k != "combination")
    assert c["errors"][c["name"]] == singles[0] or c["name"] == "combination"
    assert f.periods_ == [12] and f.season_ == 12
    assert not hasattr(f, "regressor_")
    assert f.scores_[0].shape == (sel.N_ORIGINS, 12)      # origins x steps


def test_a_named_candidate_is_used_and_calibrated():
    f = attnx.TransformerForecaster(6, method="seasonal_naive12").fit(_seasonal(60))
    assert f.method_ == "seasonal_naive12"
    y = _seasonal(60)
    np.testing.assert_array_equal(f.predict(), y[48:54])
    lo, hi = f.predict_interval(coverage=0.8)
    lo9, hi9 = f.predict_interval(coverage=0.95)
    assert np.all(lo9 <= lo) and np.all(hi <= hi9) and np.all(hi - lo > 0)


def test_half_hourly_daily_and_weekly_periods_are_both_found():
    rng = np.random.default_rng(0)
    t = np.arange(48 * 7 * 5)
    y = (10 + 3 * np.sin(2 * np.pi * t / 48) + 2 * np.where((t // 48) % 7 >= 5, -1.0, 0.3)
         + rng.normal(0, 0.5, t.size))
    f = attnx.TransformerForecaster(48, method="seasonal_naive336").fit(y)
    assert f.season_ == 48 and f.periods_ == [48, 336]
    # the weekly seasonal naive knows the weekend; the daily one would not
    truth = (10 + 3 * np.sin(2 * np.pi * (t[-48:] + 48) / 48)
             + 2 * np.where(((t[-48:] + 48) // 48) % 7 >= 5, -1.0, 0.3))
    assert np.mean(np.abs(f.predict() - truth)) < 1.0


def test_multiplicative_seasonality_beats_seasonal_naive():
    t = np.arange(132)
    rng = np.random.default_rng(2)
    y = 50 * 1.02 ** t * (1 + 0.35 * np.sin(2 * np.pi * t / 12)) * np.exp(rng.normal(0, 0.02, 132))
    f = attnx.TransformerForecaster(12, method="auto").fit(y[:120])
    err = np.mean(np.abs(f.predict() - y[120:]))
    snaive = np.mean(np.abs(y[108:120] - y[120:]))
    assert err < 0.6 * snaive


def test_many_series_and_channels_choose_their_own_methods():
    rng = np.random.default_rng(4)
    a = _seasonal(80)
    b = 100 + np.cumsum(rng.normal(size=60))
    f = attnx.TransformerForecaster(6, method="auto").fit([a, b])
    assert len(f.methods_) == 2 and len(f.predict()) == 2
    assert f.method_ in (f.methods_[0], "per-series")
    two = np.stack([a[:60], b], axis=1)
    g = attnx.TransformerForecaster(6, method="auto").fit(two)
    assert g.predict().shape == (6, 2) and len(g.methods_) == 2
    lo, hi = g.predict_interval()
    assert lo.shape == (6, 2) and np.all(lo < hi)
    q = g.predict_quantiles(quantiles=(0.05, 0.5, 0.95))
    assert q.shape == (6, 2, 3) and np.all(np.diff(q, axis=-1) >= 0)
    np.testing.assert_allclose(q[..., 1], g.predict())


def test_predict_with_new_series_reruns_the_chosen_model():
    y = _seasonal(100)
    f = attnx.TransformerForecaster(6, method="auto").fit(y)
    np.testing.assert_allclose(f.predict(y=y), f.predict())
    shifted = f.predict(y=y + 100.0)
    assert np.all(np.abs(shifted - f.predict() - 100.0) < 1.0)


def test_classical_forecasters_save_load_and_pickle(tmp_path):
    f = attnx.TransformerForecaster(6, method="auto").fit([_seasonal(70), _seasonal(50, seed=1)])
    path = tmp_path / "auto.safetensors"
    f.save(path)
    g = attnx.load(path)
    assert g.method_ == f.method_ and g.choices_ == f.choices_
    for a, b in zip(g.predict(), f.predict()):
        np.testing.assert_array_equal(a, b)
    for (a, b), (c, d) in zip(g.predict_interval(), f.predict_interval()):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)
    p = pickle.loads(pickle.dumps(f))
    np.testing.assert_allclose(p.predict(y=[_seasonal(70), _seasonal(50, seed=1)])[1],
                               f.predict()[1])


def test_onnx_export_of_a_classical_forecaster_says_why_not(tmp_path):
    f = attnx.TransformerForecaster(6, method="auto").fit(_seasonal(60))
    with pytest.raises(ValueError, match="ONNX export does not cover"):
        f.export_spec()
    pytest.importorskip("onnx")
    import attnx.io.onnx as aonnx
    with pytest.raises(ValueError, match="method='network'"):
        aonnx.export(f, tmp_path / "f.onnx")
    assert not (tmp_path / "f.onnx").exists()


def test_a_refit_forgets_the_other_path():
    y = _seasonal(120)
    f = attnx.TransformerForecaster(6, method="auto", **TINY).fit(y)
    f.set_params(method="network").fit(y)
    assert f.method_ == "network" and hasattr(f, "regressor_") and not hasattr(f, "choices_")
    f.set_params(method="auto").fit(y)
    assert f.method_ != "network" and not hasattr(f, "regressor_")


def test_pandas_in_pandas_out():
    pd = pytest.importorskip("pandas")
    idx = pd.date_range("2020-01-01", periods=48, freq="MS")
    s = pd.Series(_seasonal(48), index=idx)
    f = attnx.TransformerForecaster(6, method="auto").fit(s)
    p = f.predict()
    assert isinstance(p, pd.Series) and p.index[0] == pd.Timestamp("2024-01-01")
    assert f.season_ == 12


def test_without_statsforecast_the_own_methods_answer(monkeypatch):
    monkeypatch.setattr(cand, "have_statsforecast", lambda: False)
    f = attnx.TransformerForecaster(6, method="auto").fit(_seasonal(80))
    assert f.method_ in ("naive", "drift", "ses", "theta", "seasonal_naive12", "combination")
    assert all(n not in ("ets", "atheta", "arima") for n in f.choices_[0]["errors"])


def test_the_fallback_with_covariates_says_that_it_ignores_them():
    y = _seasonal(16)
    X = np.arange(16.0)[:, None]
    f = attnx.TransformerForecaster(12, **TINY)
    with pytest.warns(UserWarning) as caught:
        f.fit(y, X=X)
    text = " ".join(str(w.message) for w in caught)
    assert "classical methods instead" in text and "ignore X" in text
    assert f.method_ != "network"
    p = f.predict(X=X)
    assert p.shape == (12,) and np.all(np.isfinite(p))


def test_a_season_diluted_by_a_mixed_panel_is_still_offered():
    # half seasonal quarterly series, half random walks: the mean autocorrelation's
    # peak at 4 stays under PEAK_LEVEL, so the network's season is 1, but the
    # classical candidates get the period 4 (and use it on the seasonal series)
    rng = np.random.default_rng(11)
    series = []
    for i in range(40):
        n = int(rng.integers(16, 30))
        t = np.arange(n)
        if i % 2:
            series.append(50 + np.cumsum(rng.normal(0, 3, n)))
        else:
            series.append(50 + 3 * np.sin(2 * np.pi * t / 4) + rng.normal(0, 1.5, n))
    f = attnx.TransformerForecaster(4, method="auto").fit(series)
    from attnx.forecasting import _season
    assert _season.detect([s[:, None] for s in series]) == 1
    assert f.season_ == 1 and f.periods_ == [4]
    g = attnx.TransformerForecaster(4, method="auto", season=1).fit(series)
    assert g.periods_ == []                     # a season given is kept as it is


def test_seasonal_naive_joins_a_close_combination_outside_the_top():
    """Six candidates within RATIO of the best and none dominant: the combination
    weighs the TOP best and also the best seasonal naive (period > 1), the sixth
    here; naive (period 1) and a seasonal naive beyond RATIO do not join."""
    h, o = 4, 3
    truth = np.zeros((o, h))
    obs = np.ones((o, h), dtype=bool)
    errs = {"a": 1.0, "b": 1.05, "c": 1.1, "d": 1.15, "e": 1.2, "seasonal_naive12": 1.3,
            "naive": 1.25, "seasonal_naive24": 1.6}
    from attnx.forecasting import _classical as cl
    final = {k: (cl.Forecast(np.full(h, v), np.ones(h)), {}) for k, v in errs.items()}
    pred = {k: (np.full((o, h), v), np.ones((o, h))) for k, v in errs.items()}
    c = sel.pick(sel.Evaluation(final, pred, truth, obs))
    parts = [p[0] for p in c.spec["parts"]]
    assert c.name == sel.COMBO
    assert parts == ["a", "b", "c", "d", "e", "seasonal_naive12"], parts
    w = np.array([p[2] for p in c.spec["parts"]])
    inv = 1.0 / np.array([errs[k] for k in parts]) ** 2
    np.testing.assert_allclose(w, inv / inv.sum())
    # a dominant best forecasts alone, seasonal naive or not
    errs2 = dict(errs, a=0.5)
    final2 = {k: (cl.Forecast(np.full(h, v), np.ones(h)), {}) for k, v in errs2.items()}
    pred2 = {k: (np.full((o, h), v), np.ones((o, h))) for k, v in errs2.items()}
    assert sel.pick(sel.Evaluation(final2, pred2, truth, obs)).name == "a"


def test_the_default_method_is_auto_alone_and_the_network_with_covariates_or_quantiles():
    """method=None: the candidates per series for series alone (the same forecast as
    method="auto", no warning); the network when covariates are given or learned
    quantiles are asked for, which only the network has."""
    y = _seasonal(120)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f = attnx.TransformerForecaster(6, **TINY).fit(y)
    assert f.get_params()["method"] is None and f.method_ != "network"
    g = attnx.TransformerForecaster(6, method="auto", **TINY).fit(y)
    np.testing.assert_array_equal(f.predict(), g.predict())
    np.testing.assert_array_equal(f.predict_interval(), g.predict_interval())
    X = np.arange(120.0)[:, None]
    with_x = attnx.TransformerForecaster(6, **TINY).fit(y, X=X)
    assert with_x.method_ == "network" and hasattr(with_x, "regressor_")
    q = attnx.TransformerForecaster(6, intervals="quantile", **TINY).fit(y)
    assert q.method_ == "network" and q.regressor_.loss == "pinball"


def test_autoets_searches_seasonal_forms_only_where_the_series_shows_the_season():
    # a panel's period 12 given to a series without a season: AutoETS searches its
    # non-seasonal forms (a tenth of the time), and the spec says so; the origins and
    # predict(y=...) refit at that period; a spec saved without "m" refits at the main one
    pytest.importorskip("statsforecast")
    rng = np.random.default_rng(3)
    walk = 20 + np.cumsum(rng.normal(0, 1, 60))
    seasonal = _seasonal(60, seed=3)
    _, spec_w = cand.fit("ets", walk, 6, (12,))
    _, spec_s = cand.fit("ets", seasonal, 6, (12,))
    assert spec_w["m"] == 1 and spec_w["model"][2] == "N"
    assert spec_s["m"] == 12 and spec_s["model"][2] != "N"
    assert not cand.ets_seasonal(walk, 12) and cand.ets_seasonal(seasonal, 12)
    f_new = cand.refit("ets", spec_s, seasonal[:48], 6, (12,))
    old = {k: v for k, v in spec_s.items() if k != "m"}
    f_old = cand.refit("ets", old, seasonal[:48], 6, (12,))
    np.testing.assert_allclose(f_old.mean, f_new.mean)
    at_one = cand.refit("ets", dict(spec_s, m=1, model=spec_s["model"][:2] + "N"),
                        seasonal[:48], 6, (12,))
    assert not np.allclose(at_one.mean, f_new.mean)


def test_mstl_smooths_at_r_style_jumps_and_forecasts_like_every_point():
    # STL's smoothers evaluated every tenth of their window (R's stl defaults) at the
    # shortest period; the forecast stays within a small share of the every-point one's
    # error, and both know the weekly pattern that the daily season alone misses
    sm = pytest.importorskip("statsforecast.models")
    assert cand.stl_jumps(48) == {"seasonal_jump": 2, "trend_jump": 9, "low_pass_jump": 5}
    assert cand.stl_jumps(2) == {"seasonal_jump": 2, "trend_jump": 1, "low_pass_jump": 1}
    rng = np.random.default_rng(4)
    t = np.arange(24 * 7 * 8 + 24)
    clean = 10 + 3 * np.sin(2 * np.pi * t / 24) + 2 * np.where((t // 24) % 7 >= 5, -1.0, 0.3)
    y = clean + rng.normal(0, 0.3, t.size)
    f, _ = cand.fit("mstl", y[:-24], 24, (24, 168))
    exact = sm.MSTL(season_length=[24, 168], trend_forecaster=sm.AutoETS(model="ZZN"))
    ref = exact.fit(y[:-24]).predict(h=24)["mean"]
    err, err_ref = (float(np.mean(np.abs(p - clean[-24:]))) for p in (f.mean, ref))
    assert err < 1.05 * err_ref + 0.01 and err < 0.5


def test_autoets_beyond_its_longest_season_runs_on_the_seasonally_adjusted_series():
    # half-hours: no seasonal search at 48 (seconds a fit, and it mostly chose no
    # season); AutoETS without a season on the adjusted series, the indices added
    # back, so the forecast follows the day; the spec refits the same way, and a spec
    # saved before (a seasonal form at 48, no "adjusted") refits as it did
    pytest.importorskip("statsforecast")
    rng = np.random.default_rng(5)
    t = np.arange(48 * 21 + 48)
    clean = 20 + 4 * np.sin(2 * np.pi * t / 48)
    y = clean + rng.normal(0, 0.4, t.size)
    f, spec = cand.fit("ets", y[:-48], 48, (48,))
    assert spec["adjusted"] is True and spec["m"] == 1 and spec["model"][2] == "N"
    assert np.mean(np.abs(f.mean - clean[-48:])) < 0.5
    again = cand.refit("ets", spec, y[:-48], 48, (48,))
    np.testing.assert_allclose(again.mean, f.mean)
    old = cand.refit("ets", {"model": "AAA", "damped": False, "m": 48}, y[:-48], 48, (48,))
    flat = cand.refit("ets", {k: v for k, v in spec.items() if k != "adjusted"},
                      y[:-48], 48, (48,))
    assert np.mean(np.abs(old.mean - clean[-48:])) < 1.0
    assert np.ptp(flat.mean) < 0.5 < np.ptp(f.mean)
    monthly = _seasonal(60, seed=3)
    assert "adjusted" not in cand.fit("ets", monthly, 6, (12,))[1]


def test_a_weak_long_period_is_not_removed_when_its_indices_do_not_pay_by_aicc():
    # an AR(1) series whose autocorrelation at 45 passes the 90% test by chance (a
    # panel's weak period): removing 44 indices from 180 values costs more AICc
    # than it gains, so AutoETS runs on the series itself, as its own seasonal
    # search would have declined the season
    pytest.importorskip("statsforecast")
    from attnx.forecasting import _classical as cl
    rng = np.random.default_rng(37)
    e = rng.normal(0, 1, 180)
    y = np.empty(180)
    y[0] = e[0]
    for t in range(1, 180):
        y[t] = 0.5 * y[t - 1] + e[t]
    y += 10
    assert cl.seasonal(y, 45) and cl.adjust_kept(y, (45,), 8)[2] == [45]
    f, spec = cand.fit("ets", y, 8, (45,))
    assert spec["adjusted"] is False and spec["m"] == 1
    plain = cand.fit("ets", y, 8, (1,))[0]
    np.testing.assert_allclose(f.mean, plain.mean)


def test_autotheta_is_offered_only_to_series_of_at_most_its_longest_length():
    # AutoTheta's fit grows with the series (seconds on thousands of half-hours) and
    # changed nothing there; attnx's own theta on the adjusted series stays
    pytest.importorskip("statsforecast")
    rng = np.random.default_rng(6)
    for n in (500, cand.ATHETA_MAX_LENGTH, cand.ATHETA_MAX_LENGTH + 1, 4000):
        y = 20 + np.cumsum(rng.normal(0, 1, n))
        names = cand.available(y, (48,))
        assert ("atheta" in names) == (n <= cand.ATHETA_MAX_LENGTH) and "theta" in names
