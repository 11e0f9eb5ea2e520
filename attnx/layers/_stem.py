"""SequenceModel's convolutional stem, forward beside backward: layers ((kernel, stride),
...) in front of the embedding, each a 1-D convolution over time with 'same'-style zero
padding, a bias and SiLU.

Layer i reads A_i (B, T_i, C_i) (A_0 = X, C_0 = n_features; C_i = d_model after) and
writes A_{i+1} (B, T_{i+1}, d_model), T_{i+1} = ceil(T_i / stride_i):

    U_i = windows of A_i (attnx.kernels._embed.Windows(kernel, stride, pad_left, pad_right),
          pad_left = (kernel - 1) // 2, pad_right = kernel - 1 - pad_left, zeros)
    A_{i+1} = silu(U_i stem.{i}.W + stem.{i}.b)       one GEMM over all B * T_{i+1} rows

stem.{i}.W is (kernel * C_i, d_model) with W[l * C_i + c, o] = torch's Conv1d
weight[o, c, l]; the padding is torch's padding='same' for stride 1 and, for larger
strides, that of F.pad(x, (pad_left, pad_right)) before a Conv1d(stride=stride).

Key padding: padded steps read as zero; token n of a layer's output is padded when
it lies past the ceil(t_b / stride) tokens of the sequence's valid length t_b, or when
every step it covers is padded (attnx.kernels._embed.Windows.mask). A right-padded sequence of
length t_b thus gives the tokens it gives alone.

The compiled whole pass (attnx.kernels._model_pass) runs the layers, each a stage
(attnx.layers.stages.StemLayer: its weights, buffers and operands); this module holds
their geometry and masks (attnx.testing.reference_pass runs them one call at a time).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..kernels._embed import Windows, same_padding

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..runtime._typing import BoolArray, FloatArray, IntArray

    _U8Array = npt.NDArray[np.uint8]

Stem = tuple[tuple[int, int], ...]


#: stem="auto": the tokens the rule aims at (at most), and the first layer's kernel
AUTO_TOKENS, AUTO_KERNEL, AUTO_STRIDE = 16, 8, 4


def auto(t_max: int, t_min: int) -> Stem:
    """The stem of stem="auto" for sequences of t_min..t_max steps: two layers,
    (k1, s1) then (k2, s2), that leave at most AUTO_TOKENS (16) tokens.

    s1 = 4 when t_max >= 32, else 1; k1 = min(8, t_min);
    s2 = ceil(t_max / s1 / 16); k2 = min(max(2 * s2, 3), ceil(t_min / s1))

    (the second layer is an overlapping patch embedding of the first layer's local
    features: windows twice as long as their stride). Kernels never exceed the shortest
    sequence, so ragged data down to one step is accepted.
    """
    s1 = AUTO_STRIDE if t_max >= 8 * AUTO_STRIDE else 1
    s2 = max(1, -(-t_max // (s1 * AUTO_TOKENS)))
    k1 = max(1, min(AUTO_KERNEL, t_min))
    k2 = max(1, min(max(2 * s2, 3), -(-t_min // s1)))
    return ((k1, s1), (k2, s2))


#: tokenizer="auto"'s stem for a classifier's short univariate series
#: (attnx.estimators._plan): a convolution of SHORT_KERNEL steps at stride 1
SHORT_KERNEL = 3


def short(t_max: int, t_min: int) -> Stem:
    """The stem tokenizer="auto" gives a classifier's short univariate series (t_min..t_max
    steps): ((min(3, t_min), 1), (min(2 p, t_min), p)) with p = ceil(t_max / 16): local
    features at every step, then overlapping windows of 2 p every p steps, at most
    AUTO_TOKENS (16) tokens. A pattern then makes the same features wherever it lies,
    which raw-value patches of a few steps do not (their embedding sees it at each
    offset within the patch anew)."""
    p = max(1, -(-t_max // AUTO_TOKENS))
    return ((max(1, min(SHORT_KERNEL, t_min)), 1), (max(1, min(2 * p, t_min)), p))


def check_stem(stem: object) -> Stem | None:
    """stem as a tuple of (kernel, stride) int pairs >= 1, or None; TypeError or
    ValueError naming `stem` otherwise."""
    if stem is None:
        return None
    if isinstance(stem, (str, bytes)) or not isinstance(stem, Sequence):
        raise TypeError("stem must be None or a sequence of (kernel, stride) pairs, "
                        f"got {type(stem).__name__}")
    if len(stem) == 0:
        raise ValueError("stem must hold at least one (kernel, stride) layer (None: no "
                         "stem), got an empty sequence")
    out = []
    for i, layer in enumerate(stem):
        if (isinstance(layer, (str, bytes)) or not isinstance(layer, Sequence)
                or len(layer) != 2):
            raise TypeError(f"stem[{i}] must be a (kernel, stride) pair, got {layer!r}")
        for what, v in zip(("kernel", "stride"), layer):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"stem[{i}] {what} must be an int, got "
                                f"{type(v).__name__} {v!r}")
            if v < 1:
                raise ValueError(f"stem[{i}] {what} must be >= 1, got {v}")
        out.append((int(layer[0]), int(layer[1])))
    return tuple(out)


def check_settings(stem: Stem, patch_len: int | None, per_position: bool,
                   t_min: int) -> None:
    """ValueError unless an estimator's stem fits its other settings and the shortest
    sequence of the data (t_min steps)."""
    if patch_len not in (None, 1):
        raise ValueError(f"patch_len={patch_len} and stem={stem} both make the tokens: "
                         "give one of them (patch_len=None or 1 with a stem)")
    if per_position and any(s > 1 for _, s in stem):
        raise ValueError(f"stem={stem} has strides > 1, which need one target per "
                         "sequence (per-position targets keep one token per time step)")
    try:
        lengths(stem, t_min)
    except ValueError as exc:
        raise ValueError(f"stem={stem} does not fit the shortest sequence ({t_min} "
                         f"steps): {exc}") from None


def check_missing(stem: Stem | None, mask: BoolArray | None, name: str = "X") -> None:
    """ValueError naming the sequence when the stem leaves it no valid token: mask (n,
    T) is True at padded and missing (missing="mask") steps, and every window of the
    last layer is masked (Windows.mask), which missing steps can cause where a
    kernel shorter than its stride skips the steps between windows."""
    if stem is None or mask is None:
        return
    lengths(stem, mask.shape[1])   # ValueError for a kernel longer than the input
    km = mask.astype(np.uint8)
    for win in windows(stem):
        out = np.empty((km.shape[0], win.count(km.shape[1])), np.uint8)
        win.mask(km, out)
        km = out
    empty = km.all(axis=1)
    if empty.any():
        i = int(np.flatnonzero(empty)[0])
        raise ValueError(f"{name}[{i}] has no token left after stem={stem}: every window of "
                         f"its last layer reads missing (NaN) or padded steps only (a kernel "
                         f"shorter than its stride skips the steps between windows)")


def windows(stem: Stem | None) -> list[Windows]:
    """The layers' window geometry: N = ceil(T / stride) windows over T steps."""
    return [Windows(k, s, *same_padding(k)) for k, s in stem or ()]


