"""Transformer: stacked (attention + residual, SiLU MLP + residual) layers on the
compiled block stack (attnx.kernels._blocks)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from . import _block_operands
from ..kernels import _attnargs
from ..kernels._blocks import BlockActivations, BlockStack, StackScratch
from ..runtime._threads import blas_single, threads_for
from ..runtime._params import FlatAllocator, ParamDict, check_dtype, check_positive_int, rebuild_model
from ..runtime._validate import as_dtype, as_input, as_mask, cast_into, check_params
from ._attention_stack import _AttentionStack
from ._attention_workspace import _copy_rows
from .attention import MultiHeadAttention, _Last as _AttentionLast
from ..runtime._workspace import WorkspaceCache, check_size, nbytes_of

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import TypedDict

    import numpy.typing as npt

    from ..runtime._typing import AnyArray, FloatArray, RandomStateLike

    class _MLPViews(TypedDict):
        """One layer's MLP weights (or gradients) as the kernels take them."""
        W1: FloatArray            # (d_model, d_hidden)
        W2: FloatArray            # (d_hidden, d_model)
        b1: FloatArray | None     # (d_hidden,), None without bias
        b2: FloatArray | None     # (d_model,), None without bias


class _Buffers:
    """Activations of one (batch, T, Tk, store, threads) signature, reused across steps,
    named as SequenceModel's (attnx.layers._sequence_buffers) and the block stack's
    operands (attnx.kernels._blocks)."""

    hs: list[FloatArray]   # hs[i] is block i's input; hs[n_layers] its output (a training
                           # forward's input copy in hs[0]; the caller's y is written)
    zt: list[FloatArray]   # Z~ = attention(X) + X
    hid: list[FloatArray]  # Z~ W1 + b1
    s: list[FloatArray]
    sg: list[FloatArray]   # sigmoid(hid), for backward (inference does not write it)
    ctx: FloatArray | None
    mask: npt.NDArray[np.uint8] | None
    # backward scratch, made by for_backward
    dzt: FloatArray
    dhid: FloatArray
    dcur: FloatArray       # dL/dH_i between the blocks

    @staticmethod
    def shapes(n_layers: int, rows: int, d: int, d_hidden: int, store: bool
               ) -> tuple[dict[str, list[tuple[int, int]]], dict[str, tuple[int, int]]]:
        """The one size table of a Transformer's buffers: the forward's per-layer
        lists (name -> one shape per array) and the backward scratch (name -> shape).
        __init__ and for_backward allocate from it, elements() sums it."""
        L = n_layers
        forward = {"hs": [(rows, d)] * (L + 1), "zt": [(rows, d)] * L,
                   "hid": [(rows, d_hidden)] * L, "s": [(rows, d_hidden)] * L,
                   "sg": [(rows, d_hidden)] * L if store else []}
        backward = {"dzt": (rows, d), "dhid": (rows, d_hidden), "dcur": (rows, d)}
        return forward, backward

    @classmethod
    def elements(cls, n_layers: int, rows: int, d: int, d_hidden: int, store: bool) -> int:
        """Values held by the buffers of these sizes (with the backward scratch when
        store: a training forward is followed by a backward)."""
        forward, backward = cls.shapes(n_layers, rows, d, d_hidden, store)
        n = sum(math.prod(sh) for shapes in forward.values() for sh in shapes)
        return n + (sum(math.prod(sh) for sh in backward.values()) if store else 0)

    def __init__(self, n_layers: int, rows: int, d: int, d_hidden: int,
                 dtype: np.dtype[Any], store: bool = True) -> None:
        forward, self._backward = self.shapes(n_layers, rows, d, d_hidden, store)
        for name, shapes in forward.items():
            setattr(self, name, [np.empty(sh, dtype=dtype) for sh in shapes])
        self._dtype = dtype
        self.ctx = None
        self.mask = None
        self._has_backward = False
        # compiled block stacks over these buffers (Transformer._stack)
        self.stacks: dict[tuple[Any, ...], _Compiled] = {}

    def for_backward(self) -> _Buffers:
        if not self._has_backward:
            for name, sh in self._backward.items():
                setattr(self, name, np.empty(sh, dtype=self._dtype))
            self._has_backward = True
        return self


class _Compiled(NamedTuple):
    stack: BlockStack
    lasts: list[_AttentionLast]   # each attention layer's state after a training forward


class _Last(NamedTuple):
    """What backward needs from the last training forward."""

    nb: int
    t: int
    tk: int
    cross: bool
    bufs: _Buffers
    threads: int  # the forward's thread count
    stack: BlockStack


