"""The steps a panel forecast runs on each part of the panel (attnx.forecasting.dask
sends them to the workers; each reads only its part).

A part is a long-format pandas frame (a partition, or a chunk of the user's frame)
or a list of (id, series) pairs. Every step reads the part's series exactly as
TransformerForecaster.fit reads a list of them (attnx.forecasting._pandas.unwrap,
_windows.series_list, _gaps.observed_series), so the numbers are the fit's:

1. ``stats``: the part's PanelStats (attnx.forecasting._panel_season);
2. ``diffs``: the AcfSums of its series differenced at the panel's season;
3. ``fit``: every series chosen on its own with the panel's periods
   (attnx.forecasting._forecaster_auto.fit_series, one thread), kept on the worker;
4. ``counts`` and ``histogram`` / ``values_in``: what the exact selection of the
   pooled conformal scores needs (the series with fewer than MIN_SCORES scores
   borrow every series' scores, as _selection.borrow does in one process);
5. ``frame``: the part's forecasts as long-format rows.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..runtime._threads import fixed_threads
from . import _gaps, _long_format, _pandas, _season
from . import _selection as sel
from . import _windows as win
from ._forecaster_auto import fit_series
from ._panel_season import PanelStats

if TYPE_CHECKING:
    import numpy.typing as npt

    F64 = npt.NDArray[np.float64]
    U64 = npt.NDArray[np.uint64]

__all__ = ["Job", "PartFit", "stats", "diffs", "fit", "counts", "histogram", "values_in",
           "frame", "coverages", "ordered", "unordered"]


class Job(NamedTuple):
    """What every step needs to know (small: it travels with every task)."""

    horizon: int
    names: list[str] | None          # the candidates (None: all of them)
    season: int | None               # the parameter season
    id_col: str
    time_col: str
    target: str
    freq: Any
    coverage: tuple[float, ...]
    quantiles: tuple[float, ...]
    single: bool                      # one coverage given as a number: "lower", "upper"
    dtypes: dict[str, Any] | None     # of the id and time columns of the output


class Read(NamedTuple):
    ids: list[Any]
    metas: list[dict[str, Any]] | None
    series: list[F64]       # leading NaNs dropped
    ends: list[Any]         # per series: its future time stamps


def _read(part: Any, job: Job) -> Read:
    """The part's series, checked and trimmed as TransformerForecaster.fit does."""
    h = job.horizon
    need = h + 2
    if isinstance(part, list):
        items = part
    else:
        if job.id_col not in part.columns and part.index.name == job.id_col:
            part = part.reset_index()
        items = _long_format.series_of_frame(part, job.id_col, job.time_col, job.target,
                                             job.freq, need)
    ids, metas, series, ends = [], [], [], []
    for key, s in items:
        name = f"series {key!r}"
        index = [s.index] if _pandas.is_pandas(s) else None
        values, meta = _pandas.unwrap(name, s)
        raw, _ = win.series_list(name, values, min_len=need, missing=True)
        # numpy's reductions round differently on float64 data not aligned to 8 bytes,
        # which a pickled buffer on a worker can be: aligned copies give the fit's sums
        raw = [np.require(raw[0], np.float64, ["C", "A"])]
        if raw[0].shape[1] != 1:
            raise ValueError(f"{name} has {raw[0].shape[1]} columns: a panel forecast "
                             f"takes univariate series")
        trimmed, _ = _gaps.observed_series(name, raw, False, meta, index, need)
        ids.append(key)
        series.append(trimmed[0])
        if meta is not None:
            metas.append(meta[0])
            ends.append(_pandas.future_index(meta[0], h))
        else:
            ends.append(np.arange(raw[0].shape[0], raw[0].shape[0] + h, dtype=np.int64))
    return Read(ids, metas if metas else None, series, ends)


def stats(part: Any, job: Job) -> tuple[PanelStats, int, _season.AcfSums | None]:
    """Step 1: the PanelStats of the part's series (filled as the fit fills them), and,
    when the season is known in advance or likely (the parameter season, else the one
    its dates' frequency implies), that season and the AcfSums of step 2 at it (saving
    a pass over the panel when it is the panel's season; 1 and None otherwise)."""
    r = _read(part, job)
    filled = [_gaps.fill_2d(s, 1) for s in r.series]
    out = PanelStats.of(filled, r.metas)
    guess = job.season
    if guess is None and out.freq_seasons is not None and len(out.freq_seasons) == 1:
        guess = next(iter(out.freq_seasons))
    if guess is None or guess < 2:
        return out, 1, None
    return out, int(guess), _season.differenced(filled, int(guess))


def diffs(part: Any, job: Job, season_: int) -> _season.AcfSums:
    """Step 2: the AcfSums of the part's series differenced at the season."""
    r = _read(part, job)
    return _season.differenced([_gaps.fill_2d(s, 1) for s in r.series], season_)


class PartFit(NamedTuple):
    """A part's fitted series: ids, future time stamps, forecasts and error scales
    (h,), conformal scores (origins, h) and the chosen candidates' names."""

    ids: list[Any]
    ends: list[Any]
    points: list[F64]
    scales: list[F64]
    scores: list[F64]
    methods: list[str]


def fit(part: Any, job: Job, periods: list[int]) -> PartFit:
    """Step 3: every series of the part chosen on its own with the panel's periods."""
    from threadpoolctl import threadpool_limits

    r = _read(part, job)
    # one thread, as TransformerForecaster's worker processes and its small calls run
    with fixed_threads(1), threadpool_limits(limits=1):
        choices, points, scales, scores = fit_series(r.series, 1, job.horizon, periods,
                                                     job.names, None)
    return PartFit(r.ids, r.ends, [p[:, 0] for p in points], [s[:, 0] for s in scales],
                   scores, [c["name"] for c in choices])


