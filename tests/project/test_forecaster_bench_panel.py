"""benchmarks/forecasting.py's synthetic panel and its targets summary (issue 39)."""
import importlib.util
import json
import os
import warnings

import numpy as np
import pytest

import attnx

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def bench():
    path = os.path.join(HERE, "..", "..", "benchmarks", "forecasting.py")
    spec = importlib.util.spec_from_file_location("bench_forecasting", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_panel_is_fixed_by_its_seed_and_follows_its_spec(bench):
    total = 0
    for name in bench.SYNTH_SETS:
        freq, m, h, count, lo, hi = bench.SYNTH_SPEC[name]
        a, b = bench.synthetic_set(name, 0), bench.synthetic_set(name, 0)
        c = bench.synthetic_set(name, 1)
        assert len(a.series) == count and (a.season, a.horizon, a.freq) == (m, h, freq)
        assert all(lo <= s.shape[0] <= hi and np.all(np.isfinite(s)) for s in a.series)
        assert all(np.array_equal(x, y) for x, y in zip(a.series, b.series))
        assert not all(x.shape == y.shape and np.allclose(x, y)
                       for x, y in zip(a.series, c.series))
        assert all(s.min() >= 0 for s in a.series)
        total += count
    assert total >= 300
    short = bench.synthetic_set("synth_short_q", 0).series
    assert min(s.shape[0] for s in short) >= 14 and max(s.shape[0] for s in short) <= 40
    demand = np.concatenate(bench.synthetic_set("synth_demand", 0).series)
    assert 0.2 < np.mean(demand == 0) < 0.9                # intermittent


def test_targets_summarise_the_rows(bench):
    def peer(rows):
        return {"rows": [dict(series=f"s{i}", mase=v, coverage=c) for i, (v, c) in
                         enumerate(rows)], "mase": float(np.mean([v for v, _ in rows]))}
    results = [{"set": "synth_short_q", "horizon": 8, "peers": {
        "seasonal_naive": peer([(2.0, 1.0), (1.0, 1.0)]),
        "auto_ets": peer([(1.0, 0.5), (1.5, 0.5)]),
        "auto_arima": peer([(1.2, 0.5), (0.9, 0.5)]),
        "auto_theta": peer([(1.1, 0.5), (1.4, 0.5)]),
        "attnx_auto": peer([(0.8, 1.0), (1.0, 0.5)])}}]
    t = bench.targets(results, "attnx_auto")
    assert t["mase"] == pytest.approx(0.9)
    assert t["classical_mase"]["auto_arima"] == pytest.approx(1.05)
    # series s1: ARIMA (0.9) beats seasonal naive (1.0), attnx_auto (1.0) does not
    assert t["snaive_cases"] == 2 and t["snaive_beaten_by_classical_not_by_peer"] == 1
    assert t["coverage_pooled"] == pytest.approx(0.75)
    assert t["share_h8_series_cov75"] == pytest.approx(0.5)
    assert t["short_ratio"]["synth_short_q"] == pytest.approx(0.9 / 1.05)
    assert bench.targets(results, "attnx") is None


def test_auto_answers_on_every_short_series_of_the_panel(bench):
    ds = bench.synthetic_set("synth_short_y", 0)
    h = ds.horizon
    train = [s[:-h] for s in ds.series[:15]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = attnx.TransformerForecaster(h, method="auto").fit(train)
    for p, (lo, hi) in zip(f.predict(), f.predict_interval()):
        assert np.all(np.isfinite(p)) and np.all(lo <= p) and np.all(p <= hi)


def test_reuse_takes_only_the_peers_without_attnx(bench, tmp_path):
    old = [{"set": "s", "lengths": [10, 12],
            "peers": {"auto_ets": {"rows": [1]}, "attnx_auto": {"rows": [2]},
                      "seasonal_naive": {"rows": [3]}},
            "backtest": {"peers": {"auto_ets": {"mase": 1.0}, "attnx": {"mase": 2.0}}}}]
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"meta": {}, "results": old}))
    new = [{"set": "s", "lengths": [10, 12], "peers": {"seasonal_naive": {"rows": [9]}},
            "backtest": {"peers": {}}}]
    bench.reuse_results(new, str(path))
    assert set(new[0]["peers"]) == {"seasonal_naive", "auto_ets"}
    assert new[0]["peers"]["seasonal_naive"]["rows"] == [9]      # what ran stays
    assert set(new[0]["backtest"]["peers"]) == {"auto_ets"}
    other = [{"set": "s", "lengths": [10, 13], "peers": {}}]
    with pytest.raises(ValueError, match="other series"):
        bench.reuse_results(other, str(path))


def test_backtest_gives_each_series_coverage_over_its_origins(bench):
    """run_backtests keeps each series' coverage pooled over the origins, the origins
    leave every series h + 2 values (the fewest a forecaster takes), and targets
    reports the share of h >= 8 series at 0.75 or more over the origins."""
    rng = np.random.default_rng(0)
    h = 12
    series = [100 + np.cumsum(rng.normal(size=n)) for n in (36, 40, 60)]
    ds = bench.Dataset("walk", series, ["a", "b", "c"], "monthly", 1, h, "test")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = bench.run_backtests(ds, ["attnx_auto"], 3, 0, lambda *_: None)
    assert out["initial"] >= h + 2 and out["origins"] == 1
    e = out["peers"]["attnx_auto"]
    assert "series_coverage" in e and len(e["series_coverage"]) == 3
    assert np.mean(e["series_coverage"]) == pytest.approx(e["coverage"])
    results = [{"set": "walk", "horizon": h, "peers": {
        "seasonal_naive": {"rows": [dict(series="a", mase=1.0, coverage=1.0)], "mase": 1.0},
        "auto_ets": {"rows": [dict(series="a", mase=1.0, coverage=1.0)], "mase": 1.0},
        "attnx_auto": {"rows": [dict(series="a", mase=1.0, coverage=1.0)], "mase": 1.0}},
        "backtest": {"peers": {"attnx_auto": {"series_coverage": [0.9, 0.5, 0.75, 1.0]}}}}]
    t = bench.targets(results, "attnx_auto")
    assert t["share_h8_series_cov75_origins"] == pytest.approx(0.75)
    assert t["n_h8_series_origins"] == 4
