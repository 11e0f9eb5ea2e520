"""Time one training epoch of a data-parallel fit with P = 1 and P = 2 MPI ranks.

    python benchmarks/mpi_epoch.py                 # both modes, `mpiexec -n P` for each P: a table
    python benchmarks/mpi_epoch.py --modes balanced --epochs 5    # one mode, more epochs
    python benchmarks/mpi_epoch.py --plan          # the multi-machine model of README "Scaling out"

Every run sees the same global data set (the shards of attnx.distributed.shard) and
the same global batch size. distributed="exact": the P-rank fit does the arithmetic
of the 1-rank fit (the weights agree to float rounding) but each rank pads its batch
to its largest share of the shuffled global batch; distributed="balanced" (the
estimators' default): each rank takes batch / P rows of its own shard per step (the
weights differ from P = 1's; the last epoch's training loss is shown instead). Each
rank uses one thread (OMP/OpenBLAS pinned), so P = 2 uses two cores where P = 1 uses
one: run it on an otherwise idle machine (the load average is printed with the
table). Reported per model, mode and P: the median time of an epoch (over --epochs
timed epochs, after one warm-up epoch), the share of the epoch spent inside the two
Allreduce calls of each step (waiting for the slower rank included), the same
Allreduce timed alone on the gradient buffer after a barrier, and the bytes each rank
contributes per step (the flat gradient plus a 5-value loss vector; a ring Allreduce
moves 2 (P-1)/P times that over each link).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.fspath(Path(__file__).resolve().parent.parent))  # this checkout's attnx

ROOT = Path(__file__).resolve().parent.parent
# name: (class, n_heads, n_layers, d_hidden, seq_len, d_model, batch_size)
MODELS = {
    "attn-32x128x64-h8": ("attention", 8, None, None, 128, 64, 32),
    "tf-32x128x64-h8-f256-l2": ("transformer", 8, 2, 256, 128, 64, 32),
}


def _make(name, dtype, mode):
    import attnx

    kind, h, layers, hidden, _, _, bs = MODELS[name]
    common = dict(batch_size=bs, lr=1e-3, random_state=0, dtype=dtype, options={"distributed": mode})
    if kind == "attention":
        return attnx.AttentionRegressor(h, **common)
    # the bare X -> Y Transformer (no dropout, which comm refuses, no schedule, no
    # standardisation), as this benchmark always timed
    bare = dict(d_model=None, positional="none", norm=None, dropout=0.0, epochs=100,
                patch_len=1, instance_norm=None)
    options = dict(n_iter_no_change=10, lr_schedule="constant", max_grad_norm=None,
                   decay="all", standardize=False, distributed=mode)
    common["options"] = options
    return attnx.TransformerRegressor(h, layers, hidden, **bare, **common)


def worker(args):
    from mpi4py import MPI

    from attnx.distributed import Communicator, shard

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    dtype = np.dtype(args.dtype).type
    out = {}
    for name in args.models:
        _, _, _, _, t, d, bs = MODELS[name]
        rng = np.random.default_rng(0)
        X = rng.normal(size=(args.samples, t, d)).astype(dtype)
        Y = np.roll(X, 1, axis=1)
        part = shard(args.samples, rank, size)
        Xs, Ys = X[part].copy(), Y[part].copy()
        del X, Y
        est = _make(name, dtype, args.mode)
        dist = Communicator(comm)
        seen = [0]      # the largest batch buffer of any epoch, in rows (recorded, not changed)
        plain_rows = dist.rows

        def rows(parts, bs, plain_rows=plain_rows, seen=seen):
            r = plain_rows(parts, bs)
            seen[0] = max(seen[0], r)
            return r
        dist.rows = rows
        est.partial_fit(Xs, Ys, comm=dist)  # warm-up: workspaces, first touch of the pages
        dist.steps, dist.allreduce_seconds, dist.allreduce_bytes = 0, 0.0, 0
        times = []
        for _ in range(args.epochs):
            comm.Barrier()
            t0 = time.perf_counter()
            est.partial_fit(Xs, Ys, comm=dist)
            times.append(time.perf_counter() - t0)
        grads = est.model_.grads.flat
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(args.reps):
            comm.Allreduce(MPI.IN_PLACE, grads, op=MPI.SUM)
        alone = (time.perf_counter() - t0) / args.reps
        mine = dict(epoch=float(np.median(times)), allreduce=dist.allreduce_seconds / args.epochs,
                    steps=dist.steps / args.epochs,
                    bytes_per_step=dist.allreduce_bytes / max(dist.steps, 1), alone=alone,
                    loss=est.loss_curve_[-1],
                    rows=seen[0])
        every = comm.gather(mine, root=0)
        if rank == 0 and args.params_out:
            np.save(f"{args.params_out}-{name}-{args.mode}-P{size}.npy", est.model_.params.flat)
        if rank == 0:
            epoch = max(r["epoch"] for r in every)
            out[name] = dict(
                P=size, mode=args.mode, samples=args.samples, batch_size=bs,
                params=int(grads.size), loss=every[0]["loss"],
                epoch_s=epoch, steps_per_epoch=every[0]["steps"],
                allreduce_share=float(np.mean([r["allreduce"] for r in every])) / epoch,
                allreduce_alone_us=1e6 * max(r["alone"] for r in every),
                bytes_per_step=int(every[0]["bytes_per_step"]),
                rows_per_rank=[r["rows"] for r in every])
    if rank == 0:
        print("RESULT " + json.dumps(out), flush=True)


def run_all(args):
    mpiexec = Path(sys.executable).parent / "mpiexec"
    mpiexec = str(mpiexec) if mpiexec.exists() else shutil.which("mpiexec")
    if mpiexec is None:
        sys.exit("mpiexec not found: pip install 'attnx[mpi]'")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    import tempfile

    results = []
    tmp = tempfile.mkdtemp(prefix="attnx-mpi-epoch-")
    load = []
    for mode in args.modes:
        for p in args.ranks:
            cmd = [mpiexec, "-n", str(p), sys.executable, os.fspath(Path(__file__).resolve()),
                   "--worker", "--samples", str(args.samples), "--epochs", str(args.epochs),
                   "--dtype", args.dtype, "--params-out", os.path.join(tmp, "w"),
                   "--mode", mode, "--models", *args.models]
            load.append(os.getloadavg()[0])
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
            if r.returncode != 0:
                sys.exit(f"mpiexec -n {p} failed:\n{r.stdout}\n{r.stderr}")
            line = next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))
            for name, res in json.loads(line[7:]).items():
                results.append(dict(model=name, **res))
    load.append(os.getloadavg()[0])
    lines = [f"{args.samples} samples, {args.dtype}, 1 thread per rank, median of "
             f"{args.epochs} epochs after one warm-up; {os.cpu_count()} cores, 1-minute load "
             f"average {min(load):.2f}-{max(load):.2f} around the runs",
             "| model | mode | P | params | steps/epoch | epoch s | speed-up | Allreduce share "
             "| Allreduce alone us | bytes/step | batch rows per rank | last loss |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    base = {(r["model"], r["mode"]): r["epoch_s"] for r in results if r["P"] == 1}
    for r in results:
        key = (r["model"], r["mode"])
        speed = base[key] / r["epoch_s"] if key in base else float("nan")
        lines.append(f"| {r['model']} | {r['mode']} | {r['P']} | {r['params']} "
                     f"| {r['steps_per_epoch']:.0f} | {r['epoch_s']:.3f} | {speed:.2f}x "
                     f"| {100 * r['allreduce_share']:.1f}% | {r['allreduce_alone_us']:.0f} "
                     f"| {r['bytes_per_step']} | {'/'.join(map(str, r['rows_per_rank']))} "
                     f"| {r['loss']:.4g} |")
    # exact mode, the same global batches: the P-rank weights equal the 1-rank ones
    # to rounding (balanced mode draws other batches: compare the losses instead)
    for name in args.models if "exact" in args.modes else ():
        ref = np.load(os.path.join(tmp, f"w-{name}-exact-P{args.ranks[0]}.npy"))
        for p in args.ranks[1:]:
            w = np.load(os.path.join(tmp, f"w-{name}-exact-P{p}.npy"))
            diff = float(np.max(np.abs(w.astype(np.float64) - ref)) / np.max(np.abs(ref)))
            lines.append(f"{name}, exact: weights after {args.epochs + 1} epochs, P={p} vs "
                         f"P={args.ranks[0]}: max relative difference {diff:.1e} ({args.dtype})")
    shutil.rmtree(tmp, ignore_errors=True)
    text = "\n".join(lines)
    print(text)
    if args.save:
        out = ROOT / "benchmarks" / "results"
        (out / "mpi_epoch.json").write_text(json.dumps(results, indent=1) + "\n")
        (out / "mpi_epoch.txt").write_text(text + "\n")


# ---- the multi-machine model -------------------------------------------------------
# (name, parameters, float32 training step ms at 1 thread, global batch): the README's
# example models; step times from its benchmark table (tf-8x10 measured for this table)
PLAN_MODELS = [
    ("estimator example: tf d=8 T=10 l2, batch 32", None, None, 32),
    ("attn-32x128x64-h8", 16640, 13.3, 32),
    ("tf-32x128x64-h8-f256-l2", 99456, 70.4, 32),
    ("tf-8x512x256-h8-f1024-l2", 1577472, 583.0, 8),
]
NETWORKS = [("10 Gb/s Ethernet", 1.25e9, 30e-6), ("100 Gb/s InfiniBand", 12.5e9, 2e-6)]


def allreduce_seconds(nbytes, p, bandwidth, latency):
    """Ring Allreduce: 2 (P-1) messages, each rank sends 2 (P-1)/P of the buffer."""
    if p == 1:
        return 0.0
    return 2 * (p - 1) * latency + 2 * (p - 1) / p * nbytes / bandwidth


def plan(args):
    import attnx

    rows = []
    for name, n_params, step_ms, bs in PLAN_MODELS:
        if n_params is None:  # measure the small estimator model here
            est = attnx.TransformerRegressor(2, 2, epochs=1, batch_size=bs, random_state=0)
            X, Y = attnx.datasets.max_position_task(bs * 64, 10, 8, random_state=0)
            est.partial_fit(X, Y)
            t0 = time.perf_counter()
            est.partial_fit(X, Y)
            step_ms = 1e3 * (time.perf_counter() - t0) / 64
            n_params = est.model_.params.flat.size
        nbytes = 4 * n_params
        for net, bw, lat in NETWORKS:
            t1 = step_ms / 1e3
            speed = {p: t1 / (t1 / p + allreduce_seconds(nbytes, p, bw, lat))
                     for p in (2, 4, 8, 16, 32)}
            # a rank needs at least one sample of each global batch
            rows.append(f"| {name} | {n_params} | {nbytes / 1e3:.0f} KB | {step_ms:.2f} | {net} | "
                        + " | ".join(f"{speed[p]:.1f}" if p <= bs else "-"
                                     for p in (2, 4, 8, 16, 32))
                        + f" | {bs} |")
    print("| model | params | float32 bytes | step ms (P=1) | network | S(2) | S(4) | S(8) "
          "| S(16) | S(32) | global batch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", type=int, default=512, help="global samples (an epoch)")
    p.add_argument("--epochs", type=int, default=3, help="timed epochs per run")
    p.add_argument("--reps", type=int, default=20, help="repetitions of the lone Allreduce")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--models", nargs="+", choices=sorted(MODELS), default=sorted(MODELS))
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    p.add_argument("--modes", nargs="+", choices=("balanced", "exact"),
                   default=["balanced", "exact"], help="the estimators' distributed= values")
    p.add_argument("--mode", default="balanced", help=argparse.SUPPRESS)  # a worker's mode
    p.add_argument("--save", action="store_true",
                   help="write benchmarks/results/mpi_epoch.{json,txt}")
    p.add_argument("--plan", action="store_true", help="print the multi-machine model")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--params-out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
    elif args.plan:
        plan(args)
    else:
        run_all(args)


if __name__ == "__main__":
    main()
