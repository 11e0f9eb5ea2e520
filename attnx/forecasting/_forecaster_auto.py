"""The forecaster's classical path: method="auto" (or a candidate's name), and the
network path's fallback when the series are too short for its windows.

Every channel of every series is forecast on its own: the candidates of
attnx.forecasting._candidates (attnx's own methods, a seasonal autoregression and the
pretrained network; statsforecast's AutoETS, AutoTheta, AutoARIMA and MSTL when it is
installed) are scored on rolling origins and the best one, or the
combination of the best few, is kept (attnx.forecasting._selection). Its intervals are conformal:
its normalised errors at those origins scale its own error growth along the horizon.

Fitted attributes (besides the network path's season_, k_, was_list_, time_index_):
  method_       what forecasts: "network", the chosen candidate's name (one for
                every channel of every series), or "per-series" when they differ
  methods_      the chosen candidate of each series' each channel (series-major)
  periods_      the seasonal periods the candidates use: season_; when the data
                show none, a weaker peak that leaves three cycles in the median
                series (attnx.forecasting._season.detect with relaxed=True); and a longer one
                the data show (longer_periods)
  choices_      per channel: the chosen candidate's name, its spec (the model its
                search chose), every candidate's rolling-origin mean absolute error
  point_, scale_  per series: the forecast (horizon, k) and its error scale
  scores_       per channel: the conformal scores its intervals come from
                (origins, horizon; NaN past the series' end)
All are plain values and arrays, so a fitted forecaster saves, loads and pickles
whatever path it took; ONNX export covers the network only (export_spec says so).
"""
from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _gaps, _pandas, _season, _series_pool
from ._panel_season import PanelStats, classical_periods
from . import _selection as sel
from . import _windows as win

if TYPE_CHECKING:
    import numpy.typing as npt

    F64 = npt.NDArray[np.float64]

__all__ = ["ClassicalPath", "METHODS", "TooFewWindows", "fit_series"]

#: method="auto" chooses among the classical candidates; "network" trains the
#: transformer (falling back to "auto" when the series are too short for it); any
#: other value names one candidate (attnx.forecasting._candidates), still calibrated on the origins
METHODS = ("network", "auto")


def _observed_part(y: F64) -> tuple[F64, int]:
    """A channel from its first to its last observed value (interior NaNs kept for
    attnx.forecasting._selection to fill), and how many NaNs trailed it."""
    if not _gaps.has_gaps(y):
        return y, 0
    first, last = _gaps.tail(y)
    return y[first:last + 1], y.shape[0] - 1 - last


def fit_series(series: list[F64], k: int, h: int, periods: list[int],
               names: list[str] | None, n_jobs: int | None
               ) -> tuple[list[dict[str, Any]], list[F64], list[F64], list[F64]]:
    """Choose every channel of every (T_i, k) series on its own (attnx.forecasting._selection.choose,
    in `n_jobs` worker processes): per channel, series-major, the choice (Choice.to_dict)
    and its conformal scores (origins, h); per series, the forecast and its error scale
    (h, k). Trailing NaNs: the last h steps of a forecast from the last observed value."""
    tasks, lags = [], []
    for s in series:
        for j in range(k):
            y, lag = _observed_part(s[:, j])
            tasks.append((y, h + lag, tuple(periods), names))
            lags.append(lag)
    chosen = iter(_series_pool.choose_all(tasks, n_jobs))
    at = iter(lags)
    choices, points, scales, scores = [], [], [], []
    for s in series:
        pt, sc = np.empty((h, k)), np.empty((h, k))
        for j in range(k):
            c, lag = next(chosen), next(at)
            choices.append(c.to_dict())
            pt[:, j], sc[:, j] = c.forecast.mean[lag:], c.forecast.sigma[lag:]
            scores.append(np.asarray(c.scores, dtype=np.float64)[..., lag:])
        points.append(pt)
        scales.append(sc)
    return choices, points, scales, scores


class TooFewWindows(ValueError):
    """The series are valid but too short for the network's windows."""


