"""Forecast accuracy metrics and rolling-origin backtesting.

Metrics (all computed in float64, inputs never modified)
    mae, rmse                 point errors over every horizon step (and channel)
    mase                      MAE scaled by the in-sample MAE of the seasonal naive
                              forecast y[t] = y[t - season] (the M4 competition's MASE)
    smape                     M4's symmetric MAPE, in percent (0..200)
    pinball_loss              mean quantile (pinball) loss over a set of quantiles
    scaled_quantile_loss      the pinball loss per level scaled as MASE scales the MAE
                              (by the in-sample seasonal naive MAE), averaged over levels
    interval_coverage         share of true values inside [lower, upper]
    interval_width            mean upper - lower

A forecast `y_pred` has the shape of the true future `y_true`: `(horizon,)` for one
series or `(horizon, k)` for k channels. For `(horizon, k)` MASE scales each channel by
its own in-sample error and averages the k ratios; the other metrics average over every
value.

Backtesting
    backtest(estimator, y, horizon=, initial=, step=)   rolling-origin evaluation
    RollingOriginSplit(horizon, initial, step)          the same origins as a
                                                        scikit-learn cross-validator

The estimator protocol `backtest` relies on (duck-typed, scikit-learn style):

    get_params(deep=False) -> dict     constructor arguments; `type(est)(**params)` must
                                       build an unfitted copy (used for refit=True and for
                                       the single fit of refit=False: the estimator passed
                                       in is never fitted itself)
    fit(y, X=None, X_future=None)      y: one series (T,) / (T, k) or, when backtest is
                                       given a list, the list of the series' training
                                       windows. X (past covariates aligned with y) and
                                       X_future (covariates known in advance, aligned
                                       with y) are passed only when given to backtest.
    predict(y=None, X=None, X_future=None)
                                       the `horizon` values after the end of each series:
                                       (horizon,) / (horizon, k), a list of those for a
                                       list of series. With refit=True it is called
                                       without y (the series seen at fit); with
                                       refit=False it gets y= (and X=) the whole history
                                       up to the origin. X_future= the covariates of the
                                       `horizon` future steps.
    predict_interval(coverage=c, <same keywords as predict>)   only when coverage is set:
                                       (lower, upper), each shaped as the forecast, or one
                                       array shaped forecast.shape + (2,) (per series for
                                       a list).
    predict_quantiles(quantiles=q, <same keywords as predict>)  only when quantiles is
                                       set: an array shaped forecast.shape + (len(q),)
                                       (per series for a list).

Origins (cutoffs). The series is cut at n origins t_0 < ... < t_{n-1}, each one `step`
after the previous, the last one `horizon` before the end, so the most recent data is
always evaluated (as scikit-learn's TimeSeriesSplit does):
    n = (T - initial - horizon) // step + 1,   t_j = T - horizon - (n - 1 - j) * step,
training on y[:t_j] and scoring the forecast of y[t_j:t_j + horizon]. The first window
is at least `initial` long (longer by (T - initial - horizon) % step). For a list of
series of different lengths, n comes from the shortest one and every series is cut at
the same distances from its own end, so each origin is one global fit over all series.
"""
from __future__ import annotations

import copy
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..runtime._validate import as_real

__all__ = ["mae", "rmse", "mase", "smape", "pinball_loss", "interval_coverage",
           "interval_width", "seasonal_naive_scale", "clone", "backtest", "BacktestResult", "RollingOriginSplit",
           "rolling_origins"]

_F64 = np.ndarray  # float64 arrays (an alias keeps the signatures short)


# ---------------------------------------------------------------- input checks
def _real(name: str, a: object, ndims: tuple[int, ...] = (1, 2)) -> _F64:
    """a as a finite, non-empty float64 array with one of the allowed ndims (not a copy
    when it already is one; callers never write into it)."""
    arr = np.asarray(as_real(name, a, kinds="fiub", holds="real numbers"))
    if arr.ndim not in ndims:
        want = " or ".join(f"{d}-D" for d in ndims)
        raise ValueError(f"{name} must be a {want} array, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty: got shape {arr.shape}")
    arr = arr.astype(np.float64, copy=False)
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or infinity")
    return arr


def _pair(y_true: object, y_pred: object, pred_name: str = "y_pred") -> tuple[_F64, _F64]:
    t = _real("y_true", y_true)
    p = _real(pred_name, y_pred)
    if p.shape != t.shape:
        raise ValueError(f"{pred_name} must have the shape of y_true {t.shape}, got {p.shape}")
    return t, p


