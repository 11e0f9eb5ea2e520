"""The layers of an attnx model as ONNX nodes (attnx.io.onnx): attention with its heads,
masks and rotary positions, the SiLU MLP and residuals, a SequenceModel's instance
normalisation, stem, class token, pre-norm blocks and pooling."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..layers._instance_norm import KERNEL as _REVIN
from ._onnx_graph import _Graph, _interleave, _tensor_attr
from ..layers.sequence import SequenceModel
from ..layers.stages import (Block, ClassToken, Embedding, FinalNorm, Head, InstanceNorm,
                             Pooling, Positions, StemLayer)
from ..layers.transformer import Transformer


def _attention(g: _Graph, att: Any, params: Any, p: str, x: str, mask: str | None) -> str:
    """Multi-head self-attention of x (B, T, d): heads by Reshape/Transpose, masks as
    a `disallowed` (B|1, 1, T, T) boolean, fully masked rows give zeros."""
    d, h, dh = att.d_model, att.n_heads, att.d_head

    def proj(name: str, bias: str) -> str:
        y = g.op("MatMul", [x, g.const(params[p + name])])
        if att.bias:
            y = g.op("Add", [y, g.const(params[p + bias])])
        # (B, T, d) -> (B, T, h, dh) -> (B, h, T, dh)
        y = g.op("Reshape", [y, g.const_i64([0, 0, h, dh])])
        return g.op("Transpose", [y], perm=[0, 2, 1, 3])

    q, k, v = proj("Wq", "bq"), proj("Wk", "bk"), proj("Wv", "bv")
    if att.rope:
        cos, sin = g.rope_tables(x, dh)
        q, k = _rotate(g, q, cos, sin, dh), _rotate(g, k, cos, sin, dh)
    s = g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])])
    s = g.op("Mul", [s, g.scalar(1.0 / np.sqrt(dh))])
    disallowed = None
    if att.causal:
        disallowed = g.causal(x)                                   # (T, T)
    if mask is not None:
        pad = g.op("Unsqueeze", [mask, g.const_i64([1, 2])])       # (B, 1, 1, T)
        disallowed = pad if disallowed is None else g.op("Or", [disallowed, pad])
    if disallowed is not None:
        s = g.op("Where", [disallowed, g.scalar(float(np.finfo(g.dtype).min)), s])
    prob = g.op("Softmax", [s], axis=-1)
    if mask is not None and disallowed is not None:
        # a row with every key masked: softmax is uniform there, make it 0
        prob = g.op("Where", [disallowed, g.scalar(0.0), prob])
    z = g.op("MatMul", [prob, v])                                  # (B, h, T, dh)
    z = g.op("Transpose", [z], perm=[0, 2, 1, 3])
    z = g.op("Reshape", [z, g.const_i64([0, 0, d])])
    y = g.op("MatMul", [z, g.const(params[p + "Wo"])])
    if att.bias:
        y = g.op("Add", [y, g.const(params[p + "bo"])])
    return y


def _rotate(g: _Graph, t: str, cos: str, sin: str, dh: int) -> str:
    """Rotate pairs (2i, 2i+1) of t (B, h, T, dh) by the angles of cos/sin (T, dh/2)."""
    a = g.op("Slice", [t, g.const_i64([0]), g.const_i64([dh]), g.const_i64([3]),
                       g.const_i64([2])])
    b = g.op("Slice", [t, g.const_i64([1]), g.const_i64([dh]), g.const_i64([3]),
                       g.const_i64([2])])
    even = g.op("Sub", [g.op("Mul", [a, cos]), g.op("Mul", [b, sin])])
    odd = g.op("Add", [g.op("Mul", [a, sin]), g.op("Mul", [b, cos])])
    both = g.op("Concat", [even, odd], axis=3)         # [even..., odd...]
    return g.op("Gather", [both, g.const_i64(_interleave(dh // 2, dh // 2))], axis=3)


def _mlp(g: _Graph, params: Any, p: str, bias: bool, u: str) -> str:
    hid = g.op("MatMul", [u, g.const(params[p + "W1"])])
    if bias:
        hid = g.op("Add", [hid, g.const(params[p + "b1"])])
    act = g.op("Mul", [hid, g.op("Sigmoid", [hid])])              # SiLU
    y = g.op("MatMul", [act, g.const(params[p + "W2"])])
    if bias:
        y = g.op("Add", [y, g.const(params[p + "b2"])])
    return y


def _block(g: _Graph, params: Any, p: str, att: Any, h: str, mask: str | None,
           pre: bool) -> str:
    """One transformer block: post-residual (Transformer) or pre-norm (SequenceModel)."""
    if pre:
        u1 = g.layernorm(h, params[p + "ln1.g"], params[p + "ln1.b"])
        zt = g.op("Add", [_attention(g, att, params, p, u1, mask), h])
        u2 = g.layernorm(zt, params[p + "ln2.g"], params[p + "ln2.b"])
    else:
        zt = g.op("Add", [_attention(g, att, params, p, h, mask), h])
        u2 = zt
    return g.op("Add", [_mlp(g, params, p, att.bias, u2), zt])


def _sequence(g: _Graph, m: Any, x: str, mask: str | None) -> str:
    """A SequenceModel's graph, stage by stage from its list of stages (m.stages,
    attnx.layers.stages), walked by type: the stages the compiled pass runs, in its
    order, then RevIN's de-normalisation."""
    stats = None
    h = x
    for st in m.stages:
        if isinstance(st, InstanceNorm):
            h, stats = _instance_norm(g, st, h, mask)
        elif isinstance(st, StemLayer):
            h, mask = _stem_layer(g, st.w, st.kernel, st.stride, h, mask)
        elif isinstance(st, Embedding):
            x = h   # the embedding's input: the positions read its length
            h = g.op("Add", [g.op("MatMul", [h, g.const(st.w["W"])]), g.const(st.w["b"])])
        elif isinstance(st, Positions) and st.how == "sinusoidal":
            table = g.sinusoidal(x, m.d_model)
            if st.position_scale != 1.0:   # the table as the model scales it
                table = g.op("Mul", [table, g.const(np.array(st.position_scale, m.dtype))])
            h = g.op("Add", [h, table])
        elif isinstance(st, Positions):
            t = g.seq_len(x)
            table = g.op("Slice", [g.const(st.w["P"]), g.const_i64([0]), t, g.const_i64([0])])
            h = g.op("Add", [h, table])
        elif isinstance(st, ClassToken):
            h, mask = _class_token(g, st.w["cls"], h, mask)
        elif isinstance(st, Block):
            h = _block(g, st.w, "", st.attn, h, mask, st.pre)
        elif isinstance(st, FinalNorm):
            h = g.layernorm(h, st.w["g"], st.w["b"])
        elif isinstance(st, Pooling) and st.how == "cls":
            first = g.op("Gather", [h, g.const_i64([0])], axis=1)           # (B, 1, d)
            h = g.op("Squeeze", [first, g.const_i64([1])])
        elif isinstance(st, Pooling) and st.how == "max":
            h = _max_pool(g, h, mask)
        elif isinstance(st, Pooling):
            h = _pool(g, h, mask, st.how == "last")
        elif isinstance(st, Head):
            h = g.op("Add", [g.op("MatMul", [h, g.const(st.w["W"])]), g.const(st.w["b"])])
        else:
            raise TypeError(f"no ONNX export for the stage {st!r}")
    inorm = m.stages.instance_norm
    if inorm is not None and inorm.revin:
        assert stats is not None
        h = _denorm(g, inorm, h, *stats)
    if m.pooling is None and mask is not None:   # padded positions output zeros
        h = g.op("Where", [g.op("Unsqueeze", [mask, g.const_i64([2])]), g.scalar(0.0), h])
    return h


