"""attnx.forecasting.sktime.AttnxForecaster: sktime's own checks, evaluate() (with and without
exogenous X), and the same numbers as TransformerForecaster."""
import numpy as np
import pytest

pytest.importorskip("sktime")
import pandas as pd  # noqa: E402
from sktime.datasets import load_airline  # noqa: E402

import attnx  # noqa: E402
from attnx.forecasting.sktime import AttnxForecaster  # noqa: E402

TINY = dict(d_model=8, n_heads=2, n_layers=1, epochs=2, random_state=0)


def test_sktime_estimator_checks():
    from sktime.utils.estimator_checks import check_estimator

    check_estimator(AttnxForecaster, raise_exceptions=True)


def test_method_passes_through_to_the_wrapped_forecaster():
    """The default forecasts y alone with the candidates per series; method="network"
    trains the transformer on it; the forecasts match the wrapped forecaster's."""
    y = load_airline()
    for method in (None, "network"):
        f = AttnxForecaster(season=12, method=method, **TINY).fit(y, fh=[1, 2, 3])
        ref = attnx.TransformerForecaster(3, season=12, method=method, **TINY).fit(
            y.to_numpy())
        assert (f.forecaster_.method_ == "network") == (method == "network")
        np.testing.assert_array_equal(f.predict().to_numpy(), ref.predict())


@pytest.mark.parametrize("intervals", ["conformal", "quantile"])
def test_same_numbers_as_the_wrapped_forecaster(intervals):
    y = load_airline()
    f = AttnxForecaster(season=12, intervals=intervals, **TINY).fit(y, fh=[2, 5])
    ref = attnx.TransformerForecaster(5, season=12, intervals=intervals, **TINY).fit(
        y.to_numpy())
    assert len(f.forecaster_.levels_) == (7 if intervals == "quantile" else 1)
    p = f.predict()
    assert list(p.index.astype(str)) == ["1961-02", "1961-05"]
    np.testing.assert_array_equal(p.to_numpy(), ref.predict()[[1, 4]])
    iv = f.predict_interval(coverage=[0.5, 0.9])
    lo, hi = ref.predict_interval(coverage=0.9)
    np.testing.assert_array_equal(iv[(iv.columns[0][0], 0.9, "lower")].to_numpy(), lo[[1, 4]])
    np.testing.assert_array_equal(iv[(iv.columns[0][0], 0.9, "upper")].to_numpy(), hi[[1, 4]])
    q = f.predict_quantiles(alpha=[0.9, 0.1])
    want = ref.predict_quantiles(quantiles=(0.1, 0.9))[[1, 4]]
    np.testing.assert_array_equal(q.to_numpy(), want[:, ::-1])   # alpha's order kept
    # update without refitting moves the origin: the forecasts of the longer series
    f.update(_more(y, 3), update_params=False)
    longer = np.r_[y.to_numpy(), _more(y, 3).to_numpy()]
    np.testing.assert_array_equal(f.predict().to_numpy(), ref.predict(longer)[[1, 4]])


def _more(y, n):
    idx = pd.period_range(y.index[-1] + 1, periods=n, freq=y.index.freq)
    return pd.Series(y.to_numpy()[-n:], index=idx, name=y.name)


def test_runs_in_evaluate_and_multivariate():
    from sktime.forecasting.model_evaluation import evaluate
    from sktime.split import ExpandingWindowSplitter

    y = load_airline()
    cv = ExpandingWindowSplitter(fh=[1, 2, 3], initial_window=120, step_length=12)
    res = evaluate(AttnxForecaster(season=12, **TINY), cv, y, strategy="refit")
    assert len(res) == 2 and np.all(np.isfinite(res.filter(like="test_").to_numpy()))
    df = pd.DataFrame({"a": y.to_numpy(), "b": np.log(y.to_numpy())}, index=y.index)
    f = AttnxForecaster(**TINY).fit(df, fh=[1, 2])
    assert list(f.predict().columns) == ["a", "b"]
    assert f.predict_interval().shape == (2, 4)


