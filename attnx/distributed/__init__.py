"""Data-parallel training over MPI (mpi4py): the estimators' `comm=` argument.

Started as ``mpiexec -n P python -m mpi4py train.py``, every rank calls
``est.fit(X_shard, y_shard, sample_weight=w_shard, comm=MPI.COMM_WORLD)`` with its
own shard of the samples. The *global* data set is the shards concatenated in rank
order, and everything that depends on the samples is defined over it:

- batches, distributed="balanced" (the default): as PyTorch's DistributedSampler,
  each rank shuffles its own shard every epoch (a generator seeded by a number drawn
  alike on every rank from the estimator's shuffling generator, and the rank; one
  rank uses that generator itself, so its fit is the fit without comm) and takes
  ceil(batch_size / P) rows of it per step (for ragged input its own length-sorted
  plan). Every rank runs the largest shard's number of steps; a smaller shard's last
  steps are short or empty, so every row is used exactly once per epoch (no row is
  repeated to fill them). Reproducible for a given seed and P; not equal to the
  single-process fit for P > 1. With dropout, each epoch every rank draws its masks
  from a generator seeded the same way from the model's dropout generator;
- batches, distributed="exact": every rank draws the same permutation of the global
  indices from the estimator's shuffling generator (same seed on every rank; rank 0's
  seeds when random_state is None) and builds the same global batch plan (for ragged
  input the length-sorted windows over every rank's lengths), so global batch k holds
  the samples it holds in one process with all the data; each rank computes its
  own samples of the batch (possibly none), padded to its largest share (dropout is
  refused: the ranks cannot draw one process's masks);
- the gradient: each rank's loss is the (weighted) mean over its own samples of
  the batch; its gradient is scaled by its share of the batch's weight (sample
  count, or sum of sample and class weights) and one ``Allreduce`` (sum) over
  the flat gradient buffer gives every rank the gradient of the global batch.
  Every rank then applies the same AdamW step, so the weights stay identical
  without ever being broadcast (checked after every epoch with a hash);
- the validation split, classes_, class_weight="balanced", the longest sequence
  (learned positions), the epoch losses and early stopping use every rank's data.

Errors: a rank that fails (bad input on its shard, a NaN loss) must not leave
the others waiting in a collective. Data preparation runs in an agreed block
(together: one exchange of errors at its end and before any collective inside);
every step sums a small vector [error, stop, abort flags, weight, loss] before the
gradient. When any rank flagged an error, all ranks exchange the messages and
raise the same exception (same class and text, naming the first failing rank).
Ctrl-C on any rank stops every rank after the same step; a second Ctrl-C inside
a step drops that step on every rank. A rank that dies
(killed, segfault) cannot take part in any exchange: MPICH's launcher (hydra)
sees the process end and terminates the other ranks ("BAD TERMINATION ...
signal 9"), so mpiexec returns within about a second. A rank that hangs without
dying is only caught by a launcher timeout: ``mpiexec -timeout SECONDS`` or the
environment variable MPIEXEC_TIMEOUT. An exception outside attnx ends the job
only under ``python -m mpi4py`` (which calls MPI_Abort).

mpi4py is imported only when a communicator is given.
"""
from __future__ import annotations

import contextlib
import hashlib
import math
import time
from typing import (TYPE_CHECKING, Any, Callable, Iterator, Mapping, Protocol, TypeVar, Union,
                    cast, overload)

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..runtime._typing import AnyArray, FloatArray, IntArray

    F64Array = npt.NDArray[np.float64]
    # this rank's part of a global batch: (start, local samples, padded length or None,
    # global samples)
    Part = tuple[int, int, Union[int, None], int]
    # one batch of an epoch's plan: (start in the order, samples, length to pad to or None)
    PlanEntry = tuple[int, int, Union[int, None]]

    class InterruptGuard(Protocol):
        """What a rank reads and clears of the trainer's Ctrl-C guard."""

        interrupted: bool

    # what _describe sends between ranks: (exception class, message)
    ErrorInfo = tuple[type[BaseException], str]

    class MPIComm(Protocol):
        """What attnx calls on an mpi4py intracommunicator (MPI.COMM_WORLD, ...)."""

        def Get_rank(self) -> int: ...
        def Get_size(self) -> int: ...
        def allgather(self, sendobj: Any) -> list[Any]: ...
        def allreduce(self, sendobj: Any, op: Any = ...) -> Any: ...
        def bcast(self, obj: Any, root: int = ...) -> Any: ...
        def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Any = ...) -> None: ...

