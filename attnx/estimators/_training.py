"""The estimators' training: the Trainer (loop, step, validation, early stopping,
rollback) and its pieces: batch buffers and plans, snapshots, Ctrl-C, progress bars,
the validation split and the seeds."""
from __future__ import annotations

import contextlib
import math
import numbers
import signal
import threading
import warnings
from typing import (TYPE_CHECKING, Any, Callable, Iterator, Literal, Mapping, NoReturn, Protocol,
                    Union, cast)

import numpy as np

from ..layers import losses
from ._sequences import key_mask
from ..runtime._progress import Progress
from ..runtime._threads import hold
from ..runtime._validate import finite

if TYPE_CHECKING:
    from types import FrameType

    import numpy.typing as npt

    from ..runtime._params import ParamDict
    from ._sequences import Data
    from ..runtime._typing import AnyArray, BoolArray, FloatArray, IntArray, RandomStateLike
    from ..distributed import Local, Part, PlanEntry
    from ..layers.optim import AdamW

    F64Array = npt.NDArray[np.float64]
    # what signal.signal accepts and returns
    _SigHandler = Union[Callable[[int, Union[FrameType, None]], Any], int, signal.Handlers, None]

    class _Model(Protocol):
        """A model whose weights live in one flat buffer (params.flat)."""

        @property
        def params(self) -> ParamDict: ...

    class Network(_Model, Protocol):
        """What the Trainer drives: every model an estimator trains."""

        # which forward scores validation data: grad=True (the bare layers reuse
        # their training workspace) or grad=False (the inference path)
        validation_grad: bool

        @property
        def grads(self) -> ParamDict: ...
        def forward(self, x: Any, *args: Any, **kwargs: Any) -> Any: ...
        def backward(self, dy: Any, *args: Any, **kwargs: Any) -> Any: ...

    class History(Protocol):
        """The estimator's training record, which the Trainer appends to."""

        n_iter_: int
        loss_curve_: list[float]
        best_loss_: float
        validation_loss_curve_: list[float]
        best_validation_loss_: float

    #: a batch loss: (batch, m) -> (loss, weight), dL/dY into batch.dy
    LossFn = Callable[["Batch", int], "tuple[float, float]"]



class TrainingDivergedError(FloatingPointError):
    """The training loss became NaN or infinite; the estimator was rolled back to the
    end of the last good epoch."""


# ragged data: batches are cut from windows of this many batches, sorted by length
WINDOW_BATCHES = 16
# a ragged batch is padded to a multiple of this many positions (fewer distinct shapes,
# so the model's workspaces are reused more often), never beyond the longest sequence
PAD_MULTIPLE = 8


#: early stopping's patience when n_iter_no_change is None
DEFAULT_PATIENCE = 10
#: epochs=None: about this many optimizer steps, within [MIN_EPOCHS, MAX_EPOCHS] epochs
AUTO_STEPS, MIN_EPOCHS, MAX_EPOCHS = 1500, 30, 300


#: epochs=None for a regressor (SequenceEstimator._select_epochs): the share of the
#: samples held out, the patience of the held-out run, the share of the held-out
#: variance above which the network trains the whole budget, the fewest epochs of the
#: final fit, and the fewest samples the rule needs (fewer: the whole budget)
SELECT_FRACTION, SELECT_PATIENCE, SELECT_R2 = 0.2, 30, 0.5
SELECT_MIN_EPOCHS, SELECT_MIN_SAMPLES = 5, 10


