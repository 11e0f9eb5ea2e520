"""Choosing the classical candidates of many series in worker processes
(TransformerForecaster(n_jobs=...), the classical path only).

Each series (each channel) is chosen on its own (attnx.forecasting._selection.choose),
so a panel splits into contiguous chunks that worker processes choose independently;
the results come back in the panel's order and are the same as in one process (every
candidate is deterministic, and each worker, like a small call in the parent, runs
one thread).

The workers are started with the "spawn" method on every platform: a fork of a
process whose OpenMP or BLAS threads already run can hang in the child, and spawn
is what macOS and Windows use anyway. Like any multiprocessing code, a script that
asks for workers needs the ``if __name__ == "__main__":`` guard; without it (or
wherever workers cannot start) the pool breaks, and the series are chosen in this
process after a UserWarning that says why. Starting a worker costs about as much as
importing attnx and statsforecast (1-2 s), so small panels stay in this process.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from ..runtime import _cpus
from . import _selection as sel

if TYPE_CHECKING:
    import numpy.typing as npt

    F64 = npt.NDArray[Any]

__all__ = ["workers", "choose_all", "MIN_TASKS_PER_WORKER"]

#: a worker gets at least this many series (a worker's start costs about what
#: choosing 20-40 short series does)
MIN_TASKS_PER_WORKER = 50
#: chunks per worker (smaller chunks even out series of unequal cost)
CHUNKS_PER_WORKER = 4

Task = tuple[Any, int, tuple[int, ...], "list[str] | None"]   # y, h, periods, names


def workers(n_jobs: int | None, n_tasks: int) -> int:
    """Worker processes for n_tasks series: n_jobs (None: 1, in this process; -1: one
    per CPU this process may use), at most one per MIN_TASKS_PER_WORKER series; 1 means
    no workers."""
    if n_jobs is None or n_jobs == 1:
        return 1
    want = _cpus.usable() if n_jobs < 0 else int(n_jobs)
    return max(1, min(want, n_tasks // MIN_TASKS_PER_WORKER))


def _one_thread() -> None:
    """A worker's initializer: every thread pool at one thread (the workers already
    fill the CPUs)."""
    from threadpoolctl import threadpool_limits

    from ..runtime import _threads
    _threads.set_num_threads(1)
    global _LIMITS
    _LIMITS = threadpool_limits(limits=1)


_LIMITS: Any = None


def aligned(y: F64) -> F64:
    """A copy of 1-D y starting on a 64-byte boundary: statsforecast's AutoTheta rounds
    differently on data 8 bytes off a 16-byte boundary, so without it where a series'
    memory happens to lie (a view into a frame, a pickled buffer in a worker) changed
    its forecasts."""
    buf = np.empty(y.shape[0] + 8)
    off = (-buf.ctypes.data % 64) // 8
    out: F64 = buf[off:off + y.shape[0]]
    out[:] = y
    return out


def _choose_chunk(tasks: list[Task]) -> list[sel.Choice]:
    return [sel.choose(aligned(y), h, periods, names) for y, h, periods, names in tasks]


def _chunks(tasks: list[Task], n: int) -> list[list[Task]]:
    size = -(-len(tasks) // n)
    return [tasks[i:i + size] for i in range(0, len(tasks), size)]


@contextlib.contextmanager
def _this_attnx_first() -> Iterator[None]:
    """While the workers start: the folder holding the attnx this process runs first on
    sys.path (spawn hands the workers this process's sys.path; an unbuilt source
    checkout earlier on it, as a script run from the checkout puts there, would stop
    them at import)."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    saved = list(sys.path)
    sys.path.insert(0, here)
    try:
        yield
    finally:
        sys.path[:] = saved


def choose_all(tasks: list[Task], n_jobs: int | None) -> list[sel.Choice]:
    """sel.choose(y, h, periods, names) of every task, in order, in `workers(n_jobs)`
    processes (this one when that is 1, or when the workers cannot run)."""
    n = workers(n_jobs, len(tasks))
    if n > 1:
        try:
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(n, mp_context=ctx, initializer=_one_thread) as ex:
                with _this_attnx_first():   # the workers start at the submits
                    futures = [ex.submit(_choose_chunk, chunk)
                               for chunk in _chunks(tasks, n * CHUNKS_PER_WORKER)]
                return [c for f in futures for c in f.result()]
        except (BrokenProcessPool, OSError) as exc:
            warnings.warn(f"TransformerForecaster: n_jobs={n_jobs}: the worker processes "
                          f"failed ({type(exc).__name__}: {exc}); choosing every series in "
                          f"this process (a script needs the if __name__ == '__main__': "
                          f"guard for workers)", UserWarning, stacklevel=4)
    return _choose_chunk(tasks)
