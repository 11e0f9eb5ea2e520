"""The pretrained forecaster shipped with attnx (attnx/forecasting/_pretrained_forecaster.py) and
its synthetic training generator (attnx/forecasting/_synthetic_series.py)."""
import json
import os

import numpy as np
import pytest

from attnx import TransformerForecaster
from attnx.forecasting import _pretrained_forecaster as pf
from attnx.forecasting import _synthetic_series as syn


def _seasonal(seed, n=120, m=12):
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return (50 + 0.05 * t + 5 * np.sin(2 * np.pi * t / m + rng.uniform(0, 6))
            + rng.normal(0, 1.0, n))


# ---- the packaged file -------------------------------------------------------
def test_packaged_file_matches_the_training_config():
    assert os.path.exists(pf.WEIGHTS) and os.path.exists(pf.CONFIG)
    cfg = pf.load_config()
    assert (cfg["context"], cfg["horizon"], cfg["patch"], cfg["n_tokens"],
            cfg["n_features"]) == (pf.CONTEXT, pf.HORIZON, pf.PATCH, pf.N_TOKENS,
                                   pf.N_FEATURES)
    net = pf.load_network()
    params = net.get_params()
    for k in ("d_model", "n_layers", "n_heads", "d_hidden"):
        assert params[k] == cfg[k], k
    assert net.model_.n_params == cfg["n_params"]
    assert 0.05e6 <= cfg["n_params"] <= 1.5e6
    assert os.path.getsize(pf.WEIGHTS) < 8e6
    # the network reads N_FEATURES per token and writes HORIZON values
    tok, base, mu, sd, q = pf.features(_seasonal(0), 12)
    assert tok.shape == (pf.N_TOKENS, pf.N_FEATURES) and base.shape == (pf.HORIZON,)
    out = np.asarray(net.predict(tok[None].astype(np.float32)))
    assert out.reshape(-1).shape == (pf.HORIZON,)
    with open(pf.CONFIG, encoding="utf-8") as f:
        assert json.load(f)["loss_curve"]


def test_pyproject_ships_the_data_files():
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))   # the checkout
    text = open(os.path.join(root, "pyproject.toml"), encoding="utf-8").read()
    assert "data/forecaster_pretrained.safetensors" in text
    assert "data/forecaster_pretrained.json" in text


# ---- forecasts ---------------------------------------------------------------
@pytest.mark.parametrize("h", [1, 7, 64])
def test_forecast_shapes_and_determinism(h):
    y = _seasonal(1)
    a = pf.forecast(y, h, season=12)
    b = pf.forecast(list(y), h, season=12)
    assert a.shape == (h,) and np.all(np.isfinite(a))
    np.testing.assert_array_equal(a, b)
    # the first steps do not depend on h (one direct multi-horizon output)
    np.testing.assert_array_equal(pf.forecast(y, 1, season=12), a[:1])


def test_forecast_is_equivariant_to_level_and_scale():
    y = _seasonal(2)
    a = pf.forecast(y, 12, season=12)
    b = pf.forecast(3.0 * y + 100.0, 12, season=12)
    np.testing.assert_allclose(b, 3.0 * a + 100.0, rtol=1e-6, atol=1e-6)
    # the blend too, for a rescaling (a shift can change the log-or-not choice)
    np.testing.assert_allclose(pf.forecast(3.0 * y, 12, season=12, blend=True),
                               3.0 * pf.forecast(y, 12, season=12, blend=True), rtol=1e-6)


def test_short_series_and_season_none():
    for n in (3, 5, 17, 40):
        y = _seasonal(3, n=n)
        assert pf.forecast(y, 6).shape == (6,)
    # a season longer than the series is not used; detection runs for None
    assert np.all(np.isfinite(pf.forecast(_seasonal(4, n=30), 8, season=24)))
    assert pf.forecast(_seasonal(4, n=300), 8).shape == (8,)


def test_beats_naive_on_generated_seasonal_series():
    """Over ten generated seasonal series (trend + yearly cycle + noise), the zero-shot
    forecast's mean absolute error is below the naive (last value) forecast's."""
    err_pf, err_naive = [], []
    for seed in range(10):
        y = _seasonal(100 + seed, n=132)
        train, test = y[:-12], y[-12:]
        err_pf.append(np.abs(pf.forecast(train, 12, season=12) - test).mean())
        err_naive.append(np.abs(train[-1] - test).mean())
    assert np.mean(err_pf) < 0.8 * np.mean(err_naive)


