"""Predicted throughput of the fused attention kernels' hot loops (llvm-mca).

Compiles attnx/kernels/_flash.c, the extension that includes csrc/attnx_flash_impl.h, to
assembly with the exact compiler and flags setup.py builds it with (read from
setup.py's own extensions(), plus the interpreter's CFLAGS as setuptools adds
them), so the loops analysed are the shipped code's. Each SIMD level is a set of
functions in that one file (per-function target attributes; suffix _avx2 for
level 1, _avx512 for level 2), so one compile covers every level.

From the assembly it takes the innermost loop of each tile function (fl_tile_*,
with GCC's constant-propagated clones), of the exp pass fl_expsub and of the
transposes, and the heaviest vector loops of fl_forward_rows (the inlined
exp-and-sum of the online softmax) and fl_backward_head, and runs llvm-mca on
each loop body for the CPU models of its level:

  level 2 (AVX-512): sapphirerapids, icelake-server (LLVM 14 has no znver4)
  level 1 (AVX2):    znver3, sapphirerapids

Per loop: instructions per iteration, FMAs per iteration, the resource bound
(llvm-mca's Block RThroughput), the predicted steady-state cycles per iteration
(Total Cycles / iterations over -iterations=N, which includes loop-carried
dependency chains), the predicted FMAs per cycle against the two FMA ports of
every model here, the loop's FMA bound on the hardware (FMAs over the FMAs a cycle of that core at that
register width: FMA_PER_CYCLE; Zen 4, which LLVM 14 cannot model, gets this bound alone
for the AVX-512 loops) and the predicted cycles over it (1.15 = 15% above the bound), and
the bottleneck llvm-mca's -bottleneck-analysis names.

Usage (after the in-place build, from anywhere):
  python benchmarks/mca.py                  # the table, float32 and float64
  python benchmarks/mca.py --dtype f32      # one type
  python benchmarks/mca.py --show LOOP      # print one loop's body and llvm-mca report
  python benchmarks/mca.py --markdown       # the table as Markdown (benchmarks/README.md)
  python benchmarks/mca.py --rev 771ae55    # the headers of another commit (before/after)
  python benchmarks/mca.py --same-as 5d41e0f   # which levels' functions a header change moved
Needs gcc (setup.py's compiler) and llvm-mca-14 (or LLVM_MCA=path). Times nothing.
"""
import argparse
import os
import re
import runpy
import shlex
import subprocess
import sys
import sysconfig
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MCA = os.environ.get("LLVM_MCA", "llvm-mca-14")
MODELS = {"avx512": ["sapphirerapids", "icelake-server"], "avx2": ["znver3", "sapphirerapids"]}
# FMA units of every model here: Intel 512-bit on p0+p5 (256-bit p0+p1), Zen 3 FP0+FP1
# (LLVM 14's znver3 model issues only one 256-bit FMA per cycle: 50% is its ceiling)
FMA_PORTS = 2
FMA_RE = re.compile(r"^\s*v?f(n)?m(add|sub)(sub|add)?\d{3}[ps][sd]\b")
VEC_RE = re.compile(r"%[xyz]mm")
WIDE_RE = re.compile(r"^\s*\S+\s.*%[yz]mm", re.M)
ITERATIONS = 100
# FMAs a cycle of the hardware (not of LLVM 14's models) by register width: the FMA bound
# of a loop is its FMAs over this. Sapphire Rapids / Ice Lake server: two 512-bit FMA units
# (p0, p5) and two 256-bit (p0, p1); Zen 3: two 256-bit pipes; Zen 4 (no LLVM 14 model):
# two 256-bit pipes, a 512-bit FMA takes both, one a cycle.
FMA_PER_CYCLE = {"sapphirerapids": {"zmm": 2, "ymm": 2, "xmm": 2},
                 "icelake-server": {"zmm": 2, "ymm": 2, "xmm": 2},
                 "znver3": {"ymm": 2, "xmm": 2},
                 "zen4": {"zmm": 1, "ymm": 2, "xmm": 2}}
# AVX-512 loops also get a Zen 4 row with the FMA bound alone (llvm-mca-14 has no model)
BOUND_ONLY = {"avx512": ["zen4"]}