def auto_epochs(n: int, batch_size: int) -> int:
    """epochs=None: enough epochs for about AUTO_STEPS optimizer steps over n samples
    (small sets get more epochs, large ones fewer), clipped to [MIN_EPOCHS,
    MAX_EPOCHS]: round(1500 / ceil(n / batch_size))."""
    per_epoch = -(-max(int(n), 1) // max(min(batch_size, max(int(n), 1)), 1))
    return int(min(max(round(AUTO_STEPS / per_epoch), MIN_EPOCHS), MAX_EPOCHS))


class Batch:
    """One mini-batch of a fixed shape, reused every step.

    x (bs, T, n_features); mask (bs, T) bool, True = padding or a missing step (None
    for dense data without missing steps);
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
        if self.mask is not None:   # ragged data, or missing steps (missing="mask")
            mask = key_mask(data.lengths, data.missing, idx, t)
            assert mask is not None  # masked batches are built for such data only
            self.mask[:m] = mask
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


class EpochProbe(EarlyStopping):
    """The held-out run of a regressor's epochs=None (SequenceEstimator._select_epochs):
    early stopping on the held-out loss (patience SELECT_PATIENCE) that remembers the
    best epoch, and stops at once when the held-out loss falls to (1 - SELECT_R2) times
    `reference` (the loss of predicting the training targets' mean): then the network
    has shown a strong signal (`strong`) and trains the whole budget."""

    def __init__(self, tol: float, reference: float, model: _Model, optimizer: AdamW) -> None:
        super().__init__(tol, SELECT_PATIENCE, model, optimizer, keep_best=False)
        self.reference = reference
        self.epoch = self.best_epoch = 0
        self.strong = False

    def update(self, loss: float) -> bool:
        self.epoch += 1
        if loss < self.best:
            self.best_epoch = self.epoch
        stop = super().update(loss)
        if loss <= (1.0 - SELECT_R2) * self.reference:
            self.strong = True
            return True
        return stop

    @property
    def r2(self) -> float:
        """1 - best held-out loss / reference (0 when the reference is 0)."""
        return 1.0 - self.best / self.reference if self.reference > 0 else 0.0


def mean_baseline_loss(train: Data, val: Data, dist: Local, loss: str = "squared_error",
                       quantiles: Any = None) -> float:
    """The held-out loss `loss` (attnx.layers.losses.REGRESSION_LOSSES; as Trainer.mean_loss
    scores it: the weighted mean over samples of the mean over outputs) of
    predicting the training targets' weighted mean; per-sequence float targets,
    summed over every rank's samples."""
    def weights(d: Data) -> F64Array:
        return np.ones(d.n) if d.w is None else np.asarray(d.w, np.float64)

    def targets(d: Data) -> F64Array:   # (n, outputs); a rank may hold no sample
        y = np.asarray(d.y, np.float64)
        return y.reshape(d.n, int(np.prod(y.shape[1:], dtype=np.int64)))

    y_tr = targets(train)
    w_tr = weights(train)
    sums = dist.allsum(np.concatenate([[w_tr.sum()], w_tr @ y_tr]))
    mean = sums[1:] / sums[0] if sums[0] > 0 else np.zeros(y_tr.shape[1])
    y_va = targets(val)
    w_va = weights(val)
    if y_va.size:
        elem, _ = losses.elementwise(loss, mean - y_va, quantiles)
        err = np.mean(elem, axis=1)
    else:
        err = np.zeros(val.n)
    total = dist.allsum(np.array([float(w_va @ err), float(w_va.sum())]))
    return float(total[0] / total[1]) if total[1] > 0 else 0.0


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


# ---- the training loop -----------------------------------------------------------
class NonFinite(Exception):
    """A training step met NaN or infinity (the message says where)."""


class Trainer:
    """The training of one fit or partial_fit call: epochs of AdamW steps over Data,
    the validation loss, early stopping, the rollback when training diverges, Ctrl-C.

    model: the network (forward / backward / params / grads); loss(batch, m) ->
    (loss, weight) fills batch.dy (attnx.layers.losses' batch losses); batch_for(data,
    rows, t) gives the reusable Batch of that layout; dist: the distributed hooks
    (attnx.distributed.Local without comm). history: the estimator, whose n_iter_,
    loss_curve_, best_loss_ (and with validation validation_loss_curve_,
    best_validation_loss_) the loop appends to.

    Hooks for later schedules (None: off, the steps are exactly AdamW's):
    lr_schedule(step) -> lr is called before every optimizer step with the number
    of steps done so far and sets the optimizer's lr; grad_transform(flat_grad)
    changes the global gradient in place just before the step (clipping).
    """

    def __init__(self, model: Network, optimizer: AdamW, rng: np.random.Generator,
                 loss: LossFn, batch_for: Callable[[Data, int, int], Batch], dist: Local, *,
                 batch_size: int, shuffle: bool, verbose: int,
                 lr_schedule: Callable[[int], float] | None = None,
                 grad_transform: Callable[[FloatArray], None] | None = None,
                 phase: str = "fit") -> None:
        self.model, self.optimizer, self.rng = model, optimizer, rng
        self.phase = phase   # the progress bar's name
        self.loss, self.batch_for, self.dist = loss, batch_for, dist
        self.batch_size, self.shuffle, self.verbose = batch_size, shuffle, verbose
        self.lr_schedule, self.grad_transform = lr_schedule, grad_transform

    def run(self, history: History, data: Data, val: Data | None, epochs: int,
            good: Snapshot, stopper: EarlyStopping | None = None, plateau: bool = False,
            tol: float = 0.0, n_iter_no_change: int = 0) -> None:
        """Run `epochs` epochs over Data set up by dist (its global count, lengths
        and padded length). good: the snapshot to roll back to on divergence;
        stopper: early stopping (fit only), on the training loss when `plateau`
        (a ConvergenceWarning) else on the validation loss (keeping the best)."""
        model, opt, rng, dist = self.model, self.optimizer, self.rng, self.dist
        n = dist.n
        bs = min(self.batch_size, n)
        good.save(model, opt, rng)  # the state to roll back to if training diverges
        last = history.n_iter_ + epochs
        fit = stopper is not None
        bar = Progress(self.verbose if dist.is_root else 0, dist.steps_per_epoch(bs),
                       last if fit else None, phase=self.phase, epochs=epochs)
        # BLAS held at one thread for the whole loop (attnx's threads only)
        with hold(), InterruptGuard() as guard:
            try:
                for _ in range(epochs):
                    epoch = history.n_iter_ + 1
                    bar.start(epoch)
                    loss = self.epoch(history, data, bs, epoch, good, guard, bar)
                    if loss is None:  # interrupted
                        return
                    history.loss_curve_.append(loss)
                    history.__dict__.setdefault("lr_curve_", []).append(float(opt.lr))
                    history.best_loss_ = min(history.best_loss_, loss)
                    history.n_iter_ = epoch
                    vloss = None
                    if val is not None:
                        vloss = self.mean_loss(val, bs)
                        history.validation_loss_curve_.append(vloss)
                        history.best_validation_loss_ = min(history.best_validation_loss_,
                                                            vloss)
                    dist.check_identical(model.params.flat)
                    good.save(model, opt, rng)
                    watched = loss if (vloss is None or plateau) else vloss
                    if stopper is not None and stopper.update(watched):
                        if plateau:
                            bar.end(loss, vloss, " (training loss plateau)")
                            warnings.warn(
                                f"the training loss did not improve by more than tol={tol} "
                                f"for {n_iter_no_change} consecutive epochs: stopped after "
                                f"epoch {epoch} of {last} (early_stopping=True watches the "
                                f"validation loss instead; n_iter_no_change >= epochs trains "
                                f"every epoch)", _convergence_warning(), stacklevel=4)
                            return
                        bar.end(loss, vloss, " (early stop)")
                        stopper.restore_best()
                        return
                    bar.end(loss, vloss)
            finally:
                bar.close()

    def epoch(self, history: History, data: Data, bs: int, epoch: int, good: Snapshot,
              guard: InterruptGuard, bar: Progress) -> float | None:
        """One pass over data; returns the (weighted) mean loss, or None when
        interrupted (after a warning). Rolls back and raises when training diverges."""
        dist = self.dist
        order, plan, rows = self.epoch_plan(data, bs)
        t_full = data.x.shape[1]
        total, seen, done = 0.0, 0.0, 0
        with self.rank_dropout():
            for k, (start, m, t, _) in enumerate(plan):
                batch = self.batch_for(data, rows, t or t_full)
                batch.load(data, order, start, m)
                try:
                    loss, weight = self.step(batch, m, guard)
                except KeyboardInterrupt:  # raised outside the guard's reach
                    guard.interrupted = True
                    break
                except NonFinite as exc:
                    self.diverged(good, f"epoch {epoch}: {exc} at batch {k + 1} of "
                                        f"{len(plan)}", epoch)
                total += loss * weight
                seen += weight
                done += 1
                bar.step(total / seen if seen else 0.0)
                if dist.stopping(guard):  # with comm: every rank stops after the same step
                    break
        if guard.interrupted:
            bar.close()
            warnings.warn(
                f"training interrupted in epoch {epoch} after {done} of {len(plan)} "
                f"batches; the model keeps the weights of the last completed step "
                f"({self.optimizer.t} optimizer steps in all) and n_iter_ = {history.n_iter_} "
                f"counts completed epochs only", UserWarning, stacklevel=5)
            return None
        return total / seen if seen else 0.0

    @contextlib.contextmanager
    def rank_dropout(self) -> Iterator[None]:
        """Balanced mode with dropout: for one epoch the model draws its dropout masks
        from this rank's own generator (dist.shard_rng of the model's dropout_rng,
        which advances alike on every rank and is put back after the epoch), so the
        ranks' masks are independent. Without comm, on one rank, in exact mode (which
        refuses dropout) or without dropout: nothing changes."""
        shared = getattr(self.model, "dropout_rng", None)
        if shared is None or self.dist.exact or not getattr(self.model, "dropout", 0.0):
            yield
            return
        setattr(self.model, "dropout_rng", self.dist.shard_rng(shared))
        try:
            yield
        finally:
            setattr(self.model, "dropout_rng", shared)

    def epoch_plan(self, data: Data, bs: int) -> tuple[IntArray | None, list[Part], int]:
        """(order, parts, rows) of one epoch: this rank's rows of every step are
        order[start:start + m] (start..start + m when order is None) for each
        (start, m, t, _) in parts, in a batch buffer of `rows` rows.

        Without comm, and with comm in balanced mode: the batch plan of this rank's
        own data, dist.local_batch(bs) rows per step, shuffled by dist.shard_rng;
        every rank runs dist.steps_per_epoch(bs) steps (short shards end with empty
        steps). Exact mode: this rank's part of the plan of the global data set."""
        dist = self.dist
        rng = self.rng if self.shuffle else None
        if dist.exact:
            order, global_plan = batch_plan(dist.n, bs, rng, dist.lengths)
            order, mine = dist.batches(order, global_plan)
            return order, mine, dist.rows(mine, bs)
        b = dist.local_batch(bs)
        rng = None if rng is None else dist.shard_rng(rng)
        order, plan = batch_plan(data.n, b, rng, data.lengths) if data.n else (None, [])
        parts = [(s, m, t, m) for s, m, t in plan]
        parts += [(0, 0, None, 0)] * (dist.steps_per_epoch(bs) - len(parts))
        return order, parts, dist.rows(parts, b)

    def step(self, batch: Batch, m: int, guard: InterruptGuard | None = None
             ) -> tuple[float, float]:
        """One AdamW step on the first m samples of the batch; returns (batch loss
        before the step, its weight). Raises NonFinite when the loss, the gradients
        or the updated weights are not finite.

        With comm (dist) the loss, its weight and the gradient are the global batch's:
        each rank's gradient is weighted by its share of the batch's weight and summed
        over the ranks (one Allreduce) before the AdamW step; m may be 0 on a rank."""
        model, opt, dist = self.model, self.optimizer, self.dist
        loss, weight = 0.0, 0.0
        with dist.collect_error():  # with comm, a failure here is raised on every rank
            if m:
                if batch.mask is None:
                    model.forward(batch.x, grad=True, out=batch.y)
                else:
                    model.forward(batch.x, key_padding_mask=batch.mask, grad=True,
                                  out=batch.y)
                loss, weight = self.loss(batch, m)
        loss, weight = dist.batch_loss(loss, weight, guard)
        if not math.isfinite(loss):
            raise NonFinite(f"the loss became {loss}")
        if m:
            model.backward(batch.dy)
        else:
            model.grads.flat.fill(0)
        dist.reduce_gradient(model.grads.flat)  # the global batch's gradient, on every rank
        if self.grad_transform is not None:
            self.grad_transform(model.grads.flat)
        if self.lr_schedule is not None:
            opt.lr = float(self.lr_schedule(opt.t))
        try:
            opt.step(model.grads)
        except FloatingPointError:  # AdamW refused the step and left everything unchanged
            raise NonFinite("the gradients became NaN or infinite") from None
        # the next forward would refuse such weights; say so here, naming the epoch
        if not finite(model.params.flat):
            raise NonFinite("the weights overflowed to infinity")
        return loss, weight

    def mean_loss(self, data: Data, bs: int) -> float:
        """The loss over data (validation), in batches of the training batch shape."""
        model = self.model
        order, plan = batch_plan(data.n, bs, None, data.lengths) if data.n else (None, [])
        total, seen = 0.0, 0.0
        for start, m, t in plan:
            batch = self.batch_for(data, bs, t or data.x.shape[1])
            batch.load(data, order, start, m)
            kw = {} if batch.mask is None else {"key_padding_mask": batch.mask}
            # the model says which forward scores it: the bare layers reuse their
            # training workspace (grad=True); the sequence model runs its inference
            # path, which also switches dropout off
            model.forward(batch.x, grad=model.validation_grad, out=batch.y, **kw)
            loss, weight = self.loss(batch, m)
            total += loss * weight
            seen += weight
        dist = self.dist  # with comm: over every rank's validation samples
        total, seen = dist.allsum(total), dist.allsum(seen)
        return total / seen if seen else 0.0

    def diverged(self, good: Snapshot, where: str, epoch: int) -> NoReturn:
        good.restore(self.model, self.optimizer, self.rng)
        before = f"the end of epoch {epoch - 1}" if epoch > 1 else "their values before epoch 1"
        raise TrainingDivergedError(
            f"training diverged in {where} (lr={self.optimizer.lr}); the weights, optimizer "
            f"state and shuffling state were restored to {before}. Try a smaller lr.")


def _convergence_warning() -> type[Warning]:
    from ._base import sklearn_class

    return cast("type[Warning]", sklearn_class("ConvergenceWarning"))


def split(data: Data, fraction: float, seed: int, dist: Local) -> tuple[Data, Data | None]:
    """(train, validation or None): a random ceil(fraction * n) samples held out (n
    and the draw global with comm; each rank keeps its own part of both)."""
    if fraction == 0:
        return data, None
    n = dist.n
    n_val = math.ceil(fraction * n)  # fit checked that n_val < n
    perm = np.random.default_rng(seed).permutation(n)
    val, train = np.sort(perm[:n_val]), np.sort(perm[n_val:])  # keep the data's order
    return data.take(dist.local_part(train)), data.take(dist.local_part(val))


def setup(dist: Local, data: Data) -> Data:
    """dist.setup for Data: global count and lengths; with comm, ragged data padded to
    the longest sequence of every rank (a global batch may hold it). Returns data.
    (The ranks' hyper-parameters are compared before, by dist.together(params).)"""
    ragged = data.lengths is not None
    dist.setup(data.n, data.x.shape[2:] if ragged else data.x.shape[1:],
               lengths=data.lengths)
    t_max = dist.t_max  # the longest sequence of every rank; None for dense data
    if ragged and dist.distributed and t_max is not None and data.x.shape[1] < t_max:
        data = data.padded(t_max)
    return data


def seeds(random_state: RandomStateLike) -> tuple[int, int, int]:
    """(init, shuffle, split) seeds drawn from random_state."""
    init, shuffle, split_ = (int(s) for s in _rng(random_state).integers(0, 2**63 - 1, size=3))
    return init, shuffle, split_


def _rng(random_state: RandomStateLike | np.random.SeedSequence) -> np.random.Generator:
    if isinstance(random_state, np.random.RandomState):
        # scikit-learn's convention: the RandomState is drawn from (and so advances)
        return np.random.default_rng(int(random_state.randint(0, 2**63 - 1, dtype=np.int64)))
    ok = (random_state is None
          or (isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool))
          or isinstance(random_state, (np.random.Generator, np.random.SeedSequence)))
    if not ok:
        raise TypeError(f"random_state must be None, an int >= 0, a numpy Generator or a "
                        f"RandomState, got {random_state!r}")
    try:
        return np.random.default_rng(random_state)
    except ValueError as exc:
        raise ValueError(f"random_state must be None, an int >= 0, a numpy Generator or a "
                         f"RandomState, got {random_state!r}") from exc