def _positive_int(name: str, v: object, minimum: int = 1) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an int >= {minimum}, got {type(v).__name__} {v!r}")
    if v < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {v}")
    return int(v)


def _probability(name: str, v: object) -> float:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer,
                                                              np.floating)):
        raise TypeError(f"{name} must be a float in (0, 1), got {type(v).__name__} {v!r}")
    if not 0.0 < float(v) < 1.0:
        raise ValueError(f"{name} must be in (0, 1) (exclusive), got {v}")
    return float(v)


def _quantile_levels(quantiles: object) -> _F64:
    try:
        q = np.asarray(quantiles, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"quantiles must be a sequence of floats in (0, 1), got "
                        f"{quantiles!r}") from exc
    if q.ndim == 0:
        q = q.reshape(1)
    if q.ndim != 1 or q.size == 0:
        raise ValueError(f"quantiles must be a non-empty 1-D sequence of floats in (0, 1), "
                         f"got shape {q.shape}")
    if not ((q > 0.0) & (q < 1.0)).all():
        raise ValueError(f"quantiles must all be in (0, 1) (exclusive), got {q.tolist()}")
    return q


# ---------------------------------------------------------------- point metrics
def mae(y_true: object, y_pred: object) -> float:
    """Mean absolute error over every step (and channel)."""
    t, p = _pair(y_true, y_pred)
    return float(np.abs(t - p).mean())


def rmse(y_true: object, y_pred: object) -> float:
    """Root mean squared error over every step (and channel)."""
    t, p = _pair(y_true, y_pred)
    return float(math.sqrt(((t - p) ** 2).mean()))


def seasonal_naive_scale(y_train: object, season: int = 1) -> _F64:
    """In-sample MAE of the seasonal naive forecast, per channel: mean ``|y[t] - y[t-m]|``
    over t = m..T-1 of the training series, shape (k,) (k = 1 for a 1-D series)."""
    m = _positive_int("season", season)
    y = _real("y_train", y_train)
    if y.shape[0] <= m:
        raise ValueError(f"y_train must be longer than season={m} to scale MASE, got "
                         f"{y.shape[0]} values")
    y2 = y.reshape(y.shape[0], -1)
    scale: _F64 = np.abs(y2[m:] - y2[:-m]).mean(axis=0)
    return scale


def mase(y_true: object, y_pred: object, y_train: object, season: int = 1) -> float:
    """Mean absolute scaled error, as the M4 competition defines it.

    MAE of the forecast divided by the in-sample MAE of the seasonal naive forecast
    with period `season` on `y_train` (the series before the forecast origin). For
    (horizon, k) arrays each channel gets its own scale and the k ratios are averaged.
    ValueError when a channel of y_train repeats exactly with period `season` (its
    scale is 0 and MASE undefined).
    """
    t, p = _pair(y_true, y_pred)
    scale = _checked_scale(t, y_train, season, "MASE is")
    err = np.abs(t - p).reshape(t.shape[0], -1).mean(axis=0)
    return float((err / scale).mean())


def smape(y_true: object, y_pred: object) -> float:
    """Symmetric MAPE in percent, the M4 definition: mean of ``200 |y - f| / (|y| + |f|)``.

    Ranges 0..200. A step where the truth and the forecast are both 0 counts as 0
    (a perfect forecast; the formula itself would be 0/0).
    """
    t, p = _pair(y_true, y_pred)
    den = np.abs(t) + np.abs(p)
    num = np.abs(t - p)
    ratio = np.divide(num, den, out=np.zeros_like(num), where=den > 0)
    return float(200.0 * ratio.mean())


# ---------------------------------------------------------------- probabilistic metrics
def pinball_loss(y_true: object, y_quantiles: object, quantiles: object) -> float:
    """Mean pinball (quantile) loss over every step, channel and quantile.

    y_quantiles has shape y_true.shape + (len(quantiles),): its last axis holds the
    forecast of each quantile level q, scored with max(q (y - f), (q - 1) (y - f)).
    """
    t, f, q = _quantile_forecast(y_true, y_quantiles, quantiles)
    diff = t[..., None] - f
    return float(np.maximum(q * diff, (q - 1.0) * diff).mean())


