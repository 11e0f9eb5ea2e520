"""attnx's thread policy, decided here in Python and nowhere else.

One pool of threads: attnx's OpenMP threads. While any attnx call runs, the BLAS that
attnx's kernels call (scipy's OpenBLAS) is held at one thread, so its own thread pool
never spins beside attnx's (two pools spinning against each other on two cores made
small fits 3-20x slower than one thread). attnx splits large products over its own
threads instead (`pgemm`).

How many threads a call gets (`threads_for(macs)`, the forward multiply-adds the call
holds), in this order:

1. `set_num_threads(n)` (explicit): n, whatever the work or the machine.
2. The cap: OpenMP's limit in the calling thread (OMP_NUM_THREADS, threadpoolctl's
   limits; joblib/loky and Dask's nanny set them in their workers), the CPUs this
   process may use (affinity, a cgroup CPU quota) shared among the MPI ranks on this
   node, then divided among the Python threads running attnx calls at once.
3. Work: a call of fewer than MIN_PARALLEL_MACS multiply-adds runs on one thread. Its
   parallel regions would be microseconds long; on a quiet 2-core machine a second
   thread gains at most ~1.2x there, and on a busy one every region waits for a
   descheduled partner (10-100x slower).
4. Load: no more threads than the CPUs other processes left idle over the last
   ~0.25 s (/proc/stat on Linux, less this process's own CPU time), so a busy machine
   gets one thread instead of barrier waits.

A count chosen by 3 or 4 may change between calls; a forward's backward always runs
with the forward's count (its scratch is sized for it). Kernels whose results do not
depend on the thread count keep them bit for bit; the others (split GEMMs, the fused
attention's dQ shares) differ by rounding between one and two threads, as with any
other way of choosing the count: `set_num_threads(n)` fixes it.

- blas_single(): the BLAS guard around every attnx call (and `hold()` around a whole
  fit, so the calls inside it do not toggle BLAS). Reference-counted under a lock:
  the first attnx call to enter sets scipy's BLAS to one thread, the last to leave
  restores the count it found, so concurrent predict() calls from several Python
  threads never restore too early. While the guard is held, any scipy.linalg call in
  the process runs single-threaded too (OpenBLAS's count is process-wide); it gets
  its old count back as soon as attnx is idle. Only scipy's BLAS is touched (numpy's
  and torch's keep theirs) when threadpoolctl can tell which library that is;
  otherwise every BLAS threadpoolctl sees. attnx's own code calls no numpy BLAS in a
  training step (numpy's OpenBLAS is a second pool of its own).

  threadpoolctl (3.7 and later) lets only one Python thread at a time change a
  process-wide OpenBLAS count (its "controlling thread"; others are silently
  ignored). The guard takes that role only for the instant of setting or
  restoring and then gives it back, so neither attnx's worker threads nor the
  user's threads lock each other out. While another thread is inside its own
  `with threadpool_limits(...)`, that thread owns the count and attnx leaves
  BLAS as the user set it.
"""
from __future__ import annotations

import math
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

from . import _cpus
from ..kernels import _ops

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
# attnx calls inside their guard now, per Python thread (thread ident -> depth)
_inside: dict[int, int] = {}
# (library controller, count to restore) of the outermost guard
_saved: list[tuple[_LibController, int]] = []
# built once: ThreadpoolController() scans every loaded library (ms)
_controller: _Controller | None = None
# file of the BLAS that attnx's kernels call, when identified
BLAS_PATH: str | None = None

#: forward multiply-adds of a call below which it runs on one thread (automatic policy)
MIN_PARALLEL_MACS = 1e8
# set_num_threads(n): n for every call; None: the automatic policy
_explicit: int | None = None
# CPUs for this process (affinity, cgroup quota, MPI ranks on the node): read once
_USABLE = _cpus.usable()
_load = _cpus.LoadSampler()


def set_num_threads(n: int | None) -> int | None:
    """Use exactly n OpenMP threads in every attnx call from now on (the explicit
    override: the same count whatever the work and the machine's load, so results are
    the same from run to run); None goes back to the automatic policy. Returns the
    previous setting (None: automatic)."""
    global _explicit
    if n is not None and (isinstance(n, bool) or not isinstance(n, int)):
        raise TypeError(f"n must be an int >= 1 or None, got {n!r}")
    if n is not None and n < 1:
        raise ValueError(f"n must be >= 1 or None, got {n}")
    old, _explicit = _explicit, n
    return old


class fixed_threads:
    """Context manager: set_num_threads(n) inside, the previous setting after."""

    def __init__(self, n: int | None) -> None:
        self.n = n
        self._old: int | None = None

    def __enter__(self) -> fixed_threads:
        self._old = set_num_threads(self.n)
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        set_num_threads(self._old)
        return False


def get_num_threads() -> int | None:
    """The count set_num_threads() fixed, or None under the automatic policy."""
    return _explicit


def num_threads() -> int:
    """The most OpenMP threads an attnx call from this Python thread may use (>= 1):
    the explicit count, else OpenMP's limit here (OMP_NUM_THREADS, threadpoolctl) within
    the CPUs this process may use, divided among the Python threads in attnx calls."""
    if _explicit is not None:
        return _explicit
    cap = min(max(1, _ops.max_threads()), _USABLE)
    if cap > 1:
        me = threading.get_ident()
        callers = len(_inside) + (me not in _inside)
        cap = max(1, cap // callers)
    return cap


def threads_for(macs: float) -> int:
    """OpenMP threads for a call of `macs` forward multiply-adds (see the module doc)."""
    cap = num_threads()
    if _explicit is not None or cap == 1:
        return cap
    if macs < MIN_PARALLEL_MACS:
        return 1
    idle = _load.idle()
    if idle is None:   # no load reading on this system: by work alone
        return cap
    return max(1, min(cap, int(idle + 0.3)))


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


#: OpenBLAS runs a product on one thread below m*n*k = 4 * 65536: a call whose forward
#: holds fewer multiply-adds in all has no product it would thread
BLAS_THREADED_MACS = 4 * 65536


class blas_single:
    """Context manager: BLAS single-threaded while an attnx call runs.

    `with blas_single(threads, macs): kernel(..., nthreads=threads)`. Nested and
    concurrent uses share one setting (the outermost sets, the last to leave
    restores); the Python threads inside are what num_threads() divides the CPUs
    among. A one-thread call of fewer than BLAS_THREADED_MACS multiply-adds skips it
    (~30 us of setting and restoring OpenBLAS's count, for nothing: BLAS would not
    start its threads for such products).
    """

    __slots__ = ("_active",)

    def __init__(self, nthreads: int = 2, macs: float = math.inf) -> None:
        self._active = nthreads > 1 or macs >= BLAS_THREADED_MACS

    def __enter__(self) -> blas_single:
        if not self._active:
            return self
        me = threading.get_ident()
        libs = controller().lib_controllers
        with _lock:
            if not _inside:
                _limit_to_one(libs)
            _inside[me] = _inside.get(me, 0) + 1
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        if not self._active:
            return False
        me = threading.get_ident()
        with _lock:
            depth = _inside.pop(me) - 1
            if depth:
                _inside[me] = depth
            elif not _inside:
                _restore()
        return False


#: around a whole fit or predict loop: the calls inside it do not set and restore
#: BLAS's count each, and this thread counts as an attnx caller between them too
hold = blas_single


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
    """attnx calls currently inside blas_single, over every Python thread (for tests)."""
    return sum(_inside.values())


controller()
