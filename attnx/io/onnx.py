"""Export attnx models and fitted estimators to ONNX (needs the ``onnx`` package:
``pip install attnx[onnx]``).

``export(obj, path)`` writes a graph that any ONNX runtime can serve:

* input ``x``: (batch, seq_len, n_features) in the model's dtype (float32 or
  float64); batch and seq_len are dynamic axes; for an estimator fitted with
  ``missing="mask"`` it may hold NaN: a time step with NaN in any channel is
  masked inside the graph (joined to ``key_padding_mask``) and reads 0, as in
  ``predict`` (which, unlike the graph, refuses infinity and sequences with no
  step free of NaN);
* input ``key_padding_mask``: (batch, seq_len) bool, True = padding (leave it
  out with ``key_padding_mask=False``: every position is then valid);
* output ``y`` for models and regressors, in the shape ``predict`` gives for a
  3-D ``X``, or ``probabilities`` (batch, n_classes) / (batch, seq_len, n_classes)
  for classifiers (columns in ``classes_`` order, which is also stored in the
  model's metadata as JSON under ``classes``).

The graph is built from standard operators only (MatMul, Softmax, Reshape,
Transpose, Sigmoid, Where, LayerNormalization, ...): attention with its heads,
causal and padding masks and rotary positions; the SiLU MLP and residuals;
and for a SequenceModel the instance normalisation (RevIN: statistics over each
series' valid steps, the affine map, the outputs' de-normalisation), the convolutional stem (Conv with its pads and strides, then
x * Sigmoid(x)), the embedding, sinusoidal or learned positions, the class token,
pre-norm LayerNorms, mean / last / max / class-token pooling and the head. Rotary and sinusoidal
tables are computed inside the graph in float64 from the positions, so any
sequence length works (up to max_len for learned positions, as in predict).
Neither torch nor anything else beyond ``onnx`` and NumPy is imported.
"""
from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from ._onnx_graph import _Graph
from ._onnx_layers import _attention, _block, _instance_norm, _sequence, _windows
from ..estimators._ppv_tokens import COMB, PPVTokens
from ..runtime._version import __version__
from ..layers.attention import MultiHeadAttention
from ..layers.sequence import SequenceModel
from ..layers.transformer import Transformer

__all__ = ["export", "DEFAULT_OPSET"]

DEFAULT_OPSET = 17
_MIN_OPSET, _MAX_OPSET = 17, 21


