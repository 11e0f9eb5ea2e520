"""SequenceModel: embedding, positions, transformer blocks, pooling and a linear head.

X (B, T, n_features) -> Y (B, T, n_outputs) per position, or (B, n_outputs) pooled.

The model is a list of stages (attnx.layers.stages: instance norm, stem, embedding,
positions, class token, blocks, final norm, pooling, head), each owning its parameters,
buffers and kernel operands. One path each way: the compiled whole pass
(attnx.kernels._model_pass.ModelPass, assembled from the stages' operands by
attnx.layers._sequence_blocks) runs stem, embedding, class token, blocks, final norm,
pooling and head in one call; the instance norm / RevIN around it runs in Python, in its
stage. The same stages one kernel call at a time, the reference the pass is tested
against, live in attnx.testing.reference_pass.
"""
from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _instance_norm, _sequence_blocks, _stem
from ..kernels import _seq
from ..kernels._blas import check_blas_int
from ..runtime._threads import blas_single, threads_for
from ._block_operands import LN_EPS as LN_EPS
from ._sequence_buffers import _Buffers, _Last
from ..runtime._params import ParamDict, check_dtype, check_positive_int
from ..runtime._validate import as_input, as_mask, cast_into, check_params, out_array
from ..runtime._workspace import WorkspaceCache, check_size, nbytes_of
from ._attention_stack import _AttentionStack
from ._positions import sinusoidal_table as sinusoidal_table
from .attention import MultiHeadAttention
from .stages import Stages

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import TypeVar

    import numpy.typing as npt

    from ..runtime._typing import AnyArray, FloatArray, RandomStateLike

    _T = TypeVar("_T")
    _U8Array = npt.NDArray[np.uint8]

POSITIONAL = ("none", "sinusoidal", "learned", "rope")
POOLING = (None, "mean", "last", "max", "cls")
NORM = (None, "pre")


def _choice(name: str, value: object, options: tuple[_T, ...]) -> _T:
    """The option that `value` is (or equals, for a string)."""
    for o in options:
        if value is o or (isinstance(value, str) and value == o):
            return o
    raise ValueError(f"{name} must be one of {options}, got {value!r}")


