"""attnx.sktime.AttnxForecaster: sktime's own checks, evaluate(), and the same numbers
as TransformerForecaster."""
import numpy as np
import pytest

pytest.importorskip("sktime")
import pandas as pd  # noqa: E402
from sktime.datasets import load_airline  # noqa: E402

import attnx  # noqa: E402
from attnx.sktime import AttnxForecaster  # noqa: E402

TINY = dict(d_model=8, n_heads=2, n_layers=1, epochs=2, random_state=0)


def test_sktime_estimator_checks():
    from sktime.utils.estimator_checks import check_estimator

    check_estimator(AttnxForecaster, raise_exceptions=True)


def test_same_numbers_as_the_wrapped_forecaster():
    y = load_airline()
    f = AttnxForecaster(season=12, **TINY).fit(y, fh=[2, 5])
    ref = attnx.TransformerForecaster(5, season=12, **TINY).fit(y.to_numpy())
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