def scaled_quantile_loss(y_true: object, y_quantiles: object, y_train: object,
                         quantiles: object = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
                         season: int = 1) -> float:
    """The probabilistic counterpart of MASE: the mean over the levels of the pinball
    loss at that level (mean over the horizon steps) divided by the in-sample MAE of
    the seasonal naive forecast on y_train (mase's scale; per channel for (horizon, k)
    arrays, the channels' ratios averaged). At level 0.5 alone it is MASE / 2 (the
    pinball loss of the median is half the absolute error).

    y_quantiles has shape y_true.shape + (len(quantiles),). ValueError as mase's for a
    zero scale.
    """
    t, f, q = _quantile_forecast(y_true, y_quantiles, quantiles)
    scale = _checked_scale(t, y_train, season, "the scaled quantile loss is")
    k = scale.shape[0]
    diff = t[..., None] - f
    loss = np.maximum(q * diff, (q - 1.0) * diff)          # (h, [k,] n_levels)
    per = loss.reshape(t.shape[0], k, q.size).mean(axis=(0, 2))   # (k,)
    return float((per / scale).mean())


def _lo_hi(lower: object, upper: object) -> tuple[_F64, _F64]:
    lo = _real("lower", lower)
    hi = _real("upper", upper)
    if hi.shape != lo.shape:
        raise ValueError(f"upper must have the shape of lower {lo.shape}, got {hi.shape}")
    if (lo > hi).any():
        raise ValueError(f"lower must not exceed upper: {int((lo > hi).sum())} of "
                         f"{lo.size} bounds are crossed")
    return lo, hi


def interval_coverage(y_true: object, lower: object, upper: object) -> float:
    """Share (0..1) of the true values inside their interval [lower, upper]."""
    t = _real("y_true", y_true)
    lo, hi = _lo_hi(lower, upper)
    if lo.shape != t.shape:
        raise ValueError(f"lower and upper must have the shape of y_true {t.shape}, got "
                         f"{lo.shape}")
    return float(((t >= lo) & (t <= hi)).mean())


def interval_width(lower: object, upper: object) -> float:
    """Mean width upper - lower of the intervals."""
    lo, hi = _lo_hi(lower, upper)
    return float((hi - lo).mean())


# ---------------------------------------------------------------- origins and splits
def rolling_origins(n_samples: int, horizon: int, initial: int, step: int) -> list[int]:
    """The cutoffs t_0 < ... < t_{n-1} of a rolling-origin evaluation of a series of
    n_samples values (see the module docstring): train on [:t], test on [t:t+horizon]."""
    n_samples = _positive_int("n_samples", n_samples)
    horizon = _positive_int("horizon", horizon)
    initial = _positive_int("initial", initial)
    step = _positive_int("step", step)
    if n_samples < initial + horizon:
        raise ValueError(f"the series must hold at least initial + horizon = "
                         f"{initial} + {horizon} = {initial + horizon} values, got "
                         f"{n_samples}")
    n = (n_samples - initial - horizon) // step + 1
    return [n_samples - horizon - (n - 1 - j) * step for j in range(n)]


