"""What attnx's default thread policy costs or gains against one thread, as a user sees it.

Every measurement is one fit (or one run of training steps) in a fresh Python process,
timed inside that process from just before the fit to just after it (imports and data
loading excluded; the CLI row times the whole command). Two settings per case:

  1 thread   OMP_NUM_THREADS=1 (the process's OpenMP limit, which attnx reads)
  default    no thread variable at all: what every user has

and two machine states:

  quiet      nothing else running
  busy       two other processes busy-looping (``python -c "while True: pass"``) for
             the whole run, i.e. one per core on a 2-core machine

Cases (the first three are the fits issue reports were about; the last two are shapes
where a second thread pays and must keep paying):

  digits        TransformerClassifier(random_state=0, epochs=3) on scikit-learn's digits
                as 8-row sequences (1000 x 8 x 8)
  forecast300   TransformerForecaster(horizon=12, method="network", random_state=0)
                fit + predict on a 300-point monthly series (trend + yearly season +
                noise, seed 0)
  cli_co2       ``attnx forecast co2.csv --horizon 24 --method network``: statsmodels'
                co2 as 526 monthly means (needs statsmodels and pandas), the whole
                command
  attn_large    MultiHeadAttention(256, 8) training steps (forward, MSE, backward,
                AdamW) on B8 x T512 x d256, float32, after two warm-up steps
  transformer   Transformer(128, 4, n_layers=2) training steps on B32 x T128 x d128
  gridsearch    GridSearchCV(TransformerClassifier(epochs=3, random_state=0), d_model in
                {16, 32, 64} x lr in {1e-3, 3e-3}, cv=5) on all 1797 digits sequences,
                n_jobs=1 against n_jobs=2 (both with attnx's default threads)

Settings and states interleave (round r runs every case in every setting before round
r + 1), so a change of machine speed during the run hits every row alike. The table
gives the median over rounds and the ratio default / 1 thread (below 1: the default is
faster). Run:

  python benchmarks/threads.py --out benchmarks/results/threads
  python benchmarks/threads.py --cases digits,forecast300 --rounds 3 --states quiet
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

CASES: dict[str, str | None] = {
    "digits": r"""
import time, numpy as np
from sklearn.datasets import load_digits
import attnx
X, y = load_digits(return_X_y=True)
X = X.reshape(-1, 8, 8)[:1000].astype(np.float32); y = y[:1000]
t0 = time.perf_counter()
attnx.TransformerClassifier(random_state=0, epochs=3).fit(X, y)
print("SECONDS", time.perf_counter() - t0)
""",
    "forecast300": r"""
import time, numpy as np
import attnx
t = np.arange(300)
rng = np.random.default_rng(0)
y = 10 + 0.02 * t + 2 * np.sin(2 * np.pi * t / 12) + rng.normal(0, 0.5, 300)
t0 = time.perf_counter()
f = attnx.TransformerForecaster(horizon=12, method="network", random_state=0).fit(y)
f.predict_interval()
print("SECONDS", time.perf_counter() - t0)
""",
    "attn_large": None, "transformer": None,   # filled from _STEPS below
}
# training steps of a large layer or model: forward, MSE, backward, AdamW; the mean of ten
# steps after two warm-up steps
_STEPS = r"""
import time, numpy as np
import attnx
rng = np.random.default_rng(0)
x = rng.normal(size=SHAPE).astype(np.float32)
target = rng.normal(size=x.shape).astype(np.float32)
model = MODEL
opt = attnx.AdamW(model.params, lr=1e-3)
def step():
    y = model.forward(x)
    _, dy = attnx.mse_loss(y, target)
    model.backward(dy)
    opt.step(model.grads)
step(); step()
t0 = time.perf_counter()
for _ in range(10):
    step()
print("SECONDS", (time.perf_counter() - t0) / 10)
"""
CASES["attn_large"] = _STEPS.replace("SHAPE", "(8, 512, 256)").replace(
    "MODEL", "attnx.MultiHeadAttention(256, 8, random_state=0)")
CASES["transformer"] = _STEPS.replace("SHAPE", "(32, 128, 128)").replace(
    "MODEL", "attnx.Transformer(128, 4, n_layers=2, random_state=0)")
CASES["gridsearch"] = r"""
import os, time, numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV
import attnx
X, y = load_digits(return_X_y=True)
X = X.reshape(-1, 8, 8).astype(np.float32)
grid = {"d_model": [16, 32, 64], "lr": [1e-3, 3e-3]}
t0 = time.perf_counter()
GridSearchCV(attnx.TransformerClassifier(epochs=3, random_state=0), grid, cv=5,
             n_jobs=int(os.environ["BENCH_N_JOBS"])).fit(X, y)
