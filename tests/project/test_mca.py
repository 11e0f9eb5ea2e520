"""benchmarks/mca.py: its loop extraction, and the property of the shipped float32
AVX-512 wide tile it was written to check (no vector register copies in the k loop,
16 FMAs on 16 independent accumulators). Compiles attnx/kernels/_flash.c with setup.py's
flags (~20 s); skipped without gcc on x86-64 or Cython (setup.py imports it), the
llvm-mca part without llvm-mca-14."""
import platform
import re
import shutil
from pathlib import Path

import pytest
from bench_scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


mca = load_script("attnx_bench_mca", ROOT / "benchmarks" / "mca.py")


def test_innermost_loops_synthetic():
    body = """\
\tmovl $0, %eax
.L2:
\tvmovups (%rdi), %zmm0
.L3:
\tvfmadd231ps %zmm0, %zmm1, %zmm2
\taddq $4, %rdi
\tjne .L3
\tjmp .L2
.L4:
\tret
\tjmp .L9
""".splitlines()
    loops = mca.innermost_loops(body)
    assert [lab for lab, _ in loops] == [".L3"]   # .L2 holds .L3; .L9 is not backward
    lab, insns = loops[0]
    assert [i.split()[0] for i in insns] == ["vfmadd231ps", "addq", "jne"]
    assert sum(bool(mca.FMA_RE.match(i)) for i in insns) == 1


@pytest.fixture(scope="module")
def rows():
    if platform.machine() not in ("x86_64", "AMD64") or shutil.which("gcc") is None:
        pytest.skip("needs gcc on x86-64")
    if not (ROOT / "attnx" / "kernels" / "_flash.c").exists():
        pytest.skip("needs the in-place build's attnx/kernels/_flash.c")
    pytest.importorskip("Cython", reason="mca.py reads setup.py's flags, which imports Cython")
    return mca.collect("f32")[0]


def test_wide_tile_has_no_register_copies(rows):
    loops = [r for r in rows if re.match(r"fl_tile_w_f32_avx512(\.|$)", r[0])]
    assert loops
    for name, lab, level, insns in loops:
        assert level == "avx512"
        fmas = [i for i in insns if mca.FMA_RE.match(i)]
        assert len(fmas) == 16 and all("zmm" in i for i in fmas), name
        # 16 accumulators: the destinations of the 16 FMAs are 16 registers
        assert len({i.split(",")[-1].strip() for i in fmas}) == 16, name
        copies = [i for i in insns if re.match(r"^\s*vmovap[sd]\s+%zmm\d+,\s*%zmm\d+\s*$", i)]
        assert copies == [], (name, copies)


def test_llvm_mca_resource_bound(rows):
    if shutil.which(mca.MCA) is None:
        pytest.skip(f"{mca.MCA} not installed")
    name, lab, level, insns = next(r for r in rows if r[0].startswith("fl_tile_w_f32_avx512"))
    rthr, cycles, _ = mca.summarise(mca.mca(insns, "icelake-server"))
    # 16 zmm FMAs on two ports: 8 cycles is the bound; the register copies made it 9
    assert rthr == pytest.approx(8.0)
    assert 8.0 <= cycles < 9.5


def test_same_as_finds_no_change_against_the_checkouts_own_headers(capsys):
    """--same-as compiles _flash.c twice (HEAD's csrc headers, then the working tree's)
    and compares every fl_* function per level; with headers equal to HEAD's, no
    function of any level may differ (the comparison must not see label numbering or
    other run-to-run noise as a change)."""
    if platform.machine() not in ("x86_64", "AMD64") or shutil.which("gcc") is None:
        pytest.skip("needs gcc on x86-64")
    if not (ROOT / "attnx" / "kernels" / "_flash.c").exists() or not (ROOT / ".git").exists():
        pytest.skip("needs the in-place build's attnx/kernels/_flash.c and the git checkout")
    pytest.importorskip("Cython", reason="mca.py reads setup.py's flags, which imports Cython")
    import subprocess
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "csrc"],
                           capture_output=True, text=True).stdout.strip()
    if dirty:
        pytest.skip("csrc/ has uncommitted changes")
    mca.same_as("HEAD")
    lines = capsys.readouterr().out.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == ["c", "avx2", "avx512"]
    for ln in lines:
        n = int(ln.split()[1])
        assert n >= 10, ln   # the level's functions were found
        assert "differ: none; only before: none; only now: none" in ln, ln
