"""Panels in long format (one row per series and time step, as statsforecast reads
them): a frame's rows as one pandas Series per id, and forecasts as rows again.

The columns are named by the caller (default "unique_id", "ds", "y"). Per id, the
rows are sorted by time; the time column holds dates or integer steps:

- dates: the series' frequency is ``freq`` when given (a pandas offset alias such as
  "MS" or "D"), else inferred from its own dates; with ``freq``, a date missing from
  a series' calendar is a gap (NaN, attnx.forecasting._gaps fills it), a date off it
  is an error. Without ``freq``, a series whose dates have no regular step is an
  error that names it, its first irregular dates and the fix.
- integer steps: the step is ``freq`` when it is an int, else the series' constant
  step; with ``freq``, missing steps are gaps.

A repeated time stamp in one series, a target that is not a number, infinity, and
a series with fewer observed values than the forecaster needs are errors naming the
series id (and its dates). pandas is imported only when a frame is given.
"""
from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

    F64 = npt.NDArray[np.float64]

__all__ = ["check_columns", "series_of_frame", "rows"]


def check_columns(columns: Any, id_col: str, time_col: str, target: str) -> None:
    """ValueError naming the missing columns (and the ones there are)."""
    have = [str(c) for c in columns]
    missing = [(arg, c) for arg, c in (("id_col", id_col), ("time_col", time_col),
                                        ("target", target)) if c not in have]
    if missing:
        what = ", ".join(f"{c!r} ({arg})" for arg, c in missing)
        raise ValueError(f"the frame has no column {what}; its columns are "
                         f"{', '.join(map(repr, have))}: name them with id_col, time_col "
                         f"and target")


def _when(t: Any) -> str:
    text = str(t)
    return text[:-9] if text.endswith(" 00:00:00") else text


def _dates_index(key: Any, t: Any, freq: Any, seen: list[Any]) -> Any:
    """The regular DatetimeIndex of one series' sorted dates t, and the positions of
    its rows in it (None: every date present). `seen`: frequencies inferred for the
    series before, tried first (inferring one costs a millisecond)."""
    import pandas as pd

    if freq is None:
        for f in seen:
            grid = pd.date_range(t[0], periods=len(t), freq=f)
            if np.array_equal(grid.asi8, t.asi8):
                return grid, None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found = pd.infer_freq(t) if len(t) >= 3 else None
        if found is None:
            i = _first_irregular(np.asarray(t.asi8))
            where = (f"its dates {_when(t[i])}, {_when(t[i + 1])}, {_when(t[i + 2])} do not "
                     f"advance by one step" if i is not None else "it has fewer than 3 dates")
            raise ValueError(f"series {key!r} has no regular frequency ({where}): pass freq "
                             f"(e.g. freq='MS' for month starts) to place every series on "
                             f"that calendar, its missing dates as gaps")
        seen.insert(0, found)
        return pd.DatetimeIndex(t, freq=found), None
    try:
        grid = pd.date_range(t[0], t[-1], freq=freq)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"freq={freq!r} is not a pandas frequency: {exc}") from None
    pos = grid.get_indexer(t)
    if (pos < 0).any():
        j = int(np.argmax(pos < 0))
        raise ValueError(f"series {key!r} has the date {_when(t[j])}, off the calendar of "
                         f"freq={freq!r} that starts at {_when(t[0])}: fix the date or freq")
    return grid, pos


def _first_irregular(v: npt.NDArray[np.int64]) -> int | None:
    d = np.diff(v)
    if d.size < 2:
        return None
    bad = np.flatnonzero(d[1:] != d[:-1])
    return int(bad[0]) if bad.size else None