def _instance_norm(g: _Graph, st: InstanceNorm, x: str, mask: str | None
                   ) -> tuple[str, tuple[str, str]]:
    """x (B, T, F) read as the series (B, T * p, C) (p = the stage's steps), each centred
    on its mean over the valid steps and divided by sqrt(variance + eps), then the
    affine map; padded steps 0. Returns (B, T, F) and the (mean, std) (B, 1, C)."""
    p, c = st.steps, st.channels
    xs = g.op("Reshape", [x, g.const_i64([0, -1, c])])
    if mask is None:
        v = g.op("ConstantOfShape", [g.op("Shape", [xs], start=0, end=2)],
                 value=_tensor_attr(np.array([1.0], g.dtype)))            # (B, T*p)
    else:
        v = g.op("Cast", [g.op("Not", [mask])], to=g.onnx_dtype)         # (B, T)
        if p > 1:   # a padded row pads its p steps
            v = g.op("Expand", [g.op("Unsqueeze", [v, g.const_i64([2])]),
                                g.const_i64([1, 1, p])])
            v = g.op("Reshape", [v, g.const_i64([0, -1])])
    v = g.op("Unsqueeze", [v, g.const_i64([2])])                         # (B, T*p, 1)
    one = g.const_i64([1])
    cnt = g.op("Max", [g.op("ReduceSum", [v, one], keepdims=1), g.scalar(1.0)])
    mean = g.op("Div", [g.op("ReduceSum", [g.op("Mul", [xs, v]), one], keepdims=1), cnt])
    cen = g.op("Mul", [g.op("Sub", [xs, mean]), v])
    var = g.op("Div", [g.op("ReduceSum", [g.op("Mul", [cen, cen]), one], keepdims=1), cnt])
    std = g.op("Sqrt", [g.op("Add", [var, g.scalar(_REVIN.eps)])])         # (B, 1, C)
    xn = g.op("Div", [cen, std])
    if st.affine:
        xn = g.op("Mul", [g.op("Add", [g.op("Mul", [xn, g.const(st.w["g"])]),
                                       g.const(st.w["b"])]), v])
    return g.op("Reshape", [xn, g.op("Shape", [x])]), (mean, std)


