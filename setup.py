"""Build the attnx Cython extensions.

Environment switches:
  ATTNX_BUILD_JOBS=N    compile N extensions at once (default: one per CPU).
  ATTNX_DEBUG_CHECKS=1  compile with Cython bounds/wraparound checks on (used once in CI).
  ATTNX_NO_OPENMP=1     build without OpenMP even when the compiler supports it.
  ATTNX_SANITIZE=1      AddressSanitizer + UndefinedBehaviorSanitizer build (GCC/Clang):
                        -O1 -g, frame pointers, OpenMP kept; run it with the ASan runtime
                        preloaded, see .ci/sanitize.sh.

Build cache: every compiled extension is also kept in build/cache/<key>/ in this
checkout, the key a hash of what decides its machine code (its .pyx, every .pxd and
csrc header, this file, the switches above, CC/CFLAGS/LDFLAGS, the compiler's version,
the Python ABI and the numpy, scipy and Cython versions). A later build with the same
key copies the file instead of compiling: `pip install ".[test]"` after
`pip install .` compiles nothing. --force (build_ext --force) always compiles.
Progress ("attnx: compiling 3/14 _flash") goes to stderr: pip shows it with -v.
"""
import functools
import glob
import hashlib
import os
import threading
import sys
import shutil
import tempfile
import subprocess
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
MODULES = ["_blas", "_ops", "_attnargs", "_attention", "_mlp", "_seq", "_flash", "_optim",
           "_embed", "_revin", "_ppv", "_blocks", "_model_pass", "_testing"]
# a change to a C helper or a .pxd must rebuild every extension that includes it
HEADERS = sorted(glob.glob(os.path.join("csrc", "*.h"))
                 + glob.glob(os.path.join("attnx", "kernels", "*.pxd")))


@functools.lru_cache(maxsize=None)
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
def _per_module_flags(module):
    if module == "_flash":
        return _gcc_param_flags("ipa-cp-unit-growth=12")
    return []


# the environment switches and compiler settings that change the compiled files
ENV_KEYS = ("ATTNX_DEBUG_CHECKS", "ATTNX_NO_OPENMP", "ATTNX_SANITIZE", "CC", "CFLAGS",
            "CPPFLAGS", "LDFLAGS", "LDSHARED", "ARCHFLAGS")
CACHE_DIR = os.path.join(HERE, "build", "cache")
CACHE_KEEP = 3   # cached builds kept per module (e.g. the normal, a debug and an older one)


def _compile_flags(module):
    """(extra_compile_args, extra_link_args) of one module; probes the compiler, so it
    runs only when something is compiled."""
    omp_c, omp_l = _openmp_flags()
    extra_c = ["-O3", "-fopenmp-simd"] if sys.platform != "win32" else ["/O2"]
    extra_l = []
    if os.environ.get("ATTNX_SANITIZE"):
        if sys.platform == "win32":
            raise SystemExit("ATTNX_SANITIZE=1 needs GCC or Clang")
        san = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]
        extra_c = ["-O1", "-g", "-fno-omit-frame-pointer", "-fopenmp-simd"] + san
        extra_l = san
    return extra_c + omp_c + _per_module_flags(module), omp_l + extra_l


def _directives():
    debug = bool(os.environ.get("ATTNX_DEBUG_CHECKS"))
    return {
        "language_level": 3,
        "boundscheck": debug,
        "wraparound": debug,
        "cdivision": not debug,
        "initializedcheck": debug,
        "nonecheck": debug,
    }


def _source_extensions():
    """The extensions with their .pyx sources: build_ext below translates (Cython) and
    compiles only those the cache does not hold."""
    return [
        Extension(
            f"attnx.kernels.{m}",
            [os.path.join("attnx", "kernels", f"{m}.pyx")],
            include_dirs=[os.path.join(HERE, "csrc")],
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_9_API_VERSION"),
                           ("ATTNX_OMP_SIMD", "1")],
            depends=HEADERS,
        )
        for m in MODULES
    ]


def _configured(exts, force):
    """exts with their compiler flags (probed here) and numpy's headers, translated by
    Cython (force: even when a .c is newer than its .pyx)."""
    import numpy
    from Cython.Build import cythonize

    for ext in exts:
        ext.extra_compile_args, ext.extra_link_args = _compile_flags(ext.name.rsplit(".", 1)[1])
        ext.include_dirs = ext.include_dirs + [numpy.get_include()]
    done = {e.name: e for e in cythonize(exts, compiler_directives=_directives(),
                                          force=force, quiet=True)}
    for ext in exts:   # keep setuptools' own Extension objects (build_ext set them up)
        ext.sources = done[ext.name].sources
    return exts


def extensions():
    """The extensions as they are compiled: flags, include directories and the
    translated .c sources (benchmarks/mca.py reads _flash's compile command here)."""
    return _configured(_source_extensions(), force=False)


def _compiler_identity():
    """The C compiler's command and version line (no compilation)."""
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    try:
        r = subprocess.run([cc.split()[0], "--version"], capture_output=True, text=True,
                           timeout=30)
        return cc + "\n" + r.stdout
    except (OSError, subprocess.SubprocessError):
        return cc