class ClassicalPath:
    """The classical half of TransformerForecaster (a mixin; see the module)."""

    method: str | None
    n_jobs: int | None
    horizon_: int
    k_: int
    season_: int
    time_index_: Any
    was_list_: bool

    def _fit_classical(self, series: list[F64], reason: str | None,
                       covariates: bool) -> None:
        """Fit the classical path on the checked series; `reason`: why the network
        path fell back (None: asked for); `covariates`: whether X, X_future or static
        were given (they are ignored here, with a warning)."""
        h = self.horizon_
        if reason is not None:
            warnings.warn(f"TransformerForecaster: {reason}; forecasting with the classical "
                          f"methods instead (method_ says which)", UserWarning, stacklevel=3)
        if covariates:
            warnings.warn("TransformerForecaster: the classical methods ignore X, X_future "
                          "and static", UserWarning, stacklevel=3)
        found = [_gaps.fill_2d(s, 1) for s in series]   # the seasons of gappy series: filled
        stats = PanelStats.of(found, self.time_index_)
        diffs = _season.differenced(found, self.season_) if self.season_ > 1 else None
        self.periods_ = classical_periods(stats, diffs, self.season_,
                                          getattr(self, "season", None))
        names = None if self.method is None or self.method in METHODS else [str(self.method)]
        choices, points, scales, scores = fit_series(series, self.k_, h, self.periods_, names,
                                                     self.n_jobs)
        self.choices_ = choices
        self.methods_ = [c["name"] for c in choices]
        if names is not None and any(m != names[0] for m in self.methods_):
            warnings.warn(f"TransformerForecaster: method={names[0]!r} could not run on every "
                          f"series (too short); methods_ says what forecasts each",
                          UserWarning, stacklevel=3)
        self.method_ = (self.methods_[0] if len(set(self.methods_)) == 1 else "per-series")
        self.point_, self.scale_ = points, scales
        self.scores_ = sel.borrow(scores)
        self.n_series_ = len(series)

    # ---- predict -------------------------------------------------------
    def _classical_forecast(self, y: Any) -> tuple[list[F64], list[F64], list[F64],
                                                   bool, Any]:
        """(points (h, k), scales (h, k), scores per channel, was_list, pandas index
        records or None) after the fit's series, or after the series y given (the
        chosen models rerun on them without choosing again)."""
        if y is None:
            return self.point_, self.scale_, self.scores_, self.was_list_, self.time_index_
        h = self.horizon_
        y_index = _gaps.indexes(y)
        y, index = _pandas.unwrap("y", y)
        series, was_list = win.series_list("y", y, min_len=2, missing=True)
        series, _ = _gaps.observed_series("y", series, was_list, index, y_index, 2, "2")
        if series[0].shape[1] != self.k_:
            raise ValueError(f"y must have {self.k_} channel(s) as at fit, got "
                             f"{series[0].shape[1]}")
        n_fit = len(self.choices_) // self.k_
        same = len(series) == n_fit
        if not same and self.method_ == "per-series":
            raise ValueError(f"the series were fitted with different methods "
                             f"({n_fit} series); predict(y=...) needs as many series")
        pooled = sel.pool(self.scores_)
        points, scales, scores = [], [], []
        for i, s in enumerate(series):
            pt, sc = np.empty((h, self.k_)), np.empty((h, self.k_))
            for j in range(self.k_):
                at = i * self.k_ + j if same else j
                y, lag = _observed_part(s[:, j])
                f = sel.rerun(self.choices_[at], y, h + lag, tuple(self.periods_))
                pt[:, j], sc[:, j] = f.mean[lag:], f.sigma[lag:]
                scores.append(self.scores_[at] if same else pooled)
            points.append(pt)
            scales.append(sc)
        return points, scales, scores, was_list, index

    def _classical_ends(self, points: list[F64], scales: list[F64], scores: list[F64],
                        coverage: float) -> tuple[list[F64], list[F64]]:
        """The interval ends (h, k) per series for `coverage`."""
        win.interval_levels(coverage)   # checks it
        lower, upper = [], []
        for i, (pt, sc) in enumerate(zip(points, scales)):
            half = np.stack([sel.half_width(sc[:, j], scores[i * self.k_ + j], coverage)
                             for j in range(self.k_)], axis=1)
            lower.append(pt - half)
            upper.append(pt + half)
        return lower, upper

    def _classical_out(self, arrays: list[F64], was_list: bool, index: Any, kind: str,
                       extra: Any = None) -> Any:
        flat = [a if self.k_ > 1 else a[..., 0] if a.ndim == 2 else a[:, 0, :]
                for a in arrays]
        if index is None:
            return flat if was_list else flat[0]
        if kind == "point":
            out = [_pandas.point(m, a) for m, a in zip(index, flat)]
        else:
            out = [_pandas.quantiles(m, a, extra) for m, a in zip(index, flat)]
        return out if was_list else out[0]

    def _classical_predict(self, y: Any) -> Any:
        points, _, _, was_list, index = self._classical_forecast(y)
        return self._classical_out([p.copy() for p in points], was_list, index, "point")

    def _classical_interval(self, y: Any, coverage: float) -> Any:
        win.interval_levels(coverage)
        points, scales, scores, was_list, index = self._classical_forecast(y)
        lower, upper = self._classical_ends(points, scales, scores, float(coverage))
        shaped = [(lo if self.k_ > 1 else lo[:, 0], hi if self.k_ > 1 else hi[:, 0])
                  for lo, hi in zip(lower, upper)]
        if index is not None:
            out = [_pandas.interval(m, a, b) for m, (a, b) in zip(index, shaped)]
            return out if was_list else out[0]
        return shaped if was_list else shaped[0]

    def _classical_quantiles(self, y: Any, qs: tuple[float, ...]) -> Any:
        points, scales, scores, was_list, index = self._classical_forecast(y)
        cols = []
        for lv in qs:
            if lv == 0.5:
                cols.append(points)
            else:
                lo, hi = self._classical_ends(points, scales, scores, abs(2.0 * lv - 1.0))
                cols.append(lo if lv < 0.5 else hi)
        stacked = [np.sort(np.stack([c[i] for c in cols], axis=-1), axis=-1)
                   for i in range(len(points))]
        return self._classical_out(stacked, was_list, index, "quantiles", qs)
