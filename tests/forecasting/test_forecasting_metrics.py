"""attnx.forecasting: metrics against hand-computed values and other libraries'
implementations, rolling-origin backtests, the scikit-learn splitter, bad input."""
import numpy as np
import pytest

from attnx import forecasting as fc


# ---------------------------------------------------------------- hand-computed values
def test_point_metrics_by_hand():
    y = [2.0, 4.0, 0.0]
    f = [3.0, 1.0, 0.0]
    # errors 1, 3, 0
    assert fc.mae(y, f) == pytest.approx(4.0 / 3.0)
    assert fc.rmse(y, f) == pytest.approx(np.sqrt(10.0 / 3.0))
    # sMAPE terms: 200*1/5 = 40, 200*3/5 = 120, 0/0 -> 0 (both zero): mean 160/3
    assert fc.smape(y, f) == pytest.approx(160.0 / 3.0)
    # a forecast of 0 for a non-zero truth is the maximum, 200
    assert fc.smape([5.0], [0.0]) == pytest.approx(200.0)


def test_mase_by_hand():
    y_train = [1.0, 3.0, 2.0, 6.0, 4.0]
    # season 1: |3-1|, |2-3|, |6-2|, |4-6| -> mean 9/4
    # season 2: |2-1|, |6-3|, |4-2| -> mean 2
    y = [5.0, 5.0]
    f = [4.0, 8.0]  # MAE 2
    assert fc.mase(y, f, y_train) == pytest.approx(2.0 / (9.0 / 4.0))
    assert fc.mase(y, f, y_train, season=2) == pytest.approx(1.0)
    # two channels: each scaled by its own in-sample error, then averaged
    y_train2 = np.stack([y_train, np.arange(5.0) * 3.0], axis=1)  # 2nd: scale 3
    y2 = np.array([[5.0, 1.0], [5.0, 1.0]])
    f2 = np.array([[4.0, 7.0], [8.0, 1.0]])  # channel MAEs 2 and 3
    assert fc.mase(y2, f2, y_train2) == pytest.approx((2.0 / 2.25 + 3.0 / 3.0) / 2)


def test_pinball_coverage_width_by_hand():
    y = np.array([1.0, 5.0])
    q = [0.1, 0.9]
    f = np.array([[0.0, 2.0],    # y=1: q.1 under by 1 -> 0.1; q.9 over by 1 -> 0.1
                  [6.0, 3.0]])   # y=5: q.1 over by 1 -> 0.9; q.9 under by 2 -> 1.8
    assert fc.pinball_loss(y, f, q) == pytest.approx((0.1 + 0.1 + 0.9 + 1.8) / 4)
    lo = np.array([0.0, 5.5])
    hi = np.array([1.0, 7.0])
    assert fc.interval_coverage(y, lo, hi) == 0.5  # bounds are inclusive
    assert fc.interval_width(lo, hi) == pytest.approx((1.0 + 1.5) / 2)


def test_metrics_do_not_modify_or_require_writable_inputs():
    rng = np.random.default_rng(0)
    y, f, tr = rng.normal(size=6), rng.normal(size=6), rng.normal(size=20)
    keep = [a.copy() for a in (y, f, tr)]
    for a in (y, f, tr):
        a.flags.writeable = False
    fc.mae(y, f), fc.rmse(y, f), fc.smape(y, f), fc.mase(y, f, tr, 4)
    for a, k in zip((y, f, tr), keep):
        np.testing.assert_array_equal(a, k)


# ---------------------------------------------------------------- other implementations
def _random_case(seed, k=None):
    rng = np.random.default_rng(seed)
    shape = (12,) if k is None else (12, k)
    y_train = rng.normal(10.0, 3.0, size=(40,) + shape[1:])
    y = rng.normal(10.0, 3.0, size=shape)
    f = y + rng.normal(0.0, 2.0, size=shape)
    return y_train, y, f


