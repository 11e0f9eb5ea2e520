"""Comparisons of computed arrays for the tests."""
import numpy as np


def rel_err(a, b, floor=1e-300):
    """max |a - b| / max |b| (a scale-aware relative error); `floor` bounds the
    denominator for arrays that are zero in exact arithmetic."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), floor))
