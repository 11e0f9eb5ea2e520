"""Pieces of the estimators' training loop: batch buffers, snapshots, Ctrl-C, progress bars."""
import math
import signal
import sys
import threading

import numpy as np


class TrainingDivergedError(FloatingPointError):
    """The training loss became NaN or infinite; the estimator was rolled back to the
    end of the last good epoch."""


class BatchBuffers:
    """One mini-batch (bs, T, d): inputs, targets, outputs and dL/dY, reused every step.

    A short last batch fills the first m rows; the others are zeroed inputs with
    zero dL/dY, so they add exactly nothing to the gradients while the model keeps
    seeing one batch shape (its workspaces are keyed by shape and would otherwise
    be re-made twice per epoch).
    """

    def __init__(self, bs, t, d, dtype):
        self.shape = (bs, t, d)
        self.dtype = dtype
        self.x = np.zeros(self.shape, dtype)
        self.y_true = np.zeros(self.shape, dtype)
        self.y = np.zeros(self.shape, dtype)
        self.dy = np.zeros(self.shape, dtype)

    def matches(self, bs, t, d, dtype):
        return self.shape == (bs, t, d) and self.dtype == dtype

    def load(self, X, Y, order, start, m):
        """Copy samples start..start+m (of `order`, or in order when None) into the batch."""
        if order is None:
            np.copyto(self.x[:m], X[start:start + m])
            np.copyto(self.y_true[:m], Y[start:start + m])
        else:
            idx = order[start:start + m]
            # mode="clip": numpy buffers `out` in the default mode="raise"
            np.take(X, idx, axis=0, out=self.x[:m], mode="clip")
            np.take(Y, idx, axis=0, out=self.y_true[:m], mode="clip")
        if m < self.shape[0]:
            self.x[m:] = 0


class Snapshot:
    """Copies of the weights, the optimizer state and the shuffling RNG state."""

    def __init__(self, model, optimizer):
        self.params = np.empty_like(model.params.flat)
        self.m = [np.empty_like(a) for a in optimizer.m]
        self.v = [np.empty_like(a) for a in optimizer.v]
        self.t = 0
        self.rng_state = None

    def fits(self, model, optimizer):
        return (self.params.shape == model.params.flat.shape
                and self.params.dtype == model.params.flat.dtype
                and len(self.m) == len(optimizer.m))

    def save(self, model, optimizer, rng):
        np.copyto(self.params, model.params.flat)
        for dst, src in zip(self.m + self.v, optimizer.m + optimizer.v):
            np.copyto(dst, src)
        self.t = optimizer.t
        self.rng_state = rng.bit_generator.state

    def restore(self, model, optimizer, rng):
        np.copyto(model.params.flat, self.params)
        for dst, src in zip(optimizer.m + optimizer.v, self.m + self.v):
            np.copyto(dst, src)
        optimizer.t = self.t
        rng.bit_generator.state = self.rng_state


class EarlyStopping:
    """scikit-learn's rule: an epoch improves only when its loss is below best - tol;
    stop after n_iter_no_change epochs without improvement. With keep_best, the
    weights of the best epoch are kept and restore_best() puts them back."""

    def __init__(self, tol, n_iter_no_change, params, keep_best):
        self.tol, self.patience = tol, n_iter_no_change
        self.best, self.stall = math.inf, 0
        self.params = params
        self.best_params = np.empty_like(params) if keep_best else None

    def update(self, loss):
        """Record one epoch's loss; True when training should stop."""
        self.stall = self.stall + 1 if loss > self.best - self.tol else 0
        if loss < self.best:
            self.best = loss
            if self.best_params is not None:
                np.copyto(self.best_params, self.params)
        return self.stall >= self.patience

    def restore_best(self):
        if self.best_params is not None:
            np.copyto(self.params, self.best_params)


class InterruptGuard:
    """Turn Ctrl-C during training into a flag checked between steps.

    A SIGINT arriving inside an optimizer step would otherwise leave the weights
    and the optimizer state half updated. Installed only in the main thread and
    only over Python's default handler; a second Ctrl-C raises at once.
    """

    def __init__(self):
        self.interrupted = False
        self._previous = None

    def __enter__(self):
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.interrupted:
            raise KeyboardInterrupt
        self.interrupted = True

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
        return False


class Progress:
    """verbose >= 1: one tqdm bar per epoch over its batches, showing the running loss."""

    def __init__(self, verbose, n_batches, last_epoch=None):
        self.on = verbose >= 1
        self.n_batches = n_batches
        self.last_epoch = last_epoch
        self.bar = None
        if self.on:
            from tqdm import tqdm  # imported only when asked to print
            self._tqdm = tqdm

    def start(self, epoch):
        if self.on:
            total = f"/{self.last_epoch}" if self.last_epoch else ""
            self.bar = self._tqdm(total=self.n_batches, desc=f"epoch {epoch}{total}",
                                  unit="batch", leave=True, file=sys.stderr)

    def step(self, running_loss):
        if self.bar is not None:
            self.bar.set_postfix_str(f"loss={running_loss:.4g}", refresh=False)
            self.bar.update(1)

    def end(self, loss, val_loss=None, note=""):
        if self.bar is not None:
            text = f"loss={loss:.4g}"
            if val_loss is not None:
                text += f", val_loss={val_loss:.4g}"
            self.bar.set_postfix_str(text + note, refresh=False)
            self.close()

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None
