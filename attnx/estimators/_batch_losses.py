"""The estimators' batch losses: each fills a training Batch's dL/dY in place and
returns (loss, weight), built on the public losses of attnx.layers.losses."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..kernels._seq import cross_entropy_rows
from ..layers import losses

if TYPE_CHECKING:
    import numpy.typing as npt

    from ._batches import Batch

    F64Array = npt.NDArray[np.float64]


def regression_batch_loss(batch: Batch, m: int, loss: str = "squared_error",
                          quantiles: F64Array | None = None) -> tuple[float, float]:
    """(loss, weight) and dL/dY in batch.dy for the regressors' `loss`: the
    (sample-weighted) mean over samples of the mean over outputs of the elementwise
    loss; padding and short-batch rows (from m on) weigh 0. "squared_error" is
    mse_loss, "absolute_error" mae_loss, "huber" huber_loss with delta 1 (in the
    units the network is trained in, i.e. standardised targets) and "pinball" the
    pinball loss with level quantiles[j] for output column j (the last axis of y)."""
    if loss == "squared_error" and batch.w is None:
        if m == batch.shape[0]:
            value, _ = losses.mse_loss(batch.y, batch.y_true, out=batch.dy)
        else:
            value, _ = losses.mse_loss(batch.y[:m], batch.y_true[:m], out=batch.dy[:m])
            batch.dy[m:] = 0  # padding rows contribute nothing to the gradients
        return value, m
    if batch.w is None:
        w = (np.arange(batch.shape[0]) < m).astype(np.float64)
    else:
        w = np.asarray(batch.w, np.float64)
    wb = w.reshape(w.shape + (1,) * (batch.y.ndim - w.ndim))
    per_weight = batch.y.size // w.size
    total = float(w.sum())
    if total == 0:  # a batch of zero-weight samples only: no gradient, no loss
        batch.dy[...] = 0
        return 0.0, 0.0
    diff = batch.y.astype(np.float64) - batch.y_true
    elem, grad = losses.elementwise(loss, diff, quantiles)
    scale = per_weight * total
    value = float((wb * elem).sum()) / scale
    np.multiply(wb * grad, 1.0 / scale, out=batch.dy, casting="unsafe")
    return value, (m if batch.w is None else total)


def classification_batch_loss(batch: Batch, m: int,
                              label_smoothing: float = 0.0) -> tuple[float, float]:
    """(loss, weight) and dL/dlogits in batch.dy: softmax cross-entropy, the weighted
    mean over the labels (padding and short-batch rows weigh 0)."""
    assert batch.w is not None  # a classifier's batches always carry weights
    total = float(batch.w.sum())
    if total == 0:
        batch.dy[...] = 0
        return 0.0, 0.0
    # cross_entropy_loss's kernel on the batch's own buffers: the labels (int64, in
    # range) and the weights (float64, >= 0) were checked at fit, and a non-finite
    # logit gives a non-finite loss, which the trainer stops on
    n_cls = batch.y.shape[-1]
    loss = cross_entropy_rows(batch.y.reshape(-1, n_cls), batch.y_true.reshape(-1),
                              batch.w.reshape(-1), total, batch.dy.reshape(-1, n_cls),
                              float(label_smoothing))
    return float(loss), total