_T = TypeVar("_T")
_N = TypeVar("_N", int, float)

__all__ = ["Communicator", "DistributedError", "wrap", "shard"]


class DistributedError(RuntimeError):
    """An error on one rank, re-raised on every rank when its own class cannot be
    rebuilt from a message alone."""


def wrap(comm: object) -> Local:
    """The training loop's view of `comm`: None -> single process (every hook a
    no-op), an mpi4py intracommunicator -> Communicator(comm); a Communicator is
    returned as it is (so its timing counters can be read afterwards)."""
    if comm is None:
        return Local()
    if isinstance(comm, Communicator):
        return comm
    return Communicator(comm)


def shard(n: int, rank: int, size: int) -> slice:
    """The slice of range(n) that rank `rank` of `size` holds when n samples are
    split as evenly as possible in rank order (the first n % size ranks get one
    more). The CLI splits a data file this way."""
    base, extra = divmod(int(n), int(size))
    start = rank * base + min(rank, extra)
    return slice(start, start + base + (1 if rank < extra else 0))


class Local:
    """comm=None: one process holds every sample. Each hook is the identity."""

    distributed = False
    rank, size, is_root = 0, 1, True
    # the global batch plan split over the ranks (distributed="exact"); else every
    # rank batches its own shard ("balanced", and one process: the same thing)
    exact = False
    # set by setup()
    n: int
    n_local: int
    offset: int
    lengths: IntArray | None
    t_max: int | None

    def setup(self, n_local: int, tail: tuple[int, ...] = (),
              lengths: IntArray | None = None) -> None:
        self.n, self.n_local, self.offset = int(n_local), int(n_local), 0
        self.lengths = lengths
        self.t_max = None if lengths is None else int(lengths.max())

    def configure(self, mode: str) -> None:
        """The estimator's distributed= ("balanced" or "exact"); nothing without comm."""

    def local_batch(self, bs: int) -> int:
        """Rows each rank takes from its shard per step (balanced mode)."""
        return bs

    def shard_rng(self, rng: np.random.Generator) -> np.random.Generator:
        """The generator that shuffles this rank's shard this epoch (balanced mode)."""
        return rng

    def steps_per_epoch(self, bs: int) -> int:
        """Optimizer steps in one epoch over the data set up by setup()."""
        n = max(self.n, 1)
        return -(-n // min(bs, n))

    def allmax(self, value: _N) -> _N:
        return value

    def union(self, labels: AnyArray) -> AnyArray:
        return labels

    def together(self, params: Mapping[str, object] | None = None
                 ) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def collect_error(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def same(self, value: _T) -> _T:
        return value

    def local_part(self, global_idx: IntArray) -> IntArray:
        return global_idx

    def batches(self, order: IntArray | None,
                plan: list[PlanEntry]) -> tuple[IntArray | None, list[Part]]:
        """(order, [(start, m, t, m), ...]) for a plan of (start, m, t): with comm,
        this rank's part of every global batch (see Communicator.batches)."""
        return order, [(s, m, t, m) for s, m, t in plan]

    def rows(self, parts: list[Part], bs: int) -> int:
        """Rows of the batch buffer for these parts."""
        return bs

    def batch_loss(self, loss: float, weight: float,
                   guard: InterruptGuard | None = None) -> tuple[float, float]:
        """(loss, weight) of the global batch."""
        return loss, weight

    def stopping(self, guard: InterruptGuard) -> bool:
        """Whether training stops after this step (Ctrl-C)."""
        return guard.interrupted

    def reduce_gradient(self, flat: FloatArray) -> None:
        pass

    @overload
    def allsum(self, value: float) -> float: ...
    @overload
    def allsum(self, value: AnyArray) -> AnyArray: ...
    def allsum(self, value: float | AnyArray) -> float | AnyArray:
        return value

    def check_identical(self, flat: FloatArray) -> None:
        pass


class Communicator(Local):
    """Collective operations of the data-parallel fit over an mpi4py intracommunicator.

    Attributes after setup(): n (global samples), n_local, offset (index of this
    rank's first sample in the global order), counts (samples per rank).
    Counters for benchmarks: steps, allreduce_seconds (time inside the gradient
    and loss Allreduce calls, waiting for slower ranks included), allreduce_bytes
    (bytes of the gradient buffer and the loss vector summed per step).
    """

    distributed = True
    counts: list[int]  # set by setup()

    def __init__(self, comm: object) -> None:
        try:
            from mpi4py import MPI
        except ImportError as exc:
            raise ImportError("comm= needs mpi4py (pip install 'attnx[mpi]')") from exc
        if not isinstance(comm, MPI.Intracomm) or comm == MPI.COMM_NULL:
            raise TypeError(f"comm must be an mpi4py intracommunicator such as "
                            f"MPI.COMM_WORLD, got {comm!r}")
        self._MPI = MPI
        self.comm: MPIComm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.is_root = self.rank == 0
        self._error: Exception | None = None
        self._scale = 1.0
        self._stop = self._pending = self._abort = False
        self._send = np.zeros(5)
        self._recv = np.zeros(5)
        self.steps, self.allreduce_seconds, self.allreduce_bytes = 0, 0.0, 0

    # ---- agreement on errors -------------------------------------------
    @contextlib.contextmanager
    def together(self, params: Mapping[str, object] | None = None
                 ) -> Iterator[None]:
        """Run a block on every rank; if it raised on any rank, every rank raises the
        same error when leaving the block (one allgather, so use it outside the
        step loop). With `params` (the hyper-parameters) every rank first checks
        that all ranks have the same ones, so that all take the same branches.

        Collectives inside the block (union, allsum of arrays, allmax) start with
        the same exchange of errors (_sync): a rank that failed earlier in the
        block meets them there, and every rank raises at that point instead of
        the failed rank's exchange being matched with another collective."""
        if params is not None:
            self._check_params(params)
        err: Exception | None = None
        try:
            yield
        except Exception as exc:
            if getattr(exc, "_attnx_agreed", False):  # every rank raises it already
                raise
            err = exc
        self._sync(err)

    def _sync(self, err: Exception | None = None) -> None:
        self._raise_first(self.comm.allgather(None if err is None else _describe(err)), err)

    def _check_params(self, params: Mapping[str, object]) -> None:
        sig = {k: _same_repr(v) for k, v in params.items()}
        every = self.comm.allgather(sig)
        for r, other in enumerate(every):
            if other != every[0]:
                k = next(k for k in other if other[k] != every[0].get(k))
                raise ValueError(f"every rank must use the same hyper-parameters: rank 0 has "
                                 f"{k}={every[0].get(k)}, rank {r} has {k}={other[k]}")

    @contextlib.contextmanager
    def collect_error(self) -> Iterator[None]:
        """Keep an exception of the block for the next batch_loss, which makes every
        rank raise it (one collective per step instead of two)."""
        try:
            yield
        except Exception as exc:
            self._error = exc
        except KeyboardInterrupt:
            # a second Ctrl-C inside the step: this rank cannot finish the step, so
            # every rank drops it (batch_loss raises KeyboardInterrupt on each)
            # instead of this rank leaving while the others wait in the Allreduce
            self._abort = True

    def _raise_first(self, infos: list[ErrorInfo | None], err: Exception | None) -> None:
        failed = [(r, info) for r, info in enumerate(infos) if info is not None]
        if not failed:
            return
        r, (cls, text) = failed[0]
        more = f"; {len(failed) - 1} other rank(s) failed too" if len(failed) > 1 else ""
        text = f"{text} [rank {r} of {self.size}{more}]"
        exc = _rebuild(cls, text)
        setattr(exc, "_attnx_agreed", True)  # read by together()
        self._error = None
        if err is not None:
            raise exc from err
        raise exc

    # ---- the two modes ------------------------------------------------------
    def configure(self, mode: str) -> None:
        """distributed="exact": the global batch plan, split over the ranks (the
        fit equals one process's to rounding); "balanced": every rank batches its
        own shard (see local_batch, shard_rng, steps_per_epoch)."""
        self.exact = mode == "exact"

    def local_batch(self, bs: int) -> int:
        """Balanced mode: ceil(bs / size) rows of this rank's shard per step (a
        global batch of size * that, at most size - 1 rows more than bs)."""
        return bs if self.exact else -(-bs // self.size)

    def shard_rng(self, rng: np.random.Generator) -> np.random.Generator:
        """Balanced mode, once per epoch: one rank of many shuffles its shard with a
        generator seeded by (a number drawn from rng, rank), so the ranks' orders are
        independent while rng, drawn alike on every rank, stays the same everywhere
        (it is saved with the model). One rank uses rng itself: the fit of one rank
        is the fit without comm."""
        if self.size == 1:
            return rng
        seed = int(rng.integers(0, 2**63 - 1))
        return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(self.rank,)))

    def steps_per_epoch(self, bs: int) -> int:
        """Exact mode: ceil(n / bs) global batches. Balanced mode: every rank runs the
        same number of steps, that of the largest shard, ceil(max count / local
        batch); a smaller shard's last steps are short or empty (its rows weigh
        nothing there), so every row of every shard is used once per epoch."""
        bs = min(bs, max(self.n, 1))
        if self.exact:
            return super().steps_per_epoch(bs)
        b = self.local_batch(bs)
        return max(-(-c // b) for c in self.counts)

    # ---- layout of the global data set -----------------------------------
    def setup(self, n_local: int, tail: tuple[int, ...] = (),
              lengths: IntArray | None = None) -> None:
        """Exchange the shard sizes (collective). All ranks must agree on `tail`
        (the shape of a sample): else every rank raises the same ValueError. The
        hyper-parameters are compared before, by together(params), so that every
        rank takes the same branches inside that block. `lengths` (ragged data):
        this rank's sequence lengths; every rank gets all of them (self.lengths, in
        global order) and their maximum (self.t_max)."""
        rows = self.comm.allgather((int(n_local), tuple(int(s) for s in tail)))
        for r, (_, tail_r) in enumerate(rows):
            if tail_r != rows[0][1]:
                raise ValueError(f"every rank's samples must have one shape (seq_len, "
                                 f"features): rank 0 has {rows[0][1]}, rank {r} has {tail_r}")
        self.counts = [c for c, _ in rows]
        self.n_local = self.counts[self.rank]
        self.offset = sum(self.counts[:self.rank])
        self.n = sum(self.counts)
        self.lengths = self.global_lengths(lengths)
        self.t_max = None if self.lengths is None else int(self.lengths.max())

    def allmax(self, value: _N) -> _N:
        """The largest of the ranks' values."""
        self._sync()
        return cast("_N", self.comm.allreduce(value, op=self._MPI.MAX))

    def union(self, labels: AnyArray) -> AnyArray:
        """Every rank's labels, concatenated (for classes_)."""
        self._sync()
        return np.concatenate(self.comm.allgather(np.unique(labels)))

    def same(self, value: _T) -> _T:
        """rank 0's value on every rank (seeds drawn when random_state is None)."""
        return cast("_T", self.comm.bcast(value, root=0))

    def local_part(self, global_idx: IntArray) -> IntArray:
        """The global indices (sorted ascending) that fall in this rank's shard,
        as local row numbers."""
        lo, hi = np.searchsorted(global_idx, [self.offset, self.offset + self.n_local])
        return global_idx[lo:hi] - self.offset

    def global_lengths(self, lengths: IntArray | None) -> IntArray | None:
        """Every rank's sequence lengths, concatenated in rank order (ragged data:
        the global batch plan sorts by length)."""
        parts = self.comm.allgather(None if lengths is None else np.asarray(lengths))
        if all(p is None for p in parts):
            return None
        if any(p is None for p in parts):
            raise ValueError("every rank must pass X in one form: some ranks passed a list "
                             "of sequences (ragged), others one array")
        out: IntArray = np.concatenate(parts)
        return out

    def batches(self, order: IntArray | None,
                plan: list[PlanEntry]) -> tuple[IntArray | None, list[Part]]:
        """This rank's part of every global batch.

        order: the global sample order (None: 0..n-1), plan: [(start, m, t), ...]
        with global batch k = order[start:start + m] (t: its padded length or None).
        Returns (local_order, [(start, m_local, t, m_global), ...]) where this
        rank's samples of batch k are local_order[start:start + m_local] (rows
        start..start + m_local when local_order is None), as local row numbers.
        """
        off, nl = self.offset, self.n_local
        parts: list[Part] = []
        if order is None:
            for s, m, t in plan:
                lo, hi = min(max(s, off), off + nl), min(max(s + m, off), off + nl)
                parts.append((lo - off, hi - lo, t, m))
            return None, parts
        pieces: list[IntArray] = []
        begin = 0
        for s, m, t in plan:
            idx = order[s:s + m]
            mine = idx[(idx >= off) & (idx < off + nl)] - off
            pieces.append(mine)
            parts.append((begin, len(mine), t, m))
            begin += len(mine)
        local = np.concatenate(pieces) if pieces else np.zeros(0, np.intp)
        return local, parts

    def rows(self, parts: list[Part], bs: int) -> int:
        """Rows of the batch buffer: this rank's largest share of a global batch in
        this epoch (the shares are random with shuffling; each step computes this
        many rows, the unused ones padded with zero weight). Fixed within an epoch,
        so a step allocates nothing; a new value re-makes the buffers once."""
        return max(1, min(bs, max((m for _, m, _, _ in parts), default=1)))

    # ---- per step ----------------------------------------------------------
    def batch_loss(self, loss: float, weight: float,
                   guard: InterruptGuard | None = None) -> tuple[float, float]:
        """Sum [error, stop, abort, weight, loss * weight] over the ranks.

        loss is this rank's (weighted) mean loss over its samples of the batch and
        weight what that mean divides by (its sample count, or its sum of sample
        weights). Returns the global batch's (loss, weight); raises on every rank
        when any rank's step failed, KeyboardInterrupt on every rank when a rank's
        step was cut short by a second Ctrl-C (the step is dropped everywhere);
        notes whether any rank saw Ctrl-C (stopping)."""
        s = self._send
        s[0] = self._error is not None
        s[1] = self._pending or bool(guard is not None and guard.interrupted)
        s[2] = self._abort
        s[3] = weight
        s[4] = loss * weight if weight else 0.0
        t0 = time.perf_counter()
        self.comm.Allreduce(s, self._recv, op=self._MPI.SUM)
        self.allreduce_seconds += time.perf_counter() - t0
        self.allreduce_bytes += s.nbytes
        err, stop, abort, total, loss_sum = self._recv
        if err:
            self._raise_first(self.comm.allgather(
                None if self._error is None else _describe(self._error)), self._error)
        if abort:
            self._abort = self._pending = False
            raise KeyboardInterrupt
        self._stop = bool(stop)
        if total == 0:  # no weight anywhere in this batch: a zero gradient, as in one process
            self._scale = 0.0
            return 0.0, 0.0
        self._scale = weight / total
        return loss_sum / total, float(total)

    def stopping(self, guard: InterruptGuard) -> bool:
        """Whether every rank stops after this step: only when some rank's Ctrl-C
        was in this step's sum. A Ctrl-C that arrived since is held back for the
        next step's sum, so that no rank leaves the loop alone."""
        if self._stop:
            guard.interrupted = True
            return True
        if guard.interrupted:
            self._pending, guard.interrupted = True, False
        return False

    def reduce_gradient(self, flat: FloatArray) -> None:
        """flat <- sum over ranks of (weight_rank / global weight) * flat_rank, in
        place: the gradient of the global batch's mean loss, identical on every rank."""
        if self._scale != 1.0:
            flat *= flat.dtype.type(self._scale)
        t0 = time.perf_counter()
        self.comm.Allreduce(self._MPI.IN_PLACE, flat, op=self._MPI.SUM)
        self.allreduce_seconds += time.perf_counter() - t0
        self.allreduce_bytes += flat.nbytes
        self.steps += 1

    @overload
    def allsum(self, value: float) -> float: ...
    @overload
    def allsum(self, value: AnyArray) -> AnyArray: ...
    def allsum(self, value: float | AnyArray) -> float | AnyArray:
        """Sum over the ranks of a number (a float) or an array (float64)."""
        if np.ndim(value) == 0:
            return float(self.comm.allreduce(float(value), op=self._MPI.SUM))
        self._sync()
        a = np.ascontiguousarray(value, dtype=np.float64)
        out = np.empty_like(a)
        self.comm.Allreduce(a, out, op=self._MPI.SUM)
        return out

    def check_identical(self, flat: FloatArray) -> None:
        """Every rank must hold the same weights bit for bit; RuntimeError otherwise
        (on every rank) instead of silently training different models."""
        digest = hashlib.blake2b(np.ascontiguousarray(flat).view(np.uint8).data,
                                 digest_size=16).hexdigest()
        digests = self.comm.allgather(digest)
        if len(set(digests)) != 1:
            raise RuntimeError(f"the weights differ between ranks after the gradient "
                               f"Allreduce (digests {digests}); the MPI library's sum is "
                               f"not identical on every rank")


# ---- helpers ---------------------------------------------------------------
_REBUILDABLE = (ValueError, TypeError, ArithmeticError, MemoryError, RuntimeError,
                NotImplementedError, OSError, ImportError)


def _same_repr(value: object) -> str:
    """repr for comparing hyper-parameters across ranks; objects whose repr holds a
    memory address (a numpy Generator as random_state) compare by type."""
    r = repr(value)
    return type(value).__name__ if " at 0x" in r else r


def _describe(exc: BaseException) -> ErrorInfo:
    return type(exc), str(exc)


def _rebuild(cls: object, text: str) -> Exception:
    """An exception of class `cls` with message `text` when that is possible (so
    `except ValueError` works alike on every rank), else a DistributedError."""
    if isinstance(cls, type) and issubclass(cls, _REBUILDABLE):
        try:
            exc = cls(text)
            if str(exc) == text:
                return exc
        except Exception:
            pass
    name = getattr(cls, "__name__", str(cls))
    return DistributedError(f"{name}: {text}")


def global_r2(comm: MPIComm | None, y_true: npt.ArrayLike, y_pred: npt.ArrayLike) -> float:
    """R^2 (uniform average over the last axis, as attnx's score) of predictions
    spread over the ranks, from summed statistics: no rank gathers the data."""
    t = np.asarray(y_true, np.float64).reshape(-1, np.shape(y_true)[-1])
    p = np.asarray(y_pred, np.float64).reshape(t.shape)
    comm_sum: Callable[[F64Array], F64Array]
    if comm is None:
        comm_sum = (lambda a: a)
    else:
        from mpi4py import MPI

        def allreduce_sum(a: F64Array) -> F64Array:
            out = np.empty_like(a)
            comm.Allreduce(a, out, op=MPI.SUM)
            return out
        comm_sum = allreduce_sum
    n = comm_sum(np.array([t.shape[0]], np.float64))[0]
    mean = comm_sum(t.sum(axis=0)) / n
    ss = comm_sum(np.concatenate((((t - p) ** 2).sum(axis=0), ((t - mean) ** 2).sum(axis=0))))
    d = t.shape[1]
    ss_res, ss_tot = ss[:d], ss[d:]
    r2 = np.where(ss_res == 0, 1.0, 0.0)
    ok = ss_tot > 0
    r2[ok] = 1.0 - ss_res[ok] / ss_tot[ok]
    return float(r2.mean()) if math.isfinite(r2.mean()) else float("nan")
