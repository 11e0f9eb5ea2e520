"""What the Trainer keeps to go back to: snapshots of a model and its optimizer,
early stopping on a validation loss (restoring the best weights), the held-out epoch
probe of epochs=None, and the mean baseline it scores against."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping, Protocol

import numpy as np

from ..layers import losses

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..distributed import Local
    from ..layers.optim import AdamW
    from ..runtime._params import ParamDict
    from ._sequences import Data

    F64Array = npt.NDArray[np.float64]

    class _Model(Protocol):
        """A model whose weights live in one flat buffer (params.flat)."""

        @property
        def params(self) -> ParamDict: ...


#: epochs=None for a regressor (SequenceEstimator._select_epochs): the share of the
#: samples held out, the patience of the held-out run, the share of the held-out
#: variance above which the network trains the whole budget, the fewest epochs of the
#: final fit, and the fewest samples the rule needs (fewer: the whole budget)
SELECT_FRACTION, SELECT_PATIENCE, SELECT_R2 = 0.2, 30, 0.5
SELECT_MIN_EPOCHS, SELECT_MIN_SAMPLES = 5, 10


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