def _denorm(g: _Graph, st: InstanceNorm, y: str, mean: str, std: str) -> str:
    """The outputs read as (B, -1, C) back in the series' units: y * std + mean,
    after (y - beta) / (gamma + eps2) with the affine map (RevIN's de-normalisation,
    the instance norm stage's)."""
    yc = g.op("Reshape", [y, g.const_i64([0, -1, st.channels])])
    if st.affine:
        gain = np.asarray(st.w["g"], np.float64) + _REVIN.eps2
        yc = g.op("Div", [g.op("Sub", [yc, g.const(st.w["b"])]),
                          g.const(gain.astype(g.dtype))])
    out = g.op("Add", [g.op("Mul", [yc, std]), mean])
    return g.op("Reshape", [out, g.op("Shape", [y])])


def _stem_layer(g: _Graph, w: Any, k: int, s: int, x: str, mask: str | None
                ) -> tuple[str, str | None]:
    """A stem layer (its weights w["W"], w["b"]) on x (B, T, C): padded steps zeroed,
    Conv (pads (k-1)//2 and k-1-(k-1)//2, stride s, weight[o, c, l] = W[l*C + c, o]),
    bias, x * Sigmoid(x); returns (B, N, d) and the tokens' padding mask: token n is padding when it lies
    past ceil(t_b / s) (t_b one past the last valid step) or reads no valid step, as
    attnx.kernels._embed.Windows.mask."""
    wi = np.asarray(w["W"])
    d = wi.shape[1]
    c = wi.shape[0] // k
    left = (k - 1) // 2
    conv: dict[str, Any] = dict(kernel_shape=[k], pads=[left, k - 1 - left], strides=[s])
    if mask is not None:
        valid = g.op("Cast", [g.op("Not", [mask])], to=g.onnx_dtype)            # (B, T)
        x = g.op("Mul", [x, g.op("Unsqueeze", [valid, g.const_i64([2])])])
    if g.dtype == np.float32:
        kernel = g.const(wi.reshape(k, c, d).transpose(2, 1, 0))
        z = g.op("Conv", [g.op("Transpose", [x], perm=[0, 2, 1]), kernel,
                          g.const(w["b"])], **conv)                    # (B, d, N)
        z = g.op("Transpose", [z], perm=[0, 2, 1])
    else:   # onnxruntime has no float64 Conv: the same windows as strided slices
        z = g.op("Add", [g.op("MatMul", [_windows(g, x, k, s, left), g.const(wi)]),
                         g.const(w["b"])])
    z = g.op("Mul", [z, g.op("Sigmoid", [z])])                                  # (B, N, d)
    if mask is None:
        return z, None
    # steps read per window: a float32 Conv of the valid indicator with a kernel of ones
    v32 = g.op("Cast", [g.op("Not", [mask])], to=1)
    ones = g.const(np.ones((1, 1, k)), np.float32)
    count = g.op("Conv", [g.op("Unsqueeze", [v32, g.const_i64([1])]), ones], **conv)
    reads = g.op("Greater", [g.op("Squeeze", [count, g.const_i64([1])]),
                             g.scalar(0.0, np.float32)])
    # t_b = max over steps of (t + 1) * valid; the first ceil(t_b / s) windows count
    pos = g.op("Add", [g.positions(x, g.dtype), g.scalar(1.0)])
    tb = g.op("ReduceMax", [g.op("Mul", [valid, pos])] + g.axes_input([1]), keepdims=1,
              **g.axes_attr([1]))                                                # (B, 1)
    n_b = g.op("Floor", [g.op("Div", [g.op("Add", [tb, g.scalar(s - 1.0)]), g.scalar(s)])])
    inside = g.op("Less", [g.positions(z, g.dtype), n_b])                        # (B, N)
    return z, g.op("Not", [g.op("And", [reads, inside])])


