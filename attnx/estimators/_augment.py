"""Random time shifts of the training batches: tokenizer="auto"'s short univariate path of
the classifiers (attnx.estimators._plan).

With the short stem (attnx.layers._stem.short, series under 64 steps) every training
batch, as it is loaded, has each of its series moved in time by s steps, s drawn
uniformly from -k..k (k = augment_shift_, the stride of the stem's last layer: one
token's span), the steps moved in from outside repeating the series' first or last
value (edge padding):

    x'[j] = x[clip(j - s, 0, T - 1)]        j = 0 .. T - 1

Validation losses and predict see the series as they are. The default network fits a
hundred short training series exactly; the shifts show it each pattern at several
places, which a class that does not depend on a pattern's exact step needs (measured in
benchmarks/results/constants.md and benchmarks/results/accuracy_ragged_short.md).

The draws come from the fit's shuffling generator (shuffle_rng_), one per sample of
the data set and epoch, so a fit is reproducible from random_state, and with comm
(every rank draws alike and takes its own samples' shifts) the distributed "exact"
fit equals the one-process fit.
"""
from __future__ import annotations

import numbers
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..layers._stem import Stem
    from ..runtime._typing import FloatArray, IntArray
    from ._batches import Batch


def max_shift(stem: Stem) -> int:
    """The largest shift for a fit with this stem: its last layer's stride (>= 1)."""
    return max(1, int(stem[-1][1]))


def shift_rows(x: FloatArray, shifts: IntArray) -> FloatArray:
    """x (m, T, C) with row i moved by shifts[i] steps (positive: later), edge-padded:
    out[i, j] = x[i, clip(j - shifts[i], 0, T - 1)]. A new array of x's dtype."""
    if not isinstance(x, np.ndarray) or x.ndim != 3:
        raise ValueError(f"x must be an array (m, T, C), got "
                         f"{getattr(x, 'shape', type(x).__name__)}")
    s = np.asarray(shifts)
    if s.ndim != 1 or s.shape[0] != x.shape[0]:
        raise ValueError(f"shifts must be (m,) = ({x.shape[0]},) for x {x.shape}, got "
                         f"shape {s.shape}")
    if s.size and not np.issubdtype(s.dtype, np.integer):
        raise ValueError(f"shifts must be integers, got dtype {s.dtype}")
    t = x.shape[1]
    idx = np.clip(np.arange(t)[None, :] - s.astype(np.int64)[:, None], 0, max(t - 1, 0))
    out: FloatArray = x[np.arange(x.shape[0])[:, None], idx]
    return out


class Shifts:
    """The batch augmentation of a fit: each training series shifted by its own draw
    from -k..k (shift_rows), drawn anew every epoch. k: an int >= 1.

    draw(rng, n) gives the epoch's shifts of the n samples of the (global) data set,
    apply(batch, m, shifts) shifts the first m rows of a loaded batch by theirs. One
    shift per global sample: with comm every rank draws the same n numbers from the
    shared generator and takes those of its own samples, so distributed "exact"
    batches are shifted as in the one-process fit."""

    k: int

    def __init__(self, k: int) -> None:
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
            raise ValueError(f"the largest shift k must be an int >= 1, got {k!r}")
        self.k = int(k)

    def draw(self, rng: np.random.Generator, n: int) -> IntArray:
        out: IntArray = rng.integers(-self.k, self.k + 1, size=int(n))
        return out

    def apply(self, batch: Batch, m: int, shifts: IntArray) -> None:
        if not m:
            return
        # a list of series of one length has a mask with nothing masked: shifting is
        # the same there as for an array
        if batch.mask is not None and batch.mask[:m].any():
            raise ValueError("time shifts need equal-length batches without missing "
                             "steps (the short path resamples ragged series first)")
        batch.x[:m] = shift_rows(batch.x[:m], shifts)


def hook(shift: int | None) -> Shifts | None:
    """The Trainer's augment for a fit plan's augment_shift (None: none)."""
    return None if not shift else Shifts(int(shift))
