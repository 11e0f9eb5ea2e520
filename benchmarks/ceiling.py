"""How fast a training step could be on this core: a lower bound per benchmark config.

For each attention and transformer config of benchmarks/run.py (float32), the step's
matrix products are split in two:

  * dense products (the Q|K|V and output projections, the MLP, their gradients): each
    is timed here alone, at its exact shape, through attnx's own product shim (the
    OpenBLAS build attnx links, or at the AVX2 level attnx's register tiles for the
    small ones), best of --rounds, operands warm in cache;
  * attention products (scores, P V and their four gradients): counted at the core's
    measured multiply-add peak (a register-only FMA loop with enough independent
    chains for two FMA ports, compiled here with the interpreter's C compiler for the
    SIMD level attnx runs at).

Everything else (softmax and its exp, masks, transposes, the loss, AdamW, Python) is
counted as free. So ``bound`` is a time no implementation that runs its dense
products through this BLAS can beat on this core, and ``peak`` (every FLOP at the FMA
peak) a time no code at all can beat. Against the measured times of a
``benchmarks/run.py --json`` file from the same machine it prints:

  ratio@bound   SDPA's measured time / bound: the largest ratio attnx could reach
  need          bound / (the time the target asks for): above 100%, the target is out
                of reach even with free softmax and attention products at peak
  attnx eff     bound / attnx's measured time: how close attnx already is

Targets: --ratio (default 1.3) x torch SDPA for every config but the seed shape's
training step, whose target is --seed-ratio (default 2.5) x SDPA, or 60% of the run's
sgemm limit when that is the faster of the two (--seed-limit, the default; --no-seed-limit
for the ratio alone).

Usage (after the in-place build; not pinned to one core: the run file's 2-thread
races are bounded with both cores):
  python benchmarks/ceiling.py --run benchmarks/results/latest.json --json out.json \\
      --txt out.txt
"""
import argparse
import ctypes
import importlib.util
import json
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

PEAK_C = r"""
/* a = a * y + x on 12 independent vectors (GCC contracts each into one FMA) */
typedef float v8 __attribute__((vector_size(32)));
typedef float v16 __attribute__((vector_size(64)));
#define CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define DECL(i) V a##i = x * (float) (i + 1);
#define STEP(i) a##i = a##i * y + x;
#define SUM(i) s += a##i;
#define PEAK(NAME, TARGET)                                                    \
__attribute__((target(TARGET))) double NAME(long iters)                       \
{                                                                             \
    const V x = (V) {0} + 1e-7f, y = (V) {0} + 0.9999f;                       \
    CHAINS(DECL)                                                              \
    for (long i = 0; i < iters; i++) {                                        \
        CHAINS(STEP)                                                          \
        __asm__("" : : : "memory");                                           \
    }                                                                         \
    V s = (V) {0};                                                            \
    CHAINS(SUM)                                                               \
    return s[0];                                                              \
}
#define V v8
PEAK(peak_avx2, "avx2,fma")
#undef V
#define V v16
PEAK(peak_avx512, "avx512f")
"""