def export(obj: Any, path: str | os.PathLike[str], *, opset: int = DEFAULT_OPSET,
           key_padding_mask: bool = True, coverage: float | None = None) -> Any:
    """Write `obj` as an ONNX model to exactly `path`; returns the onnx.ModelProto.

    Parameters
    ----------
    obj : MultiHeadAttention, Transformer, SequenceModel, or a fitted attnx
        estimator (regressor or classifier), or a fitted TransformerForecaster
        (see below).
    path : str or path-like
        The file to write.
    opset : int
        ONNX opset version, from 17 (LayerNormalization) to 21.
    key_padding_mask : bool
        Whether the graph takes a ``key_padding_mask`` input (B, T) bool.
    coverage : float in (0, 1) or None
        Forecasters only: the graph also outputs the ``lower`` and ``upper`` ends
        of predict_interval(coverage=...) (the forecaster must have intervals).

    A forecaster's graph forecasts from the last ``window_`` steps of each series:
    input ``y`` (batch, window_, k) in the network's dtype (a shorter series is
    left-padded to window_ steps, any values, with ``key_padding_mask`` (batch,
    window_) True on the padding); ``X`` (batch, window_, c) with past covariates,
    ``X_future`` (batch, horizon, c_f) with known future covariates and ``static``
    (batch, s) when the forecaster was fitted with them; output ``forecast`` (batch,
    horizon, k), as predict(y=...) gives for those series, in the same steps: the
    scaling, the baseline and its weight, the patches, the network, the scaling back.

    Returns
    -------
    onnx.ModelProto
        The exported model (already checked with onnx.checker).
    """
    import onnx

    if isinstance(opset, bool) or not isinstance(opset, int) or not \
            _MIN_OPSET <= opset <= _MAX_OPSET:
        raise ValueError(f"opset must be an int in [{_MIN_OPSET}, {_MAX_OPSET}], got {opset!r}")
    fspec = _forecast_spec(obj)
    if fspec is not None:
        proto = _forecaster(fspec, opset, key_padding_mask, coverage, type(obj).__name__)
        onnx.checker.check_model(proto, full_check=True)
        onnx.save_model(proto, os.fspath(path))
        return proto
    if coverage is not None:
        raise ValueError("coverage applies to a forecaster's intervals only")
    model, output, meta, patch_len, missing, fill, tokens = _unwrap(obj)
    g = _Graph(model.dtype, opset)
    width = tokens.n_channels if tokens is not None else _n_in(model) // patch_len
    x = g.input("x", ["batch", "seq_len", width])
    mask = g.input("key_padding_mask", ["batch", "seq_len"], bool) if key_padding_mask \
        else None
    if missing == "mask":
        x, mask = _missing_steps(g, x, mask)
    if tokens is not None:
        x, mask = _ppv_tokens(g, x, mask, tokens)
    elif patch_len > 1:
        x, mask = _patches(g, x, mask, patch_len, _n_in(model), fill)
    y = _forward(g, model, x, mask)
    shape = _output_shape(model)
    if output == "probabilities":
        y = g.op("Softmax", [y], axis=-1)
    elif output == "squeeze":
        y = g.op("Squeeze", [y, g.const_i64([-1])])
        output, shape = "y", shape[:-1]
    g.output(g.op("Identity", [y], name=output), shape)
    proto = g.build(meta)
    onnx.checker.check_model(proto, full_check=True)
    onnx.save_model(proto, os.fspath(path))
    return proto


# ---- what is exported --------------------------------------------------------------
def _forecast_spec(obj: Any) -> Any:
    """The forecaster's ForecastSpec, or None for the other kinds of object."""
    if isinstance(obj, (MultiHeadAttention, Transformer, SequenceModel)):
        return None
    spec = getattr(obj, "export_spec", None)
    if not callable(spec) or not hasattr(obj, "horizon"):
        return None
    return spec()   # NotFittedError (a ValueError) before fit