def test_against_sklearn():
    metrics = pytest.importorskip("sklearn.metrics")
    y_train, y, f = _random_case(1)
    assert fc.mae(y, f) == pytest.approx(metrics.mean_absolute_error(y, f), rel=1e-12)
    assert fc.rmse(y, f) == pytest.approx(np.sqrt(metrics.mean_squared_error(y, f)),
                                          rel=1e-12)
    qs = np.array([0.05, 0.3, 0.5, 0.95])
    rng = np.random.default_rng(2)
    fq = y[:, None] + rng.normal(size=(12, 4))
    want = np.mean([metrics.mean_pinball_loss(y, fq[:, i], alpha=a) for i, a in enumerate(qs)])
    assert fc.pinball_loss(y, fq, qs) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("k", [None, 3])
def test_against_sktime(k):
    pm = pytest.importorskip("sktime.performance_metrics.forecasting")
    y_train, y, f = _random_case(3, k)
    for sp in (1, 4):
        # per channel (sktime's uniform_average divides the averaged MAEs instead)
        want = pm.mean_absolute_scaled_error(y, f, y_train=y_train, sp=sp,
                                             multioutput="raw_values").mean()
        assert fc.mase(y, f, y_train, season=sp) == pytest.approx(want, rel=1e-12)
    want = 100.0 * pm.mean_absolute_percentage_error(y, f, symmetric=True)
    assert fc.smape(y, f) == pytest.approx(want, rel=1e-12)


def test_against_utilsforecast():
    pd = pytest.importorskip("pandas")
    losses = pytest.importorskip("utilsforecast.losses")
    y_train, y, f = _random_case(4)
    h, m = y.size, 7
    train = pd.DataFrame({"unique_id": "a", "ds": np.arange(y_train.size), "y": y_train})
    test = pd.DataFrame({"unique_id": "a", "ds": np.arange(y_train.size, y_train.size + h),
                         "y": y, "model": f,
                         "model-lo-90": f - 2.0, "model-hi-90": f + 2.0})
    got = losses.mase(test, ["model"], seasonality=m, train_df=train)["model"].iloc[0]
    assert fc.mase(y, f, y_train, season=m) == pytest.approx(got, rel=1e-12)
    # utilsforecast's smape is the M4 one divided by 200
    got = losses.smape(test, ["model"])["model"].iloc[0]
    assert fc.smape(y, f) == pytest.approx(200.0 * got, rel=1e-12)
    got = losses.coverage(test, ["model"], level=90)["model"].iloc[0]
    assert fc.interval_coverage(y, f - 2.0, f + 2.0) == pytest.approx(got)