class Transformer(_AttentionStack):
    """A stack of n_layers transformer layers, each attention followed by a SiLU MLP,
    both with a residual connection:

        Z~ = Attention(X) + X
        H  = Z~ W1 (+ b1)
        X' = silu(H) W2 (+ b2) + Z~         silu(h) = h * sigmoid(h)

    The last layer's X' is the output Y, (B, T, d_model).

    Parameters: d_model, n_heads, n_layers=2, d_hidden=4*d_model, and causal,
    bias, rope, dtype, random_state, input_grad, attention as for
    MultiHeadAttention (the attention options apply to every layer). Initial weights: Wq, Wk, Wv, Wo,
    W1 uniform in +-1/sqrt(d_model), W2 uniform in +-1/sqrt(d_hidden), biases 0,
    drawn layer by layer from one numpy.random.default_rng(random_state).

    `params` / `grads`: names `layers.{i}.Wq` ... `layers.{i}.W2` (and biases),
    live views into one flat buffer, so AdamW updates the model in one call.

    The layers run as one compiled call each way on the block stack SequenceModel's
    blocks run on (attnx.kernels._blocks.BlockStack, without norm or dropout; with
    context every block attends to it and dL/dcontext sums their shares).
    """

    validation_grad = True  # as MultiHeadAttention's
    attn: list[MultiHeadAttention]
    _last: _Last | None

    def __init__(self, d_model: int, n_heads: int, n_layers: int = 2,
                 d_hidden: int | None = None, *, causal: bool = False, bias: bool = False,
                 rope: bool = False, dtype: npt.DTypeLike = np.float32,
                 random_state: RandomStateLike = None, input_grad: bool = True,
                 attention: str = "auto") -> None:
        d = check_positive_int("d_model", d_model)
        n_layers = check_positive_int("n_layers", n_layers)
        d_hidden = 4 * d if d_hidden is None else check_positive_int("d_hidden", d_hidden)
        self.d_model, self.n_heads, self.n_layers, self.d_hidden = d, n_heads, n_layers, d_hidden
        self.causal, self.bias, self.rope = bool(causal), bool(bias), bool(rope)
        self.dtype = check_dtype(dtype)
        self.input_grad = bool(input_grad)
        self.attention = attention

        n_att = MultiHeadAttention.n_params(d, bias)
        alloc = FlatAllocator()
        per_layer = self.n_params(d, 1, d_hidden, bias)
        starts = [alloc.reserve(per_layer) for _ in range(n_layers)]
        theta = np.zeros(alloc.size, self.dtype)
        grad = np.zeros(alloc.size, self.dtype)

        rng = np.random.default_rng(random_state)
        self.attn = []
        pviews: dict[str, FloatArray] = {}
        gviews: dict[str, FloatArray] = {}
        for i, st in enumerate(starts):
            att = MultiHeadAttention(d, n_heads, causal=causal, bias=bias, rope=rope,
                                     dtype=self.dtype, random_state=rng, attention=attention,
                                     _storage=(theta, grad, st))
            self.attn.append(att)
            mw = self._mlp_views(theta, st + n_att)
            mg = self._mlp_views(grad, st + n_att)
            mw["W1"][...] = rng.uniform(-1 / np.sqrt(d), 1 / np.sqrt(d), size=(d, d_hidden))
            mw["W2"][...] = rng.uniform(-1 / np.sqrt(d_hidden), 1 / np.sqrt(d_hidden),
                                        size=(d_hidden, d))
            for src, dst in ((att.params, pviews), (att.grads, gviews)):
                for k, v in src.items():
                    dst[f"layers.{i}.{k}"] = v
            for k, wv, gv in (("W1", mw["W1"], mg["W1"]), ("W2", mw["W2"], mg["W2"]),
                              ("b1", mw["b1"], mg["b1"]), ("b2", mw["b2"], mg["b2"])):
                if wv is not None and gv is not None:  # the biases only with bias=True
                    pviews[f"layers.{i}.{k}"] = wv
                    gviews[f"layers.{i}.{k}"] = gv
        self.params = ParamDict(theta, _ordered(pviews, n_layers))
        self.grads = ParamDict(grad, _ordered(gviews, n_layers))
        self._bufs = WorkspaceCache()
        self._last = None

    @staticmethod
    def n_params(d_model: int, n_layers: int, d_hidden: int, bias: bool) -> int:
        """Number of parameters of a Transformer with these sizes."""
        d = d_model
        per_layer = MultiHeadAttention.n_params(d, bias) + 2 * d * d_hidden
        return n_layers * (per_layer + ((d_hidden + d) if bias else 0))

    def output_shape(self, batch: int, seq_len: int) -> tuple[int, ...]:
        """Shape of forward's output for x of shape (batch, seq_len, d_model)."""
        return (batch, seq_len, self.d_model)

    @classmethod
    def config_n_params(cls, config: Mapping[str, Any]) -> int:
        """Number of parameters of the model get_config() describes (before building it)."""
        return cls.n_params(int(config["d_model"]), int(config["n_layers"]),
                            int(config["d_hidden"]), bool(config["bias"]))

    def get_config(self) -> dict[str, Any]:
        """The constructor arguments (without random_state and input_grad) that
        rebuild this model."""
        return dict(d_model=self.d_model, n_heads=self.n_heads, causal=self.causal,
                    bias=self.bias, rope=self.rope, dtype=self.dtype.name,
                    attention=self.attention, n_layers=self.n_layers,
                    d_hidden=self.d_hidden)

    def __reduce__(self) -> tuple[Callable[..., Transformer], tuple[Any, ...]]:
        # the configuration, the weights and input_grad; workspaces, gradients and
        # the last forward's state start afresh
        return (rebuild_model, (type(self), self.get_config(), self.params.flat.copy(),
                                self.input_grad))

    def _mlp_views(self, flat: FloatArray, start: int) -> _MLPViews:
        d, dh = self.d_model, self.d_hidden
        a = FlatAllocator()
        a.size = start
        v: _MLPViews = {"W1": flat[a.reserve(d * dh):a.size].reshape(d, dh),
             "W2": flat[a.reserve(dh * d):a.size].reshape(dh, d),
             "b1": None, "b2": None}
        if self.bias:
            v["b1"] = flat[a.reserve(dh):a.size]
            v["b2"] = flat[a.reserve(d):a.size]
        return v

    def _buffers(self, nb: int, t: int, tk: int, cross: bool,
                 store: bool) -> tuple[_Buffers, int]:
        threads = threads_for(self._macs(nb, t, tk))
        key = (nb, t, tk, cross, store, threads)

        def make() -> _Buffers:
            sizes = (self.n_layers, nb * t, self.d_model, self.d_hidden, store)
            check_size(nbytes_of(self.dtype, _Buffers.elements(*sizes)),
                       f"a {self.n_layers}-layer transformer over batch={nb}, T={t}")
            return _Buffers(*sizes[:4], self.dtype, store)

        return self._bufs.get(key, store, make), threads

    def _macs(self, nb: int, t: int, tk: int) -> float:
        """Forward multiply-adds (the thread policy's measure): projections, MLP,
        scores and values of every layer."""
        d = self.d_model
        return nb * t * self.n_layers * (4.0 * d * d + 2.0 * d * self.d_hidden + 2.0 * tk * d)

    def _run_threads(self, threads: int, nb: int, t: int, tk: int) -> int:
        """threads when some kernel of a pass starts an OpenMP region (MLP from
        rows*d_hidden >= 16384, attention as MultiHeadAttention._goes_parallel), else 1."""
        if nb * t * self.d_hidden >= 16384 or self.attn[0]._goes_parallel(nb, t, tk):
            return threads
        return 1

    def _stack(self, bufs: _Buffers, nb: int, t: int, tk: int, cross: bool, grad: bool,
               threads: int, mask: npt.NDArray[np.uint8] | None) -> _Compiled:
        """The compiled blocks over bufs (built on first use, then kept on bufs): no
        norm, no dropout, every layer's attention over the same context when cross."""
        paths = tuple(a._path(t, tk, grad) for a in self.attn)
        key = (mask is not None, paths, _attnargs.block_sizes() if "blocked" in paths else None)
        got = bufs.stacks.get(key)
        if got is not None:
            return got
        if grad:
            bufs.for_backward()
        attention, weights, acts, lasts = [], [], [], []
        for i, att in enumerate(self.attn):
            ops, last = _block_operands.attention(att, nb, t, tk, grad, threads, mask,
                                                  bufs.hs[i], bufs.ctx if cross else None)
            attention.append(ops)
            lasts.append(last)
            weights.append(_block_operands.weights(self.params, self.grads, f"layers.{i}.",
                                                   False))
            acts.append(BlockActivations(
                h=bufs.hs[i], h_out=bufs.hs[i + 1], zt=bufs.zt[i], u1=None, u2=None, st1=None,
                st2=None, hid=bufs.hid[i], s=bufs.s[i], sg=bufs.sg[i] if grad else None,
                m1=None, m2=None))
        scratch = (StackScratch(branch=None, dcur=bufs.dcur, dbr=None, db=None, dzt=bufs.dzt,
                                dhid=bufs.dhid, part=None) if grad else
                   StackScratch(None, None, None, None, None, None, None))
        # nth: no elementwise pass runs without norm and dropout
        stack = BlockStack(attention, weights, acts, scratch, False, False, grad, 1, threads)
        got = bufs.stacks[key] = _Compiled(stack, lasts)
        return got

    # ---- public API ----------------------------------------------------
    def forward(self, x: npt.ArrayLike, context: npt.ArrayLike | None = None,
                key_padding_mask: npt.ArrayLike | None = None, *, grad: bool = True,
                out: FloatArray | None = None) -> FloatArray:
        """Y (B, T, d_model) for x (B, T, d_model); options as MultiHeadAttention.forward.

        With context (B, Tk, d_model), every layer's attention takes its keys and
        values from context (cross-attention); key_padding_mask (B, Tk) masks keys.
        """
        d = self.d_model
        x = as_input("x", x, d)
        check_params(self.params)
        nb, t = x.shape[:2]
        ctx = None if context is None else as_input("context", context, d, batch=nb)
        cross = ctx is not None
        tk = ctx.shape[1] if ctx is not None else t
        mask: AnyArray | None = (None if key_padding_mask is None
                                 else as_mask(key_padding_mask, nb, tk))
        y = self.attn[0]._out("out", out, (nb, t, d))
        bufs, threads = self._buffers(nb, t, tk, cross, grad)
        if grad:  # the buffers below may be the last forward's: it can no longer be backed
            self._last = None
        rows = nb * t
        x_in: FloatArray | None = None
        if grad:  # backward needs the input as it was, whatever the caller does next
            cast_into("x", bufs.hs[0], x.reshape(rows, d))
        else:     # inference reads it in place when its dtype and layout allow
            x_in = as_dtype("x", x, self.dtype).reshape(rows, d)
        if ctx is not None:
            bufs.ctx = _copy_rows(bufs.ctx, ctx, self.dtype, "context")
        if mask is not None:
            if bufs.mask is None:
                bufs.mask = np.empty((nb, tk), dtype=np.uint8)
            np.copyto(bufs.mask, mask)
        comp = self._stack(bufs, nb, t, tk, cross, grad, threads,
                           None if mask is None else bufs.mask)
        with blas_single(self._run_threads(threads, nb, t, tk), self._macs(nb, t, tk)):
            # the last block writes straight into y
            comp.stack.forward(x=x_in, y=y.reshape(rows, d))
        if grad:  # inference leaves the last training forward's state alone (thread safety)
            for att, last in zip(self.attn, comp.lasts):
                att._last = last
            self._last = _Last(nb, t, tk, cross, bufs, threads, comp.stack)
        return y

    __call__ = forward

    def backward(
        self, dy: npt.ArrayLike, *,
        out: FloatArray | tuple[FloatArray | None, FloatArray | None] | None = None,
    ) -> FloatArray | tuple[FloatArray | None, FloatArray | None] | None:
        """Fill `grads` from dL/dY; return dL/dX (or (dL/dX, dL/dcontext)), None for
        dL/dX when input_grad is False."""
        if self._last is None:
            raise RuntimeError("backward needs a forward with grad=True first")
        nb, t, tk, cross, bufs, threads, stack = self._last   # the forward's thread count
        d, rows = self.d_model, nb * t
        dy = as_input("dy", dy, d, batch=nb, length=t)
        dy = as_dtype("dy", dy, self.dtype).reshape(rows, d)
        outs = out if (cross and out is not None) else (out, None)
        att0 = self.attn[0]
        dx = att0._out("out", outs[0], (nb, t, d)) if self.input_grad else None
        dctx = att0._out("out", outs[1], (nb, tk, d)) if cross else None
        with blas_single(self._run_threads(threads, nb, t, tk), self._macs(nb, t, tk)):
            # dL/dX of the first block straight into dx (not computed without it)
            stack.backward(dy=dy, dx=None if dx is None else dx.reshape(rows, d),
                           dctx=None if dctx is None else dctx.reshape(nb * tk, d),
                           input_grad=dx is not None)
        return (dx, dctx) if cross else dx

    def __repr__(self) -> str:
        opts = [f"{k}=True" for k in ("causal", "bias", "rope") if getattr(self, k)]
        return (f"Transformer(d_model={self.d_model}, n_heads={self.n_heads}, "
                f"n_layers={self.n_layers}, d_hidden={self.d_hidden}"
                + "".join(", " + o for o in opts) + f", dtype={self.dtype.name})")


def _ordered(views: Mapping[str, FloatArray], n_layers: int) -> dict[str, FloatArray]:
    order = ("Wq", "Wk", "Wv", "Wo", "W1", "W2", "bq", "bk", "bv", "bo", "b1", "b2")
    return {f"layers.{i}.{k}": views[f"layers.{i}.{k}"]
            for i in range(n_layers) for k in order if f"layers.{i}.{k}" in views}
