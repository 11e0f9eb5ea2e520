"""Many series on a Dask cluster: ``forecast(data, horizon, client=...)``.

The panel (a long-format Dask or pandas DataFrame, or a list of series) is spread
over the cluster's workers by partition, and the forecasts come back in long format
(a Dask DataFrame for a Dask DataFrame, else pandas): the same numbers, bit for bit,
as ``TransformerForecaster(horizon, **params).fit(series)`` on the whole panel in one
process, followed by predict, predict_interval and predict_quantiles (the classical
path, method=None or "auto" or one candidate's name; the network path trains one
global model, which this module does not spread: it refuses method="network" and
intervals="quantile").

What is per series runs on the workers; what the fit takes from the whole panel is
computed as a map-reduce whose parts combine exactly (integers, sets and the exact
sums of attnx.forecasting._exact_sum), so that it does not depend on how the panel is
split:

1. the season and the candidates' periods: each partition's PanelStats
   (attnx.forecasting._panel_season), merged on the client, then, when there is a
   season, the statistics of the series differenced at it (a second pass);
2. the choice of every series (attnx.forecasting._panel_parts.fit), whose results
   stay on the workers;
3. the conformal scores that series with fewer than MIN_SCORES scores borrow (every
   series' scores, attnx.forecasting._selection.borrow): their quantiles are order
   statistics, selected exactly by a few rounds of histograms of the workers' scores
   (each round narrows the range holding the wanted rank 512 times; the last fetches
   the few scores left), only when some series borrows;
4. the forecast rows, per partition.

Memory: a worker reads one partition at a time (a Dask DataFrame's partitions are
computed again for each pass instead of kept, unless the frame had to be shuffled so
that each series lies in one partition: then the shuffled frame is persisted, spread
over the workers); it keeps each partition's fitted results (about
(N_ORIGINS + 2) x horizon values per series) until the rows are made. The client
holds the merged statistics (about a third of the longest series' length, per lag)
and, for pandas or list input, the panel it was given. A Dask DataFrame needs no
shuffle when it is indexed by the id column with known divisions (``set_index``).

Each worker chooses its series with one thread (BLAS and attnx's pools at one), as
TransformerForecaster's own worker processes (n_jobs) do; start the workers with one
thread each (``LocalCluster(threads_per_worker=1)``). Needs the ``dask`` extra:
``pip install "attnx[dask]"``.
"""
from __future__ import annotations

import contextlib
import math
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np

from . import _long_format, _pandas, _panel_parts, _season
from . import _selection as sel
from . import _windows as win
from ._forecaster_auto import METHODS
from ._panel_season import classical_periods, season_of

if TYPE_CHECKING:
    import numpy.typing as npt

    F64 = npt.NDArray[np.float64]

__all__ = ["forecast", "connect", "forecast_series", "PARTS_PER_THREAD"]

#: in-memory input is cut into this many parts per worker thread (smaller parts even
#: out series of unequal cost and give the progress bar its steps)
PARTS_PER_THREAD = 8
#: the exact selection's histogram bins per round, and how many keys left in a
#: bracket are fetched instead of binned again
BINS = 512
FETCH = 4096


def _modules() -> tuple[Any, Any, Any]:
    try:
        import dask
        import dask.dataframe as dd
        import distributed
    except ImportError as exc:
        raise ImportError(f"attnx.forecasting.dask needs Dask's distributed scheduler "
                          f"({exc.name} is not installed): pip install \"attnx[dask]\""
                          ) from None
    return dask, dd, distributed


def _job(horizon: int, coverage: Any, quantiles: Any, id_col: str, time_col: str,
         target: str, freq: Any, params: dict[str, Any]) -> _panel_parts.Job:
    """The checked parameters (those of TransformerForecaster, and the output's)."""
    from .forecaster import TransformerForecaster

    if "n_jobs" in params:
        raise ValueError("n_jobs does not apply to a panel forecast on Dask: the cluster's "
                         "workers choose the series (leave n_jobs out)")
    f = TransformerForecaster(horizon, **params)
    f._check()
    if f.method == "network" or (f.method is None and f.intervals == "quantile"):
        raise ValueError("attnx.forecasting.dask forecasts with the classical methods "
                         "(method=None, 'auto' or a candidate's name): the network path "
                         "(method='network', or intervals='quantile') trains one global "
                         "model; fit TransformerForecaster in one process for it")
    names = None if f.method is None or f.method in METHODS else [str(f.method)]
    if coverage is None:
        covs: tuple[float, ...] = ()
    elif isinstance(coverage, (list, tuple)):
        covs = tuple(float(c) for c in coverage)
        if not covs:
            raise ValueError("coverage must be a number in (0, 1), a non-empty list of "
                             "them, or None")
    else:
        covs = (coverage,)
    for c in covs:
        win.interval_levels(c)
    covs = tuple(float(c) for c in covs)
    if len(set(covs)) != len(covs):
        raise ValueError(f"coverage must be distinct, got {coverage!r}")
    qs = () if quantiles is None else win.check_quantiles(quantiles)
    for name, col in (("id_col", id_col), ("time_col", time_col), ("target", target)):
        if not isinstance(col, str):
            raise TypeError(f"{name} must be a column name (str), got {col!r}")
    return _panel_parts.Job(f.horizon_, names, None if f.season is None else int(f.season),
                            id_col, time_col, target, freq, covs, qs,
                            not isinstance(coverage, (list, tuple)) and coverage is not None,
                            None)


