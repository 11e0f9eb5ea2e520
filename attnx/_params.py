"""Parameter storage: every model keeps its weights in one flat buffer.

`params` and `grads` are dicts of live views into a flat parameter buffer and a
flat gradient buffer, so a user can read and assign weights by name while the
optimizer updates the whole model with one kernel call over the flat buffer.
"""
import numpy as np


class ParamDict(dict):
    """name -> ndarray view into `flat` (a 1-D buffer holding every value once)."""

    def __init__(self, flat, views):
        super().__init__(views)
        self.flat = flat

    def __setitem__(self, key, value):
        raise TypeError(
            f"assign into the existing array instead: params[{key!r}][...] = value "
            "(the arrays are views into the model's storage)")


class FlatAllocator:
    """Hands out consecutive slices of a flat buffer, sized in a first pass."""

    def __init__(self):
        self.size = 0

    def reserve(self, n):
        start = self.size
        self.size += int(n)
        return start


def check_dtype(dtype):
    """Normalise a model dtype argument: float32 or float64 only."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"dtype must be float32 or float64, got {dtype!r}") from exc
    if dt not in (np.float32, np.float64):
        raise TypeError(f"dtype must be float32 or float64, got {dt}")
    return dt


def check_positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return int(value)
