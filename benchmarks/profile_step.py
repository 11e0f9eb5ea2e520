"""Phases of one attention training step (forward, MSE, backward, AdamW) in thread CPU
time, for a profile of where the time goes. Run it under a sampling profiler for the
per-function split, e.g.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 perf record -o step.data \
        python benchmarks/profile_step.py --steps 400
    perf report -i step.data --no-children --sort dso,symbol

Thread CPU time (not wall time) is what a phase cost this thread, so a machine shared
with other jobs changes it less; with more than one thread it undercounts the others.
"""
import argparse
import time

import numpy as np

import attnx
from attnx.kernels import _ops


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="32,128,64,8", help="batch,T,d_model,heads")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--attention", default="auto", help="auto, dense, blocked or fused")
    ap.add_argument("--steps", type=int, default=80)
    args = ap.parse_args(argv)
    nb, t, d, h = (int(v) for v in args.shape.split(","))
    dt = np.dtype(args.dtype)
    layer = attnx.MultiHeadAttention(d, h, dtype=dt, causal=args.causal, random_state=0,
                                     input_grad=False, attention=args.attention)
    opt = attnx.AdamW(layer.params)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((nb, t, d)).astype(dt)
    target = rng.standard_normal((nb, t, d)).astype(dt)
    y, dy = np.empty_like(x), np.empty_like(x)
    phases = {"forward": [], "loss": [], "backward": [], "adamw": []}
    for i in range(args.steps + 3):
        t0 = time.thread_time()
        layer.forward(x, out=y)
        t1 = time.thread_time()
        attnx.mse_loss(y, target, out=dy)
        t2 = time.thread_time()
        layer.backward(dy)
        t3 = time.thread_time()
        opt.step(layer.grads)
        t4 = time.thread_time()
        if i >= 3:  # warm-up: workspaces, first-touch pages
            for k, a, b in (("forward", t0, t1), ("loss", t1, t2), ("backward", t2, t3),
                            ("adamw", t3, t4)):
                phases[k].append(b - a)
    path = layer._path(t, t)
    print(f"B={nb} T={t} d={d} H={h} {args.dtype}{' causal' if args.causal else ''}, "
          f"path {path}, SIMD level {_ops.simd_level_name()}, "
          f"{args.steps} steps, thread CPU time (median / min):")
    total = 0.0
    for k, v in phases.items():
        med = float(np.median(v))
        total += med
        print(f"  {k:9s} {med * 1e3:8.3f} / {min(v) * 1e3:8.3f} ms")
    print(f"  {'step':9s} {total * 1e3:8.3f} ms")


if __name__ == "__main__":
    main()
