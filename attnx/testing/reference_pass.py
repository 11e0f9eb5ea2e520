"""A SequenceModel's forward and backward run layer by layer: the reference its one
production path, the compiled whole pass (attnx.kernels._model_pass), is tested against.

    y, state = reference_pass.forward(model, x, key_padding_mask)
    dx = reference_pass.backward(model, state, dy)    # fills model.grads, as model.backward

Every stage is its own kernel call, in the compiled pass's order: the instance norm,
the stem, the embedding with the positions, the class token, each block (attention,
then the MLP, with their residuals, norms and dropout), the final norm, the pooling,
the head and RevIN's de-normalisation. The row kernels are the `kernels` given:
attnx.kernels._seq (the default: then outputs, dL/dX, gradients, attention weights and
dropout masks equal the model's own bit for bit) or attnx.testing.numpy_kernels
(NumPy, to rounding). The weights are read from the model's public `params`, the
gradients written to its `grads`, the dropout masks drawn from its `dropout_rng` (as
the model's forward would draw them); the activations live in buffers of the model's
layout (attnx.layers._sequence_buffers) that the returned state owns. The attention
layers run on their own buffer-level entries, which the compiled pass shares, so
`model.attn[i].attention_weights()` reads the last reference forward's. Imports no
torch.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np

from ..kernels import _mlp, _seq
from ..kernels._embed import (cls_backward, cls_forward, cls_pool_backward, cls_pool_forward,
                              max_pool_backward, max_pool_forward)
from ..kernels._seq import random_bits
from ..layers import _stem
from ..layers._block_operands import LN_EPS
from ..layers.sequence import row_threads, sinusoidal_table
from ..runtime._threads import blas_single, threads_for
from ..runtime._validate import as_input, as_mask, cast_into

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..kernels._embed import Windows
    from ..layers._sequence_buffers import _Buffers
    from ..layers.sequence import SequenceModel
    from ..runtime._typing import FloatArray

    _U8Array = npt.NDArray[np.uint8]

__all__ = ["RowKernels", "State", "forward", "backward"]


class RowKernels(Protocol):
    """The row kernels the reference calls: attnx.kernels._seq, or
    attnx.testing.numpy_kernels (see attnx/kernels/_seq.pyi for the contract)."""

    def linear_forward(self, x: FloatArray, w: FloatArray, b: FloatArray, y: FloatArray,
                       nthreads: int = 1, pos: FloatArray | None = None,
                       t: int = 1) -> None: ...
    def linear_backward(self, dy: FloatArray, x: FloatArray, w: FloatArray,
                        dw: FloatArray, db: FloatArray, dx: FloatArray | None,
                        nthreads: int = 1) -> None: ...
    def positions_backward(self, dh: FloatArray, dp: FloatArray, t: int,
                           nthreads: int = 1) -> None: ...
    def layernorm_forward(self, x: FloatArray, g: FloatArray, b: FloatArray,
                          y: FloatArray, st: FloatArray, eps: float,
                          nthreads: int = 1) -> None: ...
    def layernorm_backward(self, dy: FloatArray, x: FloatArray, g: FloatArray,
                           grads: tuple[FloatArray, FloatArray],
                           work: tuple[FloatArray, FloatArray], dx: FloatArray,
                           add: FloatArray | None, nthreads: int = 1) -> None: ...
    def pool_forward(self, h: FloatArray, km: _U8Array | None, pooled: FloatArray,
                     nb: int, t: int, last: bool, nthreads: int = 1) -> None: ...
    def pool_backward(self, dpooled: FloatArray, km: _U8Array | None, dh: FloatArray,
                      nb: int, t: int, last: bool, nthreads: int = 1) -> None: ...
    def zero_masked_rows(self, y: FloatArray, km: _U8Array, nthreads: int = 1) -> None: ...
    def add_sub(self, out: FloatArray, a: FloatArray | None, b: FloatArray | None,
                nthreads: int = 1) -> None: ...
    def masked_add(self, out: FloatArray, res: FloatArray | None, a: FloatArray,
                   b: FloatArray | None, mult: FloatArray, nthreads: int = 1) -> None: ...
    def dropout_mask(self, bits: npt.NDArray[np.uint32], out: FloatArray, p: float,
                     nthreads: int = 1) -> None: ...


class State(NamedTuple):
    """What backward needs from a reference forward with grad=True."""

    bufs: _Buffers
    nb: int
    t: int                          # the input's steps (the blocks run on bufs.tt tokens)
    threads: int                    # the forward's thread count
    km: _U8Array | None             # the blocks' key padding mask (with the class token's)
    dropout: bool                   # whether it drew dropout masks
    kernels: RowKernels

    def dropout_masks(self) -> dict[str, FloatArray]:
        """The residual-branch multipliers drawn, as SequenceModel.dropout_masks."""
        if not self.dropout:
            return {}
        b, out = self.bufs, {}
        for i, (m1, m2) in enumerate(zip(b.m1, b.m2)):
            out[f"layers.{i}.res1"] = m1.reshape(self.nb, b.tt, -1).copy()
            out[f"layers.{i}.res2"] = m2.reshape(self.nb, b.tt, -1).copy()
        return out


def forward(model: SequenceModel, x: npt.ArrayLike,
            key_padding_mask: npt.ArrayLike | None = None, *, grad: bool = True,
            kernels: RowKernels = _seq) -> tuple[FloatArray, State]:
    """Y of model.forward(x, key_padding_mask, grad=grad), stage by stage, and the state
    backward reads. A training forward (grad=True) draws dropout masks from
    model.dropout_rng as the model's would, and leaves each attention layer's state."""
    m = model
    x = as_input("x", x, m.n_features)
    nb, t = x.shape[:2]
    macs = m.forward_macs(nb, t)
    threads = threads_for(macs)
    b = m.stages.make_buffers(nb, t, grad, threads, m.dropout > 0)
    cast_into("x", b.x, x.reshape(nb * t, m.n_features))
    km = None
    if key_padding_mask is not None:
        np.copyto(b.mask, as_mask(key_padding_mask, nb, t))
        km = b.mask
    drop = grad and m.dropout > 0
    if drop:
        _draw_masks(m, b, kernels)
    kms = _stem.token_masks(_windows(m), b.smask, km)
    kt = kms[-1]   # the tokens' key padding mask, with the class token's column
    if kt is not None and b.cmask is not None:
        b.cmask[:, 0] = 0
        b.cmask[:, 1:] = kt
        kt = b.cmask
    y = np.empty(m.output_shape(nb, t), m.dtype)
    with blas_single(threads, macs):
        _forward(m, b, kms, kt, nb, grad, drop, threads, y.reshape(-1, m.n_outputs), kernels)
    return y, State(b, nb, t, threads, kt, drop, kernels)


def backward(model: SequenceModel, state: State, dy: npt.ArrayLike) -> FloatArray | None:
    """dL/dX (B, T, n_features), or None when model.input_grad is False, from dL/dY of
    the forward that returned `state`; model.grads filled as model.backward fills them."""
    m = model
    b, nb, t = state.bufs, state.nb, state.t
    b.for_backward()
    dy = np.asarray(dy)
    if dy.shape != m.output_shape(nb, t):
        raise ValueError(f"dy must have the shape {m.output_shape(nb, t)}, got {dy.shape}")
    cast_into("dy", b.dy, dy.reshape(b.dy.shape))
    dx = np.empty((nb, t, m.n_features), m.dtype) if m.input_grad else None
    with blas_single(state.threads, m.forward_macs(nb, t)):
        _backward(m, b, state.km, nb, state.dropout, state.threads,
                  None if dx is None else dx.reshape(-1, m.n_features), state.kernels)
    return dx


def _draw_masks(m: SequenceModel, b: _Buffers, k: RowKernels) -> None:
    """The dropout multipliers: one call of random_bits for every mask, then each mask
    from its slice of the bits (what attnx.kernels._seq.dropout_masks does in one)."""
    assert b.bits is not None
    random_bits(m.dropout_rng.bit_generator, b.bits)
    at = 0
    for buf in b.m1 + b.m2:
        k.dropout_mask(b.bits[at:at + buf.size], buf, m.dropout)
        at += buf.size


def _positions(m: SequenceModel, n: int) -> FloatArray | None:
    """The table the embedding adds for n tokens, as the model builds it."""
    if m.positional == "sinusoidal":
        tab = sinusoidal_table(n, m.d_model, np.float64)
        return np.ascontiguousarray(tab * m.position_scale, m.dtype)
    return m.params["pos.P"] if m.positional == "learned" else None


# ---- the whole model, forward beside backward ----------------------------------------
def _forward(m: SequenceModel, b: _Buffers, kms: list[_U8Array | None], km: _U8Array | None,
             nb: int, grad: bool, drop: bool, threads: int, y2: FloatArray,
             k: RowKernels) -> None:
    """Instance norm, stem, embedding, class token, blocks, final norm, pooling, head and
    de-normalisation on the buffers b; kms the stem layers' masks, km the blocks'."""
    n, t, w = b.n, b.tt, m.params
    nth = row_threads(nb * t, m.d_model, threads)
    inorm = m.stages.instance_norm
    x = b.x if inorm is None else inorm.forward(b, kms[0], nb, nth)
    a = _stem_forward(m, b, x, kms, nb, grad, nth, k) if m.stem else x
    h0 = b.hs[0] if b.emb is None else b.emb
    k.linear_forward(a, w["embed.W"], w["embed.b"], h0, nth, _positions(m, n), n)
    if b.emb is not None:   # the class token first
        cls_forward(b.emb.reshape(nb, n, -1), w["cls"], b.hs[0].reshape(nb, t, -1),
                    nthreads=nth)
    for i in range(m.n_layers):
        _block_forward(m, i, b, km, nb, t, grad, drop, threads, nth, k)
    if b.stf is not None:  # pre-norm: the final LayerNorm
        k.layernorm_forward(b.hs[-1], w["norm.g"], w["norm.b"], b.hf, b.stf, LN_EPS, nth)
    if m.pooling is not None:
        _pool_forward(m, b, km, nb, t, nth, k)
    if inorm is not None and b.yn is not None:   # revin: the head's output, de-normalised
        k.linear_forward(b.pooled, w["head.W"], w["head.b"], b.yn, nth)
        inorm.denorm(b, nb, y2, nth)
    else:
        k.linear_forward(b.pooled, w["head.W"], w["head.b"], y2, nth)
    if m.pooling is None and km is not None:
        k.zero_masked_rows(y2, km)


def _backward(m: SequenceModel, b: _Buffers, km: _U8Array | None, nb: int, drop: bool,
              threads: int, dx2: FloatArray | None, k: RowKernels) -> None:
    n, t, w, g = b.n, b.tt, m.params, m.grads
    nth = row_threads(nb * t, m.d_model, threads)
    if m.pooling is None and km is not None:
        k.zero_masked_rows(b.dy, km)   # padded positions' dY is ignored
    # revin: dL/d(the head's output) through the de-normalisation
    inorm = m.stages.instance_norm
    dy = b.dy if inorm is None or b.yn is None else inorm.denorm_backward(b, nb, nth)
    kin = b.mask if km is not None else None   # the input's padding mask
    # with instance norm: dL/d(normalised X) first, then through the normalisation
    dxi = dx2 if inorm is None else b.dxn if inorm.needs_dxn(m.input_grad) else None
    if b.dpooled is None:   # pooling=None
        k.linear_backward(dy, b.pooled, w["head.W"], g["head.W"], g["head.b"], b.dhf, nth)
    else:
        k.linear_backward(dy, b.pooled, w["head.W"], g["head.W"], g["head.b"], b.dpooled, nth)
        _pool_backward(m, b, km, nb, t, nth, k)
    # dcur: dL/d(block output), walking down the stack
    if b.stf is not None:   # pre-norm: the final LayerNorm
        k.layernorm_backward(b.dhf, b.hs[-1], w["norm.g"], (g["norm.g"], g["norm.b"]),
                             (b.stf, b.part), b.da, None, nth)
        dcur = b.da
    else:
        dcur = b.dhf
    for i in reversed(range(m.n_layers)):
        _block_backward(m, i, b, dcur, drop, threads, nth, k)
    if b.demb is not None:   # the class token's rows
        cls_backward(dcur.reshape(nb, t, -1), b.demb.reshape(nb, n, -1), g["cls"],
                     nthreads=nth)
        dcur = b.demb
    if m.positional == "learned":
        k.positions_backward(dcur, g["pos.P"], n, nth)
    if not m.stem:
        k.linear_backward(dcur, b.x if b.xn is None else b.xn, w["embed.W"],
                          g["embed.W"], g["embed.b"], dxi, nth)
    else:
        k.linear_backward(dcur, b.ss[-1], w["embed.W"], g["embed.W"], g["embed.b"],
                          b.dss[-1], nth)
        kms = [kin] + [s if km is not None else None for s in b.smask]
        _stem_backward(m, b, kms, nb, nth, dxi, k)
    if inorm is not None and dxi is not None:
        inorm.backward(b, kin, nb, nth, dx2)


# ---- a block: attention and MLP with their residuals, norms and dropout --------------
def _block_forward(m: SequenceModel, i: int, b: _Buffers, km: _U8Array | None, nb: int,
                   t: int, grad: bool, drop: bool, threads: int, nth: int,
                   k: RowKernels) -> None:
    """H_{i+1} from H_i (b.hs[i]); the formulas are SequenceModel's docstring's."""
    w, p = m.params, f"layers.{i}."
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


def _block_backward(m: SequenceModel, i: int, b: _Buffers, dcur: FloatArray, drop: bool,
                    threads: int, nth: int, k: RowKernels) -> None:
    """dcur: dL/dH_{i+1} on entry, dL/dH_i on return; fills layer i's grads."""
    w, g, p = m.params, m.grads, f"layers.{i}."
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


