"""Multi-head attention layer: weights, workspaces and the calls into the kernels."""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..kernels import _attnargs
from ..runtime._threads import blas_single, threads_for
from ..runtime._params import FlatAllocator, ParamDict, check_dtype, check_positive_int, rebuild_model
from ..runtime._validate import as_dtype, as_input, as_mask, check_params, out_array
from ._attention_workspace import _copy_rows, _Workspace
from ._positions import rope_tables as rope_tables
from ..runtime._workspace import WorkspaceCache, check_size, nbytes_of

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import TypedDict

    import numpy.typing as npt

    from ..runtime._typing import AnyArray, FloatArray, RandomStateLike

    _U8Array = npt.NDArray[np.uint8]

    class _Views(TypedDict):
        """A layer's weights (or gradients) as the kernels take them."""
        qkv: FloatArray            # (d_model, 3 d_model) = [Wq | Wk | Wv]
        o: FloatArray              # (d_model, d_model)
        bqkv: FloatArray | None    # (3 d_model,), None without bias
        bo: FloatArray | None      # (d_model,), None without bias

_NAMES_W = ("Wq", "Wk", "Wv", "Wo")
_NAMES_B = ("bq", "bk", "bv", "bo")


def _index(name: str, i: object, n: int) -> int:
    """i as an index in [0, n) (negative ones count from the end); ValueError naming
    `name` otherwise."""
    if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not -n <= i < n:
        raise ValueError(f"{name} must be an int in [0, {n}), got {i!r}")
    return int(i) % n


class _Last(NamedTuple):
    """What backward needs from the last training forward."""

    x2: FloatArray               # the input rows (nb * tq, d)
    ctx2: FloatArray | None      # the context rows of cross-attention
    nb: int
    tq: int
    tk: int
    ws: _Workspace
    threads: int                 # the forward's thread count
    rope_cos: FloatArray | None
    rope_sin: FloatArray | None
    mask: AnyArray | None        # the key padding mask (uint8)


# attention="auto" takes the fused kernels where they measured faster than dense (the rule:
# _path; the numbers: benchmarks/results/constants.md)
FUSED_MIN_SCORES = 128 * 128
FUSED_INFER_MIN_SCORES = 64 * 64
FUSED_MAX_D_HEAD = 32
FUSED_ALWAYS_D_HEAD = 8
# OpenBLAS cores (threadpoolctl's "architecture") with small-matrix GEMM kernels
_SMALL_GEMM_CORES = frozenset({"skylakex", "cooperlake", "sapphirerapids"})


@functools.lru_cache(maxsize=1)
def _blas_small_gemm() -> bool:
    """Whether scipy's OpenBLAS runs kernels with a small-matrix path (False when
    it cannot be told: the fused path is then preferred for small heads)."""
    from ..runtime._threads import controller
    try:
        libs = [i for i in controller().info() if i.get("internal_api") == "openblas"]
    except (OSError, RuntimeError, AttributeError, ValueError):
        return False  # threadpoolctl could not inspect this process's libraries
    # controller() holds scipy's BLAS when it could be told apart, else every BLAS
    return bool(libs) and all(str(i.get("architecture")).lower() in _SMALL_GEMM_CORES
                              for i in libs)


