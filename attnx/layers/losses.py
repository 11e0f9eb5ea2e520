"""Loss functions with their gradients: mse_loss, cross_entropy_loss, mae_loss,
huber_loss and pinball_loss (the estimators' batch losses build on them:
attnx.estimators._batch_losses)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..kernels._ops import mse_into
from ..kernels._seq import cross_entropy_rows
from ..runtime._validate import as_dtype, finite

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..runtime._typing import FloatArray

    F64Array = npt.NDArray[np.float64]


def mse_loss(y: FloatArray, y_true: npt.ArrayLike, *,
             out: FloatArray | None = None) -> tuple[float, FloatArray]:
    """Mean squared error and its gradient.

    loss = sum((y - y_true)**2) / N  with N = y.size (the plain mean over every
    element, as `sklearn.metrics.mean_squared_error` reports it);
    dL/dy = (y - y_true) / (N / 2), so the normaliser is N / 2.

    y: float32 or float64 array of any shape; y_true: same shape (converted to
    y's dtype). Returns (loss as a Python float, dy shaped like y). `out`, an
    array like y, receives dy without allocating.
    """
    _check_float("y", y)
    y_true = np.asarray(y_true)
    if y_true.shape != y.shape:
        raise ValueError(f"y_true must have the shape of y {y.shape}, got {y_true.shape}")
    if y.size == 0:
        raise ValueError("mse_loss of an empty array is undefined")
    out = _grad_out(out, y)
    yc = np.ascontiguousarray(y)
    if y_true.dtype.kind not in "fiu":
        raise TypeError(f"y_true must hold real numbers, got dtype {y_true.dtype}")
    tc = as_dtype("y_true", y_true, y.dtype)
    loss = mse_into(yc.reshape(-1), tc.reshape(-1), out.reshape(-1))
    return float(loss), out


def cross_entropy_loss(logits: FloatArray, labels: npt.ArrayLike, *,
                       sample_weight: npt.ArrayLike | None = None,
                       label_smoothing: float = 0.0,
                       out: FloatArray | None = None) -> tuple[float, FloatArray]:
    """Softmax cross-entropy and its gradient, as torch.nn.functional.cross_entropy.

    logits: float32 or float64 array (..., C) of unnormalised class scores.
    labels: integer array of the leading shape (...), values in [0, C): (B,) labels
        for (B, C) logits, (B, T) labels for per-position logits (B, T, C).
    sample_weight: optional non-negative real array of the leading shape; the loss
        is then sum(w * l) / sum(w) (a weight of 0 drops that position, which is
        how padding is excluded), else the mean of l over every label.
    l = logsumexp(logits) - logits[label], computed with the row maximum
    subtracted so that large scores do not overflow.
    label_smoothing: e in [0, 1); the target becomes (1 - e) onehot(label) + e / C,
    as torch's label_smoothing (l = logsumexp - (1 - e) logits[label] - e mean(logits)).

    Returns (loss as a Python float, dL/dlogits shaped like logits). `out`, an
    array like logits, receives the gradient without allocating.
    """
    _check_float("logits", logits, " (..., n_classes)", 1)
    n_cls = logits.shape[-1]
    lead = logits.shape[:-1]
    if n_cls == 0 or logits.size == 0:
        raise ValueError(f"cross_entropy_loss of an empty array is undefined (logits shape "
                         f"{logits.shape})")
    labels = np.asarray(labels)
    if labels.shape != lead:
        raise ValueError(f"labels must have the leading shape {lead} of logits "
                         f"{logits.shape}, got {labels.shape}")
    if labels.dtype.kind not in "iu":
        raise TypeError(f"labels must be integer class indices, got dtype {labels.dtype}")
    if labels.size and (labels.min() < 0 or labels.max() >= n_cls):
        raise ValueError(f"labels must lie in [0, {n_cls}) for {n_cls} classes, got values in "
                         f"[{labels.min()}, {labels.max()}]")
    if not finite(logits):
        raise ValueError("logits contains NaN or infinity")
    if (isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float))
            or not 0.0 <= label_smoothing < 1.0):
        raise ValueError(f"label_smoothing must be a real number in [0, 1), got "
                         f"{label_smoothing!r}")
    z = np.ascontiguousarray(logits).reshape(-1, n_cls)
    lab = labels.reshape(-1).astype(np.int64, copy=False)
    n = lab.shape[0]
    w: npt.NDArray[np.float64] | None
    if sample_weight is None:
        w = None
        total = float(n)
    else:
        wa = np.asarray(sample_weight)
        if wa.shape != lead:
            raise ValueError(f"sample_weight must have the shape of labels {lead}, got {wa.shape}")
        if wa.dtype.kind not in "fiub":
            raise TypeError(f"sample_weight must hold real numbers, got dtype {wa.dtype}")
        w = wa.reshape(-1).astype(np.float64)
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError("sample_weight must be finite and >= 0")
        total = float(w.sum())
        if total <= 0:
            raise ValueError("sample_weight sums to 0: no position contributes to the loss")
    out = _grad_out(out, logits)
    loss = cross_entropy_rows(z, lab, w, total, out.reshape(-1, n_cls), float(label_smoothing))
    return float(loss), out


#: the regressors' training losses (their ``loss`` hyper-parameter)
REGRESSION_LOSSES = ("squared_error", "absolute_error", "huber", "pinball")


def elementwise(loss: str, diff: F64Array, quantiles: F64Array | None,
                delta: float = 1.0) -> tuple[F64Array, F64Array]:
    """Per element, the loss and its derivative with respect to the prediction, of
    diff = prediction - target (float64); quantiles: pinball's levels along the last
    axis; delta: Huber's."""
    if loss == "squared_error":
        return diff * diff, 2.0 * diff
    if loss == "absolute_error":
        return np.abs(diff), np.sign(diff)
    if loss == "huber":
        a = np.abs(diff)
        return (np.where(a <= delta, 0.5 * diff * diff, delta * (a - 0.5 * delta)),
                np.clip(diff, -delta, delta))
    if loss == "pinball":
        assert quantiles is not None
        q = np.asarray(quantiles, np.float64)
        if diff.shape[-1] != q.size:
            raise ValueError(f"quantiles must give one level per output column "
                             f"({diff.shape[-1]}), got {q.size}")
        # e = target - prediction = -diff: q e above the prediction, (q - 1) e below
        elem = np.maximum(-q * diff, (1.0 - q) * diff)
        return elem, np.where(diff > 0, 1.0 - q, np.where(diff < 0, -q, 0.0))
    raise ValueError(f"loss must be one of {REGRESSION_LOSSES}, got {loss!r}")


def log_softmax(z: FloatArray) -> FloatArray:
    """log(softmax(z)) over the last axis (predict_log_proba)."""
    z = np.asarray(z)
    shifted: FloatArray = z - z.max(axis=-1, keepdims=True)
    out: FloatArray = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return out


def _mean_of(loss: str, y: FloatArray, t: FloatArray, out: FloatArray,
             quantiles: F64Array | None = None, delta: float = 1.0
             ) -> tuple[float, FloatArray]:
    """(the mean of the elementwise `loss` of y against t (broadcast to y), its
    gradient in out): the public losses' shared body, in float64."""
    diff = y.astype(np.float64) - t
    elem, grad = elementwise(loss, diff, quantiles, delta)
    np.multiply(grad, 1.0 / grad.size, out=out, casting="same_kind")
    return float(elem.mean()), out


def _check_float(name: str, a: object, what: str = "", min_ndim: int = 0) -> None:
    """TypeError unless a is a float32 or float64 ndarray of at least min_ndim dimensions."""
    if (not isinstance(a, np.ndarray) or a.dtype not in (np.float32, np.float64)
            or a.ndim < min_ndim):
        raise TypeError(f"{name} must be a float32 or float64 ndarray{what}, got "
                        f"{getattr(a, 'dtype', type(a).__name__)}")


def _grad_out(out: FloatArray | None, like: FloatArray) -> FloatArray:
    """A new array like `like` for a loss gradient when out is None, else out checked to
    be a writeable C-contiguous array of like's shape and dtype (ValueError)."""
    if out is None:
        return np.empty(like.shape, dtype=like.dtype)
    if (not isinstance(out, np.ndarray) or out.shape != like.shape or out.dtype != like.dtype
            or not out.flags.c_contiguous or not out.flags.writeable):
        raise ValueError(f"out must be a writeable C-contiguous {like.dtype} array of shape "
                         f"{like.shape}")
    return out


def _regression_args(name: str, y: FloatArray, y_true: npt.ArrayLike,
                     out: FloatArray | None, tail: tuple[int, ...] = ()
                     ) -> tuple[FloatArray, FloatArray]:
    """(y_true as y's dtype, out) after the checks the elementwise losses share; y_true has
    y's shape without `tail` trailing axes."""
    _check_float("y", y)
    want = y.shape[:y.ndim - len(tail)] if tail else y.shape
    t = np.asarray(y_true)
    if t.shape != want:
        raise ValueError(f"y_true must have shape {want} for {name}, got {t.shape}")
    if t.dtype.kind not in "fiu":
        raise TypeError(f"y_true must hold real numbers, got dtype {t.dtype}")
    if y.size == 0:
        raise ValueError(f"{name} of an empty array is undefined")
    if not finite(np.ascontiguousarray(y)):
        raise ValueError("y contains NaN or infinity")
    tc = as_dtype("y_true", t, y.dtype)
    if not finite(np.ascontiguousarray(tc)):
        raise ValueError("y_true contains NaN or infinity")
    return tc, _grad_out(out, y)


def mae_loss(y: FloatArray, y_true: npt.ArrayLike, *,
             out: FloatArray | None = None) -> tuple[float, FloatArray]:
    """Mean absolute error and its gradient: loss = mean|y - y_true|,
    dL/dy = sign(y - y_true) / N (0 where they are equal, as torch's l1_loss)."""
    t, out = _regression_args("mae_loss", y, y_true, out)
    return _mean_of("absolute_error", y, t, out)


def huber_loss(y: FloatArray, y_true: npt.ArrayLike, delta: float = 1.0, *,
               out: FloatArray | None = None) -> tuple[float, FloatArray]:
    """Huber loss (torch's huber_loss, mean reduction) and its gradient: per element
    ``0.5 e^2`` where ``|e| <= delta``, ``delta (|e| - delta / 2)`` beyond, with
    ``e = y - y_true``; ``dL/dy = clip(e, -delta, delta) / N``."""
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not delta > 0 \
            or not np.isfinite(delta):
        raise ValueError(f"delta must be a finite real number > 0, got {delta!r}")
    t, out = _regression_args("huber_loss", y, y_true, out)
    return _mean_of("huber", y, t, out, delta=float(delta))


def pinball_loss(y: FloatArray, y_true: npt.ArrayLike, quantiles: npt.ArrayLike, *,
                 out: FloatArray | None = None) -> tuple[float, FloatArray]:
    """Pinball (quantile) loss over several quantiles at once, and its gradient.

    y (..., Q): one prediction per quantile level q_j; y_true (...): the observed
    values; quantiles (Q,) in (0, 1). Per element, with e = y_true - y[..., j]:
    q_j e where e >= 0, (q_j - 1) e where e < 0; the loss is the mean over every
    element and quantile. dL/dy = (1 - q_j) / N where y is above y_true, -q_j / N
    where below (0 where equal).
    """
    q = np.asarray(quantiles, dtype=np.float64)
    if q.ndim != 1 or q.size == 0 or not np.all((q > 0) & (q < 1)):
        raise ValueError(f"quantiles must be a non-empty 1-D sequence of levels in (0, 1), "
                         f"got {quantiles!r}")
    if not isinstance(y, np.ndarray) or y.ndim < 1 or y.shape[-1] != q.size:
        raise ValueError(f"y must end with one column per quantile ({q.size}), got shape "
                         f"{getattr(y, 'shape', None)}")
    t, out = _regression_args("pinball_loss", y, y_true, out, tail=(q.size,))
    return _mean_of("pinball", y, t[..., None], out, quantiles=q)