# ---- the stem and the pooling ---------------------------------------------------------
def _stem_forward(m: SequenceModel, b: _Buffers, x: FloatArray, kms: list[_U8Array | None],
                  nb: int, grad: bool, nth: int, k: RowKernels) -> FloatArray:
    """The stem (attnx.layers._stem) on x (b.x, or the instance-normalised b.xn);
    returns its output A_L (B * T_L, d_model)."""
    w, a, lens = m.params, x, b.lens
    for i, win in enumerate(_windows(m)):
        n = lens[i + 1]
        win.forward(a.reshape(nb, lens[i], -1), kms[i], b.su[i].reshape(nb, n, -1), nth)
        k.linear_forward(b.su[i], w[f"stem.{i}.W"], w[f"stem.{i}.b"], b.sz[i], nth)
        _mlp.silu_forward(b.sz[i], b.ss[i], b.ssg[i] if grad else None, nth)
        a = b.ss[i]
    return a


def _stem_backward(m: SequenceModel, b: _Buffers, kms: list[_U8Array | None], nb: int,
                   nth: int, dx2: FloatArray | None, k: RowKernels) -> None:
    """The stem's gradients from b.dss[-1] = dL/dA_L; dx2 (B * T, n_features) receives
    dL/dX (skipped when None)."""
    w, g, lens = m.params, m.grads, b.lens
    wins = _windows(m)
    for i in reversed(range(len(wins))):
        _mlp.silu_backward(b.dss[i], b.sz[i], b.ssg[i], b.dss[i], nth)
        target = b.dss[i - 1] if i > 0 else dx2
        k.linear_backward(b.dss[i], b.su[i], w[f"stem.{i}.W"], g[f"stem.{i}.W"],
                          g[f"stem.{i}.b"], None if target is None else b.dsu[i], nth)
        if target is not None:
            wins[i].backward(b.dsu[i].reshape(nb, lens[i + 1], -1), kms[i],
                             target.reshape(nb, lens[i], -1), nth)