class MultiHeadAttention:
    """Multi-head scaled dot-product attention with hand-written backward.

    Y = concat_h(softmax(Q_h K_h^T / sqrt(d_head) + mask) V_h) Wo (+ bo), with
    Q = X Wq (+ bq), K = C Wk (+ bk), V = C Wv (+ bv); C = X for self-attention,
    or the `context` given to forward for cross-attention.

    Parameters
    ----------
    d_model : int, width of the input and output features.
    n_heads : int, dividing d_model; d_head = d_model // n_heads.
    causal : bool, query i attends to keys j <= i only.
    bias : bool, add bq, bk, bv, bo.
    rope : bool, rotary position embedding on Q and K (pairs (2i, 2i+1) rotated
        by t * 10000^(-2i/d_head)); needs an even d_head.
    dtype : float32 or float64.
    random_state : seed for numpy.random.default_rng; weights are uniform in
        +-1/sqrt(d_model), biases start at zero.
    input_grad : bool, whether backward computes dL/dX (else it returns None).
    attention : "auto" (default), "dense", "blocked" or "fused". Dense keeps the
        (B, heads, Tq, Tk) probabilities for backward; blocked streams key blocks
        with an online softmax and keeps only a log-sum-exp per row (memory linear
        in T, probabilities recomputed in backward). Fused is blocked attention
        in register-tiled C kernels (no per-head BLAS call, no (Tq, Tk) block
        in memory). Auto picks fused from Tq * Tk = FUSED_MIN_SCORES (128 x 128;
        FUSED_INFER_MIN_SCORES = 64 x 64 for a forward with grad=False) at any
        d_head, and for small heads at any length where measured faster (see
        _path), else dense. All give the same results
        to rounding.

    Weights are laid out so that Y = X @ W: Wq, Wk, Wv, Wo are (d_model, d_model).
    `params` and `grads` map names to live views of the layer's storage.
    """

    #: estimators score validation data with forward(grad=True): the training
    #: workspace and kernels, so that the loss is the one training computes
    validation_grad = True
    _rope: dict[int, tuple[FloatArray, FloatArray]]
    _last: _Last | None

    def __init__(self, d_model: int, n_heads: int, *, causal: bool = False,
                 bias: bool = False, rope: bool = False, dtype: npt.DTypeLike = np.float32,
                 random_state: RandomStateLike = None, input_grad: bool = True,
                 attention: str = "auto",
                 _storage: tuple[FloatArray, FloatArray, int] | None = None) -> None:
        d = check_positive_int("d_model", d_model)
        h = check_positive_int("n_heads", n_heads)
        if d % h:
            raise ValueError(f"n_heads must divide d_model, got d_model={d}, n_heads={h}")
        if rope and (d // h) % 2:
            raise ValueError(f"rope needs an even d_head = d_model // n_heads, got {d // h}")
        self.d_model, self.n_heads, self.d_head = d, h, d // h
        self.causal, self.bias, self.rope = bool(causal), bool(bias), bool(rope)
        self.dtype = check_dtype(dtype)
        self.input_grad = bool(input_grad)
        if attention not in ("auto", "dense", "blocked", "fused"):
            raise ValueError("attention must be 'auto', 'dense', 'blocked' or 'fused', "
                             f"got {attention!r}")
        self.attention = attention

        if _storage is None:
            n = self.n_params(d, bias)
            _storage = (np.zeros(n, self.dtype), np.zeros(n, self.dtype), 0)
        theta, grad, start = _storage
        self._start = start  # where this layer's weights begin in the flat buffers
        self._w = self._views(theta, start)
        self._g = self._views(grad, start)
        self.params = ParamDict(theta, self._named(self._w))
        self.grads = ParamDict(grad, self._named(self._g))
        self.init_weights(random_state)

        self._ws = WorkspaceCache()
        self._rope = {}
        self._last = None  # what backward needs from the last forward

    # ---- storage -------------------------------------------------------
    @staticmethod
    def n_params(d_model: int, bias: bool) -> int:
        """Number of parameters of a layer with this width."""
        d = d_model
        return 4 * d * d + (4 * d if bias else 0)

    def output_shape(self, batch: int, seq_len: int) -> tuple[int, ...]:
        """Shape of forward's output for x of shape (batch, seq_len, d_model)."""
        return (batch, seq_len, self.d_model)

    @classmethod
    def config_n_params(cls, config: Mapping[str, Any]) -> int:
        """Number of parameters of the layer get_config() describes (before building it)."""
        return cls.n_params(int(config["d_model"]), bool(config["bias"]))

    def get_config(self) -> dict[str, Any]:
        """The constructor arguments (without random_state and input_grad) that
        rebuild this layer."""
        return dict(d_model=self.d_model, n_heads=self.n_heads, causal=self.causal,
                    bias=self.bias, rope=self.rope, dtype=self.dtype.name,
                    attention=self.attention)

    def __reduce__(self) -> tuple[Callable[..., MultiHeadAttention], tuple[Any, ...]]:
        # the configuration, a copy of the weights and input_grad (a layer inside a
        # Transformer or SequenceModel pickles as a layer of its own)
        start = self._start
        own = self.params.flat[start:start + self.n_params(self.d_model, self.bias)].copy()
        return (rebuild_model, (type(self), self.get_config(), own, self.input_grad))

    def _views(self, flat: FloatArray, start: int) -> _Views:
        d = self.d_model
        alloc = FlatAllocator()
        alloc.size = start
        qkv = flat[alloc.reserve(3 * d * d):alloc.size].reshape(d, 3 * d)
        wo = flat[alloc.reserve(d * d):alloc.size].reshape(d, d)
        bqkv = bo = None
        if self.bias:
            bqkv = flat[alloc.reserve(3 * d):alloc.size]
            bo = flat[alloc.reserve(d):alloc.size]
        return {"qkv": qkv, "o": wo, "bqkv": bqkv, "bo": bo}

    def _named(self, v: _Views) -> dict[str, FloatArray]:
        d = self.d_model
        out = {"Wq": v["qkv"][:, :d], "Wk": v["qkv"][:, d:2 * d],
               "Wv": v["qkv"][:, 2 * d:], "Wo": v["o"]}
        bqkv, bo = v["bqkv"], v["bo"]
        if bqkv is not None and bo is not None:  # bias
            out.update(bq=bqkv[:d], bk=bqkv[d:2 * d], bv=bqkv[2 * d:], bo=bo)
        return out

    def init_weights(self, random_state: RandomStateLike = None) -> None:
        """Re-draw weights uniform in +-1/sqrt(d_model); zero the biases."""
        rng = np.random.default_rng(random_state)
        lim = 1.0 / np.sqrt(self.d_model)
        for name in _NAMES_W:
            w = self.params[name]
            w[...] = rng.uniform(-lim, lim, size=w.shape)
        if self.bias:
            for name in _NAMES_B:
                self.params[name][...] = 0

    # ---- workspaces ----------------------------------------------------
    def _path(self, tq: int, tk: int, store: bool = True) -> str:
        """'dense', 'blocked' or 'fused' for this shape (see `attention`); store:
        a forward that keeps what backward needs (False: inference)."""
        if self.attention != "auto":
            return self.attention
        if tq * tk >= (FUSED_MIN_SCORES if store else FUSED_INFER_MIN_SCORES):
            return "fused"
        if self.d_head <= FUSED_MAX_D_HEAD and (
                not _blas_small_gemm() or self.dtype == np.float64
                or self.d_head <= FUSED_ALWAYS_D_HEAD):
            return "fused"
        return "dense"

    def _use_blocked(self, tq: int, tk: int) -> bool:
        return self._path(tq, tk) == "blocked"

    def _workspace(self, nb: int, tq: int, tk: int, cross: bool, store: bool,
                   threads: int | None = None) -> tuple[_Workspace, int]:
        if threads is None:
            threads = threads_for(self._macs(nb, tq, tk))
        path = self._path(tq, tk, store)
        # the blocked scratch is sized by the block sizes: they are part of the key
        key = (nb, tq, tk, cross, store, path, threads,
               _attnargs.block_sizes() if path == "blocked" else None)

        def make() -> _Workspace:
            # sizes are checked once per key (BLAS int limits, before allocating); the
            # shape's size table sizes the buffers and this estimate alike
            _attnargs.check_sizes(nb, tq, tk, self.d_model)
            shape = _attnargs.AttnShape(path, nb, tq, tk, self.d_model, self.n_heads, cross,
                                        self.causal, store, threads, self.dtype)
            check_size(nbytes_of(self.dtype, shape.elements()),
                       f"attention over batch={nb}, Tq={tq}, Tk={tk}")
            w, g = self._w, self._g
            params = _attnargs.AttnParams(w["qkv"], w["o"], w["bqkv"], w["bo"], g["qkv"],
                                          g["o"], g["bqkv"], g["bo"])
            return _Workspace(shape, params,
                              self._goes_parallel(nb, tq, tk))

        return self._ws.get(key, store, make), threads

    def _macs(self, nb: int, tq: int, tk: int) -> float:
        """Forward multiply-adds at these sizes (the thread policy's measure): the
        query and output projections, the key and value ones, scores and values."""
        d = self.d_model
        return nb * (tq * 2.0 * d * d + tk * 2.0 * d * d + 2.0 * tq * tk * d)

    def _goes_parallel(self, nb: int, tq: int, tk: int) -> bool:
        """Whether a kernel call at these sizes starts any OpenMP region (the kernels'
        own work thresholds: heads loop nb*H*Tq*Tk*d_head >= 1e5, split GEMMs
        m*n*k >= 2e5; the blocked path always). Smaller calls run with one thread and
        leave BLAS alone, so they do not pay for the BLAS guard."""
        d = self.d_model
        return (self._use_blocked(tq, tk) or nb * tq * tk * d >= 1e5
                or 3.0 * nb * max(tq, tk) * d * d >= 2e5)

    def _rope_tables(self, t_len: int) -> tuple[FloatArray, FloatArray]:
        tab = self._rope.get(t_len)
        if tab is None:
            self._rope = {t_len: rope_tables(t_len, self.d_head, self.dtype)}
            tab = self._rope[t_len]
        return tab

    # ---- forward / backward on internal buffers ------------------------
    def _forward_buffers(self, x2: FloatArray, ctx2: FloatArray | None, mask: AnyArray | None,
                         y2: FloatArray, nb: int, store: bool, ws: _Workspace, threads: int,
                         residual: FloatArray | None = None) -> None:
        """Run the forward kernel on 2-D row buffers owned by attnx (or the caller of
        this private method); remember what backward needs when store. The
        buffers must stay unchanged until backward."""
        tq = x2.shape[0] // nb
        tk = ctx2.shape[0] // nb if ctx2 is not None else tq
        rc = rs = None
        if self.rope:
            rc, rs = self._rope_tables(max(tq, tk))
        run = threads if ws.parallel else 1
        with blas_single(run, self._macs(nb, tq, tk)):
            ws.kernels.attention_forward(ws.shape, ws.bufs, ws.params, x2, ctx2, mask,
                                         None if rc is None else (rc, rs), residual, y2, run)
        if store:  # inference leaves the last training forward's state alone (thread safety)
            self._last = _Last(x2, ctx2, nb, tq, tk, ws, threads, rc, rs, mask)

    def _backward_buffers(self, dy2: FloatArray, dx2: FloatArray | None,
                          dctx2: FloatArray | None, dx_accumulate: bool = False,
                          dctx_accumulate: bool = False) -> None:
        if self._last is None:
            raise RuntimeError("backward needs a forward with grad=True first")
        x2, ctx2, nb, tq, tk, ws, threads, rc, rs, mask = self._last
        # backward runs with the forward's thread count: its scratch is sized for it
        ws.for_backward(threads)
        run = threads if ws.parallel else 1
        with blas_single(run, self._macs(nb, tq, tk)):
            ws.kernels.attention_backward(
                ws.shape, ws.bufs, ws.params, x2, ctx2, mask, None if rc is None else (rc, rs),
                dy2, dx2, dctx2, (_attnargs.ACCUMULATE_DX if dx_accumulate else 0)
                | (_attnargs.ACCUMULATE_DCTX if dctx_accumulate else 0), run)

    # ---- public API ----------------------------------------------------
    def forward(self, x: npt.ArrayLike, context: npt.ArrayLike | None = None,
                key_padding_mask: npt.ArrayLike | None = None, *, grad: bool = True,
                out: FloatArray | None = None) -> FloatArray:
        """Y for x of shape (B, Tq, d_model); returns an array (B, Tq, d_model).

        context: (B, Tk, d_model) keys/values for cross-attention (None: x).
        key_padding_mask: (B, Tk) bool, True = that key is ignored for that sample;
            a query row with every key ignored outputs zeros (plus bo).
        grad: keep what backward needs (False for inference: less memory).
        out: optional C-contiguous array (B, Tq, d_model) of the layer's dtype to
            write Y into, so that a training step allocates nothing.
        """
        x = as_input("x", x, self.d_model)
        check_params(self.params)
        nb, tq = x.shape[0], x.shape[1]
        ctx = None if context is None else as_input("context", context, self.d_model, batch=nb)
        cross = ctx is not None
        tk = ctx.shape[1] if ctx is not None else tq
        mask: AnyArray | None = (None if key_padding_mask is None
                                 else as_mask(key_padding_mask, nb, tk))
        y = self._out("out", out, (nb, tq, self.d_model))
        ws, threads = self._workspace(nb, tq, tk, cross, grad)
        if grad:  # the buffers below may be the last forward's: it can no longer be backed
            self._last = None
        if grad:
            # copies: backward needs the inputs as they were, whatever the caller does next
            x2 = ws.x = _copy_rows(ws.x, x, self.dtype)
            ctx2 = ws.ctx = (None if ctx is None
                             else _copy_rows(ws.ctx, ctx, self.dtype, "context"))
        else:  # inference reads the inputs in place when their dtype and layout allow
            x2 = as_dtype("x", x, self.dtype).reshape(nb * tq, self.d_model)
            ctx2 = (None if ctx is None else
                    as_dtype("context", ctx, self.dtype).reshape(nb * tk, self.d_model))
        if mask is not None:
            np.copyto(ws.mask, mask)
            mask = ws.mask
        self._forward_buffers(x2, ctx2, mask, y.reshape(nb * tq, self.d_model),
                              nb, grad, ws, threads)
        return y

    __call__ = forward

    def backward(
        self, dy: npt.ArrayLike, *,
        out: FloatArray | tuple[FloatArray | None, FloatArray | None] | None = None,
    ) -> FloatArray | tuple[FloatArray | None, FloatArray | None] | None:
        """Fill `grads` from dL/dY (B, Tq, d_model) of the last forward.

        Returns dL/dX (B, Tq, d_model), or (dL/dX, dL/dcontext) after a
        cross-attention forward; None in place of dL/dX when input_grad is False.
        `out` (or a pair for cross-attention) receives dL/dX without allocating.
        """
        if self._last is None:
            raise RuntimeError("backward needs a forward with grad=True first")
        last = self._last
        x2, ctx2, nb, tq, tk = last.x2, last.ctx2, last.nb, last.tq, last.tk
        d = self.d_model
        dy = as_input("dy", dy, d, batch=nb, length=tq)
        dy = as_dtype("dy", dy, self.dtype)
        cross = ctx2 is not None
        outs = out if (cross and out is not None) else (out, None)
        dx = self._out("out", outs[0], (nb, tq, d)) if self.input_grad else None
        dctx = self._out("out", outs[1], (nb, tk, d)) if cross else None
        self._backward_buffers(
            dy.reshape(nb * tq, d),
            None if dx is None else dx.reshape(nb * tq, d),
            None if dctx is None else dctx.reshape(nb * tk, d))
        return (dx, dctx) if cross else dx

    def _out(self, name: str, out: object, shape: tuple[int, ...]) -> FloatArray:
        return out_array(name, out, shape, self.dtype)

    def attention_weights(self, sample: int | None = None,
                          head: int | None = None) -> FloatArray:
        """Attention probabilities of the last forward pass (with grad=True).

        All of them as (B, n_heads, Tq, Tk), or one sample (n_heads, Tq, Tk), one
        head (B, Tq, Tk) or one (Tq, Tk) map when sample and/or head are given.
        The dense path keeps the probabilities for backward anyway; the blocked
        path recomputes just the requested ones from the kept (rotated) Q and K.
        Either way nothing is spent until this is called.
        """
        if self._last is None:
            raise RuntimeError("no attention weights kept: call forward(x) with grad=True first")
        last = self._last
        nb, tq, tk, ws, mask = last.nb, last.tq, last.tk, last.ws, last.mask
        h_all = self.n_heads
        samples = range(nb) if sample is None else [_index("sample", sample, nb)]
        heads = range(h_all) if head is None else [_index("head", head, h_all)]
        out = np.empty((len(samples), len(heads), tq, tk), dtype=self.dtype)
        for i, b in enumerate(samples):
            for j, h in enumerate(heads):
                if ws.keeps_probs:
                    out[i, j] = ws.probs[(b * h_all + h) * tq * tk:(b * h_all + h + 1) * tq * tk
                                         ].reshape(tq, tk)
                else:
                    out[i, j] = self._recompute_probs(ws, b, h, tq, tk, mask)
        if head is not None:
            out = out[:, 0]
        if sample is not None:
            out = out[0]
        return out

    def _recompute_probs(self, ws: _Workspace, b: int, h: int, tq: int, tk: int,
                         mask: AnyArray | None) -> FloatArray:
        """softmax(scale Q_h K_h^T + mask) for one sample and head from the kept Q and K
        (blocked path), in float64 with the row max subtracted."""
        d, dh = self.d_model, self.d_head
        q = ws.q[b * tq:(b + 1) * tq, h * dh:(h + 1) * dh].astype(np.float64)
        if ws.kv is None:
            k = ws.q[b * tk:(b + 1) * tk, d + h * dh:d + (h + 1) * dh]
        else:
            k = ws.kv[b * tk:(b + 1) * tk, h * dh:(h + 1) * dh]
        s = q @ k.T.astype(np.float64) / np.sqrt(dh)
        allowed = np.ones((tq, tk), dtype=bool)
        if self.causal:
            allowed &= np.tri(tq, tk, dtype=bool)
        if mask is not None:
            allowed &= ~mask[b].astype(bool)[None, :]
        s = np.where(allowed, s, -np.inf)
        mx = s.max(axis=1, keepdims=True)
        mx[~np.isfinite(mx)] = 0.0
        e = np.exp(s - mx)
        den = e.sum(axis=1, keepdims=True)
        probs: FloatArray = np.divide(e, den, out=np.zeros_like(e), where=den > 0)
        return probs

    # ---- PyTorch weight exchange (attnx.layers._torch_layout) -----------------
    def torch_state_dict(self) -> dict[str, AnyArray]:
        """Weights as a torch.nn.MultiheadAttention(d_model, n_heads, bias=bias,
        batch_first=True) state dict of NumPy arrays (copies): in_proj_weight
        (3 d_model, d_model) = [Wq^T; Wk^T; Wv^T], out_proj.weight = Wo^T, and with
        bias in_proj_bias, out_proj.bias. Convert with torch.from_numpy for
        module.load_state_dict. (torch's layer has no rope; causal is its attn_mask.)"""
        from ._torch_layout import attention_to_torch

        return attention_to_torch(self.params, self.d_model, self.bias)

    def load_torch_state_dict(self, state_dict: Any) -> MultiHeadAttention:
        """Set the weights from a torch.nn.MultiheadAttention(d_model, n_heads,
        bias=bias, batch_first=True) state dict (torch tensors or NumPy arrays);
        the keys and shapes must match exactly. All or nothing. Returns self."""
        from ._torch_layout import (as_arrays, attention_from_torch, attention_torch_shapes,
                                    check_and_assign)

        sd = as_arrays(state_dict, attention_torch_shapes(self.d_model, self.bias),
                       f"torch.nn.MultiheadAttention({self.d_model}, {self.n_heads}, "
                       f"bias={self.bias})")
        check_and_assign(self.params, attention_from_torch(sd, self.d_model, self.bias))
        return self

    def __repr__(self) -> str:
        opts = [f"{k}=True" for k in ("causal", "bias", "rope") if getattr(self, k)]
        return (f"MultiHeadAttention(d_model={self.d_model}, n_heads={self.n_heads}"
                + "".join(", " + o for o in opts) + f", dtype={self.dtype.name})")
