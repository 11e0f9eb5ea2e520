"""Missing values (NaN) in the forecaster's series: where they are, what fills them.

The rules (the user guide's "Missing values" section says the same):

- Leading NaNs are dropped: a series starts at its first observed value (a pandas
  series keeps its index: only its end places the forecast).
- Interior NaNs are filled for the methods that need complete series (every
  classical candidate and the network's inputs): linearly between the neighbouring
  observed values, or, with a seasonal period p whose observed values cover two
  cycles, linearly on the series with its seasonal indices removed (each phase's
  mean deviation from a centred moving average, over observed values only) and the
  indices added back, so that a gap across a peak keeps the peak.
- Trailing NaNs (a series whose last values are missing) are forecast, not filled:
  the forecast origin stays the end of the given series, so the classical path
  forecasts g + horizon steps from the last observed value and keeps the last
  horizon (its conformal scores taken at those lead times); the network path fills
  them with the seasonal naive continuation of the observed values.
- Filled values are never scored as if observed: the rolling origins' errors (the
  candidates' choice and their conformal scores) and the network's calibration
  scores leave them out.
- Infinity is refused, and so is a series with fewer observed values than the
  forecaster needs (an all-NaN one included), naming the series and its positions
  (its dates for pandas input).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

    F64 = npt.NDArray[np.float64]
    Bool = npt.NDArray[np.bool_]

__all__ = ["has_gaps", "trim", "fill", "fill_2d", "linear", "describe", "check_observed"]


def has_gaps(a: F64) -> bool:
    return bool(np.isnan(a).any())


def linear(y: F64) -> F64:
    """1-D y with its NaNs filled linearly between observed values (the nearest
    observed value before the first / after the last)."""
    ok = ~np.isnan(y)
    if ok.all() or not ok.any():
        return y.copy()
    t = np.arange(y.shape[0], dtype=np.float64)
    out: F64 = np.interp(t, t[ok], y[ok])
    return out


def _centred_mean(z: F64, period: int) -> F64:
    """The centred moving average of z over one period (2 x period for an even
    period), NaN where the window does not fit."""
    n = z.shape[0]
    w = np.ones(period) / period if period % 2 else np.r_[0.5, np.ones(period - 1), 0.5] / period
    out = np.full(n, np.nan)
    half = (w.shape[0] - 1) // 2
    if n >= w.shape[0]:
        out[half:n - half] = np.convolve(z, w, mode="valid")
    return out


def _indices(y: F64, period: int) -> F64 | None:
    """Each phase's mean deviation from the centred moving average of the linearly
    filled y, over observed values, shifted to mean 0 (None: a phase never seen)."""
    trend = _centred_mean(linear(y), period)
    dev = y - trend
    phase = np.arange(y.shape[0]) % period
    idx = np.empty(period)
    for j in range(period):
        d = dev[phase == j]
        d = d[~np.isnan(d)]
        if d.size == 0:
            return None
        idx[j] = d.mean()
    out: F64 = idx - idx.mean()
    return out


def fill(y: F64, period: int = 1) -> F64:
    """1-D y (no leading or trailing NaN needed) with its NaNs filled: linearly, or
    on the seasonally adjusted series when `period` > 1 and the observed values
    cover two of its cycles (module docstring)."""
    if not has_gaps(y):
        return y
    ok = ~np.isnan(y)
    if period > 1 and y.shape[0] >= 2 * period and int(ok.sum()) >= 2 * period:
        idx = _indices(y, period)
        if idx is not None:
            s = idx[np.arange(y.shape[0]) % period]
            out: F64 = linear(y - s) + s
            return out
    return linear(y)


def continue_seasonal(y: F64, n_tail: int, period: int) -> F64:
    """y (the observed part) extended by n_tail values: each the value one period
    before (the last value for period 1 or a series shorter than the period)."""
    p = period if 1 < period <= y.shape[0] else 1
    out = np.concatenate([y, np.empty(n_tail)])
    for t in range(y.shape[0], out.shape[0]):
        out[t] = out[t - p]
    return out


def fill_2d(a: F64, period: int) -> F64:
    """(T, k) series with every NaN filled channel by channel: leading ones with the
    channel's first observed value, interior ones by `fill`, trailing ones by the
    seasonal naive continuation. Every channel needs an observed value."""
    if not has_gaps(a):
        return a
    out = np.empty_like(a)
    for j in range(a.shape[1]):
        col = a[:, j]
        obs = np.flatnonzero(~np.isnan(col))
        first, last = int(obs[0]), int(obs[-1])
        mid = fill(col[first:last + 1], period)
        out[:first, j] = mid[0]
        out[first:last + 1, j] = mid
        out[last + 1:, j] = continue_seasonal(mid, a.shape[0] - last - 1, period)[mid.shape[0]:]
    return out


def trim(a: F64) -> int:
    """How many leading rows of (T, k) a are missing in every channel."""
    rows = np.isnan(a).all(axis=1)
    return int(np.argmin(rows)) if not rows.all() else a.shape[0]


def describe(where: str, meta: dict[str, Any] | None, index: Any) -> str:
    """The series' name for a message: its position, and its pandas name or columns."""
    label = None if meta is None else (meta.get("columns") if meta.get("frame")
                                       else meta.get("name"))
    return where if label is None else f"{where} ({label!r})"