def test_bad_fh():
    y = load_airline()
    # sktime refuses in-sample steps (the capability:insample tag), and an fh other than
    # fit's (requires-fh-in-fit)
    with pytest.raises(NotImplementedError, match="in-sample"):
        AttnxForecaster(**TINY).fit(y, fh=[0, 1])
    f = AttnxForecaster(**TINY).fit(y, fh=[1, 2])
    with pytest.raises(ValueError, match="different forecasting horizon"):
        f.predict(fh=[3])
    # the adapter's own check when called directly
    from sktime.forecasting.base import ForecastingHorizon
    with pytest.raises(ValueError, match="beyond the horizon of 2 it was fitted for"):
        f._steps(ForecastingHorizon([1, 3]))
    with pytest.raises(ValueError, match="does not make in-sample forecasts"):
        f._steps(ForecastingHorizon([-1, 1]))


def _airline_x():
    y = load_airline()
    t = np.arange(len(y))
    X = pd.DataFrame({"month": (t % 12).astype(float), "trend": t / 100.0}, index=y.index)
    return y, X


def test_exogenous_x_is_the_wrapped_models_x_future():
    """sktime's X (past rows at fit, future rows at predict) reaches the wrapped model
    as X_future: the same numbers as TransformerForecaster given X_future itself."""
    y, X = _airline_x()
    y_fit, X_fit, X_next = y[:-6], X[:-6], X[-6:]
    f = AttnxForecaster(season=12, **TINY).fit(y_fit, X=X_fit, fh=[1, 2, 3])
    ref = attnx.TransformerForecaster(3, season=12, **TINY).fit(
        y_fit.to_numpy(), X_future=X_fit.to_numpy())
    assert f.forecaster_.fut_mean_ is not None
    np.testing.assert_array_equal(f.predict(X=X_next).to_numpy(),
                                  ref.predict(X_future=X_next.to_numpy()[:3]))
    lo, hi = ref.predict_interval(coverage=0.9, X_future=X_next.to_numpy()[:3])
    iv = f.predict_interval(X=X_next, coverage=0.9)
    np.testing.assert_array_equal(iv.to_numpy(), np.stack([lo, hi], axis=1))
    q = f.predict_quantiles(X=X_next, alpha=[0.1, 0.9])
    np.testing.assert_array_equal(q.to_numpy(), ref.predict_quantiles(
        X_future=X_next.to_numpy()[:3], quantiles=(0.1, 0.9)))
    # X changes the forecast: other future covariates, another forecast (the wrapped
    # model's network gets weight 1 here, so its covariate inputs count)
    f.forecaster_.blend_ = 1.0
    other = X_next.assign(trend=X_next["trend"] * 0.0 - 5.0)
    assert not np.allclose(f.predict(X=X_next).to_numpy(), f.predict(X=other).to_numpy())
    # update without refitting: the origin moves, X's new rows are kept for it
    f.forecaster_.blend_ = ref.blend_
    f.update(y[-6:-3], X=X[-6:-3], update_params=False)
    np.testing.assert_array_equal(
        f.predict(X=X[-3:]).to_numpy(),
        ref.predict(y[:-3].to_numpy(), X_future=X[-3:].to_numpy()))


def test_exogenous_x_errors():
    y, X = _airline_x()
    f = AttnxForecaster(**TINY).fit(y[:-3], X=X[:-3], fh=[1, 2, 3])
    with pytest.raises(ValueError, match="3 steps after the cutoff"):
        f.predict(X=X[-2:])            # misses the first step after the cutoff
    with pytest.raises(ValueError, match="X was not given"):
        f._predict(f.fh, None)
    with pytest.raises(ValueError, match="update needs X"):
        f._update(pd.DataFrame({"y": [1.0]}, index=X.index[-3:-2]), None)
    # sktime checks fit's X against y itself; the adapter's own check (update)
    with pytest.raises(ValueError, match="X must hold a row for every time stamp of y"):
        f._past_x(X[1:], y.to_frame())