# ---------------------------------------------------------------- a tiny forecaster
class SeasonalNaive:
    """y[T + i] = y[T + i - m * ceil((i + 1) / m)]: repeat the last season. Intervals are
    the point forecast +- half_width; quantiles point + offset(q). Takes one series or a
    list; predict(y=...) forecasts from the history passed instead of the fitted one."""

    log = []

    def __init__(self, season=1, half_width=1.0):
        self.season = season
        self.half_width = half_width

    def get_params(self, deep=True):
        return {"season": self.season, "half_width": self.half_width}

    def fit(self, y, X=None, X_future=None):
        # the log keeps each instance alive, so instances never share an id()
        SeasonalNaive.log.append(("fit", self, _lengths(y), X is not None))
        self.y_ = y
        return self

    def _one(self, s, horizon):
        s = np.asarray(s, dtype=float)
        last = s[-self.season:]
        reps = -(-horizon // self.season)
        return np.concatenate([last] * reps, axis=0)[:horizon]

    def predict(self, y=None, X=None, X_future=None):
        SeasonalNaive.log.append(("predict", self, _lengths(y), X is not None))
        y = self.y_ if y is None else y
        if isinstance(y, list):
            return [self._one(s, self.horizon) for s in y]
        return self._one(y, self.horizon)

    def predict_interval(self, coverage=0.9, y=None, X=None, X_future=None):
        p = self.predict(y=y, X=X, X_future=X_future)
        if isinstance(p, list):
            return [(a - self.half_width, a + self.half_width) for a in p]
        return np.stack([p - self.half_width, p + self.half_width], axis=-1)

    def predict_quantiles(self, quantiles=(0.5,), y=None, X=None, X_future=None):
        p = self.predict(y=y, X=X, X_future=X_future)
        off = np.asarray(quantiles) - 0.5
        if isinstance(p, list):
            return [a[..., None] + off for a in p]
        return p[..., None] + off


def _lengths(y):
    if y is None:
        return None
    return [len(s) for s in y] if isinstance(y, list) else len(y)


def _seasonal_naive_with_horizon(horizon, **kw):
    # the test class reads the horizon from a class attribute (backtest clones it)
    SeasonalNaive.horizon = horizon
    return SeasonalNaive(**kw)


class MeanForecaster:
    """Forecasts the mean of the series seen at fit, whatever y predict is given."""

    def __init__(self, horizon=2):
        self.horizon = horizon

    def get_params(self, deep=True):
        return {"horizon": self.horizon}

    def fit(self, y, X=None):
        self.mean_ = float(np.mean(y))
        return self

    def predict(self, y=None, X=None):
        return np.full(self.horizon, self.mean_)


def test_rolling_origins_by_hand():
    # n = (20 - 8 - 3) // 4 + 1 = 3 origins, the last 3 before the end, 4 apart
    assert fc.rolling_origins(20, 3, 8, 4) == [9, 13, 17]
    assert fc.rolling_origins(11, 3, 8, 4) == [8]
    with pytest.raises(ValueError, match="initial \\+ horizon"):
        fc.rolling_origins(10, 3, 8, 4)


def test_backtest_seasonal_naive_matches_a_direct_loop():
    rng = np.random.default_rng(5)
    T, m, h = 60, 6, 4
    y = 5.0 + np.sin(2 * np.pi * np.arange(T) / m) * 3 + rng.normal(0, 0.5, T)
    y0 = y.copy()
    est = _seasonal_naive_with_horizon(h, season=m, half_width=0.7)
    res = fc.backtest(est, y, horizon=h, initial=30, step=5, season=m,
                      coverage=0.8, quantiles=[0.1, 0.5, 0.9])
    np.testing.assert_array_equal(y, y0)
    cuts = [r["cutoff"] for r in res.rows]
    assert cuts == fc.rolling_origins(T, h, 30, 5) and cuts[-1] == T - h
    for r, p in zip(res.rows, res.forecasts):
        t = r["cutoff"]
        want = np.array([y[t - m + (i % m)] for i in range(h)])
        np.testing.assert_array_equal(p, want)
        truth = y[t:t + h]
        scale = np.mean(np.abs(y[m:t] - y[:t - m]))
        assert r["mase"] == pytest.approx(np.mean(np.abs(truth - want)) / scale, rel=1e-12)
        assert r["rmse"] == pytest.approx(np.sqrt(np.mean((truth - want) ** 2)), rel=1e-12)
        assert r["coverage"] == np.mean(np.abs(truth - want) <= 0.7)
        assert r["width"] == pytest.approx(1.4)
        e = truth - want
        qs = np.array([0.1, 0.5, 0.9])
        d = e[:, None] - (qs - 0.5)
        assert r["pinball"] == pytest.approx(np.maximum(qs * d, (qs - 1) * d).mean())
    mean = res.mean()
    assert mean["mase"] == pytest.approx(np.mean([r["mase"] for r in res.rows]))
    assert [o["cutoff"] for o in res.per_origin()] == cuts
    assert set(mean) >= {"mae", "rmse", "mase", "smape", "pinball", "coverage", "width"}


def test_backtest_exact_on_a_periodic_series():
    y = np.tile([1.0, 4.0, 2.0, 8.0], 10)
    est = _seasonal_naive_with_horizon(5, season=4)
    # the series repeats exactly: MASE's scale is 0
    with pytest.raises(ValueError, match="MASE is undefined"):
        fc.backtest(est, y, horizon=5, initial=12, step=3, season=4)
    y[0] = 3.0  # scale > 0, forecasts from the last season stay exact
    res = fc.backtest(est, y, horizon=5, initial=12, step=3, season=4)
    assert len(res.rows) == (40 - 12 - 5) // 3 + 1
    assert all(r["mase"] == 0.0 and r["smape"] == 0.0 for r in res.rows)


class Vandal(MeanForecaster):
    """Writes into the arrays it is given."""

    def fit(self, y, X=None):
        super().fit(y)
        y[...] = 0.0
        if X is not None:
            X[...] = 0.0
        return self

    def predict(self, y=None, X=None):
        if y is not None:
            y[...] = 0.0
        return super().predict()


@pytest.mark.parametrize("refit", [True, False])
def test_backtest_never_modifies_user_arrays(refit):
    y = np.arange(30.0) ** 1.2
    X = np.ones((30, 2))
    y0, X0 = y.copy(), X.copy()
    y.flags.writeable = False
    fc.backtest(Vandal(3), y, horizon=3, initial=10, step=4, X=X, refit=refit)
    np.testing.assert_array_equal(y, y0)
    np.testing.assert_array_equal(X, X0)


def test_backtest_refit_on_and_off():
    y = np.arange(30.0) ** 1.5
    on = fc.backtest(MeanForecaster(2), y, horizon=2, initial=10, step=6, refit=True)
    off = fc.backtest(MeanForecaster(2), y, horizon=2, initial=10, step=6, refit=False)
    cuts = [r["cutoff"] for r in on.rows]
    assert cuts == [r["cutoff"] for r in off.rows] == [10, 16, 22, 28]
    for t, p in zip(cuts, on.forecasts):
        np.testing.assert_allclose(p, y[:t].mean())
    for p in off.forecasts:  # fitted once on the first window
        np.testing.assert_allclose(p, y[:10].mean())
    assert all(r["fit_time"] == 0.0 for r in off.rows[1:])


def test_backtest_call_protocol():
    SeasonalNaive.log.clear()
    y = np.random.default_rng(6).normal(size=40)
    X = np.random.default_rng(7).normal(size=(40, 2))
    est = _seasonal_naive_with_horizon(3, season=2)
    fc.backtest(est, y, horizon=3, initial=20, step=5, X=X, refit=False, season=2)
    fits = [e for e in SeasonalNaive.log if e[0] == "fit"]
    preds = [e for e in SeasonalNaive.log if e[0] == "predict"]
    assert len(fits) == 1 and fits[0][2] == 22 and fits[0][3]  # (40-20-3)//5+1 = 4
    assert [p[2] for p in preds] == [22, 27, 32, 37] and all(p[3] for p in preds)
    assert fits[0][1] is not est  # the estimator passed in is never fitted
    SeasonalNaive.log.clear()
    fc.backtest(est, y, horizon=3, initial=20, step=5, refit=True, season=2)
    fits = [e for e in SeasonalNaive.log if e[0] == "fit"]
    preds = [e for e in SeasonalNaive.log if e[0] == "predict"]
    assert [f[2] for f in fits] == [22, 27, 32, 37]
    assert len({id(f[1]) for f in fits}) == 4  # a fresh clone per origin (all alive)
    assert all(p[2] is None for p in preds)


def test_backtest_list_of_series_is_end_aligned():
    rng = np.random.default_rng(8)
    ys = [rng.normal(size=n) for n in (30, 45, 38)]
    keep = [s.copy() for s in ys]
    est = _seasonal_naive_with_horizon(4, season=1)
    res = fc.backtest(est, ys, horizon=4, initial=15, step=3)
    for s, k in zip(ys, keep):
        np.testing.assert_array_equal(s, k)
    n = (30 - 15 - 4) // 3 + 1
    assert len(res.rows) == 3 * n
    for r, p in zip(res.rows, res.forecasts):
        s = ys[r["series"]]
        assert len(s) - r["cutoff"] == 4 + (n - 1 - r["origin"]) * 3
        np.testing.assert_array_equal(p, np.full(4, s[r["cutoff"] - 1]))
    assert len(res.per_origin()) == n


def test_backtest_multichannel():
    rng = np.random.default_rng(9)
    y = rng.normal(size=(40, 3))
    res = fc.backtest(_seasonal_naive_with_horizon(5, season=2), y, horizon=5,
                      initial=20, step=5, season=2)
    r, p = res.rows[-1], res.forecasts[-1]
    assert p.shape == (5, 3)
    assert r["mase"] == pytest.approx(fc.mase(y[35:], p, y[:35], 2))


def test_clone_is_unfitted_copy_with_copied_params():
    est = MeanForecaster(horizon=[1, 2])
    c = fc.clone(est)
    assert type(c) is MeanForecaster and c.horizon == [1, 2] and c.horizon is not est.horizon
    with pytest.raises(TypeError, match="get_params"):
        fc.clone(object())


def test_rolling_origin_split_in_sklearn():
    ms = pytest.importorskip("sklearn.model_selection")
    lm = pytest.importorskip("sklearn.linear_model")
    X = np.random.default_rng(10).normal(size=(50, 3))
    yv = X @ [1.0, -2.0, 0.5]
    cv = fc.RollingOriginSplit(horizon=5, initial=20, step=5)
    ref = ms.TimeSeriesSplit(n_splits=cv.get_n_splits(X), test_size=5)
    ours = list(cv.split(X))
    theirs = list(ref.split(X))
    assert len(ours) == len(theirs) == (50 - 20 - 5) // 5 + 1 == 6
    for (a, b), (c, d) in zip(ours, theirs):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)
    out = ms.cross_validate(lm.Ridge(alpha=1e-3), X, yv, cv=cv,
                            scoring="neg_mean_absolute_error")
    assert len(out["test_score"]) == 6 and np.all(out["test_score"] > -0.05)
    with pytest.raises(ValueError, match="X is required"):
        cv.get_n_splits()


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("call, err, match", [
    (lambda: fc.mae([1.0, 2.0], [1.0]), ValueError, "y_pred must have the shape"),
    (lambda: fc.mae([1.0, np.nan], [1.0, 2.0]), ValueError, "y_true contains NaN"),
    (lambda: fc.rmse([], []), ValueError, "y_true is empty"),
    (lambda: fc.smape(["a"], ["b"]), TypeError, "y_true must hold real numbers"),
    (lambda: fc.mase([1.0], [1.0], [1.0, 2.0], season=2), ValueError,
     "y_train must be longer than season=2"),
    (lambda: fc.mase([1.0], [1.0], [1.0, 2.0], season=0), ValueError, "season must be"),
    (lambda: fc.mase([1.0], [1.0], [1.0, 2.0], season=1.5), TypeError, "season must be"),
    (lambda: fc.mase([1.0], [1.0], [3.0, 3.0, 3.0]), ValueError, "MASE is undefined"),
    (lambda: fc.mase(np.ones((2, 2)), np.ones((2, 2)), np.arange(5.0)), ValueError,
     "y_train must have the 2 channel"),
    (lambda: fc.pinball_loss([1.0], [[1.0, 2.0]], [0.1, 1.0]), ValueError,
     "quantiles must all be in \\(0, 1\\)"),
    (lambda: fc.pinball_loss([1.0], [[1.0]], [0.1, 0.9]), ValueError,
     "y_quantiles must have shape"),
    (lambda: fc.interval_coverage([1.0], [2.0], [1.0]), ValueError,
     "lower must not exceed upper"),
    (lambda: fc.interval_coverage([1.0, 2.0], [0.0], [3.0]), ValueError,
     "shape of y_true"),
    (lambda: fc.RollingOriginSplit(0, 5), ValueError, "horizon must be an int >= 1"),
    (lambda: fc.RollingOriginSplit(True, 5), TypeError, "horizon must be an int"),
])
def test_metric_errors(call, err, match):
    with pytest.raises(err, match=match):
        call()


