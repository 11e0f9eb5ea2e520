"""Loss functions."""
import numpy as np

from ._ops import mse_into
from ._validate import as_dtype


def mse_loss(y, y_true, *, out=None):
    """Mean squared error and its gradient.

    loss = sum((y - y_true)**2) / N  with N = y.size (the plain mean over every
    element, as `sklearn.metrics.mean_squared_error` reports it);
    dL/dy = (y - y_true) / (N / 2), so the normaliser is N / 2.

    y: float32 or float64 array of any shape; y_true: same shape (converted to
    y's dtype). Returns (loss as a Python float, dy shaped like y). `out`, an
    array like y, receives dy without allocating.
    """
    if not isinstance(y, np.ndarray) or y.dtype not in (np.float32, np.float64):
        raise TypeError(f"y must be a float32 or float64 ndarray, got "
                        f"{getattr(y, 'dtype', type(y).__name__)}")
    y_true = np.asarray(y_true)
    if y_true.shape != y.shape:
        raise ValueError(f"y_true must have the shape of y {y.shape}, got {y_true.shape}")
    if y.size == 0:
        raise ValueError("mse_loss of an empty array is undefined")
    if out is None:
        out = np.empty(y.shape, dtype=y.dtype)
    elif (not isinstance(out, np.ndarray) or out.shape != y.shape or out.dtype != y.dtype
          or not out.flags.c_contiguous or not out.flags.writeable):
        raise ValueError(f"out must be a writeable C-contiguous {y.dtype} array of shape {y.shape}")
    yc = np.ascontiguousarray(y)
    if y_true.dtype.kind not in "fiu":
        raise TypeError(f"y_true must hold real numbers, got dtype {y_true.dtype}")
    tc = as_dtype("y_true", y_true, y.dtype)
    loss = mse_into(yc.reshape(-1), tc.reshape(-1), out.reshape(-1))
    return float(loss), out
