"""Pieces of the estimators' training loop: batch buffers, snapshots, Ctrl-C, progress bars."""
from __future__ import annotations

import math
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping, Protocol, Union

import numpy as np

if TYPE_CHECKING:
    from types import FrameType

    import numpy.typing as npt

    from ._params import ParamDict
    from ._sequences import Data
    from ._typing import AnyArray, BoolArray, FloatArray, IntArray
    from .optim import AdamW

    F64Array = npt.NDArray[np.float64]
    # what signal.signal accepts and returns
    _SigHandler = Union[Callable[[int, Union[FrameType, None]], Any], int, signal.Handlers, None]
    # one batch of an epoch: (start in the order, samples, length to pad to or None)
    PlanEntry = tuple[int, int, Union[int, None]]

    class _Model(Protocol):
        """A model whose weights live in one flat buffer (params.flat)."""

        @property
        def params(self) -> ParamDict: ...

    class _Bar(Protocol):
        """What attnx uses of a tqdm progress bar."""

        def set_postfix_str(self, s: str = ..., refresh: bool = ...) -> object: ...
        def update(self, n: int = ...) -> object: ...
        def close(self) -> None: ...


class TrainingDivergedError(FloatingPointError):
    """The training loss became NaN or infinite; the estimator was rolled back to the
    end of the last good epoch."""


# ragged data: batches are cut from windows of this many batches, sorted by length
WINDOW_BATCHES = 16
# a ragged batch is padded to a multiple of this many positions (fewer distinct shapes,
# so the model's workspaces are reused more often), never beyond the longest sequence
PAD_MULTIPLE = 8


class Batch:
    """One mini-batch of a fixed shape, reused every step.

    x (bs, T, n_features); mask (bs, T) bool, True = padding (None for dense data);
    y_true (bs, *target_tail) in target_dtype; w (bs,) or (bs, T) loss weights (None
    when every sample weighs the same); y, dy (bs, *out_tail) model output and dL/dY.
    A short batch fills the first m rows; the others get zero inputs and zero weight
    (and one valid position, so pooling never divides by zero), adding exactly nothing
    to the gradients while the model keeps seeing one batch shape.
    """

    def __init__(self, bs: int, t: int, f: int, target_tail: tuple[int, ...],
                 target_dtype: npt.DTypeLike, out_tail: tuple[int, ...], dtype: npt.DTypeLike,
                 masked: bool, weight_ndim: int | None) -> None:
        self.shape = (bs, t, f)
        self.key = (bs, t, f, tuple(target_tail), np.dtype(target_dtype), tuple(out_tail),
                    np.dtype(dtype), bool(masked), weight_ndim)
        self.dtype = dtype
        self.x: FloatArray = np.zeros((bs, t, f), dtype)
        self.mask: BoolArray | None = np.zeros((bs, t), bool) if masked else None
        self.y_true: AnyArray = np.zeros((bs,) + tuple(target_tail), target_dtype)
        self.w: F64Array | None = (None if weight_ndim is None else
                                   np.zeros((bs,) if weight_ndim == 1 else (bs, t), np.float64))
        self.y: FloatArray = np.zeros((bs,) + tuple(out_tail), dtype)
        self.dy: FloatArray = np.zeros((bs,) + tuple(out_tail), dtype)

    def load(self, data: Data, order: IntArray | None, start: int, m: int) -> None:
        """Copy samples start..start+m of `order` (in order when None) into the batch."""
        t = self.shape[1]
        idx: slice | IntArray
        if order is None:
            idx = slice(start, start + m)
            np.copyto(self.x[:m], data.x[idx, :t] if data.x.shape[1] != t else data.x[idx])
            np.copyto(self.y_true[:m], data.y[idx] if not data.per_position or
                      data.y.shape[1] == t else data.y[idx, :t])
        else:
            idx = order[start:start + m]
            # mode="clip": numpy buffers `out` in the default mode="raise"
            if data.x.shape[1] == t:
                np.take(data.x, idx, axis=0, out=self.x[:m], mode="clip")
            else:
                np.copyto(self.x[:m], data.x[idx, :t])
            if not data.per_position or data.y.shape[1] == t:
                np.take(data.y, idx, axis=0, out=self.y_true[:m], mode="clip")
            else:
                np.copyto(self.y_true[:m], data.y[idx, :t])
        if self.mask is not None:
            assert data.lengths is not None  # masked batches are built for ragged data only
            lengths = data.lengths[idx]
            np.less_equal(lengths[:, None], np.arange(t), out=self.mask[:m])
            self.mask[m:] = True
            self.mask[m:, 0] = False
        if self.w is not None:
            if data.w is None:
                self.w[:m] = 1.0
            elif self.w.ndim == 1 or data.w.shape[1] == t:
                self.w[:m] = data.w[idx]
            else:
                self.w[:m] = data.w[idx, :t]
            self.w[m:] = 0.0
        if m < self.shape[0]:
            self.x[m:] = 0