def _bt(**kw):
    y = np.random.default_rng(11).normal(size=30)
    args = dict(horizon=3, initial=10, step=2)
    args.update(kw)
    est = args.pop("est", None) or _seasonal_naive_with_horizon(3, season=1)
    return fc.backtest(est, args.pop("y", y), **args)


@pytest.mark.parametrize("kw, err, match", [
    (dict(horizon=0), ValueError, "horizon must be an int >= 1"),
    (dict(initial=28), ValueError, "y is too short"),
    (dict(step=-1), ValueError, "step must be"),
    (dict(season=10), ValueError, "initial must exceed season=10"),
    (dict(coverage=1.0), ValueError, "coverage must be in \\(0, 1\\)"),
    (dict(quantiles=[0.5, 0.0]), ValueError, "quantiles must all be in"),
    (dict(X=np.ones((29, 2))), ValueError, "X must have the length of y \\(30\\)"),
    (dict(y=np.r_[np.ones(29), np.nan]), ValueError, "y contains NaN"),
    (dict(refit="yes"), TypeError, "refit must be a bool"),
    (dict(est=MeanForecaster(3), coverage=0.9), TypeError, "no predict_interval"),
    (dict(est=MeanForecaster(3), quantiles=[0.5]), TypeError, "no predict_quantiles"),
    (dict(est=MeanForecaster(4)), ValueError,
     "estimator.predict returned shape \\(4,\\), expected \\(3,\\)"),
    (dict(est=object()), TypeError, "fit\\(\\) method"),
])
def test_backtest_errors(kw, err, match):
    with pytest.raises(err, match=match):
        _bt(**kw)