def _stamps(index: Any, positions: npt.NDArray[np.intp], most: int = 5) -> str:
    """Up to `most` positions as dates (a pandas index) or time steps."""
    shown = positions[:most]
    if index is not None:
        items = [str(index[int(i)]).removesuffix(" 00:00:00") for i in shown]
        what = "dates"
    else:
        items = [str(int(i)) for i in shown]
        what = "time steps"
    more = f" and {positions.shape[0] - most} more" if positions.shape[0] > most else ""
    return f"{what} {', '.join(items)}{more}"


def check_observed(name: str, a: F64, need: int, index: Any = None,
                   what: str = "horizon + 2") -> None:
    """ValueError unless every channel of (T, k) a has at least `need` observed
    values; infinity is a ValueError too. `name` names the series, `index` its pandas
    index (for dates), `what` says where `need` comes from."""
    inf = np.isinf(a).any(axis=1)
    if inf.any():
        raise ValueError(f"{name} contains infinity at "
                         f"{_stamps(index, np.flatnonzero(inf))}: only finite values and NaN "
                         f"(missing) are accepted")
    for j in range(a.shape[1]):
        ok = ~np.isnan(a[:, j])
        col = "" if a.shape[1] == 1 else f" column {j}"
        n_ok = int(ok.sum())
        if n_ok == 0:
            span = _stamps(index, np.array([0, a.shape[0] - 1]) if a.shape[0] > 1
                           else np.array([0]))
            raise ValueError(f"{name}{col} has no observed value: all its {a.shape[0]} "
                             f"values are NaN ({span.replace(', ', ' to ', 1)})")
        if n_ok < need:
            raise ValueError(f"{name}{col} has {n_ok} observed value(s) (at "
                             f"{_stamps(index, np.flatnonzero(ok))}); at least {what} = "
                             f"{need} are needed")


def indexes(y: Any) -> list[Any] | None:
    """The pandas index of each series in y (None when y holds no pandas)."""
    from . import _pandas
    items = list(y) if isinstance(y, (list, tuple)) else [y]
    if not any(_pandas.is_pandas(s) for s in items):
        return None
    return [s.index if _pandas.is_pandas(s) else None for s in items]


def observed_series(name: str, series: list[F64], was_list: bool, metas: Any,
                    index: list[Any] | None, need: int, what: str = "horizon + 2"
                    ) -> tuple[list[F64], list[int]]:
    """The series with their leading all-NaN rows dropped, and how many each lost;
    a ValueError (check_observed) for a series with fewer than `need` observed values
    in a channel. Gap-free series come back as they are."""
    out, leads = [], []
    for i, s in enumerate(series):
        if not has_gaps(s):
            out.append(s)
            leads.append(0)
            continue
        where = describe(f"{name}[{i}]" if was_list else name,
                         None if not metas else metas[i], None if not index else index[i])
        check_observed(where, s, need, None if not index else index[i], what)
        lead = trim(s)
        out.append(s[lead:])
        leads.append(lead)
    return out, leads


def tail(y: F64) -> tuple[int, int]:
    """(first, last) observed positions of 1-D y."""
    obs = np.flatnonzero(~np.isnan(y))
    return int(obs[0]), int(obs[-1])


def covariates(name: str, items: list[F64] | None, leads: list[int]) -> list[F64] | None:
    """Covariates aligned with the given series: the rows of the series' dropped
    leading NaNs dropped too, NaNs filled linearly per column (ValueError for a
    column without an observed value)."""
    if items is None:
        return None
    out = []
    for i, (a, lead) in enumerate(zip(items, leads)):
        a = a[lead:]
        if has_gaps(a):
            empty = np.flatnonzero(np.isnan(a).all(axis=0))
            if empty.size:
                raise ValueError(f"{name}[{i}] column {int(empty[0])} has no observed value "
                                 f"(all NaN): give it values or leave the column out")
            a = fill_2d(a, 1)
        out.append(a)
    return out
