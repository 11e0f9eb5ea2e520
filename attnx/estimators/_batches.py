"""Training batches: one buffer of a fixed shape per batch size and length, filled from
the data in place at every step, and the plan of an epoch's batches (ragged data sorted
by length within windows, padded to a multiple of PAD_MULTIPLE)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ._sequences import key_mask

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..distributed import PlanEntry
    from ..runtime._typing import AnyArray, BoolArray, FloatArray, IntArray
    from ._sequences import Data

    F64Array = npt.NDArray[np.float64]


# ragged data: batches are cut from windows of this many batches, sorted by length
WINDOW_BATCHES = 16
# a ragged batch is padded to a multiple of this many positions (fewer distinct shapes,
# so the model's workspaces are reused more often), never beyond the longest sequence
PAD_MULTIPLE = 8


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