print("SECONDS", time.perf_counter() - t0)
"""
UNITS = {"attn_large": "s/step", "transformer": "s/step"}
#: the two settings compared per case: (name, extra environment)
SETTINGS: dict[str, tuple[tuple[str, dict[str, str]], ...]] = {
    "gridsearch": (("n_jobs=1", {"BENCH_N_JOBS": "1"}), ("n_jobs=2", {"BENCH_N_JOBS": "2"})),
}
DEFAULT_SETTINGS = (("1 thread", {"OMP_NUM_THREADS": "1"}), ("default", {}))
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_PROC_BIND")


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    env.update(extra)
    return env


def _co2_csv(folder: str) -> str | None:
    try:
        import statsmodels.api as sm
    except ImportError:
        return None
    w = sm.datasets.co2.load_pandas().data["co2"]
    m = w.resample("MS").mean().ffill()
    path = os.path.join(folder, "co2.csv")
    m.rename("co2").rename_axis("month").reset_index().to_csv(path, index=False)
    return path


def run_case(case: str, extra: dict[str, str], folder: str, co2: str | None
             ) -> float | None:
    """Seconds of one case in a fresh process (None when it cannot run here)."""
    env = _env(extra)
    if case == "cli_co2":
        if co2 is None:
            return None
        out = os.path.join(folder, "fc.csv")
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "attnx", "forecast", co2, "--horizon", "24",
                        "--time-col", "month", "--target", "co2", "--out", out, "--seed", "0",
                        "--method", "network"],
                       env=env, check=True, cwd=folder, stdout=subprocess.DEVNULL)
        return time.perf_counter() - t0
    r = subprocess.run([sys.executable, "-c", CASES[case]], env=env, check=True,
                       capture_output=True, text=True, cwd=folder)
    line = [s for s in r.stdout.splitlines() if s.startswith("SECONDS")][-1]
    return float(line.split()[1])


class Busy:
    """n processes busy-looping until the with block ends."""

    def __init__(self, n: int) -> None:
        self.n, self.procs = n, []

    def __enter__(self) -> Busy:
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                      for _ in range(self.n)]
        time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def machine() -> dict[str, object]:
    """CPU, cores, OpenBLAS kernels and OPENBLAS_CORETYPE of this run."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    code = ("import json, attnx, threadpoolctl; from attnx.kernels import _ops; print(json.dumps("
            "[_ops.simd_level_name(), [{k: i.get(k) for k in ('internal_api', 'version', "
            "'architecture', 'num_threads', 'filepath')} for i in threadpoolctl.threadpool_info()]]))")
    level, pools = json.loads(subprocess.run([sys.executable, "-c", code], env=_env({}),
                                             capture_output=True, text=True,
                                             check=True).stdout)
    return {"cpu": cpu, "cores": os.cpu_count(), "simd_level": level, "pools": pools,
            "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE", "unset"),
            "python": platform.python_version()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases",
                    default="digits,forecast300,cli_co2,attn_large,transformer,gridsearch")
    ap.add_argument("--states", default="quiet,busy")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None, help="write OUT.txt and OUT.json")
    args = ap.parse_args(argv)
    cases = args.cases.split(",")
    states = args.states.split(",")
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        co2 = _co2_csv(folder) if "cli_co2" in cases else None
        for r in range(args.rounds):
            for state in states:
                with Busy(2 if state == "busy" else 0):
                    for case in cases:
                        for setting, extra in SETTINGS.get(case, DEFAULT_SETTINGS):
                            s = run_case(case, extra, folder, co2)
                            if s is None:
                                continue
                            times.setdefault(f"{case}|{state}|{setting}", []).append(s)
                            print(f"round {r} {state:5s} {case:12s} {setting:8s} {s:8.3f}",
                                  file=sys.stderr, flush=True)
    info = machine()
    lines = [f"# attnx threads: default vs one thread, each fit in a fresh process",
             f"# CPU {info['cpu']}, {info['cores']} cores, attnx SIMD {info['simd_level']}, "
             f"OPENBLAS_CORETYPE={info['OPENBLAS_CORETYPE']}, {args.rounds} rounds (median)",
             "# BLAS/OpenMP pools: " + "; ".join(
                 f"{p['internal_api']} {p.get('version')} {p.get('architecture')}"
                 for p in info["pools"]),
             "",
             "| case | machine | baseline | time | compared | time | compared / baseline |",
             "|---|---|---|---|---|---|---|"]
    rows = []
    for case in cases:
        (base, _), (other, _) = SETTINGS.get(case, DEFAULT_SETTINGS)
        for state in states:
            one = times.get(f"{case}|{state}|{base}")
            dflt = times.get(f"{case}|{state}|{other}")
            if not one or not dflt:
                continue
            a, b = statistics.median(one), statistics.median(dflt)
            unit = UNITS.get(case, "s")
            lines.append(f"| {case} | {state} | {base} | {a:.3f} {unit} | {other} | "
                         f"{b:.3f} {unit} | {b / a:.2f}x |")
            rows.append({"case": case, "state": state, "unit": unit, "baseline": base,
                         "compared": other, "baseline_seconds": one,
                         "compared_seconds": dflt, "ratio_of_medians": b / a})
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out + ".txt", "w") as f:
            f.write(text + "\n")
        with open(args.out + ".json", "w") as f:
            json.dump({"machine": info, "rounds": args.rounds, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