class SequenceModel(_AttentionStack):
    """A transformer for sequences with its own width, pooling and output head.

        X <- instance-normalised X with instance_norm (attnx.layers._instance_norm)
        A = stem(X) (B, N, d_model), or A = X without a stem (N = T)
        H0 = A embed.W + embed.b (+ positions)          X: (B, T, n_features)
        pooling="cls": H0 = [cls; H0], the class token first (N + 1 tokens)
        blocks i = 0 .. n_layers-1, with norm=None:
            Z~ = Attn(H) + H ;       H' = silu(Z~ W1 + b1) W2 + b2 + Z~
        with norm="pre" (LayerNorm over features, eps 1e-5, affine):
            Z~ = Attn(LN1(H)) + H ;  H' = MLP(LN2(Z~)) + Z~ ; after the last block LN `norm`
        pooling None: every position; "mean": the mean of the valid positions of each
            sequence; "last": each sequence's last valid position; "max": per feature,
            the maximum over the valid positions; "cls": the class token's final row
        head: Y = pooled head.W + head.b
        instance_norm="revin": Y de-normalised, Y_j = Y_j * std_c(j) + mean_c(j)

    Parameters
    ----------
    n_features, d_model, n_heads, n_layers, n_outputs : ints; n_heads divides d_model.
    d_hidden : MLP width (None: 4 * d_model).
    pooling : None (Y is (B, N, n_outputs)), "mean", "last", "max" or "cls" (Y is
        (B, n_outputs)). "cls" prepends a learnable class token `cls` (d_model,) to the
        tokens after the embedding and positions: the token gets no position of its
        own (token j of the data keeps row j of the positions; with rotary positions
        the data tokens sit at 1..N, which leaves their relative angles unchanged), is
        never padded, and the head reads its final (normed) row. Not with causal
        (the token would attend to itself only). A sequence with no valid position
        pools to zeros (Y = head.b), except with "cls" (the token alone).
    stem : None, or a convolutional stem ((kernel, stride), ...) in front of the
        embedding (attnx.layers._stem): layer i is a 1-D convolution over time with 'same'
        zero padding (left (kernel-1)//2), stride `stride`, d_model output channels,
        a bias and SiLU, so its output has ceil(T_i / stride) steps; the embedding
        then maps d_model -> d_model and the blocks run on the N tokens of the last
        layer (token j of a stride-s layer covers steps j*s - (kernel-1)//2 onwards).
        Parameters stem.{i}.W (kernel * C_i, d_model), W[l*C_i + c, o] = torch
        Conv1d weight[o, c, l], C_0 = n_features and C_i = d_model after; stem.{i}.b.
    instance_norm : None, "input" or "revin" (RevIN, Kim et al. 2022): "input"
        normalises each input series (sequence b, channel c) by its mean and
        std = sqrt(var + 1e-5) over its valid steps (population variance, in X's
        units) before the stem / embedding; "revin" also de-normalises the outputs,
        output j by channel j when n_outputs equals the channels, or every output by
        the single channel when there is one (else ValueError). Padded steps are
        left out of the statistics, read as zero and get zero gradient; a series
        with no valid step has mean 0 and std sqrt(1e-5).
    instance_affine : RevIN's learnable per-channel affine map after the
        normalisation, xn = xhat * revin.g + revin.b (gains 1, biases 0 at first),
        inverted before the de-normalisation (y = (yn - b) / (g + 1e-10) * std +
        mean). Off by default: the embedding and the head are linear, so the map
        adds no expressiveness, and its inverse divides by the learned gain.
    instance_steps : p >= 1: each input row holds p consecutive steps of the
        n_features / p channels, feature l * C + c being step l of channel c (the
        estimators' patches); the series are then (B, T * p, C) and a padded row
        pads its p steps. 1 (the default): a row is one step.
    positional : "none", "sinusoidal" (fixed sin/cos table added to H0), "learned"
        (`pos.P` (max_len, d_model), rows 0..T-1 added to H0) or "rope" (rotary
        positions inside every attention layer; needs an even d_model // n_heads).
    position_scale : a positive number the sinusoidal table is multiplied by before
        it is added to H0 (1: the plain table). It sets how much of the embedding the
        positions are next to the tokens' values, which the input's scale sets too:
        the estimators use 2 with their PPV tokens, whose features are scaled down.
        Only with positional="sinusoidal" (else it must be 1).
    norm : None or "pre" (pre-norm blocks and a final LayerNorm).
    causal : position t attends to positions <= t only.
    bias : attention and MLP biases (embed.b and head.b always exist).
    dropout : probability p in [0, 1) of zeroing an element of each residual branch
        (the attention output and the MLP output, before they are added to the
        residual stream), the kept ones scaled by 1/(1-p), as torch's dropout.
        Only in training forwards (grad=True); off with grad=False. The masks come
        from `dropout_rng`, a numpy Generator seeded from random_state: one 64-bit
        draw per training forward keys a counter-based stream (attnx.kernels._seq.
        random_bits) that gives each element 32 random bits, and an element is
        dropped when they read below p * 2**32; so a seeded fit is bit-reproducible; backward uses the forward's masks
        (dropout_masks() returns them). The attention probabilities themselves
        are not dropped.
    max_len : longest sequence; required by positional="learned".
    dtype : float32 or float64.
    random_state : seed for numpy.random.default_rng. Initial weights: embed.W
        uniform in +-1/sqrt(its input width); attention and MLP weights as in
        Transformer; pos.P normal with std 0.02; head.W uniform in
        +-1/sqrt(d_model); LayerNorm gains 1; every bias 0; then (drawn after the
        others, so models without them start as before) stem.{i}.W uniform in
        +-1/sqrt(kernel * C_i) (torch Conv1d's bound) and cls normal with std 0.02.

    forward(x, key_padding_mask) takes a (B, T) bool mask, True = padding:
    padded positions are never attended to, are left out of the pooling, give
    zero outputs with pooling=None (their dY is ignored) and receive zero
    gradient. With a stem the padded steps read as zero and a token is padded as
    attnx.kernels._embed.Windows.mask says (past ceil(t_b / stride) for a right-padded
    sequence of length t_b, or covering padded steps only).
    `params` / `grads`: read-only mappings of live views into one flat buffer
    (names revin.g, revin.b, stem.{i}.W, stem.{i}.b, embed.W, embed.b, pos.P, cls, layers.{i}.Wq ...
    layers.{i}.b2, layers.{i}.ln1.g/.b, layers.{i}.ln2.g/.b, norm.g, norm.b, head.W, head.b).
    Set `input_grad = False` to skip dL/dX in backward (it then returns None).
    """

    #: estimators score validation data with forward(grad=False): the inference
    #: path, without dropout
    validation_grad = False
    dtype: np.dtype[np.floating[Any]]
    dropout: float
    position_scale: float
    input_grad: bool
    _freeze_dropout: bool
    _bufs: WorkspaceCache
    attn: list[MultiHeadAttention]
    params: ParamDict
    grads: ParamDict
    _last: _Last | None
    stages: Stages

    def __init__(self, n_features: int, d_model: int, n_heads: int, n_layers: int,
                 n_outputs: int, *, d_hidden: int | None = None, pooling: str | None = None,
                 positional: str = "none", norm: str | None = None, causal: bool = False,
                 bias: bool = True, dropout: float = 0.0, max_len: int | None = None,
                 stem: Sequence[Sequence[int]] | None = None,
                 instance_norm: str | None = None, instance_affine: bool = False,
                 instance_steps: int = 1, dtype: npt.DTypeLike = np.float32,
                 random_state: RandomStateLike = None, position_scale: float = 1.0) -> None:
        self.n_features = check_positive_int("n_features", n_features)
        d = self.d_model = check_positive_int("d_model", d_model)
        h = self.n_heads = check_positive_int("n_heads", n_heads)
        self.n_layers = check_positive_int("n_layers", n_layers)
        self.n_outputs = check_positive_int("n_outputs", n_outputs)
        self.d_hidden = 4 * d if d_hidden is None else check_positive_int("d_hidden", d_hidden)
        if d % h:
            raise ValueError(f"n_heads must divide d_model, got d_model={d}, n_heads={h}")
        self.pooling = _choice("pooling", pooling, POOLING)
        self.positional = _choice("positional", positional, POSITIONAL)
        self.norm = _choice("norm", norm, NORM)
        if self.positional == "rope" and (d // h) % 2:
            raise ValueError(f"positional='rope' needs an even d_model // n_heads, got {d // h}")
        self.position_scale = _check_position_scale(position_scale, self.positional)
        self.causal, self.bias = bool(causal), bool(bias)
        if self.pooling == "cls" and self.causal:
            raise ValueError("pooling='cls' needs causal=False: the class token comes first "
                             "and would attend to itself only, got causal=True")
        self.stem = _stem.check_stem(stem)
        self.instance_norm, self.instance_affine, self.instance_steps = \
            _instance_norm.check(instance_norm, instance_affine, instance_steps,
                                 self.n_features, self.n_outputs)
        if (isinstance(dropout, bool) or not isinstance(dropout, numbers.Real)
                or not 0.0 <= float(dropout) < 1.0):
            raise ValueError(f"dropout must be a number in [0, 1), got {dropout!r}")
        self.dropout = float(dropout)
        if max_len is not None:
            max_len = check_positive_int("max_len", max_len)
        elif self.positional == "learned":
            raise ValueError("positional='learned' needs max_len (the longest sequence), "
                             "got max_len=None")
        self.max_len: int | None = max_len
        self.dtype = check_dtype(dtype)
        self.input_grad = True
        self._build(random_state)
        self._bufs = WorkspaceCache()
        self._last = None
        self._freeze_dropout = False  # tests: keep the last masks (finite differences)

    # ---- storage -------------------------------------------------------
    @staticmethod
    def param_layout(config: Mapping[str, Any]) -> list[tuple[str, tuple[int, ...]]]:
        """(name, shape) of every weight of the model get_config() describes, in the
        order of the flat buffer; "layers.{i}.attn" is layer i's attention block,
        (n,) values laid out as MultiHeadAttention's own. The one table of parameter
        sizes, the stages' tables end to end (attnx.layers.stages): _build allocates
        from it, config_n_params sums it."""
        return Stages(config).param_layout()

    @classmethod
    def config_n_params(cls, config: Mapping[str, Any]) -> int:
        """Number of parameters of the model get_config() describes (before building it)."""
        return sum(int(np.prod(shape)) for _, shape in cls.param_layout(config))

    def _build(self, random_state: RandomStateLike) -> None:
        """The stages (`stages`, what the compiled pass and the ONNX export are built
        from), the weights they lay out and initialise, and the attention layers."""
        #: the model's stages in order (attnx.layers.stages)
        self.stages = Stages(self.get_config())
        self.params, self.grads, rng = self.stages.allocate(random_state)
        self.attn = [blk.attn for blk in self.stages.blocks]
        # dropout masks come from their own stream, seeded from the same random_state
        self.dropout_rng = np.random.default_rng(rng.integers(0, 2**63 - 1))

    @property
    def n_params(self) -> int:
        """Number of trainable values."""
        return self.params.flat.size

    # ---- workspaces ----------------------------------------------------
    def forward_macs(self, nb: int, t: int) -> float:
        """Multiply-adds of a forward over (nb, t) (the thread policy's measure of a
        call's work): per token and layer the four projections, the MLP and the
        attention's scores and values, plus the embedding."""
        d, n = self.d_model, self.n_tokens(t)
        per_layer = 4 * d * d + 2 * d * self.d_hidden + 2 * n * d
        return float(nb * n * (self.n_layers * per_layer + d * self.n_features))

    def _buffers(self, nb: int, t: int, store: bool) -> tuple[_Buffers, int]:
        threads = threads_for(self.forward_macs(nb, t))
        # the cache keeps the entries whose first three fields match the newest
        # key's: the shape, so that training and inference buffers live side by side
        key = (nb, t, self.n_features, store, threads)

        def make() -> _Buffers:
            rows, d = nb * (t + 1), self.d_model   # the class token may add a row
            # BLAS takes 32-bit sizes: check before allocating (the attention layers
            # check theirs in their own workspace call)
            check_blas_int(f"a sequence model over batch={nb}, T={t}", ("batch*T", rows),
                           ("d_model", d), ("d_hidden", self.d_hidden),
                           ("n_features", self.n_features), ("n_outputs", self.n_outputs))
            drop = self.dropout > 0
            check_size(nbytes_of(self.dtype, self.stages.buffer_elements(nb, t, store,
                                                                         threads, drop)),
                       f"a {self.n_layers}-layer sequence model over batch={nb}, T={t}")
            return self.stages.make_buffers(nb, t, store, threads, drop)

        return self._bufs.get(key, store, make), threads

    def _out(self, name: str, out: object, shape: tuple[int, ...]) -> FloatArray:
        return out_array(name, out, shape, self.dtype)

    def n_tokens(self, seq_len: int) -> int:
        """Tokens the embedding makes of seq_len steps: seq_len, or the stem's output
        length (ceil division by each stride); the class token aside."""
        return _stem.lengths(self.stem, seq_len)[-1]

    def output_shape(self, batch: int, seq_len: int) -> tuple[int, ...]:
        """Shape of Y for an input (batch, seq_len, n_features)."""
        if self.pooling is None:
            return (batch, self.n_tokens(seq_len), self.n_outputs)
        return (batch, self.n_outputs)

    # ---- public API ----------------------------------------------------
    def forward(self, x: npt.ArrayLike, key_padding_mask: npt.ArrayLike | None = None, *,
                grad: bool = True, out: FloatArray | None = None) -> FloatArray:
        """Y for x (B, T, n_features): (B, N, n_outputs) with pooling=None (N = T
        without a stem, n_tokens(T) with one), else (B, n_outputs).

        key_padding_mask: (B, T) bool, True = padding (ragged batches right-padded).
        grad: keep what backward needs (False for inference: no dropout, less state).
        out: optional C-contiguous array of Y's shape and the model's dtype.
        """
        x = as_input("x", x, self.n_features)
        check_params(self.params)
        nb, t = x.shape[:2]
        n = self.n_tokens(t)
        if self.max_len is not None and n > self.max_len:
            what = f"{n} tokens after the stem" if self.stem else f"sequence length {t}"
            raise ValueError(f"x has {what}, longer than max_len={self.max_len} "
                             f"(shape {x.shape})")
        mask = None if key_padding_mask is None else as_mask(key_padding_mask, nb, t)
        y = self._out("out", out, self.output_shape(nb, t))
        b, threads = self._buffers(nb, t, grad)
        if grad:  # the buffers below may be the last forward's: it can no longer be backed
            self._last = None
        rows = nb * t
        cast_into("x", b.x, x.reshape(rows, self.n_features))
        km = None
        if mask is not None:
            np.copyto(b.mask, mask)
            km = b.mask
        drop = grad and self.dropout > 0
        if drop and not self._freeze_dropout:
            b.draw_masks(self.dropout_rng, self.dropout)
        kms = _stem.token_masks([st.windows for st in self.stages.stem], b.smask, km)
        kt = kms[-1]   # the tokens' key padding mask, with the class token's column
        if kt is not None and b.cmask is not None:
            b.cmask[:, 0] = 0
            b.cmask[:, 1:] = kt
            kt = b.cmask
        # BLAS single-threaded beside attnx's own threads
        with blas_single(threads, self.forward_macs(nb, t)):
            self._forward_pass(b, kms, kt, nb, grad, drop, threads,
                               y.reshape(-1, self.n_outputs))
        if grad:  # inference leaves the last training forward's state alone (thread safety)
            self._last = _Last(nb, t, b, threads, kt, drop)
        return y

    __call__ = forward

    def _forward_pass(self, b: _Buffers, kms: list[_U8Array | None], km: _U8Array | None,
                      nb: int, grad: bool, drop: bool, threads: int, y2: FloatArray) -> None:
        """The instance norm, then stem, embedding, class token, blocks, final norm,
        pooling and head in one compiled call on the buffers b, then RevIN's
        de-normalisation; kms the stem layers' masks (attnx.layers._stem), km the blocks'."""
        nth = row_threads(nb * b.tt, self.d_model, threads)
        inorm = self.stages.instance_norm
        if inorm is not None:
            inorm.forward(b, kms[0], nb, nth)
        comp = _sequence_blocks.stack_for(self.stages, b, km, nb, grad, drop, threads, nth)
        comp.whole.forward(y2 if b.yn is None else b.yn)
        if grad:
            for att, last in zip(self.attn, comp.lasts):
                att._last = last
        if inorm is not None and b.yn is not None:   # revin: the pass leaves
            inorm.denorm(b, nb, y2, nth)             # padded rows to the caller
            if self.pooling is None and km is not None:
                _seq.zero_masked_rows(y2, km)

    def backward(self, dy: npt.ArrayLike, *,
                 out: FloatArray | None = None) -> FloatArray | None:
        """Fill `grads` from dL/dY of the last forward (grad=True); returns dL/dX
        (B, T, n_features), or None when `input_grad` is False. `out` receives
        dL/dX without allocating."""
        if self._last is None:
            raise RuntimeError("backward needs a forward with grad=True first")
        nb, t, b, threads, km, drop = self._last
        shape = self.output_shape(nb, t)
        dy = np.asarray(dy) if not isinstance(dy, np.ndarray) else dy
        if dy.shape != shape:
            raise ValueError(f"dy must have the shape of the last output {shape}, "
                             f"got {dy.shape}")
        if dy.dtype.kind not in "fiu":
            raise TypeError(f"dy must hold real numbers, got dtype {dy.dtype}")
        dx = self._out("out", out, (nb, t, self.n_features)) if self.input_grad else None
        b.for_backward()
        cast_into("dy", b.dy, dy.reshape(b.dy.shape))
        # the forward's thread count: scratch is sized for it
        with blas_single(threads, self.forward_macs(nb, t)):
            self._backward_pass(b, km, nb, drop, threads,
                                None if dx is None else dx.reshape(-1, self.n_features))
        return dx

    def _backward_pass(self, b: _Buffers, km: _U8Array | None, nb: int, drop: bool,
                       threads: int, dx2: FloatArray | None) -> None:
        """RevIN's de-normalisation backward, the compiled pass's backward, then the
        instance norm's; dx2 receives dL/dX (skipped when None)."""
        nth = row_threads(nb * b.tt, self.d_model, threads)
        inorm = self.stages.instance_norm
        if inorm is not None and b.yn is not None:   # revin: dL/d(the head's output) first
            if self.pooling is None and km is not None:
                _seq.zero_masked_rows(b.dy, km)   # padded positions' dY is ignored
            inorm.denorm_backward(b, nb, nth)
        # with instance norm: dL/d(normalised X) first, then through the normalisation
        dxi = dx2 if inorm is None else b.dxn if inorm.needs_dxn(self.input_grad) else None
        # without revin the pass zeroes the padded rows of dY itself
        comp = _sequence_blocks.stack_for(self.stages, b, km, nb, True, drop, threads, nth)
        comp.whole.backward(dxi)
        if inorm is not None and dxi is not None:
            inorm.backward(b, b.mask if km is not None else None, nb, nth, dx2)

    def _check_weights_kept(self) -> None:
        if self._last is None:
            raise RuntimeError("no attention weights kept: call forward(x) with grad=True "
                               "first")

    def token_padding(self) -> _U8Array | None:
        """The key padding mask (B, tokens) the blocks read in the last training forward
        (1 = padded; after the stem, with the class token's column first); None when it
        had no key_padding_mask. RuntimeError before a training forward."""
        self._check_weights_kept()
        assert self._last is not None
        return self._last.km

    def dropout_masks(self) -> dict[str, FloatArray]:
        """The residual-branch dropout multipliers of the last training forward:
        name -> (B, tokens, d_model) copies with values 0 or 1/(1-dropout); names
        "layers.{i}.res1" (attention branch) and "layers.{i}.res2" (MLP branch).
        Empty when the last forward used no dropout."""
        last = self._last
        if last is None or not last.dropout:
            return {}
        nb, b = last.nb, last.bufs
        out = {}
        for blk in self.stages.blocks:
            i = blk.layer
            out[blk.prefix + "res1"] = b.m1[i].reshape(nb, b.tt, -1).copy()
            out[blk.prefix + "res2"] = b.m2[i].reshape(nb, b.tt, -1).copy()
        return out

    # ---- PyTorch weight exchange (attnx.layers._torch_layout) -----------------
    def torch_encoder_layer_state_dict(self, layer: int) -> dict[str, AnyArray]:
        """Block `layer` of a ``norm="pre"`` model as the state dict (NumPy copies) of
        ``torch.nn.TransformerEncoderLayer(d_model, n_heads, d_hidden, dropout=0,
        activation=F.silu, batch_first=True, norm_first=True, bias=bias)``: self_attn.*
        as MultiHeadAttention.torch_state_dict, linear1/linear2 = W1^T/W2^T (out, in),
        norm1/norm2 = ln1/ln2. Convert with torch.from_numpy for load_state_dict.
        torch's layer has no rotary positions; causal is its src_mask / is_causal."""
        from ._torch_layout import encoder_layer_state_dict

        return encoder_layer_state_dict(self.params, self._block_prefix(layer), self.d_model,
                                        self.bias)

    def load_torch_encoder_layer_state_dict(self, layer: int,
                                            state_dict: Any) -> SequenceModel:
        """Set block `layer` of a ``norm="pre"`` model from a
        torch.nn.TransformerEncoderLayer state dict (torch tensors or NumPy arrays; the
        inverse of torch_encoder_layer_state_dict). Keys and shapes must match exactly;
        all or nothing. Returns self."""
        from ._torch_layout import load_encoder_layer_state_dict

        load_encoder_layer_state_dict(self.params, self._block_prefix(layer), self.d_model,
                                      self.d_hidden, self.n_heads, self.bias, state_dict)
        return self

    def _block_prefix(self, layer: object) -> str:
        """The weights' prefix "layers.{layer}." of a pre-norm model's block (those map
        to torch's TransformerEncoderLayer); ValueError otherwise."""
        if self.norm != "pre":
            raise ValueError("only the blocks of a SequenceModel with norm='pre' map to "
                             "torch.nn.TransformerEncoderLayer(..., norm_first=True)")
        n = self.n_layers
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not \
                0 <= layer < n:
            raise ValueError(f"layer must be an int in [0, {n}), got {layer!r}")
        return self.stages.blocks[int(layer)].prefix

    def get_config(self) -> dict[str, Any]:
        """The constructor arguments (without random_state) that rebuild this model."""
        return dict(n_features=self.n_features, d_model=self.d_model, n_heads=self.n_heads,
                    n_layers=self.n_layers, n_outputs=self.n_outputs, d_hidden=self.d_hidden,
                    pooling=self.pooling, positional=self.positional, norm=self.norm,
                    causal=self.causal, bias=self.bias, dropout=self.dropout,
                    max_len=self.max_len, stem=self.stem, instance_norm=self.instance_norm,
                    instance_affine=self.instance_affine,
                    instance_steps=self.instance_steps, dtype=self.dtype.name,
                    **({} if self.position_scale == 1.0
                       else {"position_scale": self.position_scale}))

    def __reduce__(self) -> tuple[Callable[..., SequenceModel], tuple[Any, ...]]:
        # pickles the weights, the dropout generator and input_grad; workspaces,
        # gradients and the last forward's state start afresh
        return (_rebuild, (self.get_config(), self.params.flat.copy(),
                           self.dropout_rng.bit_generator.state, self.input_grad))

    def __repr__(self) -> str:
        opts = []
        for k, default in (("pooling", None), ("positional", "none"), ("norm", None),
                           ("causal", False), ("bias", True), ("dropout", 0.0),
                           ("max_len", None), ("stem", None), ("instance_norm", None),
                           ("instance_affine", False), ("instance_steps", 1),
                           ("position_scale", 1.0)):
            v = getattr(self, k)
            if v != default:
                opts.append(f"{k}={v!r}")
        return (f"SequenceModel(n_features={self.n_features}, d_model={self.d_model}, "
                f"n_heads={self.n_heads}, n_layers={self.n_layers}, "
                f"n_outputs={self.n_outputs}, d_hidden={self.d_hidden}"
                + "".join(", " + o for o in opts) + f", dtype={self.dtype.name})")


def row_threads(rows: int, d_model: int, threads: int) -> int:
    """Threads for the elementwise kernels over rows x d_model values: one for small work
    (the compiled pass and attnx.testing.reference_pass split the rows alike)."""
    return threads if rows * d_model >= 16384 else 1


def _check_position_scale(value: Any, positional: str) -> float:
    """position_scale as a float: a finite positive real, and 1 unless the positions
    are the sinusoidal table (ValueError otherwise)."""
    if (isinstance(value, bool) or not isinstance(value, numbers.Real)
            or not math.isfinite(float(value)) or not float(value) > 0):
        raise ValueError(f"position_scale must be a finite number > 0, got {value!r}")
    if float(value) != 1.0 and positional != "sinusoidal":
        raise ValueError(f"position_scale scales the sinusoidal table: it must be 1 with "
                         f"positional={positional!r}, got {value!r}")
    return float(value)


def _rebuild(config: dict[str, Any], flat: FloatArray, rng_state: dict[str, Any],
             input_grad: bool) -> SequenceModel:
    m = SequenceModel(**config, random_state=0)
    m.params.flat[...] = flat
    m.dropout_rng.bit_generator.state = rng_state
    m.input_grad = input_grad
    return m
