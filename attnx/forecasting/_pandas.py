"""pandas in and out of the forecaster (pandas is imported only when given).

A series given as a pandas Series (one channel) or DataFrame (columns = channels)
keeps its time index: the fit records, per series, what the index is (a
DatetimeIndex or PeriodIndex with its frequency, or a regular integer index with its
step), its last value and the column names, as JSON-able values (they are saved with
the model). Forecasts then come back as pandas on the next `horizon` steps of that
index: a Series / DataFrame of point forecasts, a DataFrame of intervals (columns
"lower", "upper"; per channel for a DataFrame) or of quantiles (one column per level).
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = ["unwrap", "future_index", "point", "interval", "quantiles", "season"]

Meta = dict[str, Any]


def _pd() -> Any:
    import pandas as pd
    return pd


def is_pandas(obj: Any) -> bool:
    """A pandas Series or DataFrame (False without importing pandas when it is not
    imported yet: then obj cannot be one)."""
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(obj, (pd.Series, pd.DataFrame))


def unwrap(name: str, y: Any) -> tuple[Any, list[Meta] | None]:
    """(y with every pandas object replaced by its values, the index record of each
    series or None when y holds no pandas). A list must be all pandas or none."""
    if isinstance(y, (list, tuple)):
        flags = [is_pandas(s) for s in y]
        if not any(flags):
            return y, None
        if not all(flags):
            raise TypeError(f"{name} must be a list of pandas objects or of arrays, not a "
                            f"mix (item {flags.index(False)} is a "
                            f"{type(y[flags.index(False)]).__name__})")
        return [_values(s) for s in y], [_meta(f"{name}[{i}]", s) for i, s in enumerate(y)]
    if is_pandas(y):
        return _values(y), [_meta(name, y)]
    return y, None


def _values(s: Any) -> np.ndarray:
    try:
        a: np.ndarray = s.to_numpy(dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"the series must hold real numbers: {exc}") from exc
    return a


def _label(v: Any) -> Any:
    if isinstance(v, np.generic):
        v = v.item()
    return v if v is None or isinstance(v, (str, int, float)) else str(v)


def _meta(name: str, s: Any) -> Meta:
    pd = _pd()
    idx = s.index
    meta: Meta = {"frame": isinstance(s, pd.DataFrame),
                  "columns": [_label(c) for c in s.columns] if isinstance(s, pd.DataFrame)
                  else None,
                  "name": None if isinstance(s, pd.DataFrame) else _label(s.name)}
    if not (isinstance(idx, (pd.DatetimeIndex, pd.PeriodIndex))
            or pd.api.types.is_integer_dtype(idx.dtype)):
        raise TypeError(f"{name} must have a DatetimeIndex, a PeriodIndex or an integer "
                        f"index (RangeIndex), got a {type(idx).__name__} of {idx.dtype}")
    if len(idx) == 0:
        raise ValueError(f"{name} is empty")
    if not idx.is_unique:
        dup = idx[idx.duplicated()][0]
        raise ValueError(f"{name}'s index has duplicate time stamps (first: {dup})")
    if len(idx) > 1 and not idx.is_monotonic_increasing:
        raise ValueError(f"{name}'s index must be increasing (sort it first: "
                         f"{name}.sort_index())")
    if isinstance(idx, pd.DatetimeIndex):
        freq = idx.freqstr if idx.freq is not None else (
            pd.infer_freq(idx) if len(idx) >= 3 else None)
        if freq is None:
            raise ValueError(f"{name} has a DatetimeIndex without an inferable frequency "
                             f"(irregular steps, or fewer than 3 time stamps; it starts "
                             f"{[str(t) for t in idx[:3]]}): give it a regular index, "
                             f"e.g. {name}.asfreq('D')")
        meta.update(kind="datetime", freq=freq, last=idx[-1].isoformat(),
                    tz=None if idx.tz is None else str(idx.tz))
    elif isinstance(idx, pd.PeriodIndex):
        steps = np.diff(idx.asi8)
        if steps.size and not np.all(steps == 1):
            raise ValueError(f"{name}'s PeriodIndex has gaps (freq {idx.freqstr}): "
                             f"forecasts need consecutive periods")
        meta.update(kind="period", freq=idx.freqstr, last=int(idx[-1].ordinal))
    else:
        vals = idx.to_numpy(dtype=np.int64)
        steps = np.unique(np.diff(vals))
        if steps.size > 1:
            raise ValueError(f"{name}'s integer index must have a constant step, got steps "
                             f"{steps[:5].tolist()}")
        meta.update(kind="range", step=int(steps[0]) if steps.size else 1,
                    last=int(vals[-1]))
    return meta


#: the calendar cycle of a time step: steps per year for yearly and shorter-than-yearly
#: calendar steps, per week for days, per day for clock steps (hours, minutes, ...)
_CYCLES = (("YearBegin", 1), ("YearEnd", 1), ("BYearBegin", 1), ("BYearEnd", 1),
           ("QuarterBegin", 4), ("QuarterEnd", 4), ("BQuarterBegin", 4),
           ("BQuarterEnd", 4), ("SemiMonthBegin", 24), ("SemiMonthEnd", 24),
           ("MonthBegin", 12), ("MonthEnd", 12), ("BusinessMonthBegin", 12),
           ("BusinessMonthEnd", 12), ("Week", 52), ("BusinessDay", 5), ("Day", 7))
_DAY_NS = 86_400_000_000_000


def season(meta: Meta) -> int | None:
    """The seasonal period the frequency of a datetime / period index implies (12
    for monthly, 4 quarterly, 1 yearly, 52 weekly, 7 daily, 5 business-daily, the
    steps of a day for hours, minutes and seconds; a multiple step divides it, e.g.
    48 for 30 minutes), or None for an integer index or a frequency without one."""
    if meta.get("kind") not in ("datetime", "period"):
        return None
    pd = _pd()
    import warnings
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            off = pd.tseries.frequencies.to_offset(meta["freq"])
    except (TypeError, ValueError):
        return None
    if isinstance(off, pd.offsets.Tick) and not isinstance(off, pd.offsets.Day):
        step = int(off.nanos)
        per_day = _DAY_NS // step if step > 0 and _DAY_NS % step == 0 else 0
        return per_day if per_day > 1 else None
    for name, cycle in _CYCLES:
        cls = getattr(pd.offsets, name, None)
        if cls is not None and isinstance(off, cls):
            n = abs(int(off.n)) or 1
            return cycle // n if cycle % n == 0 else None
    return None


def future_index(meta: Meta, horizon: int) -> Any:
    """The `horizon` time stamps after the end of the series `meta` describes."""
    pd = _pd()
    if meta["kind"] == "datetime":
        last = pd.Timestamp(meta["last"])
        if meta["tz"] is not None:
            last = last.tz_convert(meta["tz"])
        return pd.date_range(start=last, periods=horizon + 1, freq=meta["freq"])[1:]
    if meta["kind"] == "period":
        last = pd.Period(ordinal=meta["last"], freq=meta["freq"])
        return pd.period_range(start=last, periods=horizon + 1, freq=meta["freq"])[1:]
    step, last = meta["step"], meta["last"]
    return pd.RangeIndex(last + step, last + step * (horizon + 1), step)


def point(meta: Meta, a: np.ndarray) -> Any:
    """(horizon,) or (horizon, k) forecasts as a Series / DataFrame on the future."""
    pd = _pd()
    index = future_index(meta, a.shape[0])
    if meta["frame"]:
        return pd.DataFrame(a.reshape(a.shape[0], -1), index=index, columns=meta["columns"])
    return pd.Series(a.reshape(-1), index=index, name=meta["name"])


def interval(meta: Meta, lower: np.ndarray, upper: np.ndarray) -> Any:
    """Intervals as a DataFrame: columns "lower", "upper" for a Series, (column,
    "lower" / "upper") for a DataFrame."""
    pd = _pd()
    index = future_index(meta, lower.shape[0])
    if not meta["frame"]:
        return pd.DataFrame({"lower": lower.reshape(-1), "upper": upper.reshape(-1)},
                            index=index)
    lo, hi = lower.reshape(len(index), -1), upper.reshape(len(index), -1)
    cols = pd.MultiIndex.from_tuples([(c, side) for c in meta["columns"]
                                      for side in ("lower", "upper")])
    return pd.DataFrame(np.stack([lo, hi], axis=2).reshape(len(index), -1), index=index,
                        columns=cols)


def quantiles(meta: Meta, q: np.ndarray, levels: tuple[float, ...]) -> Any:
    """Quantile forecasts (horizon, [k,] n_levels) as a DataFrame: one column per level
    for a Series, (column, level) for a DataFrame."""
    pd = _pd()
    index = future_index(meta, q.shape[0])
    if not meta["frame"]:
        return pd.DataFrame(q.reshape(len(index), -1), index=index,
                            columns=pd.Index(list(levels), name="quantile"))
    cols = pd.MultiIndex.from_tuples([(c, lv) for c in meta["columns"] for lv in levels],
                                     names=[None, "quantile"])
    return pd.DataFrame(q.reshape(len(index), -1), index=index, columns=cols)