class RollingOriginSplit:
    """Expanding-window splits with a fixed test size (= horizon), for scikit-learn.

    Use as `cv=` in cross_validate / cross_val_score / GridSearchCV on rows ordered in
    time. Yields (train, test) index arrays: train = 0..t-1, test = t..t+horizon-1 at
    the origins of `rolling_origins` (the last test block ends at the last row; like
    TimeSeriesSplit(test_size=horizon) but with the first training size floored at
    `initial` and the origins `step` apart).
    """

    def __init__(self, horizon: int, initial: int, step: int = 1) -> None:
        self.horizon = _positive_int("horizon", horizon)
        self.initial = _positive_int("initial", initial)
        self.step = _positive_int("step", step)

    def _n_samples(self, X: object) -> int:
        if X is None:
            raise ValueError("X is required: the number of splits depends on its length")
        return len(X)  # type: ignore[arg-type]

    def split(self, X: object, y: object = None,
              groups: object = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        n = self._n_samples(X)
        for t in rolling_origins(n, self.horizon, self.initial, self.step):
            yield np.arange(t), np.arange(t, t + self.horizon)

    def get_n_splits(self, X: object = None, y: object = None, groups: object = None) -> int:
        return len(rolling_origins(self._n_samples(X), self.horizon, self.initial,
                                   self.step))

    def __repr__(self) -> str:
        return (f"RollingOriginSplit(horizon={self.horizon}, initial={self.initial}, "
                f"step={self.step})")


# ---------------------------------------------------------------- clone
def _copy_param(v: object) -> object:
    if hasattr(v, "get_params") and not isinstance(v, type):
        return clone(v)
    try:
        return copy.deepcopy(v)
    except Exception:  # an object that cannot be copied (an MPI communicator): share it
        return v


def clone(estimator: object) -> object:
    """An unfitted copy: ``type(estimator)(**estimator.get_params(deep=False))``.

    Parameters that are estimators are cloned in turn, others deep-copied (shared
    when they cannot be copied, as an MPI communicator). scikit-learn is not needed.
    """
    get = getattr(estimator, "get_params", None)
    if not callable(get):
        raise TypeError(f"estimator must have get_params() to be cloned, got "
                        f"{type(estimator).__name__}")
    try:
        params = get(deep=False)
    except TypeError:
        params = get()
    return type(estimator)(**{k: _copy_param(v) for k, v in params.items()})


# ---------------------------------------------------------------- backtest
@dataclass
class BacktestResult:
    """Outcome of `backtest`.

    rows: one dict per (origin, series): origin (index j), series (index, 0 for a
        single series), cutoff (training length t), the metrics, fit_time and
        predict_time (seconds of the call for that origin; with a global model over a
        list both are the time of the one call for all series; fit_time is 0 at the
        origins where refit=False does not fit).
    forecasts: the point forecast of each row, aligned with rows.
    metrics: the metric names present in rows.
    """

    rows: list[dict[str, Any]] = field(default_factory=list)
    forecasts: list[np.ndarray] = field(default_factory=list)
    metrics: tuple[str, ...] = ()

    def mean(self) -> dict[str, float]:
        """Each metric (and fit_time, predict_time) averaged over all rows."""
        keys = self.metrics + ("fit_time", "predict_time")
        return {k: float(np.mean([r[k] for r in self.rows])) for k in keys}

    def per_origin(self) -> list[dict[str, Any]]:
        """One dict per origin: its cutoff (of series 0) and each metric averaged over
        the series; fit_time and predict_time of the origin."""
        out: list[dict[str, Any]] = []
        origins = sorted({r["origin"] for r in self.rows})
        for j in origins:
            rs = [r for r in self.rows if r["origin"] == j]
            d: dict[str, Any] = {"origin": j, "cutoff": rs[0]["cutoff"]}
            d.update({k: float(np.mean([r[k] for r in rs])) for k in self.metrics})
            d["fit_time"] = rs[0]["fit_time"]
            d["predict_time"] = rs[0]["predict_time"]
            out.append(d)
        return out

    def to_frame(self) -> Any:
        """rows as a pandas DataFrame (pandas imported here)."""
        import importlib
        return importlib.import_module("pandas").DataFrame(self.rows)


def _is_list_of_series(y: object) -> bool:
    return isinstance(y, (list, tuple)) and len(y) > 0 and np.ndim(y[0]) >= 1


def _series_list(name: str, y: object, n: int | None = None) -> list[_F64]:
    """y (one series, or a list of them) as a list of float64 arrays."""
    out: list[_F64]
    if isinstance(y, (list, tuple)) and _is_list_of_series(y):
        out = [_real(f"{name}[{i}]", s) for i, s in enumerate(y)]
    else:
        out = [_real(name, y)]
    if n is not None and len(out) != n:
        raise ValueError(f"{name} must hold one array per series of y ({n}), got {len(out)}")
    return out


def _check_forecast(what: str, pred: object, expected: tuple[int, ...]) -> _F64:
    p = np.asarray(pred, dtype=np.float64)
    if p.shape != expected and len(expected) == 1 and p.shape == expected + (1,):
        p = p.reshape(expected)  # (horizon, 1) for a 1-D series
    if p.shape != expected:
        raise ValueError(f"{what} returned shape {p.shape}, expected {expected}")
    if not np.isfinite(p).all():
        raise ValueError(f"{what} returned NaN or infinity")
    return p


def _per_series(what: str, out: object, n_series: int, single: bool) -> list[object]:
    if single:
        return [out]
    if isinstance(out, np.ndarray) or isinstance(out, (list, tuple)):
        items = list(out)
        if len(items) == n_series:
            return items
        raise ValueError(f"{what} returned {len(items)} forecasts for {n_series} series")
    raise TypeError(f"{what} must return a list of forecasts (one per series) for a list "
                    f"of series, got {type(out).__name__}")


def _interval(what: str, out: object, shape: tuple[int, ...]) -> tuple[_F64, _F64]:
    if isinstance(out, (tuple, list)) and len(out) == 2:
        lo, hi = out
    else:
        a = np.asarray(out, dtype=np.float64)
        if a.shape != shape + (2,):
            raise ValueError(f"{what} must return (lower, upper) or an array of shape "
                             f"{shape + (2,)}, got shape {a.shape}")
        lo, hi = a[..., 0], a[..., 1]
    return (_check_forecast(f"{what} (lower)", lo, shape),
            _check_forecast(f"{what} (upper)", hi, shape))


def backtest(estimator: object, y: object, *, horizon: int, initial: int, step: int,
             X: object = None, X_future: object = None, refit: bool = True,
             season: int = 1, quantiles: Sequence[float] | None = None,
             coverage: float | None = None) -> BacktestResult:
    """Rolling-origin evaluation of a forecaster (protocol and origins: module docstring).

    Parameters
    ----------
    estimator : the forecaster (never fitted itself: clones are)
    y : one series (T,) / (T, k), or a list of series (one global model fitted over all
        of them at each origin)
    horizon, initial, step : forecast length, minimal first training length, distance
        between origins
    X : past covariates aligned with y ((T,) / (T, p), a list for a list of y), passed
        as fit(X=X[:t]) and, with refit=False, predict(X=X[:t])
    X_future : covariates known in advance, aligned with y: fit(X_future=X_future[:t])
        and predict(X_future=X_future[t:t + horizon])
    refit : True: a fresh clone is fitted at every origin. False: one clone is fitted
        on the first window and asked predict(y=y[:t]) with the longer history.
    season : the period of the seasonal naive scale of MASE
    quantiles : levels for predict_quantiles and the pinball loss (None: not asked)
    coverage : interval coverage for predict_interval (None: not asked); rows get
        "coverage" (share inside) and "width" (mean interval width)

    Returns
    -------
    BacktestResult with rows (origin, series, cutoff, mae, rmse, mase, smape, [pinball],
    [coverage, width], fit_time, predict_time) and forecasts.
    """
    for meth in ("fit", "predict"):
        if not callable(getattr(estimator, meth, None)):
            raise TypeError(f"estimator must have a {meth}() method, got "
                            f"{type(estimator).__name__}")
    single = not _is_list_of_series(y)
    ys = _series_list("y", y)
    k_shape = ys[0].shape[1:]
    for i, s in enumerate(ys):
        if s.shape[1:] != k_shape:
            raise ValueError(f"y[{i}] must have the channels of y[0] {k_shape}, got "
                             f"shape {s.shape}")
    xs = None if X is None else _series_list("X", X, len(ys))
    fs = None if X_future is None else _series_list("X_future", X_future, len(ys))
    for name, cov in (("X", xs), ("X_future", fs)):
        for i, (c, s) in enumerate(zip(cov or [], ys)):
            if c.shape[0] != s.shape[0]:
                where = name if single else f"{name}[{i}]"
                raise ValueError(f"{where} must have the length of y ({s.shape[0]}), "
                                 f"got {c.shape[0]}")
    horizon = _positive_int("horizon", horizon)
    initial = _positive_int("initial", initial)
    step = _positive_int("step", step)
    season = _positive_int("season", season)
    if initial <= season:
        raise ValueError(f"initial must exceed season={season} (MASE's scale needs "
                         f"more than one season of training data), got {initial}")
    q = None if quantiles is None else _quantile_levels(quantiles)
    cov_level = None if coverage is None else _probability("coverage", coverage)
    if not isinstance(refit, (bool, np.bool_)):
        raise TypeError(f"refit must be a bool, got {type(refit).__name__}")
    if q is not None and not callable(getattr(estimator, "predict_quantiles", None)):
        raise TypeError("quantiles is set but the estimator has no predict_quantiles()")
    if cov_level is not None and not callable(getattr(estimator, "predict_interval", None)):
        raise TypeError("coverage is set but the estimator has no predict_interval()")

    t_min = min(s.shape[0] for s in ys)
    try:
        offsets = [t_min - t for t in rolling_origins(t_min, horizon, initial, step)]
    except ValueError as exc:
        raise ValueError(f"y is too short: {exc}") from None

    def pack(arrays: list[_F64]) -> object:
        return arrays[0] if single else arrays

    metrics = ["mae", "rmse", "mase", "smape"]
    if q is not None:
        metrics.append("pinball")
    if cov_level is not None:
        metrics += ["coverage", "width"]
    result = BacktestResult(metrics=tuple(metrics))
    fitted = None
    for j, off in enumerate(offsets):
        cuts = [s.shape[0] - off for s in ys]
        fit_kw: dict[str, object] = {}
        if xs is not None:
            fit_kw["X"] = pack([x[:c].copy() for x, c in zip(xs, cuts)])
        if fs is not None:
            fit_kw["X_future"] = pack([f[:c].copy() for f, c in zip(fs, cuts)])
        pred_kw: dict[str, object] = {}
        if fs is not None:
            pred_kw["X_future"] = pack([f[c:c + horizon].copy() for f, c in zip(fs, cuts)])
        fit_time = 0.0
        if refit or fitted is None:
            t0 = time.perf_counter()
            fitted = clone(estimator)
            fitted.fit(pack([s[:c].copy() for s, c in zip(ys, cuts)]),  # type: ignore[attr-defined]
                       **fit_kw)
            fit_time = time.perf_counter() - t0
        if not refit:
            pred_kw["y"] = pack([s[:c].copy() for s, c in zip(ys, cuts)])
            if xs is not None:
                pred_kw["X"] = fit_kw["X"]
        t0 = time.perf_counter()
        point = _per_series("predict", fitted.predict(**pred_kw),  # type: ignore[attr-defined]
                            len(ys), single)
        intervals = quants = None
        if cov_level is not None:
            intervals = _per_series("predict_interval", fitted.predict_interval(  # type: ignore[attr-defined]
                coverage=cov_level, **pred_kw), len(ys), single)
        if q is not None:
            quants = _per_series("predict_quantiles", fitted.predict_quantiles(  # type: ignore[attr-defined]
                quantiles=q.copy(), **pred_kw), len(ys), single)
        predict_time = time.perf_counter() - t0
        for i, (s, c) in enumerate(zip(ys, cuts)):
            truth = s[c:c + horizon]
            tag = "estimator.predict" + ("" if single else f" (series {i})")
            p = _check_forecast(tag, point[i], truth.shape)
            row: dict[str, Any] = {"origin": j, "series": i, "cutoff": c,
                                   "mae": mae(truth, p), "rmse": rmse(truth, p),
                                   "mase": mase(truth, p, s[:c], season),
                                   "smape": smape(truth, p)}
            if quants is not None and q is not None:
                qa = _check_forecast(tag.replace("predict", "predict_quantiles"), quants[i],
                                     truth.shape + (q.size,))
                row["pinball"] = pinball_loss(truth, qa, q)
            if intervals is not None:
                lo, hi = _interval(tag.replace("predict", "predict_interval"), intervals[i],
                                   truth.shape)
                row["coverage"] = interval_coverage(truth, lo, hi)
                row["width"] = interval_width(lo, hi)
            row["fit_time"] = fit_time
            row["predict_time"] = predict_time
            result.rows.append(row)
            result.forecasts.append(p)
    return result


def _checked_scale(t: _F64, y_train: object, season: int, what: str) -> _F64:
    """mase's per-channel scale for y_true `t`, checked: one per channel, none zero."""
    scale = seasonal_naive_scale(y_train, season)
    k = 1 if t.ndim == 1 else t.shape[1]
    if scale.shape[0] != k:
        raise ValueError(f"y_train must have the {k} channel(s) of y_true {t.shape}, got "
                         f"{scale.shape[0]}")
    if (scale == 0).any():
        raise ValueError(f"y_train's seasonal naive error (season={season}) is 0 for "
                         f"channel(s) {np.flatnonzero(scale == 0).tolist()}: {what} "
                         "undefined for a series that repeats exactly")
    return scale


def _quantile_forecast(y_true: object, y_quantiles: object,
                       quantiles: object) -> tuple[_F64, _F64, _F64]:
    """(truth, quantile forecasts, levels), the forecasts of shape truth + (n_levels,)."""
    t = _real("y_true", y_true)
    q = _quantile_levels(quantiles)
    f = _real("y_quantiles", y_quantiles, ndims=(t.ndim + 1,))
    if f.shape != t.shape + (q.size,):
        raise ValueError(f"y_quantiles must have shape y_true.shape + (len(quantiles),) = "
                         f"{t.shape + (q.size,)}, got {f.shape}")
    return t, f, q