# ---- the forecaster ----------------------------------------------------------
def test_forecaster_zero_shot_fit_and_intervals():
    y = _seasonal(5)
    est = TransformerForecaster.pretrained(horizon=12, season=12)
    zero = est.predict(y)                 # no fit needed
    est.fit(y)
    assert est.method_ == "pretrained+smoothing"
    np.testing.assert_array_equal(est.predict(), zero)
    lo, hi = est.predict_interval(coverage=0.9)
    lo80, hi80 = est.predict_interval(coverage=0.8)
    assert lo.shape == hi.shape == (12,)
    assert np.all(lo <= zero) and np.all(zero <= hi)
    assert np.all(hi - lo >= hi80 - lo80) and np.all(np.diff(hi - lo) >= -1e-9)
    # the shortest series that fits: h + 2 values
    short = TransformerForecaster.pretrained(horizon=4).fit(y[:6])
    lo, hi = short.predict_interval()
    assert np.all(np.isfinite(lo)) and np.all(hi > lo)
    for blend in (True, False):   # h + 2 = 3 values at horizon 1
        lo, hi = TransformerForecaster.pretrained(horizon=1, blend=blend).fit(
            y[:3]).predict_interval()
        assert np.isfinite(lo[0]) and hi[0] > lo[0]


def test_fine_tune_is_reproducible_and_leaves_the_shared_network():
    y = _seasonal(6, n=90)
    before = pf.forecast(y, 12, season=12)
    a = TransformerForecaster.pretrained(horizon=12, season=12, epochs=2,
                                         random_state=3).fit(y)
    b = TransformerForecaster.pretrained(horizon=12, season=12, epochs=2,
                                         random_state=3).fit(y)
    assert a.method_ == "pretrained+fine-tuned+smoothing"
    np.testing.assert_array_equal(a.predict(), b.predict())
    # the fine-tuned network itself moved; the shared one did not
    c = TransformerForecaster.pretrained(horizon=12, season=12, epochs=2, random_state=3,
                                         blend=False).fit(y)
    assert c.method_ == "pretrained+fine-tuned"
    assert not np.array_equal(c.predict(), before)
    np.testing.assert_array_equal(pf.forecast(y, 12, season=12), before)


def test_bad_input():
    y = _seasonal(7)
    with pytest.raises(ValueError, match="h must be at most 64"):
        pf.forecast(y, 65)
    with pytest.raises(ValueError, match="h"):
        pf.forecast(y, 0)
    bad = y.copy()
    bad[10] = np.nan
    with pytest.raises(ValueError, match="NaN.*step 10"):
        pf.forecast(bad, 5)
    with pytest.raises(ValueError, match="at least 3"):
        pf.forecast(y[:2], 5)
    with pytest.raises(ValueError, match="one series"):
        pf.forecast(np.ones((20, 2)), 5)
    with pytest.raises(TypeError, match="real numbers"):
        pf.forecast(["a", "b", "c"], 2)
    with pytest.raises(ValueError, match="season"):
        pf.forecast(y, 5, season=0)
    with pytest.raises(TypeError, match="blend must be True or False.*'yes'"):
        pf.forecast(y, 5, blend="yes")
    with pytest.raises(TypeError, match="blend"):
        TransformerForecaster.pretrained(horizon=4, blend=1).fit(y)
    est = TransformerForecaster.pretrained(horizon=12)
    with pytest.raises(ValueError, match="at least 14"):
        est.fit(y[:13])
    with pytest.raises(ValueError, match="fit"):
        est.predict_interval(y)
    with pytest.raises(ValueError, match="predict needs y"):
        est.predict()
    with pytest.raises(ValueError, match="h must be at most 64"):
        TransformerForecaster.pretrained(horizon=100).fit(y)
    est.fit(y)
    with pytest.raises(ValueError, match="coverage"):
        est.predict_interval(coverage=1.5)


# ---- the blend with exponential smoothing --------------------------------------
def test_blend_is_the_fixed_combination_of_network_and_smoothing():
    from attnx.forecasting import _smoothing as sm
    for n, m in ((120, 12), (9, 4), (40, 1)):
        y = _seasonal(8, n=n, m=max(m, 2))
        net = pf.forecast(y, 10, season=m)
        smooth = sm.smoothing_forecast(y, 10, m)
        np.testing.assert_allclose(pf.forecast(y, 10, season=m, blend=True),
                                   pf.NET_WEIGHT * net + (1 - pf.NET_WEIGHT) * smooth,
                                   rtol=1e-12, atol=1e-9)
    est = TransformerForecaster.pretrained(horizon=10, season=12, blend=False).fit(y)
    assert est.method_ == "pretrained"
    np.testing.assert_array_equal(est.predict(), pf.forecast(y, 10, season=12))
    blended = TransformerForecaster.pretrained(horizon=10, season=12).fit(y)
    np.testing.assert_array_equal(blended.predict(), pf.forecast(y, 10, season=12,
                                                                 blend=True))