def test_runs_in_evaluate_with_exogenous_x():
    from sktime.forecasting.model_evaluation import evaluate
    from sktime.split import ExpandingWindowSplitter

    y, X = _airline_x()
    cv = ExpandingWindowSplitter(fh=[1, 2, 3], initial_window=120, step_length=12)
    for strategy in ("refit", "update"):
        res = evaluate(AttnxForecaster(season=12, **TINY), cv, y, X=X, strategy=strategy,
                       return_model=True)
        assert len(res) == 2 and np.all(np.isfinite(res.filter(like="test_").to_numpy()))
        for model in res["fitted_forecaster"]:
            assert model.forecaster_.fut_mean_ is not None   # X reached the model


def test_past_covariates_are_the_wrapped_models_x():
    """past_covariates: those columns of X reach the wrapped model as its past
    covariates X (the others as X_future); predict needs only the others' future
    rows (or no X at all when every column is past-only)."""
    y, X = _airline_x()
    X = X.assign(lagged=np.r_[0.0, y.to_numpy()[:-1]] / 100.0)   # observed to the cutoff
    y_fit, X_fit, X_next = y[:-6], X[:-6], X[-6:]
    f = AttnxForecaster(season=12, **TINY, past_covariates=["lagged"]).fit(
        y_fit, X=X_fit, fh=[1, 2, 3])
    ref = attnx.TransformerForecaster(3, season=12, **TINY).fit(
        y_fit.to_numpy(), X=X_fit[["lagged"]].to_numpy(),
        X_future=X_fit[["month", "trend"]].to_numpy())
    assert f.forecaster_.cov_mean_ is not None and f.forecaster_.fut_mean_ is not None
    want = ref.predict(y_fit.to_numpy(), X=X_fit[["lagged"]].to_numpy(),
                       X_future=X_next[["month", "trend"]].to_numpy()[:3])
    # the future rows of the past-only column are not needed (dropped here)
    np.testing.assert_array_equal(f.predict(X=X_next.drop(columns="lagged")).to_numpy(),
                                  want)
    lo, hi = ref.predict_interval(y_fit.to_numpy(), X=X_fit[["lagged"]].to_numpy(),
                                  X_future=X_next[["month", "trend"]].to_numpy()[:3])
    np.testing.assert_array_equal(f.predict_interval(X=X_next).to_numpy(),
                                  np.stack([lo, hi], axis=1))
    # the past covariates count: other past values, another forecast
    f.forecaster_.blend_ = 1.0
    base = f.predict(X=X_next).to_numpy()
    f._seen_X = f._seen_X.assign(lagged=f._seen_X["lagged"] * 3.0)
    assert not np.allclose(base, f.predict(X=X_next).to_numpy())
    # every column past-only: predict needs no X; update appends the new rows
    g = AttnxForecaster(**TINY, past_covariates=["month", "trend", "lagged"]).fit(
        y_fit, X=X_fit, fh=[1, 2])
    assert g.forecaster_.fut_mean_ is None and g.predict().shape == (2,)
    g.update(y[-6:-3], X=X[-6:-3], update_params=False)
    ref2 = attnx.TransformerForecaster(2, **TINY).fit(y_fit.to_numpy(), X=X_fit.to_numpy())
    np.testing.assert_array_equal(
        g.predict().to_numpy(), ref2.predict(y[:-3].to_numpy(), X=X[:-3].to_numpy()))


def test_past_covariates_errors():
    y, X = _airline_x()
    with pytest.raises(ValueError, match=r"columns X does not have: \['nope'\]"):
        AttnxForecaster(**TINY, past_covariates=["nope"]).fit(y, X=X, fh=[1])
    with pytest.raises(ValueError, match="fit got no X"):
        AttnxForecaster(**TINY, past_covariates=["month"]).fit(y, fh=[1])
    with pytest.raises(TypeError, match="list of X's column names"):
        AttnxForecaster(**TINY, past_covariates="month").fit(y, X=X, fh=[1])
    f = AttnxForecaster(**TINY, past_covariates=["month"]).fit(y[:-3], X=X[:-3], fh=[1, 2])
    with pytest.raises(ValueError, match=r"known-in-advance columns \['trend'\]"):
        f.predict(X=X[-3:].drop(columns="trend"))
