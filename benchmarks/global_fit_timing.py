"""Fit + predict time of TransformerForecaster over 1000 short generated series (20-120
values each: a random walk with drift, a season of 4 or 12 or none; horizon 6), in one
process with the default threads: with --method network (the default here) one global
model, its other settings the defaults; with --method default the forecaster's
defaults (method="auto", each series on its own).

    python benchmarks/global_fit_timing.py --seed 0
    python benchmarks/global_fit_timing.py --seed 0 --method default
    python benchmarks/global_fit_timing.py --seed 0 --method default --n-jobs -1

Prints the wall and CPU seconds of fit and predict, the epochs the network trained for,
the number of training windows and the load average (the machine may be shared: the
CPU seconds do not count the time other processes took)."""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if os.path.exists(os.path.join(REPO, "attnx", "__init__.py")):
    sys.path.insert(0, REPO)  # the in-place build of this checkout

import numpy as np  # noqa: E402


def panel(seed, n_series=1000):
    """The generated series (the module docstring)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_series):
        n = int(rng.integers(20, 121))
        t = np.arange(n)
        m = int(rng.choice([1, 4, 12]))
        y = 10 + 0.05 * rng.standard_normal() * t + np.cumsum(0.3 * rng.standard_normal(n))
        if m > 1:
            y += rng.uniform(0, 2) * np.sin(2 * np.pi * t / m + rng.uniform(0, 6))
        out.append(y)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0, help="seed of the generated series")
    ap.add_argument("--series", type=int, default=1000)
    ap.add_argument("--method", choices=("network", "default"), default="network",
                    help="network: one global model; default: the forecaster's defaults "
                         "(the time includes statsforecast's import when it is installed)")
    ap.add_argument("--n-jobs", type=int, default=None,
                    help="the forecaster's n_jobs (worker processes of the defaults' "
                         "per-series choice; default None: this process)")
    args = ap.parse_args(argv)
    import attnx
    series = panel(args.seed, args.series)
    f = attnx.TransformerForecaster(
        horizon=6, method="network" if args.method == "network" else None, random_state=0,
        n_jobs=args.n_jobs)
    w0, c0 = time.perf_counter(), time.process_time()
    f.fit(series)
    w1, c1 = time.perf_counter(), time.process_time()
    f.predict()
    w2, c2 = time.perf_counter(), time.process_time()
    what = (f"{f.n_windows_} windows, final fit {f.regressor_.n_iter_} epoch(s)"
            if f.method_ == "network" else f"{len(set(f.methods_))} methods chosen")
    print(f"seed {args.seed}, {args.series} series, --method {args.method}, --n-jobs "
          f"{args.n_jobs}: fit {w1 - w0:.1f} s "
          f"({c1 - c0:.1f} s CPU), predict {w2 - w1:.2f} s ({c2 - c1:.2f} s CPU); {what}, "
          f"method_={f.method_!r}, load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
