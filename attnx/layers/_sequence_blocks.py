"""A SequenceModel's whole pass as one compiled call each way: its only path.

attnx.kernels._blocks.BlockStack runs every block's forward (or backward) on pointers
it checked once; attnx.kernels._model_pass.ModelPass runs the stem, the embedding, the
class token, that stack, the final norm, the pooling and the head, for every
configuration. `stack_for` builds both per signature of a set of buffers (the
blocks' key padding mask, one of the buffers' own arrays, training or inference,
dropout, thread counts, the attention layers' paths) and keeps them on those
buffers, so a training step spends no Python between the kernels. The same stages
one kernel call at a time, the reference this pass is tested against, live in
attnx.testing.reference_pass.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np

from . import _block_operands
from ..kernels import _attnargs
from ..kernels._blocks import BlockActivations, BlockStack, NormWeights, StackScratch
from ..kernels._model_pass import (ClassToken, EmbedEnd, HeadEnd, ModelPass, PoolEnd,
                                   StemActivations, StemOperands)
from ._block_operands import LN_EPS as LN_EPS
from ._model_plan import stages
from .attention import _Last as _AttentionLast

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..runtime._typing import FloatArray
    from ._model_plan import Stage
    from ._sequence_buffers import _Buffers
    from .attention import MultiHeadAttention

    _U8Array = npt.NDArray[np.uint8]

    class SequenceView(Protocol):
        """What building the pass reads of its SequenceModel (which imports this
        module, so it is declared here); it goes once the builders below take their
        operands explicitly."""

        attn: list[MultiHeadAttention]
        plan: tuple[Stage, ...]
        norm: str | None
        n_features: int
        n_outputs: int
        _w: dict[str, FloatArray]
        _g: dict[str, FloatArray]

        def _positions(self, n: int) -> FloatArray | None: ...


class _Compiled(NamedTuple):
    stack: BlockStack
    lasts: list[_AttentionLast]   # each attention layer's state after a training forward
    whole: ModelPass              # the whole pass


def stack_for(m: SequenceView, b: _Buffers, km: _U8Array | None, nb: int, grad: bool,
              drop: bool, threads: int, nth: int) -> _Compiled:
    """The compiled blocks over the buffers b (built on first use, then kept on b)."""
    t = b.tt
    paths = tuple(a._path(t, t, grad) for a in m.attn)
    key = (grad, drop, None if km is None else id(km), threads, nth, paths,
           _attnargs.block_sizes() if "blocked" in paths else None)
    got: _Compiled | None = b.stacks.get(key)
    if got is None:
        got = b.stacks[key] = _build(m, b, km, nb, grad, drop, threads, nth)
    return got


def _build(m: SequenceView, b: _Buffers, km: _U8Array | None, nb: int, grad: bool,
           drop: bool, threads: int, nth: int) -> _Compiled:
    """The block stack and the whole pass over the buffers b, from typed operands (a
    keyword names the buffer each argument points into)."""
    t, w, g, pre = b.tt, m._w, m._g, m.norm == "pre"
    if grad:
        b.for_backward()
    attention, weights, acts, lasts = [], [], [], []
    for blk in stages(m.plan, "block"):
        i = blk.layer
        ops, last = _block_operands.attention(m.attn[i], nb, t, t, grad, threads, km,
                                              b.u1[i] if pre else b.hs[i], None)
        attention.append(ops)
        lasts.append(last)
        weights.append(_block_operands.weights(w, g, blk.prefix, pre))
        acts.append(BlockActivations(
            h=b.hs[i], h_out=b.hs[i + 1], zt=b.zt[i], u1=b.u1[i] if pre else None,
            u2=b.u2[i] if pre else None, st1=b.st1[i] if pre else None,
            st2=b.st2[i] if pre else None, hid=b.hid[i], s=b.s[i],
            sg=b.sg[i] if grad else None, m1=b.m1[i] if drop else None,
            m2=b.m2[i] if drop else None))
    # the blocks' dL/dH_L: after the final norm's backward (da), else the head's (dhf)
    scratch = (StackScratch(branch=b.branch, dcur=b.da if pre else b.dhf, dbr=b.dbr, db=b.db,
                            dzt=b.dzt, dhid=b.dhid, part=b.part) if grad else
               StackScratch(b.branch, None, None, None, None, None, None))
    stack = BlockStack(attention, weights, acts, scratch, pre, drop, grad, nth, threads)
    return _Compiled(stack, lasts, _whole(m, b, km, nb, grad, nth, stack))


def _whole(m: SequenceView, b: _Buffers, km: _U8Array | None, nb: int, grad: bool,
           nth: int, stack: BlockStack) -> ModelPass:
    """The whole pass around `stack`: its ends read stage by stage from the model's
    description (attnx.layers._model_plan), pointing into the buffers b."""
    w, g = m._w, m._g

    def grad_of(name: str) -> FloatArray | None:
        return g[name] if grad else None

    x = b.x if b.xn is None else b.xn
    emb_in, pos, dpos = x, None, None
    stem: list[StemOperands] = []
    cls = None
    pooling, norm = None, None
    for st in m.plan:
        if st.kind == "stem":
            i = st.layer
            stem.append(StemOperands(
                st.kernel, st.stride, st.pad_left, st.pad_right, t_in=b.lens[i],
                km=None if km is None else b.mask if i == 0 else b.smask[i - 1],
                W=w[st.prefix + "W"], b=w[st.prefix + "b"], dW=grad_of(st.prefix + "W"),
                db=grad_of(st.prefix + "b"),
                acts=StemActivations(su=b.su[i], sz=b.sz[i], ss=b.ss[i],
                                     ssg=b.ssg[i] if grad else None,
                                     dss=b.dss[i] if grad else None,
                                     dsu=b.dsu[i] if grad else None)))
            emb_in = b.ss[i]
        elif st.kind == "positions":
            pos = m._positions(b.n)
            if st.how == "learned" and grad:
                dpos = g[st.prefix + "P"]
        elif st.kind == "cls":
            cls = ClassToken(cls=w[st.prefix], dcls=grad_of(st.prefix), emb=b.emb,
                             demb=b.demb if grad else None)
        elif st.kind == "final_norm":
            p = st.prefix
            norm = NormWeights(w[p + "g"], w[p + "b"], g[p + "g"], g[p + "b"], LN_EPS)
        elif st.kind == "pool":
            pooling = st.how
    embed = EmbedEnd(x_in=x, x=emb_in, W=w["embed.W"], b=w["embed.b"], dW=grad_of("embed.W"),
                     db=grad_of("embed.b"), pos=pos, dpos=dpos, h0=b.hs[0])
    pool = PoolEnd(pooling, norm, h_top=b.hs[-1], hf=b.hf, stf=b.stf, pooled=b.pooled,
                   idx=b.idx, dhf=b.dhf if grad else None,
                   dpooled=b.dpooled if grad else None)
    # revin de-normalises the head's output (b.yn) and runs its gradient first (rdy)
    head = HeadEnd(W=w["head.W"], b=w["head.b"], dW=grad_of("head.W"), db=grad_of("head.b"),
                   dy=(b.dy if b.rdy is None else b.rdy) if grad else None,
                   zero_padded=b.yn is None)
    return ModelPass(stack, nb, km, nth, stem, embed, cls, pool, head)