def _client(client: Any, distributed: Any) -> Any:
    if client is not None:
        return client
    try:
        return distributed.get_client()
    except ValueError:
        raise ValueError("no Dask client: pass client= (a distributed.Client), or start "
                         "one first, e.g. Client(LocalCluster(threads_per_worker=1))"
                         ) from None


def _chunks(n: int, n_parts: int) -> list[slice]:
    size = -(-n // max(1, min(n_parts, n)))
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def _parts(data: Any, client: Any, job: _panel_parts.Job, dd: Any, n_parts: int | None
           ) -> tuple[list[Any], str, _panel_parts.Job]:
    """The panel as parts for the workers (futures of scattered chunks, or the Dask
    frame's partitions as delayed objects), its kind ("list", "pandas", "dask") and the
    job with the output's dtypes."""
    threads = max(1, sum(client.nthreads().values()))
    want = n_parts if n_parts is not None else threads * PARTS_PER_THREAD
    if isinstance(data, dd.DataFrame):
        cols = list(data.columns) + ([data.index.name] if data.index.name else [])
        _long_format.check_columns(cols, job.id_col, job.time_col, job.target)
        by_index = data.index.name == job.id_col and job.id_col not in data.columns
        if by_index and not data.known_divisions:
            data = data.reset_index()
            by_index = False
        if by_index:
            frame = data[[job.time_col, job.target]]
        else:
            frame = client.persist(data[[job.id_col, job.time_col, job.target]]
                                   .shuffle(on=job.id_col))
        meta = frame._meta.reset_index() if by_index else frame._meta
        job = job._replace(dtypes=_dtypes(meta, job))
        return list(frame.to_delayed()), "dask", job
    if _pandas.is_pandas(data) and hasattr(data, "columns"):
        _long_format.check_columns(data.columns, job.id_col, job.time_col, job.target)
        frame = data[[job.id_col, job.time_col, job.target]]
        keys = frame[job.id_col]
        if keys.isna().any():
            raise ValueError(f"the id column {job.id_col!r} has empty values: every row "
                             f"needs its series id")
        uniq, codes = np.unique(keys.to_numpy(), return_inverse=True)
        which = np.empty(len(uniq), dtype=np.intp)
        for i, sl in enumerate(_chunks(len(uniq), want)):
            which[sl] = i
        pieces = [part for _, part in frame.groupby(which[codes.ravel()], sort=True)]
        job = job._replace(dtypes=_dtypes(frame.iloc[:0], job))
        return client.scatter(pieces), "pandas", job
    if isinstance(data, (list, tuple)):
        items = list(data)
        if not items:
            raise ValueError("data must hold at least one series, got an empty list")
        flags = [_pandas.is_pandas(s) for s in items]
        if any(flags) and not all(flags):
            raise TypeError(f"data must be a list of pandas objects or of arrays, not a mix "
                            f"(item {flags.index(not flags[0])} differs from item 0)")
        pieces = [list(zip(range(sl.start, sl.stop), items[sl]))
                  for sl in _chunks(len(items), want)]
        return client.scatter(pieces), "list", job
    raise TypeError(f"data must be a long-format pandas or Dask DataFrame or a list of "
                    f"series, got {type(data).__name__}")


def _dtypes(meta: Any, job: _panel_parts.Job) -> dict[str, Any]:
    """The output's id and time dtypes from the input frame's (empty) meta."""
    import pandas as pd

    t = meta[job.time_col].dtype
    return {job.id_col: meta[job.id_col].dtype,
            job.time_col: t if pd.api.types.is_datetime64_any_dtype(t) else np.int64}


def _each(client: Any, dask: Any, fn: Callable[..., Any], parts: list[Any], **kw: Any
          ) -> list[Any]:
    """fn(part, **kw) for every part, on the workers: their futures."""
    return list(client.compute([dask.delayed(fn)(p, **kw) for p in parts]))


def forecast(data: Any, horizon: int, *, client: Any = None, coverage: Any = 0.9,
             quantiles: Any = None, id_col: str = "unique_id", time_col: str = "ds",
             target: str = "y", freq: Any = None, partitions: int | None = None,
             verbose: int = 0, **params: Any) -> Any:
    """The next `horizon` values of every series of a panel, forecast on a Dask cluster.

    data: a long-format Dask or pandas DataFrame (columns id_col, time_col, target:
    one row per series and time step; attnx.forecasting._long_format reads it: dates
    at the frequency `freq` or each series' own, or integer steps), or a list of
    series (1-D arrays or pandas Series on a time index; their ids are their
    positions). client: a distributed.Client (default: the current one).
    coverage: the intervals' coverage (a number: columns "lower" and "upper"; a list:
    "lower_0.8", "upper_0.8", ...; None: no intervals); quantiles: levels in (0, 1) for
    columns "q_0.1", ... (None: none). partitions: how many parts in-memory input is cut
    into (default: PARTS_PER_THREAD per worker thread; a Dask frame keeps its own).
    verbose: a progress bar over the series as their partitions complete. The other
    keywords are TransformerForecaster's (method, season, ...; not n_jobs).

    Returns a long-format frame: id_col, time_col (the next horizon time stamps:
    dates, or integer steps after a series' end), "forecast", the interval ends and
    the quantiles; a Dask DataFrame (its partitions on the workers) for a Dask
    DataFrame, else pandas, sorted by id. The values are those of
    TransformerForecaster(horizon, **params) fitted on the same series in one
    process (a list of pandas Series for a frame).
    """
    dask, dd, distributed = _modules()
    job = _job(horizon, coverage, quantiles, id_col, time_col, target, freq, params)
    if partitions is not None:
        partitions = win.check_int("partitions", partitions, 1)
    client = _client(client, distributed)
    parts, kind, job = _parts(data, client, job, dd, partitions)
    h = job.horizon
    # 1. the panel's season and periods: map-reduce passes over the partitions
    first = client.gather(_each(client, dask, _panel_parts.stats, parts, job=job))
    sizes = [s.n_series for s, _, _ in first]
    stats = first[0][0]
    for s, _, _ in first[1:]:
        stats.merge(s)
    if stats.n_series == 0:
        raise ValueError("the panel holds no series")
    season_ = season_of(stats, job.season)
    diffs = None
    if season_ > 1:
        # the differenced series' sums: from the first pass when it guessed this season
        # in every part holding series, else a second pass
        guessed = [d for (s, m, d) in first if s.n_series and m == season_]
        if len(guessed) == sum(1 for s, _, _ in first if s.n_series):
            found = guessed
        else:
            found = client.gather(_each(client, dask, _panel_parts.diffs, parts, job=job,
                                        season_=season_))
        diffs = _season.AcfSums()
        for d in found:
            diffs.merge(d)
    periods = classical_periods(stats, diffs, season_, job.season)
    # 2. every series chosen on the workers, where the results stay
    fits = _each(client, dask, _panel_parts.fit, parts, job=job, periods=periods)
    _progress(fits, sizes, verbose, distributed)
    # 3. the pooled scores' quantiles, for the series that borrow them
    pooled = None
    if _panel_parts.coverages(job):
        summary = client.gather([client.submit(_panel_parts.counts, f, h) for f in fits])
        if any(b for _, _, _, b in summary):
            pooled = _pooled_quantiles(client, fits, summary, job)
    # 4. the rows
    frames = [client.submit(_panel_parts.frame, f, job, pooled) for f in fits]
    if kind == "dask":
        meta = client.submit(lambda a: a.iloc[:0], frames[0]).result()
        return dd.from_delayed(frames, meta=meta, verify_meta=False)
    import pandas as pd
    return pd.concat(client.gather(frames), ignore_index=True)


def _progress(fits: list[Any], sizes: list[int], verbose: int, distributed: Any) -> None:
    """Wait for the fits (errors raised here), with a tqdm bar over the series when
    verbose."""
    size = dict(zip((f.key for f in fits), sizes))
    bar = None
    if verbose:
        from tqdm.auto import tqdm
        bar = tqdm(total=sum(sizes), unit="series", desc="series")
    try:
        for f in distributed.as_completed(fits):
            f.result()   # a worker's error, raised here with its message
            if bar is not None:
                bar.update(size[f.key])
    finally:
        if bar is not None:
            bar.close()


def _pooled_quantiles(client: Any, fits: list[Any],
                      summary: list[tuple[int, Any, bool, bool]], job: _panel_parts.Job
                      ) -> dict[float, F64]:
    """Per coverage: _selection.step_quantiles of every series' scores pooled (at the
    coverage plus the margin, as half_width takes it), selected on the workers."""
    h = job.horizon
    stacked = all(s for _, _, s, _ in summary)
    n_all = sum(n for n, _, _, _ in summary)
    n_steps = np.sum([c for _, c, _, _ in summary], axis=0) if stacked else np.zeros(h)

    def count(col: int | None) -> int:
        return int(n_all) if col is None else int(n_steps[col])
    levels = {c: c + sel.MARGIN * (1.0 - c) for c in _panel_parts.coverages(job)}
    wanted: set[tuple[int | None, int]] = set()

    def note(col: int | None, rank: int) -> float:
        wanted.add((col, rank))
        return 0.0
    for lv in levels.values():   # which ranks depends on the counts only
        sel.step_quantiles_from(h, lv, count, note)
    found = _select(client, fits, sorted(wanted, key=lambda t: (t[0] is None, t[0] or 0,
                                                                t[1])))
    return {c: sel.step_quantiles_from(h, lv, count, lambda col, r: found[(col, r)])
            for c, lv in levels.items()}


def _select(client: Any, fits: list[Any], targets: list[tuple[int | None, int]]
            ) -> dict[tuple[int | None, int], float]:
    """The rank-th smallest pooled score of each target (step, rank), exactly: rounds
    of histograms over the ordered keys narrow each target's range until it holds at
    most FETCH keys, which are then fetched and sorted."""
    lo = {t: 0 for t in targets}
    hi = {t: 2 ** 64 - 1 for t in targets}
    below = {t: 0 for t in targets}   # keys under lo, every part's
    out: dict[tuple[int | None, int], float] = {}
    open_ = list(targets)
    while open_:
        width = {t: max(1, math.ceil((hi[t] - lo[t] + 1) / BINS)) for t in open_}
        asks = [(t[0], lo[t], hi[t], width[t]) for t in open_]
        hist = np.sum(client.gather([client.submit(_panel_parts.histogram, f, asks, BINS)
                                     for f in fits]), axis=0)
        fetch = []
        for i, t in enumerate(open_):
            need = t[1] - int(hist[i, 0])
            cum = np.cumsum(hist[i, 1:])
            b = int(np.searchsorted(cum, need))   # the bin holding the need-th key
            below[t] = int(hist[i, 0]) + (int(cum[b - 1]) if b else 0)
            lo[t], hi[t] = lo[t] + b * width[t], min(hi[t], lo[t] + (b + 1) * width[t] - 1)
            if lo[t] == hi[t]:
                out[t] = _panel_parts.unordered(lo[t])
            elif int(hist[i, 1 + b]) <= FETCH:
                fetch.append(t)
        if fetch:
            keys = client.gather([client.submit(_panel_parts.values_in, f,
                                                [(t[0], lo[t], hi[t]) for t in fetch])
                                  for f in fits])
            for i, t in enumerate(fetch):
                got = np.sort(np.concatenate([k[i] for k in keys]))
                out[t] = _panel_parts.unordered(int(got[t[1] - below[t] - 1]))
        open_ = [t for t in open_ if t not in out]
    return out


@contextlib.contextmanager
def connect(address: str) -> Iterator[Any]:
    """A distributed.Client of the scheduler at `address`, or, for "local", of a
    LocalCluster started here: one worker process per usable CPU, one thread each
    (BLAS and OpenMP at one thread too)."""
    _, _, distributed = _modules()
    if not isinstance(address, str) or not address:
        raise ValueError(f"the Dask address must be a scheduler address such as "
                         f"tcp://host:8786, or local, got {address!r}")
    if address != "local":
        with distributed.Client(address) as client:
            yield client
        return
    import logging

    from ..runtime import _cpus
    one = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    with distributed.LocalCluster(n_workers=_cpus.usable(), threads_per_worker=1,
                                  processes=True, env=one, dashboard_address=":0",
                                  silence_logs=logging.ERROR) as cluster, \
            distributed.Client(cluster) as client:
        yield client


def forecast_series(address: str, series: list[Any], forecaster: Any, coverage: float
                    ) -> tuple[list[Any], list[Any]]:
    """`attnx forecast --dask ADDRESS`: the pandas series forecast on the cluster with
    the (unfitted) forecaster's parameters, as its predict() and
    predict_interval(coverage=...) would give them after fit(series): a Series of
    point forecasts and a DataFrame of "lower" and "upper" per series."""
    import pandas as pd

    params = dict(forecaster.get_params())
    horizon = params.pop("horizon")
    if params.pop("n_jobs") is not None:
        raise ValueError("--n-jobs does not apply with --dask (the cluster's workers choose "
                         "the series)")
    verbose = params.pop("verbose")
    with connect(address) as client:
        out = forecast(series, horizon, client=client, coverage=coverage, verbose=verbose,
                       **params)
    points, bounds = [], []
    for (_, part), s in zip(out.groupby("unique_id", sort=True), series):
        index = pd.Index(part["ds"])
        points.append(pd.Series(part["forecast"].to_numpy(), index=index, name=s.name))
        bounds.append(pd.DataFrame({"lower": part["lower"].to_numpy(),
                                    "upper": part["upper"].to_numpy()}, index=index))
    return points, bounds
