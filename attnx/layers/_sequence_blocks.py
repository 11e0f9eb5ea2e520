"""A SequenceModel's whole pass as one compiled call each way, and its per-layer
reference.

attnx.kernels._blocks.BlockStack runs every block's forward (or backward) on pointers
it checked once; attnx.kernels._model_pass.ModelPass runs the stem, the embedding, the
class token, that stack, the final norm, the pooling and the head: every
configuration, wherever `applies` holds (the model's own kernels and a key padding
mask of its buffers'). `stack_for` builds both per signature of a set of buffers (the
blocks' key padding mask, training or inference, dropout, thread counts, the
attention layers' paths) and keeps them on those buffers, so a training step spends
no Python between the kernels. The per-layer path (block_forward / block_backward
below and the ends around them in attnx.layers.sequence) runs only when a test swaps
in its own kernels (m._k) or turns `applies` off: it is the reference the compiled
pass is tested against, running the same kernels in the same order.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from . import _block_operands
from ..kernels import _attnargs, _mlp, _seq
from ..kernels._blocks import BlockActivations, BlockStack, NormWeights, StackScratch
from ..kernels._model_pass import (ClassToken, EmbedEnd, HeadEnd, ModelPass, PoolEnd,
                                   StemActivations, StemOperands)
from ._block_operands import LN_EPS as LN_EPS
from ._model_plan import stages
from .attention import _Last as _AttentionLast

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..runtime._typing import FloatArray
    from ._sequence_buffers import _Buffers
    from ._sequence_view import SequenceView

    _U8Array = npt.NDArray[np.uint8]


class _Compiled(NamedTuple):
    stack: BlockStack
    lasts: list[_AttentionLast]   # each attention layer's state after a training forward
    whole: ModelPass              # the whole pass


def applies(m: SequenceView, b: _Buffers, km: _U8Array | None) -> bool:
    """Whether the compiled stack runs these blocks: the model's own kernels, and a
    key padding mask that is one of the buffers' own (stable arrays)."""
    return m._k is _seq and (km is None or km is b.mask or km is b.cmask
                             or any(km is s for s in b.smask))


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
        b.for_backward(m)
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


# ---- the per-layer path, forward beside backward --------------------------------
def block_forward(m: SequenceView, i: int, b: _Buffers, km: _U8Array | None, nb: int, t: int,
                   grad: bool, drop: bool, threads: int, nth: int) -> None:
    """Block i of the per-layer path: H_{i+1} from H_i (b.hs[i]); the formulas are
    SequenceModel's docstring's."""
    k, w, p = m._k, m._w, f"layers.{i}."
    att = m.attn[i]
    ws, _ = att._workspace(nb, t, t, False, grad, threads)
    hi, zt = b.hs[i], b.zt[i]
    if m.norm == "pre":
        k.layernorm_forward(hi, w[p + "ln1.g"], w[p + "ln1.b"], b.u1[i], b.st1[i],
                            LN_EPS, nth)
        ain = b.u1[i]
    else:
        ain = hi
    branch = b.branch if drop else None   # set whenever drop
    if branch is not None:  # Z~ = H + mask1 * Attn(.)
        att._forward_buffers(ain, None, km, branch, nb, grad, ws, threads)
        k.masked_add(zt, hi, branch, None, b.m1[i], nth)
    else:     # the attention kernel adds the residual itself
        att._forward_buffers(ain, None, km, zt, nb, grad, ws, threads, residual=hi)
    if m.norm == "pre":
        k.layernorm_forward(zt, w[p + "ln2.g"], w[p + "ln2.b"], b.u2[i], b.st2[i],
                            LN_EPS, nth)
        u2 = b.u2[i]
    else:
        u2 = zt
    # the MLP kernel returns MLP(u2) + u2 (its own residual)
    out = branch if branch is not None else b.hs[i + 1]
    _mlp.mlp_forward(u2, (w[p + "W1"], w.get(p + "b1"), w[p + "W2"], w.get(p + "b2")),
                     (b.hid[i], b.s[i], b.sg[i] if grad else None), out, nthreads=threads)
    if branch is not None:  # H' = Z~ + mask2 * (out - u2)
        k.masked_add(b.hs[i + 1], zt, branch, u2, b.m2[i], nth)
    elif u2 is not zt:  # pre-norm: the residual is Z~, not u2
        k.add_sub(b.hs[i + 1], zt, u2, nth)


def block_backward(m: SequenceView, i: int, b: _Buffers, dcur: FloatArray, drop: bool, threads: int,
                    nth: int) -> None:
    """dcur: dL/dH_{i+1} on entry, dL/dH_i on return; fills layer i's grads."""
    k, w, g, p = m._k, m._w, m._g, f"layers.{i}."
    pre = m.norm == "pre"
    u2 = b.u2[i] if pre else b.zt[i]
    # MLP branch: dbr = dL/d(branch output); the kernel returns dL/du2 + dbr in db
    drop_buf = b.dbr if drop else None   # set whenever drop
    if drop_buf is not None:
        k.masked_add(drop_buf, None, dcur, None, b.m2[i], nth)
        dbr = drop_buf
    else:
        dbr = dcur
    _mlp.mlp_backward(dbr, u2, (w[p + "W1"], w[p + "W2"]), (b.hid[i], b.s[i], b.sg[i]),
                      b.dhid, (g[p + "W1"], g.get(p + "b1"), g[p + "W2"], g.get(p + "b2")),
                      b.db, nthreads=threads)
    if pre:   # dZ~ = LN2'(db - dbr) + dcur
        k.add_sub(b.db, None, dbr, nth)
        k.layernorm_backward(b.db, b.zt[i], w[p + "ln2.g"], (g[p + "ln2.g"], g[p + "ln2.b"]),
                             (b.st2[i], b.part), b.dzt, dcur, nth)
    elif drop:  # dZ~ = (db - dbr) + dcur
        np.copyto(b.dzt, b.db)
        k.add_sub(b.dzt, dcur, dbr, nth)
    else:       # the kernel's residual already is dcur
        b.dzt, b.db = b.db, b.dzt
    # attention branch: datt = dL/d(attention output)
    if drop_buf is not None:
        k.masked_add(drop_buf, None, b.dzt, None, b.m1[i], nth)
        datt = drop_buf
    else:
        datt = b.dzt
    if pre:   # db = dL/d(LN1 output); dH = LN1'(db) + dZ~
        m.attn[i]._backward_buffers(datt, b.db, None, dx_accumulate=False)
        k.layernorm_backward(b.db, b.hs[i], w[p + "ln1.g"], (g[p + "ln1.g"], g[p + "ln1.b"]),
                             (b.st1[i], b.part), dcur, b.dzt, nth)
    else:     # dH = dZ~ + attention'(datt)
        np.copyto(dcur, b.dzt)
        m.attn[i]._backward_buffers(datt, dcur, None, dx_accumulate=True)
