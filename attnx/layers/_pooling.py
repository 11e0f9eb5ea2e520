"""SequenceModel's pooling of the final tokens into one row per sequence, forward beside
backward: "mean" and "last" (attnx.kernels._seq), "max" and "cls" (attnx.kernels._embed).

    mean: the mean of the valid tokens      last: the last valid token
    max:  per feature, the maximum over the valid tokens (its gradient goes to the
          token that gave it, the first on ties)
    cls:  token 0, the class token SequenceModel prepends (never padded)
A sequence with no valid token pools to zeros (mean, last, max).

These are the per-layer reference path's calls (attnx.layers.sequence); in production the
compiled whole pass (attnx.kernels._model_pass) runs the same kernels' cores.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..kernels._embed import cls_pool_backward, cls_pool_forward, max_pool_backward, max_pool_forward

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from ._sequence_buffers import _Buffers
    from ._sequence_view import SequenceView

    _U8Array = npt.NDArray[np.uint8]


def forward(m: SequenceView, b: _Buffers, km: _U8Array | None, nb: int, t: int,
            nth: int) -> None:
    """b.pooled (B, d) from b.hf (B * t, d), t tokens per sequence."""
    pool = m.pooling
    if pool == "max":
        assert b.idx is not None
        max_pool_forward(b.hf.reshape(nb, t, -1), km, b.pooled, b.idx, nth)
    elif pool == "cls":
        cls_pool_forward(b.hf.reshape(nb, t, -1), b.pooled, nth)
    else:
        m._k.pool_forward(b.hf, km, b.pooled, nb, t, pool == "last", nth)


def backward(m: SequenceView, b: _Buffers, km: _U8Array | None, nb: int, t: int,
             nth: int) -> None:
    """b.dhf (B * t, d) from b.dpooled (B, d); rows the pooling did not read get 0."""
    pool, dp = m.pooling, b.dpooled
    assert dp is not None
    if pool == "max":
        assert b.idx is not None
        max_pool_backward(dp, b.idx, b.dhf.reshape(nb, t, -1), nth)
    elif pool == "cls":
        cls_pool_backward(dp, b.dhf.reshape(nb, t, -1), nth)
    else:
        m._k.pool_backward(dp, km, b.dhf, nb, t, pool == "last", nth)
