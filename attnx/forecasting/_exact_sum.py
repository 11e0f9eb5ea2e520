"""Exact sums of float64 values, per position, that merge in any order.

A float64 sum rounds after every addition, so summing a panel's values in another
order (its parts on several machines, then the parts' sums) gives another result in
the last bits. ``ExactSums`` keeps each position's sum exactly, as an integer count of
2**-BASE (every finite float64 is an integer multiple of it), and rounds once, when
the sums are read (``values``): the correctly rounded sum, whatever the order of the
additions and however the values were split into parts. Adding a part costs one
vectorised pass over its values plus a Python loop over the distinct (position,
exponent) pairs, not over the values.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

    F64 = npt.NDArray[np.float64]
    Int = npt.NDArray[np.intp]

__all__ = ["ExactSums"]

#: every finite float64, subnormals included, is an integer multiple of 2**-BASE
#: (2**-1074 is the smallest; 52 more bits keep a 53-bit mantissa's shift nonnegative)
BASE = 1074 + 52
#: the mantissa is split at this bit, so a part's int64 partial sums cannot overflow
#: before 2**36 values share a position and an exponent
_SPLIT = 26
#: more than the number of shifts (BASE + 1024): a key's position and shift apart
_SHIFTS = 4096


class ExactSums:
    """Exact sums at positions 0..n-1 (grown as values arrive)."""

    def __init__(self) -> None:
        self._sums: list[int] = []

    def __len__(self) -> int:
        return len(self._sums)

    def add(self, positions: Int, values: F64) -> None:
        """Add values[i] at positions[i] (finite values; equal positions add up)."""
        values = np.asarray(values, dtype=np.float64).ravel()
        positions = np.asarray(positions, dtype=np.int64).ravel()
        if values.shape != positions.shape:
            raise ValueError(f"positions and values differ in size: {positions.shape[0]} "
                             f"and {values.shape[0]}")
        if values.size == 0:
            return
        if not np.all(np.isfinite(values)):
            raise ValueError("ExactSums adds finite values only")
        if positions.min() < 0:
            raise ValueError("positions must be >= 0")
        frac, exp = np.frexp(values)   # values = frac * 2**exp, 0.5 <= |frac| < 1
        mant = np.ldexp(frac, 53).astype(np.int64)   # exact: |mant| < 2**53
        shift = exp.astype(np.int64) - 53 + BASE     # values = mant * 2**(shift - BASE)
        lo = mant & ((1 << _SPLIT) - 1)
        hi = mant >> _SPLIT                          # mant = hi * 2**_SPLIT + lo
        key = positions * _SHIFTS + shift
        order = np.argsort(key, kind="stable")
        key = key[order]
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        sum_lo = np.add.reduceat(lo[order], starts)
        sum_hi = np.add.reduceat(hi[order], starts)
        top = int(positions.max()) + 1
        if top > len(self._sums):
            self._sums.extend([0] * (top - len(self._sums)))
        for k, a, b in zip(key[starts].tolist(), sum_lo.tolist(), sum_hi.tolist()):
            pos, sh = divmod(k, _SHIFTS)
            self._sums[pos] += (a << sh) + (b << (sh + _SPLIT))

    def merge(self, other: ExactSums) -> ExactSums:
        """These sums plus other's (in place; returns self)."""
        if len(other._sums) > len(self._sums):
            self._sums.extend([0] * (len(other._sums) - len(self._sums)))
        for i, v in enumerate(other._sums):
            self._sums[i] += v
        return self

    def values(self, n: int | None = None) -> F64:
        """The sums at positions 0..n-1 (default: all), each rounded once to float64
        (round half to even; 0 where nothing was added)."""
        n = len(self._sums) if n is None else n
        scale = 1 << BASE
        # int / int is correctly rounded in Python
        out = [self._sums[i] / scale if i < len(self._sums) else 0.0 for i in range(n)]
        return np.asarray(out, dtype=np.float64)
