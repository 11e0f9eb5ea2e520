"""Build the attnx Cython extensions.

Environment switches:
  ATTNX_BUILD_JOBS=N    compile N extensions at once (default: one per CPU).
  ATTNX_DEBUG_CHECKS=1  compile with Cython bounds/wraparound checks on (used once in CI).
  ATTNX_NO_OPENMP=1     build without OpenMP even when the compiler supports it.
  ATTNX_SANITIZE=1      AddressSanitizer + UndefinedBehaviorSanitizer build (GCC/Clang):
                        -O1 -g, frame pointers, OpenMP kept; run it with the ASan runtime
                        preloaded, see .ci/sanitize.sh.
"""
import glob
import os
import sys
import shutil
import tempfile
import subprocess
import sysconfig

import numpy as np
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from Cython.Build import cythonize

HERE = os.path.dirname(os.path.abspath(__file__))
MODULES = ["_blas", "_ops", "_attnargs", "_attention", "_mlp", "_seq", "_flash", "_optim",
           "_embed", "_revin", "_ppv", "_blocks", "_model_pass", "_testing"]
# a change to a C helper or a .pxd must rebuild every extension that includes it
HEADERS = sorted(glob.glob(os.path.join("csrc", "*.h"))
                 + glob.glob(os.path.join("attnx", "kernels", "*.pxd")))


def _openmp_flags():
    """Return (compile, link) flags for OpenMP, or empty lists when unsupported."""
    if os.environ.get("ATTNX_NO_OPENMP"):
        return [], []
    if sys.platform == "win32":
        return ["/openmp"], []
    flags = ["-fopenmp"]
    cc = sysconfig.get_config_var("CC") or "cc"
    cc = cc.split()[0]
    tmp = tempfile.mkdtemp()
    try:
        src = os.path.join(tmp, "t.c")
        with open(src, "w") as f:
            f.write("#include <omp.h>\nint main(void){return omp_get_max_threads() < 1;}\n")
        r = subprocess.run([cc, *flags, src, "-o", os.path.join(tmp, "t")],
                           capture_output=True)
        return (flags, flags) if r.returncode == 0 else ([], [])
    except OSError:
        return [], []
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _gcc_param_flags(*params):
    """--param flags when the compiler takes them (GCC), else none."""
    if sys.platform == "win32":
        return []
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    flags = [f"--param={p}" for p in params]
    tmp = tempfile.mkdtemp()
    try:
        src = os.path.join(tmp, "t.c")
        with open(src, "w") as f:
            f.write("int main(void){return 0;}\n")
        r = subprocess.run([cc, "-Werror", *flags, "-c", src, "-o", os.path.join(tmp, "t.o")],
                           capture_output=True)
        return flags if r.returncode == 0 else []
    except OSError:
        return []
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# GCC clones the fused kernels' static tile functions (csrc/attnx_flash_impl.h) for
# constant arguments within a budget of ipa-cp-unit-growth percent of the translation
# unit, and clones round differently (FMA contraction after constant propagation).
# The budget scales with the whole _flash.c, Cython glue included: when the entry
# points moved to attnx.kernels._attnargs, the smaller glue changed which tiles were cloned and
# the float32 AVX2 / AVX-512 backward's last bits. 12 (GCC's default is 10) gives the
# same clones, so the same bits, as before (checked against a build of 436e7ba at
# every SIMD level); a change of this file's glue must check them again. The register-
# copy fix of the tiles (FL_KEEP, benchmarks/mca.py) grew their bodies and changed the
# float32 AVX-512 clones at 12 (no budget gives the old set back): float32 at level 2
# moved in the last bit (relative 3e-8..5e-8 of a MultiHeadAttention step at d_head 8
# and 32); levels 0 and 1, and float64 at every level, kept their bits.
PER_MODULE_FLAGS = {"_flash": _gcc_param_flags("ipa-cp-unit-growth=12")}


def extensions():
    debug = bool(os.environ.get("ATTNX_DEBUG_CHECKS"))
    omp_c, omp_l = _openmp_flags()
    extra_c = ["-O3", "-fopenmp-simd"] if sys.platform != "win32" else ["/O2"]
    extra_l = []
    if os.environ.get("ATTNX_SANITIZE"):
        if sys.platform == "win32":
            raise SystemExit("ATTNX_SANITIZE=1 needs GCC or Clang")
        san = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]
        extra_c = ["-O1", "-g", "-fno-omit-frame-pointer", "-fopenmp-simd"] + san
        extra_l = san
    exts = [
        Extension(
            f"attnx.kernels.{m}",
            [os.path.join("attnx", "kernels", f"{m}.pyx")],
            include_dirs=[os.path.join(HERE, "csrc"), np.get_include()],
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_9_API_VERSION"),
                           ("ATTNX_OMP_SIMD", "1")],
            depends=HEADERS,
            extra_compile_args=extra_c + omp_c + PER_MODULE_FLAGS.get(m, []),
            extra_link_args=omp_l + extra_l,
        )
        for m in MODULES
    ]
    directives = {
        "language_level": 3,
        "boundscheck": debug,
        "wraparound": debug,
        "cdivision": not debug,
        "initializedcheck": debug,
        "nonecheck": debug,
    }
    return cythonize(exts, compiler_directives=directives)


class ParallelBuildExt(build_ext):
    """build_ext compiling the extensions on every CPU unless told otherwise (-j N, or
    ATTNX_BUILD_JOBS=N): pip's build runs it without -j, one module at a time."""

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            jobs = os.environ.get("ATTNX_BUILD_JOBS") or (os.cpu_count() or 1)
            self.parallel = max(1, int(jobs))


setup(ext_modules=extensions(), cmdclass={"build_ext": ParallelBuildExt})