def _windows(m: SequenceModel) -> list[Windows]:
    return [st.windows for st in m.stages.stem]


def _pool_forward(m: SequenceModel, b: _Buffers, km: _U8Array | None, nb: int, t: int,
                  nth: int, k: RowKernels) -> None:
    """b.pooled (B, d) from b.hf (B * t, d), t tokens per sequence."""
    pool = m.pooling
    if pool == "max":
        assert b.idx is not None
        max_pool_forward(b.hf.reshape(nb, t, -1), km, b.pooled, b.idx, nth)
    elif pool == "cls":
        cls_pool_forward(b.hf.reshape(nb, t, -1), b.pooled, nth)
    else:
        k.pool_forward(b.hf, km, b.pooled, nb, t, pool == "last", nth)


def _pool_backward(m: SequenceModel, b: _Buffers, km: _U8Array | None, nb: int, t: int,
                   nth: int, k: RowKernels) -> None:
    """b.dhf (B * t, d) from b.dpooled (B, d); rows the pooling did not read get 0."""
    pool, dp = m.pooling, b.dpooled
    assert dp is not None
    if pool == "max":
        assert b.idx is not None
        max_pool_backward(dp, b.idx, b.dhf.reshape(nb, t, -1), nth)
    elif pool == "cls":
        cls_pool_backward(dp, b.dhf.reshape(nb, t, -1), nth)
    else:
        k.pool_backward(dp, km, b.dhf, nb, t, pool == "last", nth)
