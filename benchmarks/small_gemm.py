"""Small float32 products on attnx's register tiles against scipy's OpenBLAS, in one
process (the SIMD level of attnx.kernels._blas switched between turns), on the products
and on whole estimator fits.

    python benchmarks/small_gemm.py                       # products, then the fits
    python benchmarks/small_gemm.py --sets Sunspots --rounds 7 --json out.json
    python benchmarks/small_gemm.py --no-fits             # products only
    python benchmarks/small_gemm.py --level 1             # the AVX2 tiles on an AVX-512 CPU

Products: the GEMMs of a 2-layer SequenceModel with d_model 32, MLP width 128 on
256 rows (the Sunspots model's batch: 16 windows x 16 patches), forward (X W),
input gradient (dY W^T) and weight gradient (X^T dY), plus larger ones where BLAS's
cache blocking takes over; each timed as the best of --rounds turns of enough calls
to take a few milliseconds (one Python call each: ~1 us of overhead on both sides).
Fits: the development panel's sets with the estimators' defaults (random_state 0),
turns alternating tiles / BLAS, CPU time of the process; the ratio is paired per
round. --level picks the tiles: 1 the AVX2 ones, 2 the AVX-512 ones (Intel CPUs
only; elsewhere level 2 keeps BLAS, so both sides are BLAS); the default is the
machine's level. On a CPU without AVX2 or with ATTNX_SIMD=0 both sides are BLAS.
Run it on an idle machine, one thread: OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1.
"""
import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, os.fspath(HERE.parent))   # this checkout's attnx

# (ta, tb, m, n, k, what)
PRODUCTS = [
    (0, 0, 256, 96, 32, "X W_qkv"), (0, 0, 256, 32, 32, "Z W_o"),
    (0, 0, 256, 128, 32, "X W_1"), (0, 0, 256, 32, 128, "S W_2"),
    (0, 1, 256, 32, 96, "dQKV W_qkv^T"), (0, 1, 256, 32, 32, "dY W_o^T"),
    (0, 1, 256, 128, 32, "dY W_2^T"), (0, 1, 256, 32, 128, "dH W_1^T"),
    (1, 0, 32, 96, 256, "X^T dQKV"), (1, 0, 32, 32, 256, "Z^T dY"),
    (1, 0, 32, 128, 256, "X^T dH"), (1, 0, 128, 32, 256, "S^T dY"),
    (0, 0, 928, 192, 64, "X W_qkv, 928 rows, d 64"), (1, 0, 64, 192, 928, "X^T dQKV, 928 rows"),
    (0, 0, 4096, 192, 64, "X W_qkv, 4096 rows, d 64"), (0, 0, 4096, 64, 64, "Z W_o, 4096 rows"),
    (0, 1, 4096, 64, 64, "dY W_o^T, 4096 rows"), (1, 0, 64, 192, 4096, "X^T dQKV, 4096 rows"),
    (0, 0, 4096, 768, 256, "X W_qkv, 4096 rows, d 256 (BLAS)"),
]


def _time_calls(fn, calls):
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def products(rounds, tiles):
    from attnx.kernels import _blas
    from attnx.kernels._testing import gemm_into
    rng = np.random.default_rng(0)
    rows = []
    for ta, tb, m, n, k, what in PRODUCTS:
        a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
        b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
        c = np.empty((m, n), np.float32)
        calls = max(3, int(3e6 / (m * n * k)) * 10)
        best = {0: np.inf, tiles: np.inf}
        for r in range(rounds):
            for level in ((tiles, 0) if r % 2 == 0 else (0, tiles)):
                _blas._attach_for_benchmarks(level)
                best[level] = min(best[level], _time_calls(
                    lambda: gemm_into(bool(ta), bool(tb), a, b, c, m, n, k), calls))
        _blas._attach_for_benchmarks(_level())
        flop = 2.0 * m * n * k
        rows.append({"op": f"{'T' if ta else 'N'}{'T' if tb else 'N'}", "m": m, "n": n, "k": k,
                     "what": what, "blas_us": best[0] * 1e6, "tiles_us": best[tiles] * 1e6,
                     "blas_gflops": flop / best[0] / 1e9,
                     "tiles_gflops": flop / best[tiles] / 1e9, "speedup": best[0] / best[tiles]})
        print(f"  {rows[-1]['op']} {m:5d} x {n:4d} x {k:5d}  {what:28s} BLAS {best[0] * 1e6:8.2f} us "
              f"({rows[-1]['blas_gflops']:5.1f} GFLOP/s)  tiles {best[tiles] * 1e6:8.2f} us "
              f"({rows[-1]['tiles_gflops']:5.1f})  x{rows[-1]['speedup']:.2f}", flush=True)
    return rows


