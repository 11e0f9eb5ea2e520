#!/usr/bin/env python3
"""Benchmark race: attnx against plain NumPy, PyTorch and PyTorch SDPA.

For every configuration and dtype it times a full training step (forward, MSE
loss, backward, AdamW) and a forward-only predict, per batch, for each
implementation, and reports median / min / max time, the ratio to attnx
(other / attnx: above 1 means attnx is faster), achieved GFLOP/s, peak memory
and the BLAS libraries in use.

How it measures
  * One worker process per thread count. The parent re-runs this script with
    `--worker --threads N`; the worker sets OMP_NUM_THREADS, OPENBLAS_NUM_THREADS
    and MKL_NUM_THREADS before importing anything numeric, then applies
    threadpoolctl.threadpool_limits(N) and torch.set_num_threads(N), checks that
    every library reports N, and returns its results as JSON.
  * Implementations run interleaved in rounds: each round gives every
    implementation one turn of consecutive steps, and the order rotates from
    round to round. Each turn starts with a pause and `--turn-warmup` untimed
    steps, so that every library is timed in the steady state of a training
    loop, not in the wake of the previous library: OpenBLAS's idle workers
    keep spinning for ~0.1 s after a call (measured here: an attnx step 30 ms
    after NumPy's 2-thread matmuls took 13 ms instead of 7), and the first step
    after any pause finds cold caches and sleeping OpenMP workers (up to 2x on
    a small step). Every step is timed on its own after `--warmup` untimed steps.
  * GFLOP/s counts 2*m*n*k per matrix product of the step (see step_flops);
    masked (causal) attention is counted as full for every implementation,
    including PyTorch SDPA whose kernel skips the masked blocks, so GFLOP/s
    ratios equal time ratios. Elementwise work (softmax, SiLU, AdamW) is not
    counted.
  * Peak memory: the highest number of bytes live in the array library's own
    allocator, above what was live before, while a fresh copy of the model is
    built, its optimizer made and two training steps run ("train"), or while a
    built model runs two predicts ("predict"; attnx's inference workspace and
    output array are made inside this window). NumPy and attnx data is counted
    with tracemalloc (NumPy reports its array buffers to it); PyTorch's CPU
    allocator with the profiler's memory events. Memory held inside the BLAS
    libraries (packing buffers) is not counted for anyone. Measured in a
    separate pass after the timing, never while timing.
  * The machine's GEMM limit: a large square sgemm / dgemm through
    scipy.linalg.blas (the OpenBLAS attnx calls), with the same thread count;
    NumPy's matmul and torch.mm of the same size are shown beside it.

Examples
  python benchmarks/run.py                         # full suite, 1 and 2 threads
  python benchmarks/run.py --quick --threads 1     # seconds: the CI smoke test
  python benchmarks/run.py --only attention --dtypes float32 --json out.json
"""
import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
IMPLS = ("attnx", "numpy", "torch", "torch-sdpa")
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
HYPER = dict(lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)


# ---------------------------------------------------------------- configurations
@dataclass(frozen=True)
class Config:
    kind: str            # "attention", "transformer" or "sequence"
    B: int
    T: int
    d: int
    H: int
    causal: bool = False
    hidden: int = 0      # transformer only
    layers: int = 0      # transformer and sequence
    features: int = 0    # sequence only: input features per position
    outputs: int = 0     # sequence only: outputs per sequence (mean pooling)

    @property
    def id(self):
        pre = {"attention": "attn", "transformer": "tf", "sequence": "seq"}[self.kind]
        s = f"{pre}-{self.B}x{self.T}x{self.d}-h{self.H}"
        if self.kind != "attention":
            s += f"-f{self.hidden}-l{self.layers}"
        if self.kind == "sequence":
            s += f"-in{self.features}-out{self.outputs}"
        return s + ("-causal" if self.causal else "")


FULL_CONFIGS = (
    Config("attention", 32, 128, 64, 8),
    Config("attention", 32, 128, 64, 8, causal=True),
    Config("attention", 8, 512, 256, 8),
    Config("attention", 64, 64, 128, 4),
    Config("attention", 4, 1024, 128, 8),
    Config("transformer", 32, 128, 64, 8, hidden=256, layers=2),
    Config("transformer", 32, 128, 64, 8, hidden=256, layers=3),
    Config("transformer", 8, 512, 256, 8, hidden=1024, layers=2),
    # attnx.SequenceModel: embedding, 2 pre-norm blocks, final LayerNorm, mean pooling,
    # linear head. Peers: the PyTorch twin of attnx.testing.torch_twin ("torch", attention
    # written out); no NumPy or SDPA version of this model exists, so those are left out.
    Config("sequence", 32, 128, 64, 8, hidden=256, layers=2, features=16, outputs=4),
    # the accuracy panel's shapes (d_model 64, 4 heads, 2 blocks): a univariate series of
    # 150 steps, 12 channels of ~29 steps (JapaneseVowels), and 2000 steps as 16 patch
    # tokens of 125 values (the estimators' patches are the model's input features)
    Config("sequence", 16, 150, 64, 4, hidden=128, layers=2, features=1, outputs=4),
    Config("sequence", 32, 29, 64, 4, hidden=128, layers=2, features=12, outputs=4),
    Config("sequence", 16, 16, 64, 4, hidden=128, layers=2, features=125, outputs=4),
)
# implementations that have a version of each model kind
KIND_IMPLS = {"attention": IMPLS, "transformer": IMPLS, "sequence": ("attnx", "torch")}
QUICK_CONFIGS = (
    Config("attention", 2, 16, 16, 2),
    Config("attention", 2, 16, 16, 2, causal=True),
    Config("transformer", 2, 16, 16, 2, hidden=32, layers=2),
)


