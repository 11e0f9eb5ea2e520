"""One transformer block's typed kernel operands (attnx.kernels._blocks) from a model's
attention layer and weights: what SequenceModel (attnx.layers._sequence_blocks) and
Transformer (attnx.layers.transformer) both build their BlockStack from."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..kernels._blocks import AttentionOperands, BlockWeights, NormWeights
from .attention import _Last as _AttentionLast

if TYPE_CHECKING:
    from collections.abc import Mapping

    import numpy as np
    import numpy.typing as npt

    from ..runtime._typing import FloatArray
    from .attention import MultiHeadAttention

    _U8Array = npt.NDArray[np.uint8]

# LayerNorm's epsilon (as torch's default)
LN_EPS = 1e-5


def attention(att: MultiHeadAttention, nb: int, tq: int, tk: int, grad: bool, threads: int,
              mask: _U8Array | None, x: FloatArray, ctx: FloatArray | None
              ) -> tuple[AttentionOperands, _AttentionLast]:
    """The attention call of a block whose attention reads the rows x (nb * tq, d) and,
    for cross-attention, the context rows ctx (nb * tk, d); and the layer's state a
    training forward of it leaves (for attention_weights)."""
    ws, _ = att._workspace(nb, tq, tk, ctx is not None, grad, threads)
    if grad:   # the stack's backward calls are checked against the backward buffers
        ws.for_backward(threads)
    rope = att._rope_tables(max(tq, tk)) if att.rope else None
    ops = AttentionOperands(ws.shape, ws.bufs, ws.params, threads if ws.parallel else 1,
                            mask, rope, ctx)
    rc, rs = rope if rope is not None else (None, None)
    return ops, _AttentionLast(x, ctx, nb, tq, tk, ws, threads, rc, rs, mask)


def weights(w: Mapping[str, FloatArray], g: Mapping[str, FloatArray], prefix: str,
            pre: bool) -> BlockWeights:
    """A block's LayerNorms (pre-norm) and MLP weights and gradients from the model's
    params w and grads g (names prefix + "W1", "ln1.g", ...; biases may be absent)."""
    def norm(name: str) -> NormWeights | None:
        p = prefix + name
        return (NormWeights(w[p + ".g"], w[p + ".b"], g[p + ".g"], g[p + ".b"], LN_EPS)
                if pre else None)

    p = prefix
    return BlockWeights(norm("ln1"), norm("ln2"), w[p + "W1"], w.get(p + "b1"), w[p + "W2"],
                        w.get(p + "b2"), g[p + "W1"], g.get(p + "b1"), g[p + "W2"],
                        g.get(p + "b2"))
