"""Types: the stubs of the compiled kernels match the built modules, and the whole
package passes mypy --strict (configuration in pyproject.toml)."""
import glob
import os
import subprocess
import tempfile
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(args, cwd=ROOT):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env,
                          capture_output=True, text=True)


def _run_on_tested_attnx(args):
    """Run against the attnx this suite imports: the in-place build, or the installed
    package when the checkout is unbuilt (then from outside the checkout)."""
    import attnx
    parent = os.path.dirname(os.path.dirname(os.path.abspath(attnx.__file__)))
    env = dict(os.environ, PYTHONPATH=parent)
    return subprocess.run([sys.executable, "-m", *args], cwd=tempfile.gettempdir(), env=env,
                          capture_output=True, text=True)


def test_every_compiled_module_has_a_stub_matching_it():
    pyx = sorted(os.path.basename(p)[:-4] for p in glob.glob(os.path.join(ROOT, "attnx", "kernels", "*.pyx")))
    missing = [m for m in pyx if not os.path.exists(os.path.join(ROOT, "attnx", "kernels", m + ".pyi"))]
    assert not missing, f"compiled modules without a .pyi stub: {missing}"
    assert os.path.exists(os.path.join(ROOT, "attnx", "py.typed"))
    r = _run_on_tested_attnx(["mypy.stubtest", "--ignore-missing-stub"]
                             + [f"attnx.kernels.{m}" for m in pyx])
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_strict_on_the_whole_package():
    # no file arguments: pyproject's [tool.mypy] (strict, files = attnx) decides what is checked
    r = _run(["mypy", "--cache-dir=/dev/null"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no issues found in" in r.stdout, r.stdout
    n_files = int(r.stdout.split("no issues found in")[1].split()[0])
    n_modules = len(glob.glob(os.path.join(ROOT, "attnx", "**", "*.py"), recursive=True))
    assert n_files >= n_modules, f"mypy checked {n_files} files, the package has {n_modules}"