def _forecaster(f: Any, opset: int, with_mask: bool, coverage: float | None,
                name: str) -> Any:
    """The forecaster's graph (see export)."""
    net = f.network
    model = net.model
    g = _Graph(model.dtype, opset)
    k, ko, h, w = f.k, f.k_out, f.horizon, f.window
    y = g.input("y", ["batch", w, k])
    mask = g.input("key_padding_mask", ["batch", w], bool) if with_mask else None
    cov = g.input("X", ["batch", w, len(f.cov_mean)]) if f.cov_mean is not None else None
    fut = (g.input("X_future", ["batch", h, len(f.fut_mean)]) if f.fut_mean is not None
           else None)
    stat = g.input("static", ["batch", f.n_static]) if f.n_static is not None else None
    ends = None
    if coverage is not None:
        if f.interval is None:
            raise ValueError("this forecaster was fitted with intervals=None: no intervals "
                             "to export (coverage must be None)")
        ends = f.interval(coverage)   # ValueError for a bad coverage
    one = g.const_i64([1])
    ci = f.channel_independent
    if ci:   # one row per (series, channel): (B * k, W, 1), covariates repeated
        y = g.op("Reshape", [g.op("Transpose", [y], perm=[0, 2, 1]), g.const_i64([-1, w, 1])])
        mask, cov, fut, stat = (None if a is None else _repeat_rows(g, a, k)
                                for a in (mask, cov, fut, stat))
    feats = y if cov is None else g.op("Concat", [y, cov], axis=2)
    if mask is not None:   # padded steps hold the first real step (as predict pads)
        first = g.op("ReduceSum", [g.op("Cast", [mask], to=7), one], keepdims=1)  # (n, 1)
        first = g.op("Min", [first, g.const_i64([w - 1])])
        first = g.op("Expand", [g.op("Unsqueeze", [first, g.const_i64([2])]),
                                g.op("Shape", [g.op("Slice", [feats, g.const_i64([0]),
                                                              one, one])])])
        feats = g.op("Where", [g.op("Unsqueeze", [mask, g.const_i64([2])]),
                               g.op("GatherElements", [feats, first], axis=1), feats])
        real = g.op("Unsqueeze", [g.op("Cast", [g.op("Not", [mask])], to=g.onnx_dtype),
                                  g.const_i64([2])])                    # (n, W, 1)
    else:
        real = None
    v = g.op("Slice", [feats, g.const_i64([0]), g.const_i64([ko]), g.const_i64([2])])
    mu, sd = _scale_stats(g, v, real, f.std_floor)
    xs = g.op("Div", [g.op("Sub", [v, mu]), sd])
    x = xs
    if cov is not None:
        c = g.op("Slice", [feats, g.const_i64([ko]), g.const_i64([ko + len(f.cov_mean)]),
                           g.const_i64([2])])
        c = g.op("Div", [g.op("Sub", [c, g.const(f.cov_mean)]), g.const(f.cov_std)])
        x = g.op("Concat", [xs, c], axis=2)
    base = _baseline(g, f.baseline, xs, real, h, w, f.period)
    # patches, newest first: (n, N, patch_len * channels), and the patch mask
    n_tok = (w - f.patch_len) // f.patch_stride + 1
    idx = (f.patch_stride * np.arange(n_tok)[::-1, None]
           + np.arange(f.patch_len)[None, :]).astype(np.int64)
    width = f.patch_len * (ko + (0 if cov is None else len(f.cov_mean)))
    tok = g.op("Reshape", [g.op("Gather", [x, g.const(idx, np.int64)], axis=1),
                           g.const_i64([0, n_tok, width])])
    tmask = None
    if real is not None:
        pad = g.op("Gather", [g.op("Squeeze", [real, g.const_i64([2])]),
                              g.const(idx, np.int64)], axis=1)              # (n, N, P)
        tmask = g.op("Equal", [g.op("ReduceMax", [pad] + g.axes_input([2]), keepdims=0,
                                    **g.axes_attr([2])), g.scalar(0.0)])
    extra = []
    if stat is not None:
        extra.append(stat)
    if fut is not None:
        z = g.op("Div", [g.op("Sub", [fut, g.const(f.fut_mean)]), g.const(f.fut_std)])
        extra.append(g.op("Reshape", [z, g.const_i64([0, -1])]))
    if extra:
        e = extra[0] if len(extra) == 1 else g.op("Concat", extra, axis=1)
        e = g.op("Unsqueeze", [e, one])                                     # (n, 1, E)
        shape = g.op("Concat", [g.op("Shape", [tok], start=0, end=2),
                                g.op("Shape", [e], start=2, end=3)], axis=0)
        tok = g.op("Concat", [tok, g.op("Expand", [e, shape])], axis=2)
    nq = f.n_levels
    out = _forward(g, model, tok, tmask)
    if nq == 1:
        levels = g.op("Reshape", [out, g.const_i64([0, h, ko, 1])])
    else:   # the learned quantile levels of each value, sorted ascending
        levels = g.op("Reshape", [out, g.const_i64([0, h, ko, nq])])
        levels = g.top_k_ascending(levels, nq)

    def scaled(weights: Any) -> str:
        """blend * (the weighted sorted levels) + the baseline, (n, h, k_out)."""
        t = g.op("Squeeze", [g.op("MatMul", [levels, g.const(np.reshape(weights, (nq, 1)))]),
                             g.const_i64([3])])
        t = g.op("Mul", [t, g.scalar(f.blend)])
        return t if base is None else g.op("Add", [t, base])
    point = scaled(f.point)
    outs = [("forecast", g.op("Add", [g.op("Mul", [point, sd]), mu]))]
    if ends is not None:
        w_lo, w_hi, half = ends
        lower = g.op("Min", [g.op("Sub", [scaled(w_lo), g.const(half)]), point])
        upper = g.op("Max", [g.op("Add", [scaled(w_hi), g.const(half)]), point])
        outs += [("lower", g.op("Add", [g.op("Mul", [lower, sd]), mu])),
                 ("upper", g.op("Add", [g.op("Mul", [upper, sd]), mu]))]
    for out_name, t in outs:
        if ci:   # (B * k, h, 1) -> (B, h, k)
            t = g.op("Transpose", [g.op("Reshape", [t, g.const_i64([-1, k, h])])],
                     perm=[0, 2, 1])
        g.output(g.op("Identity", [t], name=out_name), ["batch", h, k])
    meta = {"attnx_version": __version__, "attnx_model": name, "horizon": str(h),
            "window": str(w)}
    if coverage is not None:
        meta["coverage"] = repr(float(coverage))
    return g.build(meta)