def test_smoothing_follows_lines_levels_seasons_and_growth():
    from attnx.forecasting import _smoothing as sm
    t = np.arange(60, dtype=np.float64)
    j = np.arange(60, 72, dtype=np.float64)
    # an exact line: a trend model continues it
    fc, name = sm.exponential_smoothing(3.0 + 0.5 * t, 12)
    assert name in ("holt", "damped")
    np.testing.assert_allclose(fc, 3.0 + 0.5 * j, rtol=0.02)
    # white noise around a level: SES, a flat forecast near the level
    rng = np.random.default_rng(0)
    fc, name = sm.exponential_smoothing(10.0 + rng.normal(0, 1, 200), 6)
    assert name == "ses" and np.ptp(fc) == 0 and abs(fc[0] - 10.0) < 0.6
    # a clean season on a line comes back with its phase
    y = 20.0 + 0.1 * t + 3.0 * np.sin(2 * np.pi * t / 12)
    np.testing.assert_allclose(sm.smoothing_forecast(y, 12, 12),
                               20.0 + 0.1 * j + 3.0 * np.sin(2 * np.pi * j / 12), atol=0.15)
    # multiplicative growth x season: run on the log, the season's amplitude grows
    g = 50.0 * np.exp(0.02 * np.arange(96)) * (1 + 0.3 * np.sin(2 * np.pi * np.arange(96) / 12))
    k = np.arange(96, 108)
    truth = 50.0 * np.exp(0.02 * k) * (1 + 0.3 * np.sin(2 * np.pi * k / 12))
    fc = sm.smoothing_forecast(g, 12, 12)
    assert np.max(np.abs(fc / truth - 1)) < 0.03
    # it reads only the last WINDOW values, and short series work
    long = np.r_[rng.normal(0, 50, 500), y]
    np.testing.assert_array_equal(sm.smoothing_forecast(long, 5, 12),
                                  sm.smoothing_forecast(long[-sm.WINDOW:], 5, 12))
    for n in (2, 3, 5):
        assert np.all(np.isfinite(sm.smoothing_forecast(y[:n], 4, 12)))


# ---- the generator -----------------------------------------------------------
def test_generator_is_reproducible_from_a_seed():
    a, ma = syn.panel(40, seed=5, extra=8)
    b, mb = syn.panel(40, seed=5, extra=8)
    c, _ = syn.panel(40, seed=6, extra=8)
    assert ma == mb
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert any(x.shape != y.shape or not np.array_equal(x, y) for x, y in zip(a, c))
    assert all(np.all(np.isfinite(x)) and x.shape[0] >= 14 + 8 for x in a)
    assert set(ma) <= {1, *syn.PERIODS}


def test_generator_covers_its_kinds():
    series, seasons = syn.panel(300, seed=1)
    lengths = np.array([s.shape[0] for s in series])
    assert lengths.min() < 40 and lengths.max() > 400
    assert sum(m == 1 for m in seasons) > 30 and len(set(seasons)) >= 6
    zeros = [np.mean(s == 0) for s in series]
    assert max(zeros) > 0.3   # intermittent demand


# ---- the training script -----------------------------------------------------
def test_training_script_is_reproducible_from_its_seed(tmp_path):
    import importlib.util
    safetensors = pytest.importorskip("safetensors.numpy")
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))   # the checkout
    spec = importlib.util.spec_from_file_location(
        "train_pretrained_forecaster",
        os.path.join(root, "benchmarks", "train_pretrained_forecaster.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    args = ["--n-series", "12", "--per-series", "2", "--n-val", "4", "--epochs", "1",
            "--seed", "5"]
    a = mod.main(args + ["--out", str(tmp_path / "a")])
    b = mod.main(args + ["--out", str(tmp_path / "b")])
    assert a["loss_curve"] == b["loss_curve"] and a["validation"] == b["validation"]
    wa = safetensors.load_file(str(tmp_path / "a.safetensors"))
    wb = safetensors.load_file(str(tmp_path / "b.safetensors"))
    assert wa.keys() == wb.keys()
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k])
    assert a["n_features"] == pf.N_FEATURES and a["n_params"] > 0


# ---- as a candidate of method="auto" -------------------------------------------
def test_the_pretrained_network_is_a_candidate_of_auto():
    from attnx.forecasting import _candidates as cand
    y = _seasonal(1)
    assert "pretrained" in cand.available(y, (12,)) and cand.is_candidate("pretrained")
    assert cand.min_length("pretrained", (12,)) == 3
    fc, spec = cand.fit("pretrained", y, 12, (12,))
    np.testing.assert_array_equal(fc.mean, pf.forecast(y, 12, season=12))
    assert fc.sigma.shape == (12,) and np.all(np.diff(fc.sigma) > 0) and spec == {}
    with pytest.raises(ValueError, match="at most 64"):
        cand.fit("pretrained", y, 65, (12,))


def test_auto_still_forecasts_beyond_the_networks_horizon():
    """h > 64: the pretrained candidate drops out, the others forecast."""
    y = np.sin(np.arange(400) * 2 * np.pi / 12) + 0.01 * np.arange(400)
    f = TransformerForecaster(horizon=70, method="auto").fit(y)
    assert "pretrained" not in str(f.method_) and np.isfinite(f.predict()).all()
