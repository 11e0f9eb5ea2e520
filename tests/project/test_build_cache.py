"""setup.py's build cache (build/cache/<key>/): the key follows the sources and the build
switches, a build whose every extension is cached runs no compiler, and --force compiles.
Run on a copy of the sources in a temporary folder, with CC=false: any compile fails."""
import os
import runpy
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytest.importorskip("Cython", reason="setup.py translates the .pyx files with Cython")


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    shutil.copy(os.path.join(ROOT, "setup.py"), tmp_path)
    shutil.copytree(os.path.join(ROOT, "csrc"), tmp_path / "csrc")
    kernels = tmp_path / "attnx" / "kernels"
    shutil.copytree(os.path.join(ROOT, "attnx", "kernels"), kernels,
                    ignore=shutil.ignore_patterns("*.so", "*.c", "*.html", "__pycache__"))
    (tmp_path / "attnx" / "__init__.py").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CC", "false")
    for k in ("ATTNX_DEBUG_CHECKS", "ATTNX_SANITIZE", "ATTNX_NO_OPENMP", "CFLAGS"):
        monkeypatch.delenv(k, raising=False)
    return tmp_path


def _setup_ns(path):
    import setuptools
    saved = setuptools.setup
    setuptools.setup = lambda **kw: None
    try:
        return runpy.run_path(str(path / "setup.py"), run_name="setup_under_test")
    finally:
        setuptools.setup = saved


def _cache_paths(ns):
    from setuptools import Distribution
    exts = ns["_source_extensions"]()
    cmd = ns["ParallelBuildExt"](Distribution({"ext_modules": exts}))
    cmd.ensure_finalized()
    common = ns["_common_key"]()
    return [cmd._cache_path(e, common) for e in exts]


def test_key_follows_switches_and_sources(checkout, monkeypatch):
    base = _cache_paths(_setup_ns(checkout))
    assert len(set(base)) == 14
    for k, v in [("ATTNX_DEBUG_CHECKS", "1"), ("ATTNX_SANITIZE", "1"),
                 ("ATTNX_NO_OPENMP", "1"), ("CFLAGS", "-O0")]:
        monkeypatch.setenv(k, v)
        other = _cache_paths(_setup_ns(checkout))
        monkeypatch.delenv(k)
        assert not set(other) & set(base), k
    monkeypatch.setenv("ATTNX_BUILD_JOBS", "1")   # how many at once: the same files
    assert _cache_paths(_setup_ns(checkout)) == base
    pyx = checkout / "attnx" / "kernels" / "_mlp.pyx"
    pyx.write_text(pyx.read_text() + "\n# changed\n")
    after_pyx = _cache_paths(_setup_ns(checkout))
    changed = [a != b for a, b in zip(after_pyx, base)]
    assert sum(changed) == 1 and "_mlp" in after_pyx[changed.index(True)]
    header = checkout / "csrc" / sorted(os.listdir(checkout / "csrc"))[0]
    header.write_text(header.read_text() + "\n/* changed */\n")
    assert not set(_cache_paths(_setup_ns(checkout))) & set(after_pyx)


def test_cached_build_runs_no_compiler_and_force_compiles(checkout):
    paths = _cache_paths(_setup_ns(checkout))
    for p in paths:
        os.makedirs(os.path.dirname(p))
        with open(p, "wb") as f:
            f.write(b"cached " + os.path.basename(p).encode())
    env = {**os.environ, "CC": "false", "ATTNX_BUILD_JOBS": "1"}
    run = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"],
                         cwd=checkout, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "attnx: all 14 extensions reused from build/cache" in run.stderr
    for p in paths:
        with open(checkout / "attnx" / "kernels" / os.path.basename(p), "rb") as f:
            assert f.read() == b"cached " + os.path.basename(p).encode()
    forced = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", "--force"],
                            cwd=checkout, env=env, capture_output=True, text=True, timeout=600)
    assert forced.returncode != 0    # it tried to compile (with CC=false)
    assert "attnx: compiling 14 Cython extensions" in forced.stderr
    assert "attnx: compiling 1/14 _blas" in forced.stderr