def fma_peak(level, rounds=5):
    """Measured float32 multiply-add peak of one core, GFLOP/s, at attnx's SIMD level
    (1: 256-bit, 2: 512-bit): 12 independent chains, enough for two FMA ports at
    four cycles' latency."""
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")
    with tempfile.TemporaryDirectory() as tmp:
        src, lib = os.path.join(tmp, "peak.c"), os.path.join(tmp, "peak.so")
        with open(src, "w") as f:
            f.write(PEAK_C)
        subprocess.run(cc + ["-O2", "-ffp-contract=fast", "-shared", "-fPIC", src, "-o", lib],
                       check=True)
        so = ctypes.CDLL(lib)
        fn = so.peak_avx512 if level >= 2 else so.peak_avx2
        fn.restype, fn.argtypes = ctypes.c_double, [ctypes.c_long]
        lanes = 16 if level >= 2 else 8
        iters = 20_000_000
        best = np.inf
        fn(iters // 10)
        for _ in range(rounds):
            t0 = time.perf_counter()
            fn(iters)
            best = min(best, time.perf_counter() - t0)
        return 12 * lanes * 2 * iters / best / 1e9


def dense_products(kind, B, T, d, hidden, layers, train):
    """(ta, tb, m, n, k) of every dense product of one step (as benchmarks/run.py
    counts them: input_grad=False, so the first block has no dX)."""
    n = B * T
    out = []
    for layer in range(1 if kind == "attention" else layers):
        out += [(0, 0, n, 3 * d, d), (0, 0, n, d, d)]                  # X Wqkv, Z Wo
        if train:
            out += [(1, 0, d, d, n), (0, 1, n, d, d), (1, 0, d, 3 * d, n)]   # dWo, dZ, dWqkv
            if layer > 0:
                out.append((0, 1, n, d, 3 * d))                         # dX
        if kind == "transformer":
            out += [(0, 0, n, hidden, d), (0, 0, n, d, hidden)]          # Z W1, S W2
            if train:
                out += [(1, 0, hidden, d, n), (0, 1, n, hidden, d),       # dW2, dS
                        (1, 0, d, hidden, n), (0, 1, n, d, hidden)]       # dW1, dZ
    return out


def attention_flops(B, T, d, layers, train):
    """Counted FLOPs of the score and value products (2 forward, 4 backward)."""
    return layers * (2 + (4 if train else 0)) * 2 * B * T * T * d


def time_products(shapes, rounds):
    """Best seconds of each distinct product through attnx's shim; total of the list."""
    from attnx.kernels._testing import gemm_into
    rng = np.random.default_rng(0)
    best = {}
    for s in sorted(set(shapes)):
        ta, tb, m, n, k = s
        a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
        b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
        c = np.empty((m, n), np.float32)
        calls = max(2, int(2e8 / (2 * m * n * k)))
        gemm_into(bool(ta), bool(tb), a, b, c, m, n, k)
        t = np.inf
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(calls):
                gemm_into(bool(ta), bool(tb), a, b, c, m, n, k)
            t = min(t, (time.perf_counter() - t0) / calls)
        best[s] = t
    return sum(best[s] for s in shapes), best


def _run_module():
    """benchmarks/run.py (stdlib imports only at its module level), under the name the
    tests load it by."""
    name = "attnx_bench_run"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, "run.py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod           # dataclasses look their module up there
        spec.loader.exec_module(mod)
    return sys.modules[name]


def _shown(path):
    """A path as the checkout names it when it lies inside the checkout."""
    rel = os.path.relpath(os.path.abspath(path), os.path.dirname(HERE))
    return path if rel.startswith("..") else rel


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default=os.path.join(HERE, "results", "latest.json"),
                    help="a benchmarks/run.py --json file from this machine")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ratio", type=float, default=1.3, help="target: this x SDPA")
    ap.add_argument("--seed-ratio", type=float, default=2.5,
                    help="the seed shape's training-step target: this x SDPA")
    ap.add_argument("--seed-limit", action=argparse.BooleanOptionalAction, default=True,
                    help="the seed shape's target is also 60%% of the sgemm limit")
    ap.add_argument("--json")
    ap.add_argument("--txt")
    args = ap.parse_args(argv)
    import threadpoolctl
    from attnx.kernels import _ops
    level = _ops.simd_level()
    if level < 1:
        sys.exit("ceiling.py needs an x86-64 CPU with AVX2 (the FMA peak loop)")
    with open(args.run) as f:
        run = json.load(f)
    cpu = _run_module()._cpu_name()
    lines = [f"attnx ceiling  {time.strftime('%Y-%m-%dT%H:%M:%S')}  machine: {cpu}, "
             f"attnx SIMD level {_ops.simd_level_name()}",
             f"measured times from: {_shown(args.run)} (attnx {run.get('attnx_commit')}, "
             f"created {run.get('created')})"]
    out = {"machine": cpu, "simd_level": _ops.simd_level_name(), "run": _shown(args.run),
           "rows": []}
    for r in run["runs"]:
        nth = r["threads"]
        with threadpoolctl.threadpool_limits(nth):
            peak1 = fma_peak(level, args.rounds)
            peak = peak1 * nth          # one core's peak times the cores used
            lim = r["gemm_limit"]["float32"]["scipy"]       # attnx's BLAS
            lines += ["", f"=== {nth} thread(s): FMA peak {peak:.1f} GFLOP/s "
                          f"({peak1:.1f} per core), the run's sgemm limit {lim:.1f} "
                          f"({100 * lim / peak:.0f}% of peak)",
                      f"{'config':28s} {'mode':7s} {'dense':>6s} {'dense ms':>8s} "
                      f"{'bound ms':>8s} {'peak ms':>8s} {'attnx ms':>8s} {'SDPA ms':>8s} "
                      f"{'target':>7s} {'ratio@bound':>11s} {'need':>6s} {'attnx eff':>9s}",
                      "-" * 118]
            for res in r["results"]:
                sh = res["shape"]
                if res["dtype"] != "float32" or sh["kind"] not in ("attention", "transformer"):
                    continue
                train = res["mode"] == "train"
                layers = 1 if sh["kind"] == "attention" else sh.get("layers", 1)
                shapes = dense_products(sh["kind"], sh["B"], sh["T"], sh["d"],
                                        sh.get("hidden", 0), layers, train)
                f_dense = sum(2.0 * m * n * k for _, _, m, n, k in shapes)
                f_att = attention_flops(sh["B"], sh["T"], sh["d"], layers, train)
                if abs(f_dense + f_att - res["flops"]) > 1e-6 * res["flops"]:
                    raise RuntimeError(f"{res['config']}: FLOP split {f_dense + f_att:.0f} "
                                       f"differs from run.py's {res['flops']:.0f}")
                t_dense, _ = time_products(shapes, args.rounds)
                if nth > 1:         # the BLAS at one thread, when that is faster
                    with threadpoolctl.threadpool_limits(1):
                        t_dense = min(t_dense, time_products(shapes, args.rounds)[0])
                bound = t_dense + f_att / (peak * 1e9)
                t_peak = res["flops"] / (peak * 1e9)
                imp = res["impls"]
                t_attnx = imp["attnx"]["median_s"]
                t_sdpa = imp["torch-sdpa"]["median_s"]
                seed = (sh["kind"] == "attention" and not sh.get("causal")
                        and (sh["B"], sh["T"], sh["d"], sh["H"]) == (32, 128, 64, 8))
                if seed and train:
                    target_t = t_sdpa / args.seed_ratio
                    target = f"{args.seed_ratio:g}x"
                    if args.seed_limit and res["flops"] / (0.6 * lim * 1e9) < target_t:
                        target_t = res["flops"] / (0.6 * lim * 1e9)
                        target = "60%lim"
                else:
                    target_t = t_sdpa / args.ratio
                    target = f"{args.ratio:g}x"
                row = {"config": res["config"], "mode": res["mode"], "threads": nth,
                       "flops": res["flops"], "dense_flops": f_dense, "attention_flops": f_att,
                       "dense_s": t_dense, "bound_s": bound, "peak_s": t_peak,
                       "attnx_s": t_attnx, "sdpa_s": t_sdpa, "target": target,
                       "target_s": target_t, "ratio_at_bound": t_sdpa / bound,
                       "need": bound / target_t, "attnx_efficiency": bound / t_attnx,
                       "fma_peak_gflops": peak, "sgemm_limit_gflops": lim}
                out["rows"].append(row)
                lines.append(
                    f"{res['config']:28s} {res['mode']:7s} {100 * f_dense / res['flops']:5.0f}% "
                    f"{1e3 * t_dense:8.2f} {1e3 * bound:8.2f} {1e3 * t_peak:8.2f} "
                    f"{1e3 * t_attnx:8.2f} {1e3 * t_sdpa:8.2f} {target:>7s} "
                    f"{t_sdpa / bound:10.2f}x {100 * bound / target_t:5.0f}% "
                    f"{100 * bound / t_attnx:8.0f}%")
                print(lines[-1], file=sys.stderr, flush=True)     # progress
    lines += ["", "dense: the dense products' share of the step's counted FLOPs. bound: dense "
              "products at their measured time through attnx's shim + attention products at "
              "the FMA peak + everything else free. peak: all counted FLOPs at the FMA peak. "
              f"target: the time {args.ratio:g}x SDPA asks for (the seed shape's training step: "
              f"{args.seed_ratio:g}x SDPA" + (", or 60% of the sgemm limit when faster"
                                               if args.seed_limit else "") + "). need: bound / target time (over 100%: out of reach on this "
              "core with this BLAS). attnx eff: bound / attnx's measured time."]
    text = "\n".join(lines)
    print(text)
    for path, content in ((args.txt, text + "\n"), (args.json, json.dumps(out, indent=1))):
        if path:
            with open(path, "w") as f:
                f.write(content)


if __name__ == "__main__":
    main()