def flash_compile_command(asm_path, csrc_dir=None):
    """gcc command line of setup.py's _flash extension, -c replaced by -S; csrc_dir,
    when given, is searched for the csrc headers first."""
    import setuptools
    cwd = os.getcwd()
    saved_setup = setuptools.setup
    setuptools.setup = lambda **kw: None
    os.chdir(ROOT)
    try:
        ns = runpy.run_path(os.path.join(ROOT, "setup.py"), run_name="mca")
        exts = ns["extensions"]()
    finally:
        setuptools.setup = saved_setup
        os.chdir(cwd)
    ext = next(e for e in exts if e.name == "attnx.kernels._flash")
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")
    cflags = shlex.split(sysconfig.get_config_var("CFLAGS") or "")
    ccshared = shlex.split(sysconfig.get_config_var("CCSHARED") or "")
    pyinc = sysconfig.get_paths()["include"]
    venvinc = ([f"-I{os.path.join(sys.exec_prefix, 'include')}"]
               if sys.exec_prefix != sys.base_exec_prefix else [])   # as setuptools does
    macros = [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in ext.define_macros]
    incs = [f"-I{os.path.join(ROOT, d) if not os.path.isabs(d) else d}"
            for d in ext.include_dirs] + venvinc + [f"-I{pyinc}"]
    src = os.path.join(ROOT, ext.sources[0])
    # -g0: no debug directives in the loop bodies (codegen is the same with or without -g)
    if csrc_dir:
        incs = [f"-I{csrc_dir}"] + incs
    return (cc + cflags + ccshared + macros + incs + ["-S", src, "-o", asm_path]
            + list(ext.extra_compile_args) + ["-g0", "-w"])


def functions(asm):
    """{name: [lines]} of the fl_* functions in GCC's assembly."""
    out, cur = {}, None
    for line in asm.splitlines():
        m = re.match(r"^(fl_[A-Za-z0-9_.]+):", line)
        if m:
            cur = m.group(1)
            out[cur] = []
            continue
        if cur is not None:
            if line.lstrip().startswith(".size"):
                cur = None
            elif not line.lstrip().startswith((".cfi", ".p2align", ".loc")):
                out[cur].append(line)
    return out


def innermost_loops(body):
    """(label, [instruction lines]) of the innermost loops: a label L and a later
    jump back to L, with no other back-edge target between them."""
    labels = {}
    for i, line in enumerate(body):
        m = re.match(r"^(\.L\w+):", line)
        if m:
            labels[m.group(1)] = i
    loops = []
    for i, line in enumerate(body):
        m = re.match(r"^\s*j\w+\s+(\.L\w+)\s*$", line)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            loops.append((labels[m.group(1)], i, m.group(1)))
    inner = []
    for a, b, lab in loops:
        if any(a < a2 and b2 <= b and (a2, b2) != (a, b) for a2, b2, _ in loops):
            continue
        insns = [ln for ln in body[a + 1:b + 1] if ln.strip() and not ln.strip().endswith(":")
                 and not ln.strip().startswith(".")]
        inner.append((lab, insns))
    return inner