def _common_key():
    """The part of every extension's cache key that is not its own .pyx."""
    import Cython
    import numpy
    import scipy

    h = hashlib.sha256()
    for path in [os.path.join(HERE, "setup.py")] + [os.path.join(HERE, p) for p in HEADERS]:
        with open(path, "rb") as f:
            h.update(os.path.relpath(path, HERE).encode() + b"\0" + f.read() + b"\0")
    for k in ENV_KEYS:
        h.update(f"{k}={os.environ.get(k, '')}\0".encode())
    for k in ("EXT_SUFFIX", "CC", "CFLAGS", "LDSHARED", "SOABI"):
        h.update(f"{k}={sysconfig.get_config_var(k)}\0".encode())
    h.update(f"{sys.version}\0{sys.platform}\0{sysconfig.get_platform()}\0".encode())
    h.update(f"numpy {numpy.__version__} scipy {scipy.__version__} "
             f"Cython {Cython.__version__}\0".encode())
    h.update(_compiler_identity().encode())
    return h


def _say(msg):
    print(f"attnx: {msg}", file=sys.stderr, flush=True)


class ParallelBuildExt(build_ext):
    """build_ext that reuses build/cache/ (see the top of this file) and compiles the
    rest on every CPU unless told otherwise (-j N, or ATTNX_BUILD_JOBS=N): pip's build
    runs it without -j, one module at a time."""

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            jobs = os.environ.get("ATTNX_BUILD_JOBS") or (os.cpu_count() or 1)
            self.parallel = max(1, int(jobs))

    def _cache_path(self, ext, common):
        h = common.copy()
        h.update(f"debug={self.debug}\0".encode())
        for src in ext.sources:
            with open(os.path.join(HERE, src), "rb") as f:
                h.update(f.read())
        name = os.path.basename(self.get_ext_filename(self.get_ext_fullname(ext.name)))
        return os.path.join(CACHE_DIR, h.hexdigest()[:20], name)

    def build_extensions(self):
        self.check_extensions_list(self.extensions)
        every = self.extensions
        common = _common_key()
        todo = []
        for ext in every:
            cached = self._cache_path(ext, common)
            out = self.get_ext_fullpath(ext.name)
            if not self.force and os.path.exists(cached):
                os.makedirs(os.path.dirname(out), exist_ok=True)
                shutil.copyfile(cached, out)
                shutil.copymode(cached, out)
                os.utime(cached)   # most recently used: kept by _prune_cache
            else:
                todo.append((ext, cached))
        rel = os.path.relpath(CACHE_DIR, os.getcwd()) if os.getcwd() == HERE else CACHE_DIR
        if not todo:
            _say(f"all {len(every)} extensions reused from {rel} (sources, flags, compiler, "
                 "Python and numpy unchanged): nothing to compile")
            return
        reused = len(every) - len(todo)
        _say(f"compiling {len(todo)} Cython extensions"
             + (f" ({reused} reused from {rel})" if reused else "")
             + f", {self.parallel} at a time: this takes minutes (about 2-3 on 2 cores); "
             f"later builds of these sources reuse them from {rel}")
        # translated here, one after another (Cython's compiler is not thread-safe), and
        # always: a .c left by a build with other directives must not be reused
        exts = _configured([ext for ext, _ in todo], force=True)
        self._progress = [0, len(exts), threading.Lock()]
        force, self.force = self.force, True   # a stale build/lib file must not be cached
        self.extensions = exts
        try:
            super().build_extensions()
        finally:
            self.extensions, self.force = every, force
        for ext, (_, cached) in zip(exts, todo):
            self._store(self.get_ext_fullpath(ext.name), cached)
        _prune_cache()
        _say(f"compiled {len(exts)} extensions; kept in {rel}")

    def build_extension(self, ext):
        if getattr(self, "_progress", None):
            with self._progress[2]:
                self._progress[0] += 1
                i, n = self._progress[0], self._progress[1]
            _say(f"compiling {i}/{n} {ext.name.rsplit('.', 1)[1]} ...")
        super().build_extension(ext)

    @staticmethod
    def _store(built, cached):
        """Copy a compiled file into the cache (through a temporary name: another build
        may read the same key at the same time)."""
        os.makedirs(os.path.dirname(cached), exist_ok=True)
        tmp = f"{cached}.{os.getpid()}.{threading.get_ident()}.tmp"
        shutil.copy2(built, tmp)
        os.replace(tmp, cached)


def _prune_cache():
    """Keep the CACHE_KEEP most recently used builds of each module."""
    by_name = {}
    for path in glob.glob(os.path.join(CACHE_DIR, "*", "*")):
        if not path.endswith(".tmp"):
            by_name.setdefault(os.path.basename(path), []).append(path)
    for paths in by_name.values():
        paths.sort(key=os.path.getmtime, reverse=True)
        for old in paths[CACHE_KEEP:]:
            try:
                os.remove(old)
                os.rmdir(os.path.dirname(old))
            except OSError:
                pass


setup(ext_modules=_source_extensions(), cmdclass={"build_ext": ParallelBuildExt})