def _level():
    from attnx.kernels import _ops
    return _ops.simd_level()


def fits(sets, rounds, tiles):
    sys.path[:0] = [os.fspath(HERE), os.fspath(HERE.parent / "examples")]
    import accuracy
    from attnx import TransformerClassifier, TransformerRegressor
    from attnx.kernels import _blas
    rows = []
    for name in sets:
        d = accuracy.LOADERS[name]()
        est = TransformerRegressor if d.task == "regress" else TransformerClassifier
        t = {0: [], tiles: []}
        for r in range(rounds):
            for level in ((tiles, 0) if r % 2 == 0 else (0, tiles)):
                _blas._attach_for_benchmarks(level)
                model = est(random_state=0)
                t0 = time.process_time()
                model.fit(d.Xtr, d.ytr)
                t[level].append(time.process_time() - t0)
        _blas._attach_for_benchmarks(_level())
        paired = [b / a for a, b in zip(t[tiles], t[0])]
        rows.append({"set": name, "blas_s": t[0], "tiles_s": t[tiles],
                     "paired_speedup_median": float(np.median(paired)),
                     "paired_speedup_min": min(paired), "paired_speedup_max": max(paired)})
        print(f"  {name:16s} BLAS median {np.median(t[0]):.3f} s (min {min(t[0]):.3f})  tiles "
              f"median {np.median(t[tiles]):.3f} s (min {min(t[tiles]):.3f})  paired BLAS/tiles "
              f"median x{np.median(paired):.3f} [{min(paired):.3f}, {max(paired):.3f}]", flush=True)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sets", default="Sunspots,JapaneseVowels,UnitTest,Covid3Month,"
                                      "CardanoSentiment,PigCVP,ACSF1,OSULeaf,Coffee")
    ap.add_argument("--no-fits", action="store_true")
    ap.add_argument("--level", type=int, choices=(1, 2), default=None,
                    help="the tiles to time: 1 AVX2, 2 AVX-512 (default: this machine's level)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    from attnx.kernels import _ops
    import threadpoolctl
    info = {"cpu": platform.processor() or platform.machine(),
            "simd_level": _ops.simd_level_name(),
            "blas": [{k: i.get(k) for k in ("internal_api", "version", "architecture")}
                     for i in threadpoolctl.threadpool_info()],
            "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
            "threads": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}}
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(line.split(":", 1)[1].strip() for line in f
                               if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"{info['cpu']}, attnx SIMD level {info['simd_level']}, BLAS {info['blas']}")
    if _ops.simd_level() == 0:
        print("no AVX2: the tiles do not run here (both sides would be BLAS)")
        return
    tiles = args.level or _ops.simd_level()
    if tiles > _ops.simd_level():
        sys.exit(f"--level {tiles}: this CPU runs attnx at level {_ops.simd_level()}")
    out = {"machine": info, "rounds": args.rounds, "tiles_level": tiles}
    print(f"products (best of --rounds turns), tiles of level {tiles}:")
    out["products"] = products(args.rounds, tiles)
    if not args.no_fits:
        print("fits (defaults, random_state 0; CPU time):")
        out["fits"] = fits([s for s in args.sets.split(",") if s], args.rounds, tiles)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