def _repeat_rows(g: _Graph, a: str, k: int) -> str:
    """(B, ...) -> (B * k, ...): each row k times in a row (a series' channels)."""
    u = g.op("Unsqueeze", [a, g.const_i64([1])])
    rank_tail = g.op("Shape", [a], start=1)
    shape = g.op("Concat", [g.op("Shape", [a], start=0, end=1), g.const_i64([k]), rank_tail],
                 axis=0)
    flat = g.op("Concat", [g.const_i64([-1]), rank_tail], axis=0)
    return g.op("Reshape", [g.op("Expand", [u, shape]), flat])


def _scale_stats(g: _Graph, v: str, real: str | None, floor: float) -> tuple[str, str]:
    """attnx.forecasting._windows.scale_stats: mean and floored std over the real steps, (n, 1, k)."""
    one = g.const_i64([1])
    if real is None:
        cnt = g.op("Cast", [g.op("Shape", [v], start=1, end=2)], to=g.onnx_dtype)
        vw = v
    else:
        cnt = g.op("Max", [g.op("ReduceSum", [real, one], keepdims=1), g.scalar(1.0)])
        vw = g.op("Mul", [v, real])
    mu = g.op("Div", [g.op("ReduceSum", [vw, one], keepdims=1), cnt])
    d = g.op("Sub", [v, mu])
    d2 = g.op("Mul", [d, d]) if real is None else g.op("Mul", [g.op("Mul", [d, d]), real])
    var = g.op("Div", [g.op("ReduceSum", [d2, one], keepdims=1), cnt])
    fl = g.op("Mul", [g.op("Add", [g.op("Abs", [mu]), g.scalar(1.0)]), g.scalar(floor)])
    return mu, g.op("Sqrt", [g.op("Max", [var, g.op("Mul", [fl, fl])])])


def _baseline(g: _Graph, name: str, xs: str, real: str | None, h: int, w: int,
              season: int) -> str | None:
    """The baseline forecast (n, h, k) in scaled units from the scaled contexts xs (n,
    w, k) (attnx.forecasting.forecaster._baseline); None for none."""
    if name == "seasonal_naive":
        return g.op("Gather", [xs, g.const_i64([w - season + j % season for j in range(h)])],
                    axis=1)
    if name == "seasonal_mean":
        return _profile(g, xs, real, h, w, season)
    if name == "combined":
        a = _baseline(g, "seasonal_naive", xs, real, h, w, season)
        b = _baseline(g, "seasonal_mean", xs, real, h, w, season)
        assert a is not None and b is not None
        return g.op("Mul", [g.op("Add", [a, b]), g.scalar(0.5)])
    return None