def _steps_index(key: Any, t: npt.NDArray[np.int64], freq: Any) -> Any:
    """The regular integer index of one series' sorted steps t, and the positions of its
    rows in it (None: every step present)."""
    import pandas as pd

    if freq is None:
        d = np.unique(np.diff(t))
        if d.size > 1:
            raise ValueError(f"series {key!r} has integer steps of {d[:3].tolist()} in its "
                             f"time column: pass freq (an int: the step) to read the missing "
                             f"steps as gaps")
        step = int(d[0]) if d.size else 1
        return pd.RangeIndex(int(t[0]), int(t[-1]) + step, step), None
    if isinstance(freq, bool) or not isinstance(freq, (int, np.integer)) or freq < 1:
        raise ValueError(f"freq must be a positive int (the step) for an integer time "
                         f"column, got {freq!r}")
    off = (t - t[0]) % int(freq)
    if off.any():
        j = int(np.argmax(off != 0))
        raise ValueError(f"series {key!r} has the step {int(t[j])}, off its steps of "
                         f"{int(freq)} from {int(t[0])}")
    grid = pd.RangeIndex(int(t[0]), int(t[-1]) + int(freq), int(freq))
    return grid, ((t - t[0]) // int(freq)).astype(np.intp)


def series_of_frame(frame: Any, id_col: str, time_col: str, target: str, freq: Any,
                    need: int) -> list[tuple[Any, Any]]:
    """(id, pandas Series on its regular time index) per id of a long-format frame,
    sorted by id; each series with at least `need` observed values."""
    import pandas as pd

    check_columns(frame.columns, id_col, time_col, target)
    if len(frame) == 0:
        return []
    ids = frame[id_col]
    if ids.isna().any():
        raise ValueError(f"the id column {id_col!r} has empty values: every row needs its "
                         f"series id")
    times = frame[time_col]
    dates = pd.api.types.is_datetime64_any_dtype(times.dtype)
    if not dates and not pd.api.types.is_integer_dtype(times.dtype):
        raise TypeError(f"the time column {time_col!r} must hold dates (datetime64) or "
                        f"integer steps, got {times.dtype}: convert it, e.g. with "
                        f"pd.to_datetime")
    if times.isna().any():
        raise ValueError(f"the time column {time_col!r} has empty values")
    try:
        values = pd.to_numeric(frame[target], errors="raise").to_numpy(dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"the target column {target!r} must hold numbers: {exc}") from None
    codes, keys = pd.factorize(ids, sort=True)
    stamps = times.to_numpy()
    order = np.lexsort((stamps.view(np.int64) if dates else stamps.astype(np.int64), codes))
    codes, stamps, values = codes[order], stamps[order], values[order]
    cuts = np.flatnonzero(np.diff(codes)) + 1
    seen: list[Any] = []
    out = []
    for c, lo, hi in zip(codes[np.r_[0, cuts]], np.r_[0, cuts], np.r_[cuts, len(codes)]):
        key, v = keys[c], values[lo:hi]
        t = pd.DatetimeIndex(stamps[lo:hi]) if dates else stamps[lo:hi]
        dup = t[1:] == t[:-1]
        if dup.any():
            raise ValueError(f"series {key!r} has two rows for {_when(t[int(np.argmax(dup))])}: "
                             f"keep one of them")
        if np.isinf(v).any():
            raise ValueError(f"series {key!r} has the value {v[np.isinf(v)][0]} on "
                             f"{_when(t[int(np.argmax(np.isinf(v)))])}: only finite values and "
                             f"NaN (missing) are accepted")
        ok = ~np.isnan(v)
        n_ok = int(ok.sum())
        if n_ok < need:
            span = (f"from {_when(t[ok][0])} to {_when(t[ok][-1])}" if n_ok
                    else f"all NaN, from {_when(t[0])} to {_when(t[-1])}")
            raise ValueError(f"series {key!r} has {n_ok} observed value(s) ({span}); at "
                             f"least horizon + 2 = {need} are needed: drop it or forecast a "
                             f"shorter horizon")
        index, pos = (_dates_index(key, t, freq, seen) if dates
                      else _steps_index(key, np.asarray(t, dtype=np.int64), freq))
        if pos is not None:
            full = np.full(len(index), np.nan)
            full[pos] = v
            v = full
        out.append((_plain(key), pd.Series(v, index=index, name=target)))
    return out


def _plain(key: Any) -> Any:
    return key.item() if isinstance(key, np.generic) else key


def rows(ids: list[Any], index: list[Any], columns: dict[str, list[F64]], id_col: str,
         time_col: str, dtypes: dict[str, Any] | None = None) -> Any:
    """A long-format frame of forecasts: per series its id, its future time stamps
    `index[i]` (a pandas Index or integer steps) and each column's values
    columns[name][i] (horizon,); the id and time columns cast to `dtypes` when given
    (so that every partition of a Dask frame has the same ones)."""
    import pandas as pd

    h = [len(ix) for ix in index]
    key = pd.Series(np.repeat(np.asarray(ids + [None], dtype=object)[:-1], h))
    if not index:
        stamps = pd.Series([], dtype=np.int64)
    elif isinstance(index[0], pd.Index):
        stamps = pd.Series(index[0].append(list(index[1:])) if len(index) > 1 else index[0])
    else:
        stamps = pd.Series(np.concatenate([np.asarray(ix, dtype=np.int64) for ix in index]))
    if dtypes is None or id_col not in dtypes:
        key = key.infer_objects()
    data: dict[str, Any] = {id_col: key, time_col: stamps}
    for name, vals in columns.items():
        data[name] = pd.Series(np.concatenate(vals) if vals else np.zeros(0))
    frame = pd.DataFrame(data)
    if dtypes:
        frame = frame.astype(dtypes)
    return frame
