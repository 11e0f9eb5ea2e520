"""Ragged series resampled to one length (tokenizer="auto" of the classifiers).

A classifier's univariate training series of different lengths are each resampled, by
linear interpolation over their own valid steps, to the longest training length
T_ref; the fit then treats them as equal-length series of T_ref steps (the short stem
under 64 steps, PPV tokens from 64: attnx.estimators._plan). The fitted length is the
plan's (plan_.resample_length, also resample_length_) and every series given to
predict is resampled to it alike. A pattern that spans a fixed share of its series then
has one scale in every series, which fixed kernels and windows need: on synthetic ragged
sets whose events scale with the series' length (cylinder-bell-funnel, two patterns;
15-40 and 15-150 steps), this did better than own-length windows and dilations.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..runtime._typing import FloatArray, IntArray


def to_length(x: FloatArray, lengths: IntArray | None, length: int) -> FloatArray:
    """x (n, T, C) with each series' first lengths[i] steps valid (all T without
    lengths) resampled to (n, length, C) in x's dtype: the value at position j is the
    linear interpolation of the series at j (t_i - 1) / (length - 1); a series of one
    step repeats it (and a series of none gives zeros)."""
    n, t, c = x.shape
    out = np.zeros((n, int(length), c), dtype=x.dtype)
    lens = np.full(n, t) if lengths is None else np.asarray(lengths)
    for i in range(n):
        ti = int(lens[i])
        if ti <= 0:
            continue
        pos = np.linspace(0.0, ti - 1.0, int(length))
        lo = np.minimum(np.floor(pos).astype(np.int64), ti - 1)
        hi = np.minimum(lo + 1, ti - 1)
        frac = (pos - lo)[:, None]
        xi = x[i, :ti].astype(np.float64)
        out[i] = (1.0 - frac) * xi[lo] + frac * xi[hi]
    return out
