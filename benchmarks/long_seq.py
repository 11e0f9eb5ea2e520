"""Long-sequence attention: attnx (the path its "auto" rule picks, printed per row)
against PyTorch's scaled_dot_product_attention (its CPU flash kernel) with autograd.

Each (implementation, configuration) runs in its own subprocess, so that the
peak-memory figure (ru_maxrss after the timed steps minus ru_maxrss after setup)
belongs to that implementation alone. Both run with the same thread count
(OMP/OpenBLAS/MKL env vars, threadpoolctl, torch.set_num_threads).

    python benchmarks/long_seq.py                  # T = 2048 ... 16384, causal and not
    python benchmarks/long_seq.py --t 2048 4096 --steps 2 --json out.json
"""
import argparse
import json
import os
import subprocess
import sys
import time

D_MODEL, N_HEADS, BATCH = 256, 8, 1


def worker(impl, t, causal, steps, threads):
    import resource

    import numpy as np
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCH, t, D_MODEL)).astype(np.float32)
    y_true = rng.normal(size=x.shape).astype(np.float32)
    with threadpool_limits(threads):
        if impl == "attnx":
            import attnx

            layer = attnx.MultiHeadAttention(D_MODEL, N_HEADS, causal=causal, random_state=0,
                                             input_grad=False)
            opt = attnx.AdamW(layer.params, lr=1e-4)
            y = np.empty_like(x)
            dy = np.empty_like(x)

            def step():
                layer.forward(x, out=y)
                attnx.mse_loss(y, y_true, out=dy)
                layer.backward(dy)
                opt.step(layer.grads)

            def predict():
                layer.forward(x, grad=False, out=y)
            path = layer._path(t, t)
        else:
            import torch
            import torch.nn.functional as F

            torch.set_num_threads(threads)
            dh = D_MODEL // N_HEADS
            g = torch.Generator().manual_seed(0)
            w = {k: (torch.rand(D_MODEL, D_MODEL, generator=g) * 2 - 1).div_(D_MODEL ** 0.5)
                 .requires_grad_() for k in ("Wq", "Wk", "Wv", "Wo")}
            opt = torch.optim.AdamW(list(w.values()), lr=1e-4)
            xt, yt = torch.from_numpy(x), torch.from_numpy(y_true)

            def fwd():
                q, k, v = ((xt @ w[n]).view(BATCH, t, N_HEADS, dh).transpose(1, 2)
                           for n in ("Wq", "Wk", "Wv"))
                z = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                return z.transpose(1, 2).reshape(BATCH, t, D_MODEL) @ w["Wo"]

            def step():
                loss = ((fwd() - yt) ** 2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()

            def predict():
                with torch.no_grad():
                    fwd()
            path = f"sdpa ({torch.backends.cpu.get_cpu_capability()})"

        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out = {}
        for name, fn in (("train", step), ("predict", predict)):
            fn()  # warm-up
            times = []
            for _ in range(steps):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            out[name] = sorted(times)[len(times) // 2]
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out["peak_mib"] = (peak - base) / 1024
        out["path"] = path
        if impl == "attnx":
            from run import _blas_by_impl, _cpu_name
            from threadpoolctl import threadpool_info
            out["cpu"] = _cpu_name()
            out["blas"] = _blas_by_impl(threadpool_info(), attnx, None)["attnx"]
            out["simd"] = attnx.kernels._ops.simd_level_name()
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--t", type=int, nargs="+", default=[2048, 4096, 8192, 16384],
                    help="sequence lengths (default: 2048 4096 8192 16384)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="threads for every library (default: all cores)")
    ap.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up")
    ap.add_argument("--json", help="also write the results to this JSON file")
    ap.add_argument("--worker", nargs=3, metavar=("IMPL", "T", "CAUSAL"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        impl, t, causal = args.worker
        print(json.dumps(worker(impl, int(t), causal == "1", args.steps, args.threads)))
        return 0
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads),
               OPENBLAS_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    print(f"long-sequence attention, B={BATCH}, d={D_MODEL}, heads={N_HEADS}, float32, "
          f"{args.threads} thread(s), OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(not set)')}")
    print(f"{'T':>6} {'causal':>6} {'attnx path':>10} | {'attnx train':>11} {'sdpa train':>10} {'ratio':>6} | "
          f"{'attnx fwd':>9} {'sdpa fwd':>8} {'ratio':>6} | {'attnx MiB':>9} {'sdpa MiB':>8}")
    rows = []
    for t in args.t:
        for causal in (True, False):
            res = {}
            for impl in ("attnx", "torch-sdpa"):
                r = subprocess.run([sys.executable, __file__, "--worker", impl, str(t),
                                    "1" if causal else "0", "--steps", str(args.steps),
                                    "--threads", str(args.threads)],
                                   env=env, capture_output=True, text=True)
                if r.returncode != 0:
                    sys.stderr.write(r.stderr)
                    raise SystemExit(f"{impl} failed at T={t}")
                res[impl] = json.loads(r.stdout.strip().splitlines()[-1])
            a, s = res["attnx"], res["torch-sdpa"]
            rows.append({"T": t, "causal": causal, **{f"{k}_{m}": v[m] for k, v in res.items()
                                                    for m in v}})
            if not rows[:-1]:
                print(f"# CPU {a['cpu']}; attnx SIMD level {a['simd']}; {a['blas']}; "
                      f"torch {s['path']}", flush=True)
            print(f"{t:>6} {str(causal):>6} {a['path']:>10} | {a['train'] * 1e3:>9.0f}ms {s['train'] * 1e3:>8.0f}ms "
                  f"{s['train'] / a['train']:>6.2f} | {a['predict'] * 1e3:>7.0f}ms "
                  f"{s['predict'] * 1e3:>6.0f}ms {s['predict'] / a['predict']:>6.2f} | "
                  f"{a['peak_mib']:>9.0f} {s['peak_mib']:>8.0f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