# Variables that cap the instruction sets each library uses (an AVX2 stand-in on an
# AVX-512 machine: ATTNX_SIMD=1 OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2
# MKL_ENABLE_INSTRUCTIONS=AVX2).
CPU_CAP_VARS = ("ATTNX_SIMD", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")


def _attention_flops(c, train, dx):
    """Matrix-product FLOPs (2mnk each) of one self-attention block on B*T rows."""
    n, d, bt2d = c.B * c.T, c.d, c.B * c.T * c.T * c.d
    # forward: [Q|K|V] = X Wqkv (3nd^2 mults), S = QK^T and Z = PV (B*H*T*T*dh each), Y = Z Wo
    f = 2 * n * d * 3 * d + 2 * bt2d + 2 * bt2d + 2 * n * d * d
    if train:
        f += 2 * (2 * n * d * d)          # dWo = Z^T dY, dZ = dY Wo^T
        f += 4 * (2 * bt2d)               # dV, dP, dQ, dK
        f += 2 * n * d * 3 * d            # dWqkv = X^T d[Q|K|V]
        if dx:
            f += 2 * n * 3 * d * d        # dX = d[Q|K|V] Wqkv^T
    return f


def step_flops(c, train):
    """Matmul FLOPs of a training step (train=True) or of a predict: 2*m*n*k per
    GEMM. Models are fitted with input_grad=False, so the first block's dX is
    not computed; causal attention is counted as full."""
    if c.kind == "attention":
        return _attention_flops(c, train, dx=False)
    n, d, f = c.B * c.T, c.d, c.hidden
    total = 0
    if c.kind == "sequence":   # embedding in, head out; the embedding needs every block's dX
        total += (2 * n * c.features * d + 2 * c.B * d * c.outputs) * (2 if train else 1)
    for i in range(c.layers):
        total += _attention_flops(c, train, dx=i > 0 or c.kind == "sequence")
        total += 2 * (2 * n * d * f)                   # H = Z~ W1, out = S W2
        if train:
            total += 4 * (2 * n * d * f)               # dW2, dS, dW1, dZ~
    return total


def select_configs(args):
    configs = QUICK_CONFIGS if args.quick else FULL_CONFIGS
    if args.only:
        configs = tuple(c for c in configs if c.kind == args.only)
    if args.configs:
        pats = [p.strip() for p in args.configs.split(",") if p.strip()]
        configs = tuple(c for c in configs if any(p in c.id for p in pats))
    return configs


# ---------------------------------------------------------------- command line
def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="benchmarks/run.py",
        description="Time attnx against NumPy, PyTorch and PyTorch SDPA: a training step "
                    "(forward, MSE loss, backward, AdamW) and a predict per batch.",
        epilog="Each thread count runs in its own worker process with the thread count "
               "fixed for every library before import. Ratios are other/attnx median "
               "times: above 1 means attnx is faster.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter, allow_abbrev=False)
    p.add_argument("--quick", action="store_true",
                   help="tiny shapes and few steps (smoke test); sets --steps 3 --warmup 1 "
                        "--rounds 3 --gemm-size 128 --pause 0.03 unless given")
    p.add_argument("--only", choices=("attention", "transformer", "sequence"),
                   help="one model kind")
    p.add_argument("--configs", default="",
                   help="comma-separated substrings of configuration ids to keep, e.g. "
                        "'attn-32x128,tf-8x512' (see --list)")
    p.add_argument("--list", action="store_true", help="list the configuration ids and exit")
    p.add_argument("--dtypes", default="float32,float64", help="comma-separated dtypes")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts, one "
                   "worker process each")
    p.add_argument("--impls", default=",".join(IMPLS),
                   help=f"comma-separated implementations among {','.join(IMPLS)} "
                        "(attnx is always run: ratios are relative to it)")
    p.add_argument("--steps", type=int, default=None, help="timed steps per implementation "
                   "(default 20; 3 with --quick)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps first "
                   "(default 3; 1 with --quick)")
    p.add_argument("--rounds", type=int, default=None, help="rounds the timed steps are "
                   "split into (default 5; 3 with --quick)")
    p.add_argument("--pause", type=float, default=None, help="seconds of sleep before "
                   "each turn (default 0.15, longer than OpenBLAS's idle workers spin; "
                   "0.03 with --quick)")
    p.add_argument("--turn-warmup", type=int, default=1, help="untimed steps at the "
                   "start of every turn")
    p.add_argument("--gemm-size", type=int, default=None, help="n of the n x n x n "
                   "GEMM-limit measurement (default 2048; 128 with --quick)")
    p.add_argument("--wait-quiet", type=float, default=None, metavar="SECONDS",
                   help="before each race wait up to SECONDS for other processes to use "
                        "less than 0.15 CPU (Linux; default 120, 0 with --quick; 0 disables)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory pass")
    p.add_argument("--phases", action="store_true",
                   help="also time attnx's forward / loss / backward / AdamW separately")
    p.add_argument("--json", metavar="FILE", help="write all results as JSON")
    p.add_argument("--txt", metavar="FILE", help="also write the printed table to FILE")
    p.add_argument("--seed", type=int, default=1, help="seed of weights and data")
    # internal: the parent runs one worker per thread count
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    quick = args.quick
    for name, full, small in (("steps", 20, 3), ("warmup", 3, 1), ("rounds", 5, 3),
                              ("gemm_size", 2048, 128), ("wait_quiet", 120.0, 0.0),
                              ("pause", 0.15, 0.03)):
        if getattr(args, name) is None:
            setattr(args, name, small if quick else full)
    if (args.steps < 1 or args.warmup < 0 or args.rounds < 1 or args.gemm_size < 1
            or args.turn_warmup < 0 or args.pause < 0):
        p.error("--steps, --rounds and --gemm-size must be >= 1, --warmup, --turn-warmup "
                "and --pause >= 0")
    args.rounds = min(args.rounds, args.steps)
    args.dtype_list = [s.strip() for s in args.dtypes.split(",") if s.strip()]
    if not args.dtype_list or any(s not in ("float32", "float64") for s in args.dtype_list):
        p.error("--dtypes takes float32 and/or float64")
    try:
        args.thread_list = [int(s) for s in args.threads.split(",") if s.strip()]
    except ValueError:
        p.error("--threads takes comma-separated integers")
    if not args.thread_list or min(args.thread_list) < 1:
        p.error("--threads needs positive integers")
    impls = [s.strip() for s in args.impls.split(",") if s.strip()]
    bad = [s for s in impls if s not in IMPLS]
    if bad:
        p.error(f"unknown implementation(s) {bad}; choose among {list(IMPLS)}")
    args.impl_list = ["attnx"] + [s for s in IMPLS[1:] if s in impls]
    if not args.list and not select_configs(args):
        p.error("no configuration left after --only/--configs")
    return args