def test_backtest_list_errors():
    ys = [np.arange(30.0), np.arange(20.0)]
    est = _seasonal_naive_with_horizon(3)
    with pytest.raises(ValueError, match="X must hold one array per series of y \\(2\\)"):
        fc.backtest(est, ys, horizon=3, initial=10, step=2, X=[np.ones(30)])
    with pytest.raises(ValueError, match="X\\[1\\] must have the length of y \\(20\\)"):
        fc.backtest(est, ys, horizon=3, initial=10, step=2, X=[np.ones(30), np.ones(21)])
    with pytest.raises(ValueError, match="y\\[1\\] must have the channels"):
        fc.backtest(est, [np.ones((30, 2)), np.ones((30, 3))], horizon=3, initial=10, step=2)


# ---------------------------------------------------------------- the benchmark harness
def test_benchmark_harness_scores_seasonal_naive_and_skips_missing_forecaster(tmp_path):
    pytest.importorskip("statsforecast")
    pytest.importorskip("statsmodels")
    import importlib.util
    import json
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "forecasting.py"
    spec = importlib.util.spec_from_file_location("attnx_bench_forecasting", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "fc"
    assert bench.main(["--sets", "nile", "--peers", "seasonal_naive,ridge_ar,attnx",
                       "--origins", "1", "--out", str(out)]) == 0
    res = json.loads(out.with_suffix(".json").read_text())["results"][0]
    y = bench.load_set("nile").series[0]
    assert res["horizon"] == 6 and len(y) == 100
    # seasonal naive with m = 1 repeats the last training value
    truth, last = y[-6:], y[-7]
    scale = np.mean(np.abs(np.diff(y[:-6])))
    sn = res["peers"]["seasonal_naive"]
    assert sn["mase"] == pytest.approx(np.mean(np.abs(truth - last)) / scale, rel=1e-12)
    assert sn["smape"] == pytest.approx(
        np.mean(200 * np.abs(truth - last) / (np.abs(truth) + last)), rel=1e-12)
    assert 0.0 <= sn["coverage"] <= 1.0 and res["peers"]["ridge_ar"]["coverage"] is None
    # one origin of forecasting.backtest is the hold-out itself
    for peer in ("seasonal_naive", "ridge_ar"):
        b = res["backtest"]["peers"][peer]
        assert b["mase"] == pytest.approx(res["peers"][peer]["mase"], rel=1e-12)
        assert b["n_scores"] == 1
    assert res["backtest"]["initial"] == 94
    import attnx
    if not hasattr(attnx, "TransformerForecaster"):
        assert "skipped" in res["peers"]["attnx"]["note"]
    assert "| nile (1, 6, 1) |" in out.with_suffix(".md").read_text()
