"""Many series on Dask: attnx.forecasting.dask.forecast on a LocalCluster of 1 and 2
worker processes against one TransformerForecaster in this process.

Generated monthly series (seeded; lengths LO-HI, a yearly cycle on half of them, a
trend, noise, a few NaN gaps) as a long-format pandas frame on month-start dates;
horizon 18 by default. Reports wall times (the cluster's start excluded), the largest
absolute difference from the one-process forecasts and intervals (0: identical), and
each worker's peak resident memory (its process's ru_maxrss).

    PYTHONPATH=. python benchmarks/forecast_dask.py --series 10000 --method theta
    PYTHONPATH=. python benchmarks/forecast_dask.py --series 100000 --lengths 24,60 \\
        --horizon 6 --method theta --on-workers 64 --workers 2
"""
import argparse
import logging
import os
import resource
import time

import numpy as np
import pandas as pd


def panel(n, lo, hi, seed, first=0):
    """Series first..first+n-1 in long format (each from its own seeded generator, so
    any range of them can be generated apart)."""
    ids, stamps, values = [], [], []
    start = pd.Timestamp("2000-01-01")
    for i in range(first, first + n):
        rng = np.random.default_rng([seed, 53, i])
        length = int(rng.integers(lo, hi + 1))
        t = np.arange(length)
        y = 100 + rng.normal(0, 0.3) * t + rng.normal(0, 3, length)
        if i % 2:
            y += rng.uniform(5, 20) * np.sin(2 * np.pi * t / 12 + rng.uniform(0, 6))
        if i % 10 == 0:
            y[rng.integers(1, length - 1)] = np.nan
        ids.append(np.full(length, i))
        stamps.append(pd.date_range(start, periods=length, freq="MS").to_numpy())
        values.append(y)
    return pd.DataFrame({"unique_id": np.concatenate(ids), "ds": np.concatenate(stamps),
                         "y": np.concatenate(values)})


def lazy_panel(n, lo, hi, seed, n_parts):
    """The same panel as a Dask DataFrame whose partitions are generated on the workers
    (indexed by unique_id with known divisions: no shuffle, nothing kept)."""
    import dask.dataframe as dd

    size = -(-n // n_parts)
    firsts = list(range(0, n, size))

    def part(first):
        return panel(min(size, n - first), lo, hi, seed, first).set_index("unique_id")
    return dd.from_map(part, firsts, divisions=tuple(firsts) + (n - 1,))


def one_process(frame, h, params):
    import attnx

    series = [pd.Series(g["y"].to_numpy(), index=pd.DatetimeIndex(g["ds"], freq="MS"))
              for _, g in frame.groupby("unique_id", sort=True)]
    from threadpoolctl import threadpool_limits

    from attnx.runtime._threads import fixed_threads

    t0 = time.perf_counter()
    # one thread, as the workers choose: the pretrained candidate's threaded kernels
    # and BLAS may round otherwise on long inputs
    with fixed_threads(1), threadpool_limits(limits=1):
        f = attnx.TransformerForecaster(h, **params).fit(series)
    point = np.concatenate([p.to_numpy() for p in f.predict()])
    bounds = f.predict_interval(coverage=0.9)
    lower = np.concatenate([b["lower"].to_numpy() for b in bounds])
    upper = np.concatenate([b["upper"].to_numpy() for b in bounds])
    return time.perf_counter() - t0, np.stack([point, lower, upper])


def _peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def on_cluster(frame, h, params, workers, as_dask, lazy=None):
    import dask.dataframe as dd
    import distributed

    from attnx.forecasting import dask as adask

    one = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                  env=one, dashboard_address=":0",
                                  silence_logs=logging.ERROR) as cluster, \
            distributed.Client(cluster) as client:
        if lazy is not None:
            data = lazy_panel(*lazy)
        else:
            data = dd.from_pandas(frame, npartitions=8 * workers) if as_dask else frame
        t0 = time.perf_counter()
        out = adask.forecast(data, h, client=client, **params)
        if as_dask or lazy is not None:
            out = out.compute().sort_values(["unique_id", "ds"], kind="stable")
        wall = time.perf_counter() - t0
        peaks = sorted(client.run(_peak_rss_mb).values())
    got = np.stack([out[c].to_numpy() for c in ("forecast", "lower", "upper")])
    return wall, got, peaks


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--series", type=int, default=10000)
    p.add_argument("--lengths", default="48,240", help="LO,HI series lengths")
    p.add_argument("--horizon", type=int, default=18)
    p.add_argument("--method", default=None, help="TransformerForecaster's method")
    p.add_argument("--workers", default="1,2", help="cluster sizes to run")
    p.add_argument("--dask-frame", action="store_true",
                   help="give a Dask DataFrame (shuffled by id) instead of pandas")
    p.add_argument("--on-workers", type=int, default=0, metavar="PARTS",
                   help="generate the panel on the workers, in PARTS partitions of a Dask "
                        "DataFrame (no one-process run: the client never holds the panel)")
    p.add_argument("--no-one-process", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    lo, hi = (int(v) for v in a.lengths.split(","))
    lazy = (a.series, lo, hi, a.seed, a.on_workers) if a.on_workers else None
    frame = None if lazy else panel(a.series, lo, hi, a.seed)
    params = {} if a.method is None else {"method": a.method}
    rows = "generated on the workers" if lazy else f"{len(frame)} rows"
    kind = "Dask" if a.dask_frame or lazy else "pandas"
    print(f"{a.series} series of {lo}-{hi} months ({rows}), horizon {a.horizon}, method "
          f"{a.method or 'default (auto)'}, {kind} input", flush=True)
    ref = None
    if not (a.no_one_process or lazy):
        wall, ref = one_process(frame, a.horizon, params)
        print(f"one process: {wall:.1f} s, peak memory {_peak_rss_mb():.0f} MB", flush=True)
    for n in (int(v) for v in a.workers.split(",")):
        wall, got, peaks = on_cluster(frame, a.horizon, params, n, a.dask_frame, lazy)
        diff = "n/a" if ref is None else f"{np.max(np.abs(got - ref)):.3g}"
        print(f"{n} worker(s): {wall:.1f} s, max abs diff from one process {diff}, "
              f"peak worker memory {', '.join(f'{m:.0f}' for m in peaks)} MB", flush=True)


if __name__ == "__main__":
    main()