def mca(insns, cpu):
    text = "\n".join(insns) + "\n"
    r = subprocess.run([MCA, f"-mcpu={cpu}", "-mtriple=x86_64-unknown-linux-gnu",
                        f"-iterations={ITERATIONS}", "-bottleneck-analysis"],
                       input=text, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    return r.stdout


def summarise(report):
    def num(pat):
        m = re.search(pat, report)
        return float(m.group(1)) if m else float("nan")
    rthr = num(r"Block RThroughput:\s+([\d.]+)")
    cycles = num(r"Total Cycles:\s+(\d+)") / ITERATIONS
    res = num(r"Resource Pressure\s+\[\s*([\d.]+)%")
    dep = num(r"Data Dependencies:\s+\[\s*([\d.]+)%")
    m = re.search(r"Resource Pressure\s+\[[^\]]*\]\n((?:\s+- \S+\s+\[[^\]]*\]\n)+)", report)
    ports = re.findall(r"- (\S+)\s+\[\s*([\d.]+)%", m.group(1)) if m else []
    if "No resource or data dependency bottlenecks" in report:
        what = "none (dispatch/frontend)"
    elif dep == dep and (res != res or dep > res):
        what = f"data deps {dep:.0f}%"
    elif ports:
        top = sorted(ports, key=lambda p: -float(p[1]))[:2]
        what = "ports " + ",".join(p[0].replace("SKXPort", "p").replace("ICXPort", "p")
                                    .replace("Zn3", "") for p in top) + f" {res:.0f}%"
    else:
        what = "?"
    return rthr, cycles, what


ROWS = [  # (function name pattern, what the loop is, how many loops to take)
    (r"fl_tile_w_", "wide tile k-loop", 1),
    (r"fl_tile_w4_", "4-row wide tile k-loop", 1),
    (r"fl_tile_m_", "one-vector tall tile k-loop", 1),
    (r"fl_tile_mf_", "one-vector tall tile, full rows", 1),
    (r"fl_tile_n_", "narrow tile k-loop", 1),
    (r"fl_tile_pair_", "key-pair tile k-loop", 1),
    (r"fl_forward_rows_", "forward: heaviest vector loop (exp-sum)", 1),
    (r"fl_backward_head_", "backward: heaviest vector loops", 2),
    (r"fl_expsub_", "exp pass (P recompute)", 1),
    (r"fl_transpose_", "8x8 / 4x4 block transpose", 1),
]


def checkout_csrc(rev, tmp):
    """csrc/*.h of git revision rev, written under tmp: the directory."""
    out = os.path.join(tmp, "csrc")
    os.makedirs(out)
    names = subprocess.run(["git", "-C", ROOT, "ls-tree", "--name-only", f"{rev}:csrc"],
                           capture_output=True, text=True, check=True).stdout.split()
    for name in names:
        data = subprocess.run(["git", "-C", ROOT, "show", f"{rev}:csrc/{name}"],
                              capture_output=True, check=True).stdout
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    return out


def _compile(rev=None):
    """({name: assembly lines} of the fl_* functions, the compile command), _flash.c
    compiled with the checkout's csrc headers, or rev's."""
    tmp = tempfile.mkdtemp()
    asm_path = os.path.join(tmp, "flash.s")
    cmd = flash_compile_command(asm_path, checkout_csrc(rev, tmp) if rev else None)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("compile failed:\n" + " ".join(cmd) + "\n" + r.stderr)
    with open(asm_path) as f:
        return functions(f.read()), cmd


def compiled_functions(rev=None):
    """{name: assembly with local labels blanked} of the fl_* functions (see _compile)."""
    return {k: "\n".join(re.sub(r"\.L\w+", ".L", ln) for ln in v)
            for k, v in _compile(rev)[0].items()}


def same_as(rev):
    """Per level, the fl_* functions whose code differs between rev's csrc headers and
    the checkout's. A change meant for one level (the AVX2 tiles, say) must leave the
    others' code as it was: GCC's clone budget spans the whole _flash.c (setup.py's
    PER_MODULE_FLAGS), so a change anywhere can move another level's last bits; equal
    assembly proves it did not, without a CPU of that level."""
    before, after = compiled_functions(rev), compiled_functions()
    for suffix in ("_c", "_avx2", "_avx512"):
        b = {k for k in before if re.search(suffix + r"(\.|$)", k)}
        a = {k for k in after if re.search(suffix + r"(\.|$)", k)}
        moved = sorted(k for k in a & b if before[k] != after[k])
        print(f"{suffix[1:]:7s} {len(a)} functions; differ: {moved or 'none'}; "
              f"only before: {sorted(b - a) or 'none'}; only now: {sorted(a - b) or 'none'}")


def collect(dtype, rev=None):
    funcs, cmd = _compile(rev)
    rows, seen = [], set()
    for pat, what, take in ROWS:
        for name in sorted(funcs):
            m = re.match(pat + r"(f32|f64)_(avx2|avx512)(\..+)?$", name)
            if not m or (dtype and m.group(1) != dtype):
                continue
            loops = innermost_loops(funcs[name])
            loops = [lp for lp in loops if len(VEC_RE.findall("\n".join(lp[1]))) >= 4]
            if not loops:
                continue
            # the main loop: the most instructions on full-width vectors (a scalar
            # tail's FMAs on xmm do not count), then the most FMAs
            # (vector FMAs first, then the other full-width vector instructions; a range
            # that holds a ret is cold code laid out between a label and a jump back)
            loops = [lp for lp in loops if not any(i.split()[0] in ("ret", "vzeroupper")
                                                   for i in lp[1])]
            loops.sort(key=lambda lp: (-sum(bool(FMA_RE.match(i) and WIDE_RE.match(i))
                                            for i in lp[1]),
                                       -len(WIDE_RE.findall("\n".join(lp[1]))), len(lp[1])))
            for lab, insns in loops[:take]:
                key = (re.sub(r"\..+$", "", name), tuple(
                    re.sub(r"\.L\w+", "L", i) for i in insns))
                if key in seen:       # a constprop clone with the same loop
                    continue
                seen.add(key)
                rows.append((name, lab, m.group(2), insns))
    return rows, cmd


def fma_width(insns):
    for i in insns:
        if FMA_RE.match(i):
            return "zmm" if "zmm" in i else "ymm" if "ymm" in i else "xmm"
    return "-"


def table(rows, markdown):
    head = ["loop", "cpu", "insns", "FMAs", "RThr", "cyc/it", "FMA/cyc", "of 2", "FMA bound",
            "cyc/bound", "bottleneck"]
    out = []
    if markdown:
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
    else:
        out.append(f"{'loop':44s} {'cpu':15s} {'insns':>5s} {'FMAs':>8s} {'RThr':>6s} "
                   f"{'cyc/it':>7s} {'FMA/cyc':>7s} {'of 2':>5s} {'bound':>6s} {'/bound':>6s}"
                   "  bottleneck")
    for name, lab, level, insns in rows:
        nf = sum(bool(FMA_RE.match(i)) for i in insns)
        width = fma_width(insns)
        for cpu in MODELS[level] + BOUND_ONLY.get(level, []):
            bound = nf / FMA_PER_CYCLE[cpu][width] if nf else float("nan")
            if cpu in BOUND_ONLY.get(level, []):
                rthr = cyc = fpc = float("nan")
                what = "FMA bound only (no llvm-mca model)"
            else:
                rthr, cyc, what = summarise(mca(insns, cpu))
                fpc = nf / cyc if cyc else 0.0
            cells = [f"{name} {lab}", cpu, str(len(insns)),
                     f"{nf} {width}" if nf else "0",
                     *(f"{v:.2f}" if v == v else "-" for v in (rthr, cyc, fpc)),
                     f"{fpc / FMA_PORTS:.0%}" if nf and fpc == fpc else "-",
                     f"{bound:.2f}" if nf else "-",
                     f"{cyc / bound:.2f}" if nf and cyc == cyc else "-", what]
            if markdown:
                out.append("| " + " | ".join(cells) + " |")
            else:
                out.append(f"{cells[0]:44s} {cells[1]:15s} {cells[2]:>5s} {cells[3]:>8s} "
                           f"{cells[4]:>6s} {cells[5]:>7s} {cells[6]:>7s} {cells[7]:>5s} "
                           f"{cells[8]:>6s} {cells[9]:>6s}  {cells[10]}")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", choices=["f32", "f64"], default=None)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--show", metavar="FUNC[:LABEL]",
                    help="print this loop's body and llvm-mca's full report")
    ap.add_argument("--cmd", action="store_true", help="print the compile command")
    ap.add_argument("--rev", help="analyse the csrc/ headers of this git revision (e.g. "
                    "the commit before a kernel change) with the checkout's attnx/kernels/_flash.c")
    ap.add_argument("--same-as", metavar="REV",
                    help="list, per SIMD level, the fused kernels' functions whose assembly "
                    "differs between REV's csrc/ headers and the checkout's (nothing else)")
    args = ap.parse_args()
    if args.same_as:
        same_as(args.same_as)
        return
    rows, cmd = collect(args.dtype, args.rev)
    if args.cmd:
        print(" ".join(shlex.quote(c) for c in cmd))
    if args.show:
        fn, _, lab = args.show.partition(":")
        for name, l, level, insns in rows:
            if name == fn and (not lab or l == lab):
                print("\n".join(insns))
                for cpu in MODELS[level]:
                    print(f"==== {cpu}")
                    print(mca(insns, cpu))
        return
    print(table(rows, args.markdown))


if __name__ == "__main__":
    main()
