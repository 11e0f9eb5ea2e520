"""Forecasting: TransformerForecaster, its classical candidates and their selection,
seasonality, windows, pandas and sktime adapters, and the accuracy metrics and rolling-origin
backtesting (attnx.forecasting.mase, .backtest, ...)."""
from .metrics import (BacktestResult, RollingOriginSplit, backtest, clone, interval_coverage,
                      interval_width, mae, mase, pinball_loss, rmse, rolling_origins,
                      scaled_quantile_loss, seasonal_naive_scale, smape)
from .forecaster import FORECASTERS, TransformerForecaster

__all__ = ["TransformerForecaster", "FORECASTERS", "mae", "rmse", "mase", "smape",
           "pinball_loss", "scaled_quantile_loss", "interval_coverage", "interval_width",
           "seasonal_naive_scale", "clone", "backtest", "BacktestResult", "RollingOriginSplit", "rolling_origins"]