def batch_plan(n: int, bs: int, rng: np.random.Generator | None,
               lengths: IntArray | None) -> tuple[IntArray | None, list[PlanEntry]]:
    """Batches of one epoch as (index array, length to pad to) pairs.

    Dense data (lengths None): a permutation drawn from rng (or the data's order when
    rng is None) cut into consecutive batches. Ragged data: the permutation is cut into
    windows of WINDOW_BATCHES * bs samples, each window sorted by length (stable) and
    cut into batches, so a batch holds sequences of similar lengths and little padding;
    then the batches are shuffled (one more draw from rng), so that training does not
    see a short-to-long curriculum inside each window.
    """
    order = rng.permutation(n) if rng is not None else None
    if lengths is None:
        return order, [(start, min(bs, n - start), None) for start in range(0, n, bs)]
    if order is None:
        order = np.arange(n)
    win = WINDOW_BATCHES * bs
    parts: list[IntArray] = []
    for s in range(0, n, win):
        w = order[s:s + win]
        parts.append(w[np.argsort(lengths[w], kind="stable")])
    order = np.concatenate(parts)
    tmax = int(lengths.max())
    plan: list[PlanEntry] = []
    for start in range(0, n, bs):
        m = min(bs, n - start)
        longest = int(lengths[order[start:start + m]].max())
        plan.append((start, m, min(tmax, -(-longest // PAD_MULTIPLE) * PAD_MULTIPLE)))
    if rng is not None:
        plan = [plan[i] for i in rng.permutation(len(plan))]
    return order, plan


class Snapshot:
    """Copies of the weights, the optimizer state and the shuffling RNG state."""

    def __init__(self, model: _Model, optimizer: AdamW) -> None:
        self.params = np.empty_like(model.params.flat)
        self.m = [np.empty_like(a) for a in optimizer.m]
        self.v = [np.empty_like(a) for a in optimizer.v]
        self.t = 0
        self.rng_state: Mapping[str, Any] | None = None

    def fits(self, model: _Model, optimizer: AdamW) -> bool:
        return (self.params.shape == model.params.flat.shape
                and self.params.dtype == model.params.flat.dtype
                and len(self.m) == len(optimizer.m))

    def save(self, model: _Model, optimizer: AdamW,
             rng: np.random.Generator | None = None) -> None:
        np.copyto(self.params, model.params.flat)
        for dst, src in zip(self.m + self.v, optimizer.m + optimizer.v):
            np.copyto(dst, src)
        self.t = optimizer.t
        self.rng_state = None if rng is None else rng.bit_generator.state

    def restore(self, model: _Model, optimizer: AdamW,
                rng: np.random.Generator | None = None) -> None:
        """Put back what save() copied (the RNG state only when both were given one)."""
        np.copyto(model.params.flat, self.params)
        for dst, src in zip(optimizer.m + optimizer.v, self.m + self.v):
            np.copyto(dst, src)
        optimizer.t = self.t
        if rng is not None:
            assert self.rng_state is not None  # restore(rng) always follows a save(rng)
            rng.bit_generator.state = self.rng_state


class EarlyStopping:
    """scikit-learn's rule: an epoch improves only when its loss is below best - tol;
    stop after n_iter_no_change epochs without improvement. With keep_best, the
    weights and the optimizer state (moments and step count) of the best epoch are
    kept and restore_best() puts them back, so that training that goes on (warm
    start, partial_fit) continues from the best epoch as a whole."""

    def __init__(self, tol: float, n_iter_no_change: int, model: _Model, optimizer: AdamW,
                 keep_best: bool) -> None:
        self.tol, self.patience = tol, n_iter_no_change
        self.best: float = math.inf
        self.stall = 0
        self.model, self.optimizer = model, optimizer
        self.best_state = Snapshot(model, optimizer) if keep_best else None

    def update(self, loss: float) -> bool:
        """Record one epoch's loss; True when training should stop."""
        self.stall = self.stall + 1 if loss > self.best - self.tol else 0
        if loss < self.best:
            self.best = loss
            if self.best_state is not None:
                self.best_state.save(self.model, self.optimizer)
        return self.stall >= self.patience

    def restore_best(self) -> None:
        if self.best_state is not None:
            self.best_state.restore(self.model, self.optimizer)


class InterruptGuard:
    """Turn Ctrl-C during training into a flag checked between steps.

    A SIGINT arriving inside an optimizer step would otherwise leave the weights
    and the optimizer state half updated. Installed only in the main thread and
    only over Python's default handler; a second Ctrl-C raises at once.
    """

    def __init__(self) -> None:
        self.interrupted = False
        self._previous: _SigHandler = None

    def __enter__(self) -> InterruptGuard:
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.interrupted:
            raise KeyboardInterrupt
        self.interrupted = True

    def __exit__(self, *exc: object) -> Literal[False]:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
        return False


class Progress:
    """verbose >= 1: one tqdm bar per epoch over its batches, showing the running loss."""

    def __init__(self, verbose: int, n_batches: int, last_epoch: int | None = None) -> None:
        self.on = verbose >= 1
        self.n_batches = n_batches
        self.last_epoch = last_epoch
        self.bar: _Bar | None = None
        if self.on:
            from tqdm import tqdm  # imported only when asked to print
            self._tqdm: Callable[..., _Bar] = tqdm

    def start(self, epoch: int) -> None:
        if self.on:
            total = f"/{self.last_epoch}" if self.last_epoch else ""
            self.bar = self._tqdm(total=self.n_batches, desc=f"epoch {epoch}{total}",
                                  unit="batch", leave=True, file=sys.stderr)

    def step(self, running_loss: float) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"loss={running_loss:.4g}", refresh=False)
            self.bar.update(1)

    def end(self, loss: float, val_loss: float | None = None, note: str = "") -> None:
        if self.bar is not None:
            text = f"loss={loss:.4g}"
            if val_loss is not None:
                text += f", val_loss={val_loss:.4g}"
            self.bar.set_postfix_str(text + note, refresh=False)
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