# ---------------------------------------------------------------- parent
def _git_state():
    try:
        rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "attnx", "csrc"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return rev + ("+uncommitted kernel changes" if dirty else "") if rev else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def run_parent(args, argv, passthrough):
    runs = []
    for n in args.thread_list:
        fd, out = tempfile.mkstemp(prefix="attnx-bench-", suffix=".json")
        os.close(fd)
        env = dict(os.environ)
        for var in THREAD_VARS:
            env[var] = str(n)
        cmd = [sys.executable, os.path.abspath(__file__), *passthrough,
               "--worker", "--threads", str(n), "--worker-out", out]
        print(f"[run.py] worker: {n} thread(s) ...", file=sys.stderr, flush=True)
        t0 = time.time()
        r = subprocess.run(cmd, env=env)
        if r.returncode != 0:
            print(f"[run.py] the {n}-thread worker failed (exit {r.returncode})", file=sys.stderr)
            return r.returncode or 1
        with open(out) as f:
            runs.append(json.load(f))
        os.unlink(out)
        print(f"[run.py] worker: {n} thread(s) done in {time.time() - t0:.0f} s",
              file=sys.stderr, flush=True)
    doc = {
        "command": "python benchmarks/run.py " + " ".join(argv),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "attnx_commit": _git_state(),
        "settings": {"steps": args.steps, "warmup": args.warmup, "rounds": args.rounds,
                     "pause_s": args.pause, "turn_warmup": args.turn_warmup,
                     "gemm_size": args.gemm_size, "seed": args.seed,
                     "quick": args.quick, "hyper": HYPER,
                     **({"wait_quiet_s": args.wait_quiet} if args.wait_quiet > 0 else {})},
        "runs": runs,
    }
    text = format_report(doc)
    print(text)
    if args.txt:
        with open(args.txt, "w") as f:
            f.write(text + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    return 0


# ---------------------------------------------------------------- report
def _ms(s):
    return f"{s * 1e3:.2f}" if s < 1 else f"{s * 1e3:.0f}"


def _mb(b):
    return "-" if b is None else f"{b / 2**20:.1f}"


def format_report(doc):
    lines = []
    out = lines.append
    runs = doc["runs"]
    first = runs[0]
    env = first["env"]
    out(f"attnx benchmark  {doc['created']}  attnx {first['attnx_version']} "
        f"(commit {doc['attnx_commit']})")
    out(f"command: {doc['command']}")
    builds = sorted({r.get("attnx_build") for r in runs})
    out(f"attnx build (hash of the compiled extensions): {', '.join(map(str, builds))}"
        + ("  WARNING: the workers ran different builds" if len(builds) > 1 else ""))
    s = doc["settings"]
    out(f"steps: {s['steps']} timed after {s['warmup']} warm-up, interleaved in "
        f"{s['rounds']} rounds (order rotated; each turn: {s['pause_s'] * 1e3:.0f} ms pause, "
        f"{s.get('turn_warmup', 0)} untimed step(s), then the timed ones)")
    out(f"machine: {env['cpu']}, {env['cpus']} CPUs, Python {env['python']}, numpy "
        f"{env['numpy']}, scipy {env['scipy']}, torch {env.get('torch') or 'absent'}")
    out(f"OPENBLAS_CORETYPE: {env['openblas_coretype']}  (one environment for every "
        "implementation)")
    if "attnx_simd" in env:
        caps = ", ".join(f"{k}={v}" for k, v in env.get("cpu_caps_env", {}).items())
        out(f"attnx SIMD level: {env['attnx_simd']}" + (f"; set: {caps}" if caps else ""))
    out("BLAS in use:")
    for who, what in first["blas_by_impl"].items():
        out(f"  {who:<11} {what}")
    out("  threadpoolctl:")
    for lib in first["threadpool_info"]:
        out(f"    {lib['user_api']}/{lib['internal_api']} {lib.get('version') or ''} "
            f"arch={lib.get('architecture') or '-'} threads={lib['num_threads']} "
            f"{os.path.basename(lib['filepath'])}")
    out("")
    for run in runs:
        n = run["threads"]
        out(f"=== {n} thread{'s' if n > 1 else ''}  (" + ", ".join(
            f"{k}={v}" for k, v in run["thread_check"].items()) + ")")
        if not run["threads_ok"]:
            out("    WARNING: not every library reports the requested thread count")
        for dt, lim in run["gemm_limit"].items():
            out(f"    GEMM limit {dt} {lim['n']}^3: scipy BLAS {lim['scipy']:.1f} GFLOP/s"
                f" (attnx's), numpy {lim['numpy']:.1f}"
                + (f", torch {lim['torch']:.1f}" if lim.get("torch") else ""))
        hdr = (f"    {'config':<36} {'dtype':<7} {'mode':<7} {'impl':<10} {'median ms':>9} "
               f"{'min ms':>8} {'max ms':>8} {'ratio':>6} {'GFLOP/s':>8} {'%limit':>6} "
               f"{'peak MB':>8}")
        out(hdr)
        out("    " + "-" * (len(hdr) - 4))
        prev = None
        for r in run["results"]:
            if prev is not None and (r["config"], r["dtype"]) != prev:
                out("")
            prev = (r["config"], r["dtype"])
            for name, m in r["impls"].items():
                out(f"    {r['config']:<36} {r['dtype']:<7} {r['mode']:<7} {name:<10} "
                    f"{_ms(m['median_s']):>9} {_ms(m['min_s']):>8} {_ms(m['max_s']):>8} "
                    f"{m['ratio']:>6.2f} {m['gflops']:>8.1f} {100 * m['frac_limit']:>5.1f}% "
                    f"{_mb(m.get('peak_bytes')):>8}")
            if (r.get("foreign_cpu") or 0) >= 0.1:
                out(f"    {'':<36} {'':<7} {'':<7} NOTE: other processes used "
                    f"{r['foreign_cpu']:.2f} CPU during this race (noisy)")
            if r.get("loss_check"):
                out(f"    {'':<36} {'':<7} {'':<7} {r['loss_check']}")
            if r.get("phases"):
                ph = r["phases"]
                tot = sum(ph.values())
                out(f"    {'':<36} {'':<7} {'':<7} attnx phases (median ms): " + ", ".join(
                    f"{k} {_ms(v)} ({100 * v / tot:.0f}%)" for k, v in ph.items()))
        out("")
    out("Ratios other/attnx of the median time (>1: attnx faster); 'best' is the "
        "fastest other implementation")
    others = [i for i in IMPLS[1:] if any(i in r["impls"] for run in runs for r in run["results"])]
    cols = others + ["best"]
    short = {"torch-sdpa": "sdpa"}
    width = 6
    block = lambda cells: " ".join(f"{c:>{width}}" for c in cells)  # noqa: E731
    head1 = f"  {'':<36} {'':<7} {'':<7}"
    head2 = f"  {'config':<36} {'dtype':<7} {'mode':<7}"
    for run in runs:
        title = f"{run['threads']} thread{'s' if run['threads'] > 1 else ''}"
        head1 += " | " + f"{title:^{len(cols) * (width + 1) - 1}}"
        head2 += " | " + block(short.get(c, c) for c in cols)
    out(head1)
    out(head2)
    out("  " + "-" * (len(head2) - 2))
    keyed = [{(r["config"], r["dtype"], r["mode"]): r for r in run["results"]} for run in runs]
    for key in keyed[0]:
        row = f"  {key[0]:<36} {key[1]:<7} {key[2]:<7}"
        for k in keyed:
            r = k.get(key)
            cells = []
            for c in cols:
                if r is None:
                    v = None
                elif c == "best":
                    v = r.get("best_other_ratio")
                else:
                    v = r["impls"].get(c, {}).get("ratio")
                cells.append("-" if v is None else f"{v:.2f}")
            row += " | " + block(cells)
        out(row)
    out("")
    out("GFLOP/s: 2mnk per matrix product of the step (elementwise work not counted; causal "
        "counted as full for all, though torch-sdpa skips masked blocks). %limit: of scipy's "
        "sgemm/dgemm above. Peak MB: bytes live in the array library's allocator during "
        "model+optimizer creation and 2 steps (train) or 2 predicts (predict): tracemalloc "
        "for attnx/numpy, profiler memory events for torch; BLAS-internal buffers excluded.")
    return "\n".join(lines)


# ---------------------------------------------------------------- worker
def run_worker(args):
    n = args.threads = args.thread_list[0]
    for var in THREAD_VARS:           # before numpy/scipy/torch load their thread pools
        os.environ[var] = str(n)
    if os.path.isdir(os.path.join(REPO, "attnx", "kernels")) and any(
            f.endswith((".so", ".pyd")) for f in os.listdir(os.path.join(REPO, "attnx", "kernels"))):
        sys.path.insert(0, REPO)      # attnx built in place in this checkout
    sys.path.insert(0, HERE)

    import gc
    import numpy as np
    import scipy
    import threadpoolctl

    # attnx first: its OpenMP runtime is then the system libgomp it was built against
    # (a later torch shares that libgomp: one OpenMP runtime in the process, by soname)
    import attnx
    torch = None
    want_torch = any(i.startswith("torch") for i in args.impl_list)
    if want_torch:
        try:
            import torch
        except ImportError:
            print("[run.py] torch does not import: torch implementations skipped",
                  file=sys.stderr)
    import numpy_model as nm
    tm = None
    if torch is not None:
        import torch_model as tm
        torch.set_num_threads(n)
    impl_list = [i for i in args.impl_list if not i.startswith("torch") or torch is not None]
    limiter = threadpoolctl.threadpool_limits(limits=n)  # noqa: F841  (kept for the run)

    info = threadpoolctl.threadpool_info()
    check = {"attnx_omp": attnx.kernels._ops.max_threads()}
    for lib in info:
        check[f"{lib['internal_api']}:{os.path.basename(lib['filepath']).split('.')[0]}"] = \
            lib["num_threads"]
    if torch is not None:
        check["torch"] = torch.get_num_threads()
    threads_ok = all(v == n for v in check.values())

    env = {
        "cpu": _cpu_name(), "cpus": os.cpu_count(), "python": platform.python_version(),
        "numpy": np.__version__, "scipy": scipy.__version__,
        "torch": torch.__version__ if torch is not None else None,
        "threadpoolctl": threadpoolctl.__version__,
        "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", "(not set)"),
        "attnx_simd": attnx.kernels._ops.simd_level_name(),
        "cpu_caps_env": {v: os.environ[v] for v in CPU_CAP_VARS if v in os.environ},
        "thread_vars": {v: os.environ.get(v) for v in THREAD_VARS},
    }
    blas_by_impl = _blas_by_impl(info, attnx, torch)
    torch_config = _torch_blas(torch) if torch is not None else None

    log = lambda msg: print(f"[run.py {n}t] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    log("GEMM limit ...")
    gemm_limit = {dt: _gemm_limit(np, torch, dt, args.gemm_size) for dt in args.dtype_list}

    results = []
    for cfg in select_configs(args):
        for dt in args.dtype_list:
            dtype = np.dtype(dt)
            t0 = time.perf_counter()
            bench = _Bench(cfg, dtype, args.seed, impl_list, np, attnx, nm, tm, torch)
            cfg_impls = bench.impl_list
            for mode in ("train", "predict"):
                res = bench.race(mode, args, log)
                lim = gemm_limit[dt]["scipy"]
                flops = step_flops(cfg, mode == "train")
                base = res["attnx"]
                impls = {}
                for name in cfg_impls:
                    st = res[name]
                    impls[name] = {
                        "median_s": st["median"], "min_s": st["min"], "max_s": st["max"],
                        "n_timed": st["n"], "ratio": st["median"] / base["median"],
                        "gflops": flops / st["median"] / 1e9,
                        "frac_limit": flops / st["median"] / 1e9 / lim,
                    }
                shape = {k: v for k, v in asdict(cfg).items() if v or k == "causal"}
                row = {"config": cfg.id, "shape": shape, "dtype": dt, "mode": mode,
                       "flops": flops, "impls": impls,
                       "best_other_ratio": min((impls[i]["ratio"] for i in impls if i != "attnx"),
                                               default=None)}
                if bench.foreign is not None:
                    row["foreign_cpu"] = round(bench.foreign, 3)
                if mode == "train":
                    row["loss0"] = {i: res[i]["loss0"] for i in cfg_impls}
                    row["loss_check"] = _loss_check(row["loss0"], dtype)
                    if args.phases:
                        row["phases"] = bench.attnx_phases(args)
                if row["best_other_ratio"] is None:
                    del row["best_other_ratio"]
                results.append(row)
            if not args.no_memory:
                for mode in ("train", "predict"):
                    row = results[-2] if mode == "train" else results[-1]
                    for name in cfg_impls:
                        row["impls"][name]["peak_bytes"] = bench.peak_memory(name, mode)
            bench.close()
            del bench
            gc.collect()
            log(f"{cfg.id} {dt}: {time.perf_counter() - t0:.1f} s")

    doc = {"threads": n, "threads_ok": threads_ok, "thread_check": check, "env": env,
           "attnx_version": attnx.__version__, "attnx_file": attnx.__file__,
           "attnx_build": _build_id(attnx),
           "threadpool_info": [{k: lib.get(k) for k in ("user_api", "internal_api", "version",
                                                          "architecture", "num_threads",
                                                          "threading_layer", "filepath")}
                               for lib in info],
           "blas_by_impl": blas_by_impl, "torch_config": torch_config,
           "gemm_limit": gemm_limit, "impls": impl_list, "results": results}
    with open(args.worker_out, "w") as f:
        json.dump(doc, f)
    return 0


def _build_id(attnx):
    """Short hash of attnx's compiled extensions (two workers must race the same build)."""
    import hashlib
    folder = os.path.dirname(attnx.__file__)
    h = hashlib.sha256()
    for name in sorted(os.listdir(folder)):
        if name.endswith((".so", ".pyd")):
            with open(os.path.join(folder, name), "rb") as f:
                h.update(f.read())
    return h.hexdigest()[:12]


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _blas_by_impl(info, attnx, torch):
    def describe(pred):
        for lib in info:
            if lib["user_api"] == "blas" and pred(lib["filepath"]):
                return (f"{lib['internal_api']} {lib.get('version')} "
                        f"(arch {lib.get('architecture')}, {os.path.basename(lib['filepath'])})")
        return "unknown"
    scipy_blas = describe(lambda p: "scipy.libs" in p or "scipy_openblas32" in p)
    path = getattr(attnx.runtime._threads, "BLAS_PATH", None)
    if path:
        scipy_blas = describe(lambda p: p == path)
    out = {"attnx": "scipy.linalg.cython_blas -> " + scipy_blas,
           "numpy": "numpy.matmul -> " + describe(lambda p: "numpy.libs" in p or "numpy" in p)}
    if torch is not None:
        out["torch"] = "ATen -> " + _torch_blas(torch)
        out["torch-sdpa"] = "ATen fused CPU attention kernel (+ the same BLAS for projections)"
    return out


def _torch_blas(torch):
    cfg = torch.__config__.show()
    blas = "?"
    for part in cfg.replace("\n", ",").split(","):
        if "BLAS_INFO=" in part:
            blas = part.split("=", 1)[1].strip()
    mkl = ""
    for line in cfg.splitlines():
        if "Math Kernel Library Version" in line:
            mkl = " " + line.split("Version", 1)[1].split("Product")[0].strip(" -")
    try:
        cap = torch.backends.cpu.get_cpu_capability()
    except AttributeError:
        cap = "?"
    return (f"BLAS_INFO={blas}{mkl} (bundled in torch, not OpenBLAS: OPENBLAS_CORETYPE does "
            f"not apply), CPU capability {cap}")


def _gemm_limit(np, torch, dt, size):
    """Best of a few n x n x n products through scipy's BLAS, numpy and torch, GFLOP/s."""
    from scipy.linalg import blas
    dtype = np.dtype(dt)
    rng = np.random.default_rng(0)
    a = np.asfortranarray(rng.standard_normal((size, size)).astype(dtype))
    b = np.asfortranarray(rng.standard_normal((size, size)).astype(dtype))
    c = np.zeros((size, size), dtype=dtype, order="F")
    gemm = blas.sgemm if dtype == np.float32 else blas.dgemm
    flops = 2.0 * size ** 3
    reps = 5 if size <= 1024 else 3

    def best(fn):
        fn()
        t = math.inf
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            t = min(t, time.perf_counter() - t0)
        return flops / t / 1e9
    out = {"n": size, "scipy": best(lambda: gemm(1.0, a, b, beta=0.0, c=c, overwrite_c=1))}
    ac, bc, cc = np.ascontiguousarray(a), np.ascontiguousarray(b), np.empty((size, size), dtype)
    out["numpy"] = best(lambda: np.matmul(ac, bc, out=cc))
    if torch is not None:
        ta, tb, tc = torch.from_numpy(ac), torch.from_numpy(bc), torch.from_numpy(cc)
        out["torch"] = best(lambda: torch.mm(ta, tb, out=tc))
    return out


def _loss_check(loss0, dtype):
    """Every implementation's first loss, from the same weights and data, should agree."""
    ref = loss0["attnx"]
    worst = max(abs(v - ref) / abs(ref) for v in loss0.values())
    tol = 1e-3 if dtype.itemsize == 4 else 1e-9
    return "" if worst <= tol else (f"WARNING: first losses differ by {worst:.2g} (relative): "
                                    f"{loss0}")


def _cpu_jiffies():
    """(busy jiffies of the whole machine, jiffies of this process, monotonic time),
    or None off Linux."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        with open("/proc/self/stat") as f:
            st = f.read()
        fields = st[st.rindex(")") + 2:].split()
    except (OSError, ValueError, IndexError):
        return None
    busy = v[0] + v[1] + v[2] + sum(v[5:8])          # user nice system irq softirq steal
    return busy, int(fields[11]) + int(fields[12]), time.monotonic()


def foreign_cpu(before, after):
    """CPUs used by other processes (and the hypervisor) between two _cpu_jiffies()."""
    if before is None or after is None or after[2] <= before[2]:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    return max(0.0, ((after[0] - before[0]) - (after[1] - before[1])) / tick
               / (after[2] - before[2]))


def wait_quiet(limit_s, log, threshold=0.15, probe_s=0.5):
    """Sleep until other processes use < threshold CPU, at most limit_s; returns the
    seconds waited."""
    t0 = time.monotonic()
    warned = False
    while limit_s > 0:
        a = _cpu_jiffies()
        time.sleep(probe_s)
        load = foreign_cpu(a, _cpu_jiffies())
        if load is None or load < threshold:
            break
        waited = time.monotonic() - t0
        if waited > limit_s:
            log(f"machine still busy ({load:.2f} CPU used by others) after {waited:.0f} s: "
                "measuring anyway")
            break
        if not warned:
            log(f"waiting for the machine to be quiet ({load:.2f} CPU used by others) ...")
            warned = True
    return time.monotonic() - t0


def _seq_twin(model, torch):
    """The PyTorch twin of an attnx.SequenceModel (attnx.testing.torch_twin), same weights."""
    from attnx.testing.torch_twin import SeqTwin
    return SeqTwin(model)


class _Bench:
    """The implementations of one (config, dtype), built from one attnx model's weights."""

    def __init__(self, cfg, dtype, seed, impl_list, np, attnx, nm, tm, torch):
        self.cfg, self.dtype, self.seed = cfg, dtype, seed
        self.np, self.attnx, self.nm, self.tm, self.torch = np, attnx, nm, tm, torch
        rng = np.random.default_rng(seed + 1)
        if cfg.kind == "sequence":
            self.x = rng.standard_normal((cfg.B, cfg.T, cfg.features)).astype(dtype)
            self.t = rng.standard_normal((cfg.B, cfg.outputs)).astype(dtype)
        else:
            shape = (cfg.B, cfg.T, cfg.d)
            self.x = rng.standard_normal(shape).astype(dtype)
            self.t = rng.standard_normal(shape).astype(dtype)
        self.ref = self._attnx_model()          # weight source for the others
        self.impl_list = [i for i in impl_list if i in KIND_IMPLS[cfg.kind]]
        self.foreign = None
        self.impls = {name: self.build(name) for name in impl_list}

    def _attnx_model(self):
        c, a = self.cfg, self.attnx
        kw = dict(causal=c.causal, dtype=self.dtype, random_state=self.seed, input_grad=False)
        if c.kind == "attention":
            return a.MultiHeadAttention(c.d, c.H, **kw)
        if c.kind == "sequence":
            del kw["input_grad"]
            return a.SequenceModel(c.features, c.d, c.H, c.layers, c.outputs, d_hidden=c.hidden,
                                   pooling="mean", norm="pre", **kw)
        return a.Transformer(c.d, c.H, c.layers, c.hidden, **kw)

    def build(self, name):
        """(train_step, predict) closures of a freshly built implementation."""
        c, np, x, t = self.cfg, self.np, self.x, self.t
        if name == "attnx":
            a = self.attnx
            m = self._attnx_model()
            opt = a.AdamW(m.params, **HYPER)
            y, dy = np.empty_like(t), np.empty_like(t)
            yp = []

            def train():
                m.forward(x, out=y)
                loss, _ = a.mse_loss(y, t, out=dy)
                m.backward(dy)
                opt.step(m.grads)
                return loss

            def predict():
                if not yp:
                    yp.append(np.empty_like(t))
                return m.forward(x, grad=False, out=yp[0])
            return train, predict, m
        if name == "numpy":
            nm = self.nm
            if c.kind == "attention":
                m = nm.NumpyAttention(c.d, c.H, causal=c.causal, dtype=self.dtype)
            else:
                m = nm.NumpyTransformer(c.d, c.H, c.layers, c.hidden, causal=c.causal,
                                        dtype=self.dtype)
            m.load_params(self.ref.params)
            opt = nm.NumpyAdamW(m.buffers, **HYPER)
            return (lambda: nm.train_step(m, opt, x, t)), (lambda: m.forward(x, grad=False)), m
        tm, torch = self.tm, self.torch
        sdpa = name == "torch-sdpa"
        if c.kind == "sequence":
            m = _seq_twin(self.ref, torch)
        elif c.kind == "attention":
            m = tm.TorchAttention(c.d, c.H, causal=c.causal, dtype=self.dtype, sdpa=sdpa)
        else:
            m = tm.TorchTransformer(c.d, c.H, c.layers, c.hidden, causal=c.causal,
                                    dtype=self.dtype, sdpa=sdpa)
        if c.kind != "sequence":
            m.load_params(self.ref.params)
        opt = tm.make_optimizer(m, **HYPER)
        tx, tt = torch.from_numpy(x), torch.from_numpy(t)
        return (lambda: tm.train_step(m, opt, tx, tt)), (lambda: tm.predict(m, tx)), m

    def race(self, mode, args, log):
        np = self.np
        wait_quiet(args.wait_quiet, log)
        idx = 0 if mode == "train" else 1
        fns = {name: self.impls[name][idx] for name in self.impl_list}
        stats = {name: {"times": []} for name in fns}
        for name, fn in fns.items():          # warm-up (the first train step gives loss0)
            time.sleep(args.pause)
            for i in range(max(args.warmup, 1 if mode == "train" else 0)):
                v = fn()
                if mode == "train" and i == 0:
                    stats[name]["loss0"] = float(v)
        per_turn = -(-args.steps // args.rounds)
        order = list(fns)
        clock = time.perf_counter
        snap = _cpu_jiffies()
        for r in range(args.rounds):
            k = r % len(order)
            for name in order[k:] + order[:k]:
                fn, times = fns[name], stats[name]["times"]
                time.sleep(args.pause)
                for _ in range(args.turn_warmup):
                    fn()
                for _ in range(per_turn):
                    t0 = clock()
                    fn()
                    times.append(clock() - t0)
        self.foreign = foreign_cpu(snap, _cpu_jiffies())
        for name, st in stats.items():
            ts = np.array(st.pop("times"))
            st.update(median=float(np.median(ts)), min=float(ts.min()), max=float(ts.max()),
                      n=int(ts.size))
        return stats

    def attnx_phases(self, args):
        """Median seconds of attnx's forward, loss, backward and AdamW within a step."""
        np, a = self.np, self.attnx
        m = self.impls["attnx"][2]
        opt = a.AdamW(m.params, **HYPER)
        x, t = self.x, self.t
        y, dy = np.empty_like(t), np.empty_like(t)
        names = ("forward", "loss", "backward", "adamw")
        parts = (lambda: m.forward(x, out=y), lambda: a.mse_loss(y, t, out=dy),
                 lambda: m.backward(dy), lambda: opt.step(m.grads))
        times = {k: [] for k in names}
        for i in range(args.warmup + args.steps):
            if i % max(1, args.steps // args.rounds) == 0:
                time.sleep(args.pause)
                for _ in range(args.turn_warmup):
                    for fn in parts:
                        fn()
            for k, fn in zip(names, parts):
                t0 = time.perf_counter()
                fn()
                if i >= args.warmup:
                    times[k].append(time.perf_counter() - t0)
        return {k: float(np.median(v)) for k, v in times.items()}

    def peak_memory(self, name, mode):
        """Peak bytes live in the array library's allocator (see the module docstring)."""
        import gc
        gc.collect()
        if name.startswith("torch"):
            return self._peak_torch(name, mode)
        import tracemalloc
        twice = self._twice(name, mode)
        gc.collect()
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            twice()
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
        return int(peak)

    def _twice(self, name, mode):
        """Two training steps or two predicts of `name`; a predict closure is built
        outside the measured region (building a training step is part of it)."""
        if mode == "train":
            def run():
                fn = self.build(name)[0]
                fn()
                fn()
        else:
            pred = self.build(name)[1]

            def run():
                pred()
                pred()
        return run

    def _peak_torch(self, name, mode):
        from torch.profiler import ProfilerActivity, profile
        twice = self._twice(name, mode)
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        saved = os.dup(2)                      # the profiler prints to fd 2: keep the log clean
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 2)
            with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
                twice()
            prof.export_chrome_trace(path)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(devnull)
        with open(path) as f:
            events = json.load(f).get("traceEvents", [])
        os.unlink(path)
        mem = [e["args"] for e in events if e.get("name") == "[memory]" and "args" in e]
        if not mem:
            return None
        base = mem[0]["Total Allocated"] - mem[0]["Bytes"]
        return int(max(m["Total Allocated"] for m in mem) - base)

    def close(self):
        self.impls.clear()
        self.ref = None


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.list:
        for c in (FULL_CONFIGS if not args.quick else QUICK_CONFIGS):
            print(f"{c.id:<32} {c.kind}  B={c.B} T={c.T} d={c.d} H={c.H}"
                  + (f" hidden={c.hidden} layers={c.layers}" if c.kind != "attention" else "")
                  + (f" features={c.features} outputs={c.outputs}" if c.kind == "sequence"
                     else "")
                  + ("  causal" if c.causal else ""))
        return 0
    if args.worker:
        return run_worker(args)
    # the workers get the same options; --json/--txt/--threads are the parent's
    passthrough, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in ("--json", "--txt", "--threads"):
            skip = True
            continue
        if a.startswith(("--json=", "--txt=", "--threads=")):
            continue
        passthrough.append(a)
    return run_parent(args, argv, passthrough)


if __name__ == "__main__":
    sys.exit(main())
