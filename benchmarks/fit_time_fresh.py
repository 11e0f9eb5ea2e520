"""Fit + predict + 90% interval time of TransformerForecaster on one series of 500
monthly values (50 + 0.05 t + 5 sin(2 pi t / 12) + 0.5 * a random walk, the random
walk from seed --seed), horizon 18, in this fresh process: the first fit (which pays
for importing statsforecast when the defaults use it) and a second one. With
``--kind half-hourly``: 4032 half-hourly values (12 weeks: a daily cycle, one offset
per weekday, a wandering level and noise, all drawn from the seed), horizon 48.

    python benchmarks/fit_time_fresh.py --seed 0                    # the defaults
    python benchmarks/fit_time_fresh.py --seed 0 --method network   # the transformer
    python benchmarks/fit_time_fresh.py --seed 0 --kind half-hourly

Run it from a folder outside the checkout, one process per measurement, with no thread
variables set (what a user gets)."""
import argparse
import os
import sys
import time

T0 = time.perf_counter()
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if os.path.exists(os.path.join(REPO, "attnx", "__init__.py")):
    sys.path.insert(0, REPO)  # the in-place build of this checkout

import numpy as np  # noqa: E402


def series(seed, n=500):
    """The generated monthly series (the module docstring)."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return 50 + 0.05 * t + 5 * np.sin(2 * np.pi * t / 12) + 0.5 * np.cumsum(rng.standard_normal(n))


def half_hourly(seed, n=4032, day=48):
    """The generated half-hourly series (the module docstring)."""
    rng = np.random.default_rng([seed, 1])
    t = np.arange(n)
    daily = (rng.uniform(1, 3) * np.sin(2 * np.pi * t / day + rng.uniform(0, 6))
             + rng.uniform(0, 1) * np.sin(4 * np.pi * t / day + 1))
    weekly = rng.uniform(0.5, 2) * rng.normal(0, 1, 7)[(t // day) % 7]
    level = np.cumsum(rng.uniform(0.01, 0.1) * rng.standard_normal(n))
    return 30 + daily + weekly + level + rng.uniform(0.1, 0.6) * rng.standard_normal(n)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0, help="seed of the generated series")
    ap.add_argument("--method", choices=("default", "network"), default="default",
                    help="default: the forecaster's defaults; network: method='network'")
    ap.add_argument("--kind", choices=("monthly", "half-hourly"), default="monthly",
                    help="the generated series (the module docstring)")
    args = ap.parse_args(argv)
    import attnx
    imported = time.perf_counter() - T0
    y, h = (series(args.seed), 18) if args.kind == "monthly" else (half_hourly(args.seed), 48)
    method = None if args.method == "default" else "network"
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        f = attnx.TransformerForecaster(horizon=h, method=method, random_state=0).fit(y)
        f.predict()
        f.predict_interval(coverage=0.9)
        times.append(time.perf_counter() - t0)
    print(f"--kind {args.kind} --method {args.method}, seed {args.seed}: "
          f"first fit + predict + interval "
          f"{times[0]:.2f} s, second {times[1]:.2f} s (import attnx {imported:.2f} s), "
          f"method_={f.method_!r}, periods_={getattr(f, 'periods_', None)}, "
          f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