def _profile(g: _Graph, xs: str, real: str | None, h: int, w: int, season: int) -> str:
    """attnx.forecasting._season.profile: per phase (counted back from the window's end) the mean
    of its real steps, the real context's mean for a phase without one; horizon step
    j takes phase season - 1 - j % season."""
    one = g.const_i64([1])
    phase = (w - 1 - np.arange(w)) % season
    onehot = (phase[None, :] == np.arange(season)[:, None]).astype(np.float64)
    real_c = g.const(np.ones((1, w, 1))) if real is None else real   # (n | 1, w, 1)
    xr = g.op("Mul", [xs, real_c])
    tot = g.op("MatMul", [g.const(onehot), xr])                                   # (n, s, k)
    cnt = g.op("MatMul", [g.const(onehot), real_c])                               # (n, s, 1)
    overall = g.op("Div", [g.op("ReduceSum", [xr, one], keepdims=1),
                           g.op("Max", [g.op("ReduceSum", [real_c, one], keepdims=1),
                                        g.scalar(1.0)])])                         # (n, 1, k)
    prof = g.op("Where", [g.op("Greater", [cnt, g.scalar(0.0)]),
                          g.op("Div", [tot, g.op("Max", [cnt, g.scalar(1.0)])]), overall])
    steps = [season - 1 - j % season for j in range(h)]
    return g.op("Gather", [prof, g.const_i64(steps)], axis=1)


def _missing_steps(g: _Graph, x: str, mask: str | None) -> tuple[str, str]:
    """missing="mask": a step of x (B, T, f) with NaN in any channel is masked (joined
    to the key padding mask, or the mask itself when the graph takes none) and reads
    0 in every channel, as the estimators' predict."""
    nan = g.op("Cast", [g.op("IsNaN", [x])], to=7)     # int64: ReduceMax at every opset
    step = g.op("Cast", [g.op("ReduceMax", [nan] + g.axes_input([2]), keepdims=0,
                              **g.axes_attr([2]))], to=9)                       # (B, T)
    x = g.op("Where", [g.op("Unsqueeze", [step, g.const_i64([2])]), g.scalar(0.0), x])
    return x, step if mask is None else g.op("Or", [mask, step])


def _patches(g: _Graph, x: str, mask: str | None, p: int, width: int, fill: str = "last"
             ) -> tuple[str, str | None]:
    """The estimator's patches in the graph (attnx.estimators._sequences.patch): masked steps
    (padding, missing) zeroed, the time axis padded to a multiple of p, every step
    after a sequence's last unmasked step that step, then (B, T, f) -> (B, T/p, p*f);
    a patch is padding when all its steps are (the fill steps count as padding).
    Steps past the patch of a sequence's last unmasked step hold that step here and 0
    in the estimator: those tokens are masked, so no output sees them. fill="zero"
    (models fitted before that rule): every masked or fill step reads 0."""
    t = g.seq_len(x)
    pk = g.const_i64([p])
    extra = g.op("Mod", [g.op("Sub", [pk, g.op("Mod", [t, pk])]), pk])
    zero = g.const_i64([0])
    one = g.const_i64([1])
    pads3 = g.op("Concat", [zero, zero, zero, zero, extra, zero], axis=0)
    keep = None if mask is None else g.op("Not", [mask])
    if keep is not None:   # masked steps read 0
        x = g.op("Mul", [x, g.op("Unsqueeze", [g.op("Cast", [keep], to=g.onnx_dtype),
                                               g.const_i64([2])])])
    if fill == "zero":
        x = g.op("Pad", [x, pads3])
    elif keep is None:   # every sequence ends at T: its last step repeated
        x = g.op("Pad", [x, pads3], mode="edge")
    else:
        # one past each sequence's last unmasked step (0: none)
        after = g.op("Add", [g.positions(x, np.int64), one])                    # (T,)
        ends = g.op("ReduceMax", [g.op("Where", [keep, after, zero])] + g.axes_input([1]),
                    keepdims=1, **g.axes_attr([1]))                             # (B, 1)
        x = g.op("Pad", [x, pads3])
        last = g.op("Max", [g.op("Sub", [ends, one]), zero])
        last = g.op("Expand", [g.op("Unsqueeze", [last, g.const_i64([2])]),
                               g.op("Shape", [g.op("Slice", [x, zero, one, one])])])
        last = g.op("GatherElements", [x, last], axis=1)                        # (B, 1, f)
        past = g.op("GreaterOrEqual", [g.positions(x, np.int64), ends])        # (B, T')
        x = g.op("Where", [g.op("Unsqueeze", [past, g.const_i64([2])]), last, x])
    x = g.op("Reshape", [x, g.const_i64([0, -1, width])])
    if mask is not None:
        m = g.op("Cast", [mask], to=7)   # int64: Pad and ReduceMin take it at every opset
        m = g.op("Pad", [m, g.op("Concat", [zero, zero, zero, extra], axis=0),
                         g.const_i64([1])])
        m = g.op("Reshape", [m, g.const_i64([0, -1, p])])
        mask = g.op("Cast", [g.op("ReduceMin", [m] + g.axes_input([2]), keepdims=0,
                                  **g.axes_attr([2]))], to=9)
    return x, mask