def lengths(stem: Stem | None, t: int) -> list[int]:
    """[T_0 = t, T_1, ..., T_L]: the steps each stem layer reads, then the tokens
    (ceil division by each stride). ValueError when a kernel is longer than its
    layer's input."""
    out = [t]
    for i, (k, s) in enumerate(stem or ()):
        if k > out[-1]:
            raise ValueError(f"stem layer {i} has kernel {k}, longer than its input of "
                             f"{out[-1]} steps (x has T={t}); use shorter kernels or "
                             "longer sequences")
        out.append(-(-out[-1] // s))
    return out


def min_length(stem: Stem | None) -> int:
    """The fewest steps an input may have so that every kernel fits its layer's input."""
    need = 1
    for k, s in reversed(stem or ()):
        need = max(k, (need - 1) * s + 1)
    return need


def pad_short(stem: Stem | None, x: FloatArray, lengths: IntArray | None
              ) -> tuple[FloatArray, IntArray | None]:
    """x (n, T, C) right-padded with zero steps to min_length(stem) when T is shorter,
    the added steps marked as padding in the returned lengths; x, lengths unchanged
    otherwise. A padded step reads as zero, as the 'same' padding, and tokens past
    a sequence's length are masked, so each sequence's pooled output is the one
    the stem would give it alone."""
    need = min_length(stem)
    n, t = x.shape[:2]
    if t >= need:
        return x, lengths
    out = np.zeros((n, need) + x.shape[2:], dtype=x.dtype)
    out[:, :t] = x
    return out, (np.full(n, t, dtype=np.intp) if lengths is None else lengths)


def token_masks(windows: list[Windows], smask: list[_U8Array],
                km: _U8Array | None) -> list[_U8Array | None]:
    """[km_0 = km, km_1, ..., km_L]: the key padding mask each layer reads, then the
    tokens' (all None without a mask); layer i's output mask is written into smask[i]."""
    out = [km]
    for win, dst in zip(windows, smask):
        cur = out[-1]
        if cur is None:
            out.append(None)
        else:
            win.mask(cur, dst)
            out.append(dst)
    return out
