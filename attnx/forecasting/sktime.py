"""attnx's TransformerForecaster as an sktime forecaster (``pip install attnx[sktime]``).

    from attnx.forecasting.sktime import AttnxForecaster
    f = AttnxForecaster(season=12, random_state=0).fit(y, fh=[1, 2, 3])
    f.predict(); f.predict_interval(coverage=0.9); f.predict_quantiles(alpha=[0.1, 0.9])

A thin adapter: the horizon of the wrapped model is the largest step of the
forecasting horizon given to fit (sktime's ``fh``, relative to the cutoff; in-sample
steps are not supported), every forecast is made from all the data seen so far (so
``update(..., update_params=False)`` moves the forecast origin without refitting;
with update_params=True the model is refitted on all of it), and
intervals and quantiles are the wrapped model's conformally calibrated ones. The model is
fitted on the values alone, so season=None finds the season from the data (not from
the index's frequency).

Exogenous X (sktime's convention: known for the past at fit and update, for the future
at predict) are the wrapped model's covariates known in advance, ``X_future``: at fit
its rows aligned with y (each training window sees its next `horizon` rows), at
predict the rows of the `horizon` steps after the cutoff, which X must all hold
(steps 1 to the fitted horizon, also for an fh that skips some:
``capability:non_contiguous_X`` is False). The columns named in ``past_covariates``
are observed only up to the cutoff: they become the wrapped model's past covariates
``X`` (each window's context sees them, no forecast needs their future), and predict
reads only the other columns' future rows (X may be left out when every column is
past-only).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from sktime.forecasting.base import BaseForecaster

from ._forecaster_params import QUANTILE_LEVELS
from .forecaster import TransformerForecaster

__all__ = ["AttnxForecaster"]


class AttnxForecaster(BaseForecaster):  # type: ignore[misc]
    """sktime forecaster around attnx.TransformerForecaster.

    Parameters: those of TransformerForecaster but `horizon` (taken from fit's fh),
    with the same defaults; see its documentation. And:

    intervals : "conformal" or "quantile" (as TransformerForecaster's; None is not
        offered: sktime's forecasters give intervals).
    method : as TransformerForecaster's: None (the default) forecasts y alone with the
        candidate models chosen per series ("auto") and trains the network when X is
        given; "network" always trains the transformer.
    n_jobs : as TransformerForecaster's: worker processes for the candidates of many
        series (None: in this process).
    past_covariates : list of X's column names, or None
        X's columns observed only up to the cutoff (past covariates: the wrapped
        model's X); None (the default): every column of X is known in advance for the
        horizon (the wrapped model's X_future).

    Examples
    --------
    >>> from sktime.datasets import load_airline
    >>> from attnx.forecasting.sktime import AttnxForecaster
    >>> y = load_airline()
    >>> f = AttnxForecaster(season=12, d_model=8, n_heads=2, epochs=2, random_state=0)
    >>> f = f.fit(y, fh=[1, 2, 3])
    >>> f.predict().index.astype(str).tolist()
    ['1961-01', '1961-02', '1961-03']
    >>> f.predict_interval(coverage=0.9).shape
    (3, 2)
    """

    _tags = {
        "authors": ["attnx developers"],
        "maintainers": ["attnx developers"],
        "python_dependencies": None,
        "y_inner_mtype": "pd.DataFrame",
        "X_inner_mtype": "pd.DataFrame",
        "capability:multivariate": True,
        "capability:exogenous": True,
        "capability:non_contiguous_X": False,
        "capability:insample": False,
        "capability:pred_int": True,
        "capability:pred_int:insample": False,
        "capability:missing_values": False,
        "requires-fh-in-fit": True,
        "capability:random_state": True,
        "capability:update": True,
    }
    # the data seen is kept here (_seen), not in sktime's _y
    _config = {"remember_data": False}

    def __init__(self, window: int | None = None, patch_len: int | None = None,
                 patch_stride: int | None = None, season: int | None = None,
                 baseline: str = "auto", d_model: int = 64,
                 n_heads: int = 4, n_layers: int = 2, d_hidden: int | None = None,
                 dropout: float = 0.1, channel_independent: bool = True,
                 intervals: str = "conformal", quantile_levels: Any = QUANTILE_LEVELS,
                 calibration: int | None = None, steps: int = 500,
                 epochs: int | None = None, batch_size: int = 32, lr: float = 1e-3,
                 weight_decay: float = 0.01, random_state: Any = None,
                 method: str | None = None, n_jobs: int | None = None,
                 past_covariates: list[str] | None = None) -> None:
        self.window = window
        self.patch_len = patch_len
        self.patch_stride = patch_stride
        self.season = season
        self.baseline = baseline
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_layers = n_layers
        self.d_hidden = d_hidden
        self.dropout = dropout
        self.channel_independent = channel_independent
        self.intervals = intervals
        self.quantile_levels = quantile_levels
        self.calibration = calibration
        self.steps = steps
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.random_state = random_state
        self.method = method
        self.n_jobs = n_jobs
        self.past_covariates = past_covariates
        super().__init__()
        # sktime's BaseForecaster creates these only when remember_data is on at
        # construction; a later set_config(remember_data=True) expects them
        self._y = getattr(self, "_y", None)
        self._X = getattr(self, "_X", None)

    # ---- helpers --------------------------------------------------------
    def _steps(self, fh: Any) -> np.ndarray:
        """fh as 1-based steps after the cutoff; a ValueError for in-sample steps and
        (after fit) for steps beyond the fitted horizon."""
        rel = np.asarray(fh.to_relative(self.cutoff), dtype=np.int64)
        if rel.size == 0 or rel.min() < 1:
            raise ValueError(f"fh must hold steps after the cutoff (relative steps >= 1): "
                             f"AttnxForecaster does not make in-sample forecasts, got "
                             f"relative steps {rel.tolist()}")
        horizon = getattr(self, "forecaster_", None)
        if horizon is not None and rel.max() > horizon.horizon_:
            raise ValueError(f"fh reaches {int(rel.max())} steps ahead, beyond the horizon "
                             f"of {horizon.horizon_} it was fitted for: refit with this fh")
        return rel

    def _past(self) -> np.ndarray | None:
        """The past covariates seen, aligned with _history() (None without)."""
        past: np.ndarray | None = self._split(self._seen_X)[0]
        return past

    def _history(self) -> np.ndarray:
        y: np.ndarray = self._seen.to_numpy(dtype=np.float64)
        return y

    def _past_x(self, X: Any, y: pd.DataFrame) -> pd.DataFrame | None:
        """X's rows at y's time stamps (a ValueError naming the missing ones)."""
        if X is None:
            return None
        missing = y.index.difference(X.index)
        if len(missing):
            raise ValueError(f"X must hold a row for every time stamp of y; missing "
                             f"{len(missing)}, the first {missing[0]}")
        return X.loc[y.index]

    def _model(self, horizon: int) -> TransformerForecaster:
        params = self.get_params(deep=False)
        params.pop("past_covariates")
        if self.intervals not in ("conformal", "quantile"):
            raise ValueError(f"intervals must be 'conformal' or 'quantile', got "
                             f"{self.intervals!r}")
        return TransformerForecaster(horizon, **params)

    def _past_columns(self, X: Any) -> list[Any]:
        """The columns of X named in past_covariates (checked: each must be in X)."""
        names = self.past_covariates
        if names is None:
            return []
        if isinstance(names, str) or not isinstance(names, (list, tuple)):
            raise TypeError(f"past_covariates must be a list of X's column names or None, "
                            f"got {names!r}")
        if X is None:
            raise ValueError(f"past_covariates={list(names)!r} names columns of X, but fit "
                             f"got no X")
        missing = [c for c in names if c not in X.columns]
        if missing:
            raise ValueError(f"past_covariates names columns X does not have: {missing} "
                             f"(X's columns: {list(X.columns)})")
        return list(names)

    def _split(self, X: pd.DataFrame | None) -> tuple[Any, Any]:
        """(the past covariates, the known-in-advance ones) of the seen X, as arrays
        aligned with the data seen (None for an empty part)."""
        if X is None:
            return None, None
        past = X[self._past_cols].to_numpy(dtype=np.float64) if self._past_cols else None
        rest = X.drop(columns=self._past_cols)
        return past, (rest.to_numpy(dtype=np.float64) if rest.shape[1] else None)

    def _future_x(self, fh: Any, X: Any) -> np.ndarray | None:
        """X_future for the wrapped model: X's rows of the fitted horizon's steps after
        the cutoff, its known-in-advance columns (None when fit had none)."""
        if self._seen_X is None or self._split(self._seen_X)[1] is None:
            return None
        from sktime.forecasting.base import ForecastingHorizon

        h = self.forecaster_.horizon_
        steps = ForecastingHorizon(np.arange(1, h + 1), is_relative=True, freq=fh.freq)
        index = steps.to_absolute_index(self.cutoff)
        missing = [] if X is None else index.difference(X.index)
        if X is None or len(missing):
            raise ValueError(f"X at predict must hold the exogenous values of the {h} "
                             f"steps after the cutoff (the fitted horizon), as at fit: "
                             + ("X was not given" if X is None else
                                f"missing {len(missing)}, the first {missing[0]}"))
        future = [c for c in self._seen_X.columns if c not in self._past_cols]
        lacking = [c for c in future if c not in X.columns]
        if lacking:
            raise ValueError(f"X at predict must hold the known-in-advance columns "
                             f"{future}; missing {lacking}")
        out: np.ndarray = X.loc[index, future].to_numpy(dtype=np.float64)
        return out

    def _frame(self, fh: Any, values: np.ndarray, columns: Any) -> pd.DataFrame:
        index = fh.to_absolute_index(self.cutoff)
        return pd.DataFrame(values, index=index, columns=columns)

    # ---- sktime's interface --------------------------------------------
    def _fit(self, y: pd.DataFrame, X: Any = None, fh: Any = None) -> AttnxForecaster:
        rel = self._steps(fh)
        self._past_cols = self._past_columns(X)
        self._seen = y
        self._seen_X = self._past_x(X, y)
        self.forecaster_ = self._model(int(rel.max()))
        self._refit()
        return self

    def _refit(self) -> None:
        past, fut = self._split(self._seen_X)
        self.forecaster_.fit(self._history(), X=past, X_future=fut)

    def _update(self, y: pd.DataFrame, X: Any = None, update_params: bool = True
                ) -> AttnxForecaster:
        """Append y to the data seen (the forecasts start after its end); with
        update_params, refit the model on all of it (same horizon)."""
        self._seen = _append(self._seen, y)
        if self._seen_X is not None:
            if X is None:
                raise ValueError("AttnxForecaster was fitted with X: update needs X for "
                                 "the new time stamps of y too")
            self._seen_X = _append(self._seen_X, self._past_x(X, y))
        if update_params:
            self.forecaster_ = self._model(self.forecaster_.horizon_)
            self._refit()
        return self

    def _predict(self, fh: Any, X: Any = None) -> pd.DataFrame:
        rel = self._steps(fh)
        point = np.asarray(self.forecaster_.predict(self._history(), X=self._past(),
                                                    X_future=self._future_x(fh, X)))
        return self._frame(fh, point.reshape(len(point), -1)[rel - 1], self._seen.columns)

    def _predict_interval(self, fh: Any, X: Any = None, coverage: Any = 0.9) -> pd.DataFrame:
        rel = self._steps(fh)
        names = list(self._get_varnames())
        blocks = []
        fut = self._future_x(fh, X)
        for c in coverage:
            lo, hi = self.forecaster_.predict_interval(self._history(), X=self._past(),
                                                       X_future=fut, coverage=float(c))
            blocks.append((np.asarray(lo).reshape(len(lo), -1)[rel - 1],
                           np.asarray(hi).reshape(len(hi), -1)[rel - 1]))
        cols, data = [], []
        for j, name in enumerate(names):
            for c, (lo, hi) in zip(coverage, blocks):
                cols += [(name, c, "lower"), (name, c, "upper")]
                data += [lo[:, j], hi[:, j]]
        return self._frame(fh, np.stack(data, axis=1), pd.MultiIndex.from_tuples(cols))

    def _predict_quantiles(self, fh: Any, X: Any = None, alpha: Any = None) -> pd.DataFrame:
        rel = self._steps(fh)
        names = list(self._get_varnames())
        alpha = [float(a) for a in alpha]
        levels = sorted(set(alpha))
        q = np.asarray(self.forecaster_.predict_quantiles(
            self._history(), X=self._past(), X_future=self._future_x(fh, X),
            quantiles=levels))
        q = q.reshape(q.shape[0], -1, len(levels))[rel - 1]   # (n_fh, k, n_levels)
        cols, data = [], []
        for j, name in enumerate(names):
            for a in alpha:
                cols.append((name, a))
                data.append(q[:, j, levels.index(a)])
        return self._frame(fh, np.stack(data, axis=1), pd.MultiIndex.from_tuples(cols))

    @classmethod
    def get_test_params(cls, parameter_set: str = "default") -> list[dict[str, Any]]:
        """Two tiny, fast configurations for sktime's estimator checks."""
        tiny = dict(d_model=8, n_heads=2, n_layers=1, epochs=2, random_state=0)
        return [tiny, dict(tiny, window=8, patch_len=4, dropout=0.0, channel_independent=False,
                           intervals="quantile")]


def _append(seen: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """seen with the rows of new appended (new wins on a repeated time stamp)."""
    both = pd.concat([seen, new])
    out: pd.DataFrame = both[~both.index.duplicated(keep="last")].sort_index()
    return out
