"""attnx's thread policy, decided here in Python and nowhere else.

- num_threads(): the OpenMP thread count an attnx call uses, read once per call
  in the calling thread (OMP_NUM_THREADS, or threadpoolctl's limits on OpenMP)
  and passed to every kernel as `nthreads`. Kernels never pick a count.
- blas_single(nthreads): attnx runs its own OpenMP threads (batch x heads in
  parallel, large GEMMs split by rows or columns), each calling BLAS. A
  multi-threaded BLAS beside them oversubscribes the cores, so while any attnx
  call with nthreads > 1 is running, scipy's BLAS (the one attnx calls) is set to
  one thread through threadpoolctl's public API. The guard is reference-counted
  under a lock: the first attnx call to enter sets 1, the last to leave restores
  the count it found, so concurrent predict() calls from several Python threads
  never restore too early. While the guard is held, any scipy.linalg call in
  the process runs single-threaded too (OpenBLAS's count is process-wide); it
  gets its old count back as soon as attnx is idle. Only scipy's BLAS is
  touched (numpy's and torch's keep theirs) when threadpoolctl can tell which
  library that is; otherwise every BLAS threadpoolctl sees.

  threadpoolctl (3.7 and later) lets only one Python thread at a time change a
  process-wide OpenBLAS count (its "controlling thread"; others are silently
  ignored). The guard takes that role only for the instant of setting or
  restoring and then gives it back, so neither attnx's worker threads nor the
  user's threads lock each other out. While another thread is inside its own
  `with threadpool_limits(...)`, that thread owns the count and attnx leaves
  BLAS as the user set it.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Literal, Protocol

import scipy.linalg.cython_blas  # noqa: F401  (loads scipy's BLAS before we look for it)
from threadpoolctl import ThreadpoolController

_release: Callable[[], object] | None
try:  # threadpoolctl >= 3.7: one "controlling thread" per process-wide OpenBLAS
    from threadpoolctl import OpenBLASController as _OpenBLAS
    _release = getattr(_OpenBLAS, "clear_controlling_thread", None)
except ImportError:  # older threadpoolctl: any thread may set the count
    _release = None

from . import _ops

if TYPE_CHECKING:
    class _LibController(Protocol):
        """What attnx uses of one of threadpoolctl's per-library controllers."""

        def get_num_threads(self) -> int | None: ...
        def set_num_threads(self, num_threads: int) -> Any: ...

    class _Controller(Protocol):
        """What attnx uses of threadpoolctl.ThreadpoolController."""

        @property
        def lib_controllers(self) -> list[_LibController]: ...
        def info(self) -> list[dict[str, Any]]: ...
        def select(self, **kwargs: str) -> _Controller: ...

_lock = threading.Lock()
_depth = 0          # attnx calls inside their guard now
# (library controller, count to restore) of the outermost guard
_saved: list[tuple[_LibController, int]] = []
# built once: ThreadpoolController() scans every loaded library (ms)
_controller: _Controller | None = None
# file of the BLAS that attnx's kernels call, when identified
BLAS_PATH: str | None = None


def num_threads() -> int:
    """OpenMP threads for an attnx call from this Python thread (>= 1)."""
    return max(1, _ops.max_threads())


def _scipy_blas(ctl: _Controller) -> _Controller:
    """The controller restricted to scipy's BLAS, or to every BLAS when unknown."""
    global BLAS_PATH
    blas = [info for info in ctl.info() if info["user_api"] == "blas"]
    # pip wheels of scipy vendor OpenBLAS in scipy.libs (or use scipy-openblas32);
    # numpy's copy (numpy.libs, 64-bit integers) is a different library
    own = [i["filepath"] for i in blas
           if "scipy.libs" in i["filepath"] or "scipy_openblas32" in i["filepath"]]
    if len(own) == 1:
        BLAS_PATH = own[0]
        return ctl.select(filepath=own[0])
    if len(blas) == 1:
        BLAS_PATH = blas[0]["filepath"]
    return ctl.select(user_api="blas")


def controller() -> _Controller:
    """The cached threadpoolctl controller of the BLAS attnx calls."""
    global _controller
    if _controller is None:
        with _lock:
            if _controller is None:
                _controller = _scipy_blas(ThreadpoolController())
    return _controller


def _give_back_control() -> None:
    """Let other threads (attnx's next caller, the user's threadpoolctl) set
    OpenBLAS's count again; clears only if this thread holds the role."""
    if _release is not None:
        _release()


class blas_single:
    """Context manager: BLAS single-threaded while attnx's parallel regions run.

    `with blas_single(nthreads): kernel(..., nthreads=nthreads)`. Does nothing
    when nthreads <= 1 (no attnx parallel region: BLAS may use its threads).
    """

    __slots__ = ("_active",)

    def __init__(self, nthreads: int) -> None:
        self._active = nthreads > 1

    def __enter__(self) -> blas_single:
        global _depth
        if self._active:
            libs = controller().lib_controllers
            with _lock:
                if _depth == 0:
                    _limit_to_one(libs)
                _depth += 1
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        global _depth
        if self._active:
            with _lock:
                _depth -= 1
                if _depth == 0:
                    _restore()
        return False


def _limit_to_one(libs: list[_LibController]) -> None:
    """Record each library's count and set 1 (skipped where it already is 1:
    a get is a few times cheaper than a set)."""
    for lib in libs:
        n = lib.get_num_threads()
        if n is not None and n != 1:
            lib.set_num_threads(1)
            _saved.append((lib, n))
    _give_back_control()


def _restore() -> None:
    while _saved:
        lib, n = _saved.pop()
        lib.set_num_threads(n)
    _give_back_control()


def guard_depth() -> int:
    """attnx calls currently inside blas_single (for tests)."""
    return _depth


controller()