def _stacked(scores: list[F64], h: int) -> bool:
    return all(s.ndim == 2 and s.shape[1] == h for s in scores)


def counts(part: PartFit, h: int) -> tuple[int, npt.NDArray[np.int64], bool, bool]:
    """Step 4: the part's pooled scores (all steps', and each step's when stacked),
    whether its series stack (every score array (origins, h)), and whether one
    borrows (fewer than MIN_SCORES scores)."""
    n_all = sum(sel.count(s) for s in part.scores)
    stacked = _stacked(part.scores, h)
    steps = np.zeros(h, dtype=np.int64)
    if stacked:
        for s in part.scores:
            steps += np.sum(~np.isnan(s), axis=0)
    borrows = any(sel.count(s) < sel.MIN_SCORES for s in part.scores)
    return int(n_all), steps, stacked, borrows


def ordered(x: F64) -> U64:
    """Float64 as uint64 in the same order (negative floats below positive ones)."""
    bits = np.ascontiguousarray(x, dtype=np.float64).view(np.uint64)
    sign = np.uint64(1 << 63)
    out: U64 = np.where(bits & sign, ~bits, bits | sign)
    return out


def unordered(u: int) -> float:
    """The float64 that `ordered` maps to u."""
    sign = 1 << 63
    bits = (u ^ sign) if u & sign else (~u & (2 ** 64 - 1))
    return float(np.array([bits], dtype=np.uint64).view(np.float64)[0])


def _pooled(part: PartFit, col: int | None) -> U64:
    """The part's scores of one step (None: of all steps), as ordered keys."""
    if col is None:
        parts = [s.ravel() for s in part.scores]
    else:
        parts = [s[:, col] for s in part.scores]
    a = np.concatenate(parts) if parts else np.zeros(0)
    return ordered(a[~np.isnan(a)])


def histogram(part: PartFit, targets: list[tuple[int | None, int, int, int]],
              bins: int) -> npt.NDArray[np.int64]:
    """Per target (step, lo, hi, width): how many of the part's keys lie below lo, then
    how many fall in each of `bins` bins of `width` keys from lo to hi."""
    out = np.zeros((len(targets), bins + 1), dtype=np.int64)
    for i, (col, lo, hi, width) in enumerate(targets):
        keys = _pooled(part, col)
        out[i, 0] = int(np.sum(keys < np.uint64(lo)))
        inside = keys[(keys >= np.uint64(lo)) & (keys <= np.uint64(hi))]
        which = ((inside - np.uint64(lo)) // np.uint64(width)).astype(np.int64)
        out[i, 1:] = np.bincount(which, minlength=bins)[:bins]
    return out


def values_in(part: PartFit, targets: list[tuple[int | None, int, int]]) -> list[U64]:
    """Per target (step, lo, hi): the part's keys from lo to hi."""
    out = []
    for col, lo, hi in targets:
        keys = _pooled(part, col)
        out.append(keys[(keys >= np.uint64(lo)) & (keys <= np.uint64(hi))])
    return out


def coverages(job: Job) -> list[float]:
    """Every interval coverage the output needs: the coverages asked for and those of
    the quantiles (level q is an end of the central |2q - 1| interval)."""
    out = list(job.coverage)
    out += [abs(2.0 * lv - 1.0) for lv in job.quantiles if lv != 0.5]
    return list(dict.fromkeys(out))


def frame(part: PartFit, job: Job, pooled: dict[float, F64] | None) -> Any:
    """Step 5: the part's forecasts in long format: id, time, "forecast", the interval
    ends of each coverage and the quantiles (those of TransformerForecaster's predict,
    predict_interval and predict_quantiles). `pooled`: per coverage, the conformal
    quantile of each step over every series' scores, for the series that borrow."""
    half: dict[float, list[F64]] = {c: [] for c in coverages(job)}
    for pt, sc, s in zip(part.points, part.scales, part.scores):
        own = sel.count(s) >= sel.MIN_SCORES
        for c in half:
            if own:
                half[c].append(sel.half_width(sc, s, c))
            else:
                if pooled is None:
                    raise ValueError("a series borrows the pooled scores, but none were "
                                     "given")
                half[c].append(pooled[c] * sc)
    cols: dict[str, list[F64]] = {"forecast": [p.copy() for p in part.points]}
    for c in job.coverage:
        lo, hi = ("lower", "upper") if job.single else (f"lower_{c:g}", f"upper_{c:g}")
        cols[lo] = [p - w for p, w in zip(part.points, half[c])]
        cols[hi] = [p + w for p, w in zip(part.points, half[c])]
    if job.quantiles:
        levels = []
        for lv in job.quantiles:
            if lv == 0.5:
                levels.append(part.points)
            else:
                c = abs(2.0 * lv - 1.0)
                sign = -1.0 if lv < 0.5 else 1.0
                levels.append([p - w if sign < 0 else p + w
                               for p, w in zip(part.points, half[c])])
        stacked = [np.sort(np.stack([lv[i] for lv in levels], axis=-1), axis=-1)
                   for i in range(len(part.points))]
        for m, lv in enumerate(job.quantiles):
            cols[f"q_{lv:g}"] = [a[:, m] for a in stacked]
    return _long_format.rows(part.ids, part.ends, cols, job.id_col, job.time_col,
                             job.dtypes)