def _windows(g: _Graph, x: str, k: int, s: int, left: int) -> str:
    """(B, N, k*C) windows of x (B, T, C) zero-padded by (left, k-1-left), N = ceil(T/s):
    row n holds steps n*s + l - left for l = 0..k-1, channels fastest (Windows' rows)."""
    xp = g.op("Pad", [x, g.const_i64([0, left, 0, 0, k - 1 - left, 0])])
    t = g.seq_len(x)
    n = g.op("Div", [g.op("Add", [t, g.const_i64([s - 1])]), g.const_i64([s])])
    span = g.op("Add", [g.op("Mul", [g.op("Sub", [n, g.const_i64([1])]), g.const_i64([s])]),
                        g.const_i64([1])])          # s*(N-1)+1 steps from a window's start
    parts = [g.op("Slice", [xp, g.const_i64([l]), g.op("Add", [span, g.const_i64([l])]),
                            g.const_i64([1]), g.const_i64([s])]) for l in range(k)]
    return parts[0] if k == 1 else g.op("Concat", parts, axis=2)


def _class_token(g: _Graph, cls: Any, h: str, mask: str | None) -> tuple[str, str | None]:
    """The class token first: (B, N, d) -> (B, N+1, d); the mask gets a valid column."""
    d = int(np.asarray(cls).shape[0])
    batch = g.op("Shape", [h], start=0, end=1)
    tok = g.op("Expand", [g.const(np.asarray(cls).reshape(1, 1, d)),
                          g.op("Concat", [batch, g.const_i64([1, d])], axis=0)])
    h = g.op("Concat", [tok, h], axis=1)
    if mask is not None:
        col = g.op("ConstantOfShape", [g.op("Concat", [batch, g.const_i64([1])], axis=0)],
                   value=_tensor_attr(np.array([False])))
        mask = g.op("Concat", [col, mask], axis=1)
    return h, mask


def _max_pool(g: _Graph, h: str, mask: str | None) -> str:
    """(B, T, d) -> (B, d): per feature the maximum over the valid positions; zeros
    for a sequence without valid positions."""
    if mask is None:
        return g.op("ReduceMax", [h] + g.axes_input([1]), keepdims=0, **g.axes_attr([1]))
    pad = g.op("Unsqueeze", [mask, g.const_i64([2])])
    low = g.op("Where", [pad, g.scalar(float("-inf")), h])
    big = g.op("ReduceMax", [low] + g.axes_input([1]), keepdims=0, **g.axes_attr([1]))
    vf = g.op("Cast", [g.op("Not", [mask])], to=g.onnx_dtype)
    anyv = g.op("ReduceMax", [vf] + g.axes_input([1]), keepdims=1, **g.axes_attr([1]))
    return g.op("Where", [g.op("Greater", [anyv, g.scalar(0.0)]), big, g.scalar(0.0)])


def _pool(g: _Graph, h: str, mask: str | None, last: bool) -> str:
    """(B, T, d) -> (B, d): mean of the valid positions, or the last valid one; zeros
    for a sequence without valid positions."""
    if mask is None:
        valid = g.op("ConstantOfShape", [g.op("Shape", [h], start=0, end=2)],
                     value=_tensor_attr(np.array([True])))
    else:
        valid = g.op("Not", [mask])
    vf = g.op("Cast", [valid], to=g.onnx_dtype)                    # (B, T)
    if last:
        pos = g.op("Add", [g.positions(h, g.dtype), g.scalar(1.0)])   # 1..T
        idx = g.op("ReduceMax", [g.op("Mul", [vf, pos])] + g.axes_input([1]),
                   keepdims=1, **g.axes_attr([1]))               # (B, 1), 0 = none
        onehot = g.op("Cast", [g.op("Equal", [pos, idx])], to=g.onnx_dtype)
        return g.op("ReduceSum", [g.op("Mul", [h, g.op("Unsqueeze", [onehot,
                                                                      g.const_i64([2])])]),
                                  g.const_i64([1])], keepdims=0)
    total = g.op("ReduceSum", [g.op("Mul", [h, g.op("Unsqueeze", [vf, g.const_i64([2])])]),
                               g.const_i64([1])], keepdims=0)      # (B, d)
    count = g.op("ReduceSum", [vf, g.const_i64([1])], keepdims=1)  # (B, 1)
    return g.op("Div", [total, g.op("Max", [count, g.scalar(1.0)])])
