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
import weakref
from typing import (TYPE_CHECKING, Any, Callable, Iterator, Literal, NoReturn, Protocol,
                    Union, cast)

import numpy as np

from ._batches import Batch, batch_plan
from ._snapshots import EarlyStopping, Snapshot
from ..runtime._progress import Progress
from ..runtime._threads import hold
from ..runtime._validate import finite

if TYPE_CHECKING:
    from types import FrameType

    import numpy.typing as npt

    from ..runtime._params import ParamDict
    from ._sequences import Data
    from ..runtime._typing import FloatArray, IntArray, RandomStateLike
    from ..distributed import Local, Part
    from ..layers.optim import AdamW
    from ._augment import Shifts

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


#: early stopping's patience when n_iter_no_change is None
DEFAULT_PATIENCE = 10
#: epochs=None: about this many optimizer steps, within [MIN_EPOCHS, MAX_EPOCHS] epochs
AUTO_STEPS, MIN_EPOCHS, MAX_EPOCHS = 1500, 30, 300


def auto_epochs(n: int, batch_size: int) -> int:
    """epochs=None: enough epochs for about AUTO_STEPS optimizer steps over n samples
    (small sets get more epochs, large ones fewer), clipped to [MIN_EPOCHS,
    MAX_EPOCHS]: round(1500 / ceil(n / batch_size))."""
    per_epoch = -(-max(int(n), 1) // max(min(batch_size, max(int(n), 1)), 1))
    return int(min(max(round(AUTO_STEPS / per_epoch), MIN_EPOCHS), MAX_EPOCHS))


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
    augment (attnx.estimators._augment.Shifts): every epoch draws one shift per
    sample of the global data set from rng, and each training batch's rows are
    shifted by theirs after loading (not the validation batches).
    """

    def __init__(self, model: Network, optimizer: AdamW, rng: np.random.Generator,
                 loss: LossFn, batch_for: Callable[[Data, int, int], Batch], dist: Local, *,
                 batch_size: int, shuffle: bool, verbose: int,
                 lr_schedule: Callable[[int], float] | None = None,
                 grad_transform: Callable[[FloatArray], None] | None = None,
                 phase: str = "fit", augment: Shifts | None = None) -> None:
        self.model, self.optimizer, self.rng = model, optimizer, rng
        self.phase = phase   # the progress bar's name
        self.loss, self.batch_for, self.dist = loss, batch_for, dist
        self.batch_size, self.shuffle, self.verbose = batch_size, shuffle, verbose
        self.lr_schedule, self.grad_transform = lr_schedule, grad_transform
        self.augment = augment

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
        aug = self.augment   # this epoch's shift of every (global) sample
        shifts = None if aug is None else aug.draw(self.rng, dist.n)
        total, seen, done = 0.0, 0.0, 0
        with self.rank_dropout():
            for k, (start, m, t, _) in enumerate(plan):
                batch = self.batch_for(data, rows, t or t_full)
                batch.load(data, order, start, m)
                if aug is not None and shifts is not None:
                    idx = np.arange(start, start + m) if order is None else \
                        order[start:start + m]
                    aug.apply(batch, m, shifts[idx + dist.offset])
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


# ---- buffers kept beside a network ---------------------------------------------------
class Scratch:
    """What a network's training calls reuse from one call to the next, so that a
    partial_fit allocates no batch-sized array: the Batch of each layout (key: the
    layout; at most MAX_BATCHES, then cleared) and the rollback snapshot. Kept beside
    the network (scratch(model)), never on the estimator, never saved."""

    MAX_BATCHES = 8

    def __init__(self) -> None:
        self.batches: dict[tuple[Any, ...], Batch] = {}
        self._snapshot: Snapshot | None = None

    def batch(self, key: tuple[Any, ...], make: Callable[[], Batch]) -> Batch:
        found = self.batches.get(key)
        if found is None:
            if len(self.batches) > self.MAX_BATCHES:
                self.batches.clear()
            found = self.batches[key] = make()
        return found

    def snapshot(self, model: _Model, optimizer: AdamW) -> Snapshot:
        """A Snapshot sized for this model and optimizer (reused while it fits)."""
        snap = self._snapshot
        if snap is None or not snap.fits(model, optimizer):
            snap = self._snapshot = Snapshot(model, optimizer)
        return snap


#: each live network's Scratch; an entry goes with its network
_SCRATCH: weakref.WeakKeyDictionary[Any, Scratch] = weakref.WeakKeyDictionary()


def scratch(model: Any) -> Scratch:
    """The Scratch of this network (a new one for a network that takes no weak
    reference: then nothing is reused between calls)."""
    try:
        found = _SCRATCH.get(model)
        if found is None:
            found = _SCRATCH[model] = Scratch()
        return found
    except TypeError:
        return Scratch()


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