def _ppv_tokens(g: _Graph, x: str, mask: str | None, tokens: PPVTokens
                ) -> tuple[str, str | None]:
    """The PPV tokens in the graph (attnx.estimators._ppv_tokens): each channel centred and
    scaled (rounded to the model's dtype, as the kernel reads it), masked steps read
    0; per dilation the nine taps (zero 'same' padding) times the 84 kernels'
    weights (-1 and 2) in float64, as the kernel computes (onnxruntime has no
    float64 Conv); per bias a Greater; the counts summed per window, dilation by
    dilation (no (B, F, T) tensor), then the fraction over each window's valid steps
    and the windows' padding mask as _patches makes it."""
    from onnx import numpy_helper

    f64 = 11
    w = tokens.window
    c = tokens.n_channels
    xs = g.op("Div", [g.op("Sub", [g.op("Cast", [x], to=f64), g.const(tokens.mean, np.float64)]),
                      g.const(tokens.scale, np.float64)])
    xs = g.op("Cast", [g.op("Cast", [xs], to=g.onnx_dtype)], to=f64)
    if mask is not None:
        xs = g.op("Where", [g.op("Unsqueeze", [mask, g.const_i64([2])]),
                            g.scalar(0.0, np.float64), xs])
    nk = len(COMB)
    weight = -np.ones((9, nk))
    weight[COMB.T, np.arange(nk)[None, :]] = 2.0                        # (9, 84)
    # the kernel compares with the bias in the model's dtype
    bias = tokens.bias.astype(g.dtype).astype(np.float64)                # (D, C, 84, Q)
    nq = bias.shape[3]
    if mask is not None:
        keep = g.op("Cast", [g.op("Not", [mask])], to=g.onnx_dtype)     # (B, T)
    else:
        keep = g.op("ConstantOfShape", [g.op("Shape", [x], start=0, end=2)],
                    value=numpy_helper.from_array(np.ones(1, g.dtype)))
    t = g.seq_len(x)
    pk = g.const_i64([w])
    extra = g.op("Mod", [g.op("Sub", [pk, g.op("Mod", [t, pk])]), pk])
    zero = g.const_i64([0])
    keep_w = g.op("Pad", [keep, g.op("Concat", [zero, zero, zero, extra], axis=0)])
    keep_w = g.op("Reshape", [keep_w, g.const_i64([0, -1, w])])          # (B, N, w)
    xs = g.op("Transpose", [xs], perm=[0, 2, 1])                         # (B, C, T)
    sums = []
    for i, d in enumerate(tokens.dilations.tolist()):
        xp = g.op("Pad", [xs, g.const_i64([0, 0, 4 * d, 0, 0, 4 * d])])
        taps = [g.op("Unsqueeze", [g.op("Slice", [xp, g.const_i64([k * d]),
                                                  g.op("Add", [t, g.const_i64([k * d])]),
                                                  g.const_i64([2])]), g.const_i64([3])])
                for k in range(9)]
        out = g.op("MatMul", [g.op("Concat", taps, axis=3),
                              g.const(weight, np.float64)])              # (B, C, T, 84)
        out = g.op("Unsqueeze", [out, g.const_i64([4])])                # (B, C, T, 84, 1)
        b = g.const(bias[i][:, None], np.float64)                        # (C, 1, 84, Q)
        hit = g.op("Cast", [g.op("Greater", [out, b])], to=g.onnx_dtype)
        hit = g.op("Transpose", [hit], perm=[0, 1, 3, 4, 2])             # (B, C, 84, Q, T)
        hit = g.op("Reshape", [hit, g.const_i64([0, c * nk * nq, -1])])   # (B, G, T)
        hit = g.op("Mul", [hit, g.op("Unsqueeze", [keep, g.const_i64([1])])])
        hit = g.op("Pad", [hit, g.op("Concat", [zero, zero, zero, zero, zero, extra],
                                     axis=0)])
        hit = g.op("Reshape", [hit, g.const_i64([0, c * nk * nq, -1, w])])
        sums.append(g.op("ReduceSum", [hit, g.const_i64([3])], keepdims=0))   # (B, G, N)
    sums_all = g.op("Concat", sums, axis=1) if len(sums) > 1 else sums[0]   # (B, F, N)
    cnt = g.op("ReduceSum", [keep_w, g.const_i64([2])], keepdims=0)      # (B, N)
    cnt = g.op("Max", [cnt, g.scalar(1.0)])
    tok = g.op("Div", [sums_all, g.op("Unsqueeze", [cnt, g.const_i64([1])])])
    tok = g.op("Transpose", [tok], perm=[0, 2, 1])                       # (B, N, F)
    if mask is not None:
        m = g.op("Cast", [mask], to=7)
        m = g.op("Pad", [m, g.op("Concat", [zero, zero, zero, extra], axis=0),
                         g.const_i64([1])])
        m = g.op("Reshape", [m, g.const_i64([0, -1, w])])
        mask = g.op("Cast", [g.op("ReduceMin", [m] + g.axes_input([2]), keepdims=0,
                                  **g.axes_attr([2]))], to=9)
    return tok, mask


def _unwrap(obj: Any) -> tuple[Any, str, dict[str, str], int, str, str, PPVTokens | None]:
    """(model, output kind, metadata, patch length, missing rule, patch fill, PPV
    transform or None) for a model or a fitted estimator (whose export_spec() says
    which network to export and how predict reads its output)."""
    meta = {"attnx_version": __version__}
    if isinstance(obj, (MultiHeadAttention, Transformer, SequenceModel)):
        meta["attnx_model"] = type(obj).__name__
        return obj, "y", meta, 1, "error", "last", None
    if not callable(getattr(obj, "export_spec", None)):
        raise TypeError(f"export needs a MultiHeadAttention, Transformer, SequenceModel or a "
                        f"fitted attnx estimator, got {type(obj).__name__}")
    spec = obj.export_spec()  # NotFittedError (a ValueError) before fit
    if spec.tokens is not None:
        meta["tokenizer"] = "ppv"
    meta["attnx_model"] = type(obj).__name__
    if spec.classes is not None:
        meta["classes"] = json.dumps(np.asarray(spec.classes).tolist())
    if spec.patch_len > 1:
        meta["patch_len"] = str(spec.patch_len)
    if spec.missing == "mask":
        meta["missing"] = spec.missing
    return (spec.model, spec.output, meta, spec.patch_len, spec.missing, spec.patch_fill,
            spec.tokens)


def _output_shape(model: Any) -> list[Any]:
    if hasattr(model, "n_outputs"):   # SequenceModel
        tail = [model.n_outputs]
        if model.pooling is not None:
            return ["batch"] + tail
        # a stem with strides > 1 makes fewer tokens than steps
        strided = any(s > 1 for _, s in model.stem or ())
        return ["batch", "tokens" if strided else "seq_len"] + tail
    return ["batch", "seq_len", model.d_model]


def _n_in(model: Any) -> int:
    return int(getattr(model, "n_features", model.d_model))


def _forward(g: _Graph, model: Any, x: str, mask: str | None) -> str:
    if isinstance(model, MultiHeadAttention):
        return _attention(g, model, model.params, "", x, mask)
    if isinstance(model, Transformer):
        h = x
        for i, att in enumerate(model.attn):
            h = _block(g, model.params, f"layers.{i}.", att, h, mask, pre=False)
        return h
    return _sequence(g, model, x, mask)
