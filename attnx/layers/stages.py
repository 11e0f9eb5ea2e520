"""A SequenceModel as a list of stages, each one class owning its parameters, its
activation buffers and its kernel operands.

    InstanceNorm ("input" / "revin")   the input series normalised (revin: the outputs
                                       de-normalised after the head)
    StemLayer i (kernel, stride)       windows, one GEMM, bias, SiLU
    Embedding (width_in -> d_model)    the tokens' linear map
    Positions ("sinusoidal"/"learned") added to the embedding
    ClassToken                         the class token, prepended
    Block i                            a transformer block
    FinalNorm                          the last LayerNorm (pre-norm)
    Pooling ("mean"/"last"/"max"/"cls")  one row per sequence
    Head (d_model -> n_outputs)        the output map

`Stages(config)` makes the stages of the model get_config() describes, in that order
(a configuration's missing stages left out; rotary positions live in the blocks'
attention). Each stage declares:

- its parameters once (`params()`: name, shape, initialisation); the model's flat
  buffer is the stages' tables laid end to end (`Stages.param_layout`), each stage
  binding views of its own span (`bind`) and drawing its initial values (`init`);
- its activation buffers (`buffers()`: its entries of the model's one size table,
  attnx.layers._sequence_buffers allocating from it);
- its typed kernel operands (`operands()`, from its own weight and gradient views and
  those buffers): attnx.layers._sequence_blocks assembles the compiled whole pass
  (attnx.kernels._model_pass, where each stage's forward sits beside its backward)
  from them. The instance norm's forward and backward run in Python, in its class.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from . import _block_operands, _instance_norm, _stem
from ..kernels import _model_pass as _mp
from ..kernels._blocks import (AttentionOperands, BlockActivations, BlockWeights,
                               NormWeights)
from ..kernels._embed import Windows, same_padding
from ..runtime._params import ParamDict
from ._block_operands import LN_EPS
from ._sequence_buffers import BufferTable, Geometry, _Buffers, _buffers
from ._positions import sinusoidal_table
from .attention import MultiHeadAttention
from .attention import _Last as _AttentionLast

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..runtime._typing import FloatArray, RandomStateLike

    _U8Array = npt.NDArray[np.uint8]

_Shape = tuple[int, ...]
_Init = Callable[["FloatArray", np.random.Generator], None]


# ---- initialisations ------------------------------------------------------------------
def uniform(v: FloatArray, rng: np.random.Generator) -> None:
    """Uniform in +-1/sqrt(rows) (the input width of a y = x W map; torch's bound)."""
    bound = 1 / np.sqrt(v.shape[0])
    v[...] = rng.uniform(-bound, bound, size=v.shape)


def normal(v: FloatArray, rng: np.random.Generator) -> None:
    """Normal with std 0.02."""
    v[...] = rng.normal(0.0, 0.02, size=v.shape)


def ones(v: FloatArray, rng: np.random.Generator) -> None:
    """1 (a gain), no draw."""
    v[...] = 1


def zeros(v: FloatArray, rng: np.random.Generator) -> None:
    """0 (a bias), no draw."""
    v[...] = 0


class Param(NamedTuple):
    """One parameter of a stage: its name (the model's is the stage's prefix + name), its
    shape and its initialisation (None: the stage's own `init` sets it)."""

    name: str
    shape: _Shape
    init: _Init | None


# ---- the stages -----------------------------------------------------------------------
class Stage:
    """A stage: the prefix of its weights' names, its input and output widths, and after
    `bind` its weight and gradient views `w` and `g` (by the names of its `params`)."""

    prefix = ""
    w: dict[str, FloatArray]
    g: dict[str, FloatArray]

    def __init__(self, width_in: int, width_out: int) -> None:
        self.width_in, self.width_out = width_in, width_out

    def params(self) -> list[Param]:
        """The stage's parameters in the flat buffer's order (none by default)."""
        return []

    def names(self) -> list[str]:
        """The stage's names in the model's `params` mapping, in order."""
        return [p.name for p in self.params()]

    def buffers(self, geo: Geometry) -> BufferTable:
        """The stage's entries of the model's buffer size table (none by default)."""
        return _buffers()

    def bind(self, theta: FloatArray, grad: FloatArray, start: int) -> int:
        """Views of the stage's parameters in the flat weights and gradients from
        `start`; returns where the next stage's begin."""
        self.w, self.g = {}, {}
        for p in self.params():
            end = start + math.prod(p.shape)
            self.w[p.name] = theta[start:end].reshape(p.shape)
            self.g[p.name] = grad[start:end].reshape(p.shape)
            start = end
        return start

    def init(self, rng: np.random.Generator) -> None:
        """Initial values, drawn from rng in the order of `params`."""
        for p in self.params():
            if p.init is not None:
                p.init(self.w[p.name], rng)

    def _grad(self, name: str, grad: bool) -> FloatArray | None:
        return self.g[name] if grad else None

    def _detail(self) -> str:
        return ""

    def __repr__(self) -> str:
        extra = self._detail()
        return (f"{type(self).__name__}({self.prefix!r}, {self.width_in} -> {self.width_out}"
                + (f", {extra}" if extra else "") + ")")


class InstanceNorm(Stage):
    """instance_norm "input" or "revin" (attnx.layers._instance_norm's formulas), forward
    beside backward, on the model's buffers: the input rows hold `steps` steps of
    `channels` channels each; with instance_affine the gains and biases revin.g and
    revin.b, neighbours in the flat buffer, read as one (2, C) array (`coef`, `dcoef`;
    None without the map). With "revin" it also de-normalises the head's outputs."""

    prefix = "revin."
    coef: FloatArray | None
    dcoef: FloatArray | None

    def __init__(self, mode: str, affine: bool, steps: int, n_features: int,
                 n_outputs: int, pooled: bool) -> None:
        super().__init__(n_features, n_features)
        self.mode, self.affine, self.steps = mode, affine, steps
        self.revin = mode == "revin"
        self.channels = n_features // steps
        self.n_outputs, self.pooled = n_outputs, pooled
        self.coef = self.dcoef = None

    def params(self) -> list[Param]:
        c = self.channels
        return [Param("g", (c,), ones), Param("b", (c,), zeros)] if self.affine else []

    def bind(self, theta: FloatArray, grad: FloatArray, start: int) -> int:
        end = super().bind(theta, grad, start)
        if self.affine:   # the kernel reads [gamma; beta] as one array
            self.coef = theta[start:end].reshape(2, self.channels)
            self.dcoef = grad[start:end].reshape(2, self.channels)
        return end

    def buffers(self, geo: Geometry) -> BufferTable:
        """xn (the normalised input), rst (2, B, C) the series' mean and std, yn (the
        head's output before the de-normalisation, revin); backward dxn (dL/dxn), rdx
        (dL/dX scratch when only the affine map's gradient needs the pass), rdy (dL/dyn)
        and rdst (dL/d mean, std) for revin; rmask the series' steps' padding mask."""
        nb, t, f, c = geo.nb, geo.t, self.width_in, self.channels
        out_rows = nb if self.pooled else geo.rows
        rev = self.revin
        return _buffers(
            {"xn": [(nb * t, f)], "rst": [(2, nb, c)],
             "yn": [(out_rows, self.n_outputs)] if rev else []},
            {"dxn": [(nb * t, f)], "rdx": [(nb * t, f)] if self.affine else [],
             "rdy": [(out_rows, self.n_outputs)] if rev else [],
             "rdst": [(2, nb, c)] if rev else []},
            {"rmask": [((nb, t * self.steps), np.uint8)] if self.steps > 1 else []})

    def needs_dxn(self, input_grad: bool) -> bool:
        """Whether backward runs down to the normalised input: for dL/dX, or for the
        affine map's gradient."""
        return input_grad or self.coef is not None

    def step_mask(self, b: _Buffers, km: _U8Array | None, nb: int) -> _U8Array | None:
        """The series' (B, T * p) padding mask from the rows' (B, T) one."""
        if km is None or self.steps == 1:
            return km
        assert b.rmask is not None
        b.rmask.reshape(nb, -1, self.steps)[...] = km[:, :, None]
        return b.rmask

    def forward(self, b: _Buffers, km: _U8Array | None, nb: int, nth: int) -> FloatArray:
        """b.xn and b.rst from b.x; returns the normalised input (B * T, n_features)."""
        assert b.xn is not None and b.rst is not None
        c = self.channels
        _instance_norm.KERNEL.forward(b.x.reshape(nb, -1, c), self.step_mask(b, km, nb),
                                      self.coef, b.xn.reshape(nb, -1, c), b.rst, nth,
                                      check=False)
        return b.xn

    def backward(self, b: _Buffers, km: _U8Array | None, nb: int, nth: int,
                 dx2: FloatArray | None) -> None:
        """dL/dX into dx2 (or scratch when None) from b.dxn (km: the forward's; its
        series mask b.rmask is still the forward's), through the statistics (and, with
        revin, the gradients b.rdst reaching them from the outputs); the affine map's
        gradient added to the de-normalisation's (revin) or written."""
        assert b.dxn is not None and b.rst is not None
        c = self.channels
        dx = dx2 if dx2 is not None else b.rdx
        assert dx is not None
        _instance_norm.KERNEL.backward(
            b.dxn.reshape(nb, -1, c), b.x.reshape(nb, -1, c),
            km if km is None or self.steps == 1 else b.rmask, self.coef, b.rst,
            b.rdst if self.revin else None, dx.reshape(nb, -1, c), self.dcoef,
            accumulate=self.revin, nthreads=nth, check=False)

    def denorm(self, b: _Buffers, nb: int, y2: FloatArray, nth: int) -> None:
        """y2 (the head's rows) = the de-normalised b.yn."""
        assert b.yn is not None and b.rst is not None
        c = self.channels
        _instance_norm.KERNEL.denorm(b.yn.reshape(nb, -1, c), self.coef, b.rst,
                                     y2.reshape(nb, -1, c), nth, check=False)

    def denorm_backward(self, b: _Buffers, nb: int, nth: int) -> FloatArray:
        """dL/dyn (b.rdy) and dL/d(mean, std) (b.rdst) from b.dy; the affine map's
        gradient written (not added). Returns b.rdy."""
        assert b.yn is not None and b.rst is not None and b.rdy is not None
        assert b.rdst is not None
        c = self.channels
        _instance_norm.KERNEL.denorm_backward(
            b.dy.reshape(nb, -1, c), b.yn.reshape(nb, -1, c), self.coef, b.rst,
            b.rdy.reshape(nb, -1, c), self.dcoef, b.rdst, accumulate=False, nthreads=nth,
            check=False)
        return b.rdy

    def _detail(self) -> str:
        return f"{self.mode!r}" + (", affine" if self.affine else "") + (
            f", steps={self.steps}" if self.steps > 1 else "")


class StemLayer(Stage):
    """Stem layer i (attnx.layers._stem): windows of `kernel` steps every `stride` over
    its input ('same'-style zero padding), one GEMM with stem.{i}.W (kernel * C_i,
    d_model), the bias stem.{i}.b, SiLU."""

    def __init__(self, layer: int, kernel: int, stride: int, width_in: int,
                 d_model: int) -> None:
        super().__init__(width_in, d_model)
        self.layer, self.kernel, self.stride = layer, kernel, stride
        self.pad_left, self.pad_right = same_padding(kernel)
        self.prefix = f"stem.{layer}."
        self.windows = Windows(kernel, stride, self.pad_left, self.pad_right)

    def params(self) -> list[Param]:
        # W uniform in +-1/sqrt(kernel * C_i): torch Conv1d's bound
        return [Param("W", (self.kernel * self.width_in, self.width_out), uniform),
                Param("b", (self.width_out,), zeros)]

    def buffers(self, geo: Geometry) -> BufferTable:
        """su (windows), sz (before SiLU), ss (after SiLU), ssg (sigmoid, training
        only); backward dss (dL/d ss, then dL/d sz in place) and dsu (dL/d su); smask
        the output tokens' padding mask."""
        nb, n = geo.nb, geo.lens[self.layer + 1]
        su: list[_Shape] = [(nb * n, self.kernel * self.width_in)]
        rows: list[_Shape] = [(nb * n, self.width_out)]
        return _buffers({"su": su, "sz": rows, "ss": rows, "ssg": rows if geo.store else []},
                        {"dss": rows, "dsu": su}, {"smask": [((nb, n), np.uint8)]})

    def operands(self, b: _Buffers, km: _U8Array | None, grad: bool) -> _mp.StemOperands:
        """The layer's call; km: the blocks' key padding mask (None: no mask)."""
        i = self.layer
        return _mp.StemOperands(
            self.kernel, self.stride, self.pad_left, self.pad_right, t_in=b.lens[i],
            km=None if km is None else b.mask if i == 0 else b.smask[i - 1],
            W=self.w["W"], b=self.w["b"], dW=self._grad("W", grad), db=self._grad("b", grad),
            acts=_mp.StemActivations(su=b.su[i], sz=b.sz[i], ss=b.ss[i],
                                     ssg=b.ssg[i] if grad else None,
                                     dss=b.dss[i] if grad else None,
                                     dsu=b.dsu[i] if grad else None))

    def _detail(self) -> str:
        return f"kernel={self.kernel}, stride={self.stride}"


class Embedding(Stage):
    """H0 = A embed.W + embed.b (+ the positions): A the input (or the stem's output)."""

    prefix = "embed."

    def params(self) -> list[Param]:
        return [Param("W", (self.width_in, self.width_out), uniform),
                Param("b", (self.width_out,), zeros)]

    def operands(self, b: _Buffers, x: FloatArray, pos: FloatArray | None,
                 dpos: FloatArray | None, grad: bool) -> _mp.EmbedEnd:
        """The embedding of x (the input, or the stem's output), the model's input
        being b.x or its normalised copy b.xn."""
        return _mp.EmbedEnd(x_in=b.x if b.xn is None else b.xn, x=x, W=self.w["W"],
                            b=self.w["b"], dW=self._grad("W", grad), db=self._grad("b", grad),
                            pos=pos, dpos=dpos, h0=b.hs[0])


class Positions(Stage):
    """The table added to the embedding: the sinusoidal one (times position_scale, one per
    token count, kept), or the learned pos.P (max_len, d_model), its first rows read."""

    def __init__(self, how: str, d_model: int, max_len: int | None, position_scale: float,
                 dtype: np.dtype[Any]) -> None:
        super().__init__(d_model, d_model)
        self.how, self.max_len = how, max_len
        self.position_scale, self.dtype = position_scale, dtype
        self.prefix = "pos." if how == "learned" else ""
        self._tables: dict[int, FloatArray] = {}

    def params(self) -> list[Param]:
        if self.how != "learned":
            return []
        assert self.max_len is not None   # checked by the model
        return [Param("P", (self.max_len, self.width_out), normal)]

    def table(self, n: int) -> FloatArray:
        """The table the embedding adds for n tokens (pos.P: its first n rows are read)."""
        if self.how == "learned":
            return self.w["P"]
        tab = self._tables.get(n)
        if tab is None:   # one table per length (ragged batches revisit theirs), <= 64
            tables = self._tables if len(self._tables) < 64 else {}
            tab = sinusoidal_table(n, self.width_out, np.float64)
            tab = tables[n] = np.ascontiguousarray(tab * self.position_scale, self.dtype)
            self._tables = tables
        return tab

    def operands(self, n: int, grad: bool) -> tuple[FloatArray, FloatArray | None]:
        """The table for n tokens and its gradient (learned positions, training)."""
        return self.table(n), self._grad("P", grad) if self.how == "learned" else None

    def _detail(self) -> str:
        return repr(self.how)


class ClassToken(Stage):
    """The learnable class token `cls` (d_model,) put before the tokens."""

    def params(self) -> list[Param]:
        return [Param("cls", (self.width_out,), normal)]

    def buffers(self, geo: Geometry) -> BufferTable:
        """emb: the tokens before the class token, demb their gradient; cmask the
        blocks' padding mask with the token's column."""
        rows: list[_Shape] = [(geo.nb * geo.lens[-1], self.width_out)]
        return _buffers({"emb": rows}, {"demb": rows},
                        ints={"cmask": [((geo.nb, geo.tt), np.uint8)]})

    def operands(self, b: _Buffers, grad: bool) -> _mp.ClassToken:
        return _mp.ClassToken(cls=self.w["cls"], dcls=self._grad("cls", grad), emb=b.emb,
                              demb=b.demb if grad else None)


class Block(Stage):
    """Transformer block i of n_layers (SequenceModel's docstring has the formulas): its
    attention layer (`attn`, a MultiHeadAttention on the span layers.{i}.attn of the
    flat buffer, made by `init`), the SiLU MLP W1 (d, d_hidden), W2 and the biases b1,
    b2 (bias), the LayerNorms ln1, ln2 (pre-norm). Its buffers are the block's
    activations and, for the first block, those the stack shares."""

    attn: MultiHeadAttention
    _storage: tuple[FloatArray, FloatArray, int]

    def __init__(self, layer: int, n_layers: int, d_model: int, d_hidden: int, n_heads: int,
                 *, pre: bool, bias: bool, causal: bool, rope: bool,
                 dtype: np.dtype[Any]) -> None:
        super().__init__(d_model, d_model)
        self.layer, self.n_layers, self.d_hidden, self.n_heads = layer, n_layers, d_hidden, \
            n_heads
        self.pre, self.bias, self.causal, self.rope, self.dtype = pre, bias, causal, rope, dtype
        self.prefix = f"layers.{layer}."

    def params(self) -> list[Param]:
        d, dh = self.width_in, self.d_hidden
        out = [Param("attn", (MultiHeadAttention.n_params(d, self.bias),), None),
               Param("W1", (d, dh), uniform), Param("W2", (dh, d), uniform)]
        if self.bias:
            out += [Param("b1", (dh,), zeros), Param("b2", (d,), zeros)]
        if self.pre:
            out += [Param(n + s, (d,), ones if s == ".g" else zeros)
                    for n in ("ln1", "ln2") for s in (".g", ".b")]
        return out

    def names(self) -> list[str]:
        # `params` has always listed every matrix, then every vector, the attention's first
        att = list(self.attn.params)
        own = [p for p in self.params() if p.init is not None]
        return ([n for n in att if self.w[n].ndim == 2] + [p.name for p in own
                                                           if len(p.shape) == 2]
                + [n for n in att if self.w[n].ndim == 1] + [p.name for p in own
                                                             if len(p.shape) == 1])

    def bind(self, theta: FloatArray, grad: FloatArray, start: int) -> int:
        self._storage = (theta, grad, start)   # the attention's span comes first
        end = super().bind(theta, grad, start)
        del self.w["attn"], self.g["attn"]     # the attention layer's own views replace it
        return end

    def init(self, rng: np.random.Generator) -> None:
        """The attention layer (drawing its weights), then W1, W2 and the norms."""
        self.attn = MultiHeadAttention(
            self.width_in, self.n_heads, causal=self.causal, bias=self.bias, rope=self.rope,
            dtype=self.dtype, random_state=rng, attention="auto", _storage=self._storage)
        self.w.update(self.attn.params)
        self.g.update(self.attn.grads)
        super().init(rng)

    def buffers(self, geo: Geometry) -> BufferTable:
        """zt (Z~ = attention branch + residual), hid (Z W1 + b1), s (silu), sg (sigmoid,
        training), u1, u2 and st1, st2 (pre-norm: the LayerNorms' outputs and row
        statistics, mean and 1/std), m1, m2 (dropout: the branches' multipliers).
        Inference keeps one set, the first block's, for every block."""
        rows, d, dh = geo.rows, self.width_in, self.d_hidden
        own = geo.store or self.layer == 0
        act: list[_Shape] = [(rows, d)] if own else []
        stats: list[_Shape] = [(2, rows)] if own and self.pre else []
        masks: list[_Shape] = [(rows, d)] if geo.drop and geo.store else []
        tab = _buffers({"zt": act, "hid": [(rows, dh)] if own else [],
                        "s": [(rows, dh)] if own else [],
                        "sg": [(rows, dh)] if geo.store else [],
                        "u1": act if self.pre else [], "u2": act if self.pre else [],
                        "st1": stats, "st2": stats, "m1": masks, "m2": masks})
        return BufferTable.merge([tab, self._stack_buffers(geo)]) if self.layer == 0 else tab

    def _stack_buffers(self, geo: Geometry) -> BufferTable:
        """What the blocks share: hs (the block inputs, hs[L] the output; inference: two
        that alternate, a block never writing its own input), branch (a branch's output
        before it is masked), the dropout masks' random bits (one 32-bit draw per
        element), the backward scratch (dhf: dL/d the top rows, da: after the final
        norm's backward, part: per-thread LayerNorm gain sums)."""
        rows, d, L = geo.rows, self.width_in, self.n_layers
        drop = geo.drop and geo.store
        return _buffers(
            {"hs": [(rows, d)] * (L + 1 if geo.store else 2),
             "branch": [(rows, d)] if drop else []},
            {"dhf": [(rows, d)], "da": [(rows, d)], "db": [(rows, d)], "dzt": [(rows, d)],
             "dbr": [(rows, d)] if geo.drop else [], "dhid": [(rows, self.d_hidden)],
             "part": [(max(geo.threads, 1), 2 * d)]},
            {"bits": [((2 * L * rows * d,), np.uint32)] if drop else []})

    def operands(self, b: _Buffers, km: _U8Array | None, nb: int, grad: bool, drop: bool,
                 threads: int) -> tuple[AttentionOperands, _AttentionLast, BlockWeights,
                                        BlockActivations]:
        """The block's attention call (and the state its training forward leaves), its
        weights and its activations, over the buffers b (km: the blocks' mask)."""
        i, t, pre = self.layer, b.tt, self.pre
        ops, last = _block_operands.attention(self.attn, nb, t, t, grad, threads, km,
                                              b.u1[i] if pre else b.hs[i], None)
        acts = BlockActivations(
            h=b.hs[i], h_out=b.hs[i + 1], zt=b.zt[i], u1=b.u1[i] if pre else None,
            u2=b.u2[i] if pre else None, st1=b.st1[i] if pre else None,
            st2=b.st2[i] if pre else None, hid=b.hid[i], s=b.s[i],
            sg=b.sg[i] if grad else None, m1=b.m1[i] if drop else None,
            m2=b.m2[i] if drop else None)
        return ops, last, _block_operands.weights(self.w, self.g, "", pre), acts

    def _detail(self) -> str:
        return f"d_hidden={self.d_hidden}" + (", pre-norm" if self.pre else "")


class FinalNorm(Stage):
    """The LayerNorm after the last block (pre-norm): norm.g, norm.b."""

    prefix = "norm."

    def params(self) -> list[Param]:
        d = self.width_in
        return [Param("g", (d,), ones), Param("b", (d,), zeros)]

    def buffers(self, geo: Geometry) -> BufferTable:
        """hf: the normed rows (without the norm hf is the stack's output), stf their
        statistics."""
        return _buffers({"hf": [(geo.rows, self.width_in)], "stf": [(2, geo.rows)]})

    def operands(self) -> NormWeights:
        w, g = self.w, self.g
        return NormWeights(w["g"], w["b"], g["g"], g["b"], LN_EPS)


class Pooling(Stage):
    """One row per sequence: "mean", "last", "max" (per feature) or "cls" (the class
    token's row)."""

    def __init__(self, how: str, d_model: int) -> None:
        super().__init__(d_model, d_model)
        self.how = how

    def buffers(self, geo: Geometry) -> BufferTable:
        """pooled (B, d) and its gradient dpooled; idx the maxima's positions (max)."""
        pooled: list[_Shape] = [(geo.nb, self.width_in)]
        return _buffers({"pooled": pooled}, {"dpooled": pooled},
                        {"idx": [((geo.nb, self.width_in), np.int64)]
                         if self.how == "max" else []})

    @staticmethod
    def end(pool: Pooling | None, norm: FinalNorm | None, b: _Buffers,
            grad: bool) -> _mp.PoolEnd:
        """The pass's top end: the final norm (if any), then the pooling (if any)."""
        return _mp.PoolEnd(None if pool is None else pool.how,
                           None if norm is None else norm.operands(), h_top=b.hs[-1],
                           hf=b.hf, stf=b.stf, pooled=b.pooled, idx=b.idx,
                           dhf=b.dhf if grad else None, dpooled=b.dpooled if grad else None)

    def _detail(self) -> str:
        return repr(self.how)


class Head(Stage):
    """Y = pooled head.W + head.b (d_model -> n_outputs), per sequence or per token."""

    prefix = "head."

    def __init__(self, d_model: int, n_outputs: int, pooled: bool) -> None:
        super().__init__(d_model, n_outputs)
        self.pooled = pooled

    def params(self) -> list[Param]:
        return [Param("W", (self.width_in, self.width_out), uniform),
                Param("b", (self.width_out,), zeros)]

    def buffers(self, geo: Geometry) -> BufferTable:
        """dy: dL/dY (its rows: one per sequence pooled, else per token)."""
        return _buffers(backward={"dy": [(geo.nb if self.pooled else geo.rows,
                                           self.width_out)]})

    def operands(self, b: _Buffers, grad: bool) -> _mp.HeadEnd:
        # revin de-normalises the head's output (b.yn) and runs its gradient first (rdy)
        return _mp.HeadEnd(W=self.w["W"], b=self.w["b"], dW=self._grad("W", grad),
                           db=self._grad("b", grad),
                           dy=(b.dy if b.rdy is None else b.rdy) if grad else None,
                           zero_padded=b.yn is None)


#: the order the stages draw their initial values from the one generator: the first
#: stages of the model's history first, those added later after them (so that models
#: without them start as before); the others draw nothing
DRAW_ORDER: tuple[type[Stage], ...] = (Embedding, Block, Positions, Head, StemLayer,
                                       ClassToken, InstanceNorm, FinalNorm, Pooling)


# ---- the model's stages ---------------------------------------------------------------
class Stages:
    """The stages, in order, of the SequenceModel that get_config() describes (a
    configuration read from a file is checked for its stem); iterating gives them in
    order, the attributes by kind (None or [] when the configuration has none)."""

    instance_norm: InstanceNorm | None
    stem: list[StemLayer]
    embed: Embedding
    positions: Positions | None
    cls: ClassToken | None
    blocks: list[Block]
    final_norm: FinalNorm | None
    pool: Pooling | None
    head: Head

    def __init__(self, config: Mapping[str, Any]) -> None:
        f, d = int(config["n_features"]), int(config["d_model"])
        n_out, L = int(config["n_outputs"]), int(config["n_layers"])
        dh = 4 * d if config["d_hidden"] is None else int(config["d_hidden"])
        dtype = np.dtype(config["dtype"])
        pooling, norm = config.get("pooling"), config.get("norm")
        pooled, pre = pooling is not None, norm == "pre"
        # configurations written before instance normalisation existed have none
        inorm = config.get("instance_norm")
        self.instance_norm = None if inorm is None else InstanceNorm(
            inorm, bool(config.get("instance_affine", False)),
            int(config.get("instance_steps", 1)), f, n_out, pooled)
        self.stem = []
        width = f
        for i, (k, s) in enumerate(_stem.check_stem(config.get("stem")) or ()):
            self.stem.append(StemLayer(i, k, s, width, d))
            width = d
        self.embed = Embedding(width, d)
        positional = config.get("positional", "none")
        self.positions = (Positions(positional, d, config.get("max_len"),
                                    float(config.get("position_scale", 1.0)), dtype)
                          if positional in ("sinusoidal", "learned") else None)
        self.cls = ClassToken(d, d) if pooling == "cls" else None
        self.blocks = [Block(i, L, d, dh, int(config["n_heads"]), pre=pre,
                             bias=bool(config["bias"]), causal=bool(config["causal"]),
                             rope=positional == "rope", dtype=dtype) for i in range(L)]
        self.final_norm = FinalNorm(d, d) if pre else None
        self.pool = None if pooling is None else Pooling(pooling, d)
        self.head = Head(d, n_out, pooled)
        self.n_features, self.dtype = f, dtype

    def __iter__(self) -> Iterator[Stage]:
        if self.instance_norm is not None:
            yield self.instance_norm
        yield from self.stem
        yield self.embed
        for st in (self.positions, self.cls):
            if st is not None:
                yield st
        yield from self.blocks
        for end in (self.final_norm, self.pool):
            if end is not None:
                yield end
        yield self.head

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return "Stages(\n" + "".join(f"  {st!r},\n" for st in self) + ")"

    # ---- parameters ---------------------------------------------------------------
    def param_layout(self) -> list[tuple[str, _Shape]]:
        """(name, shape) of every weight, in the flat buffer's order: the stages in
        order, each with its table ("layers.{i}.attn": block i's attention span)."""
        return [(st.prefix + p.name, p.shape) for st in self for p in st.params()]

    def allocate(self, random_state: RandomStateLike
                 ) -> tuple[ParamDict, ParamDict, np.random.Generator]:
        """The flat weights and gradients laid out from the stages' tables, each stage
        bound to its span and initialised (in DRAW_ORDER); returns `params`, `grads`
        and the generator after the draws."""
        size = sum(math.prod(shape) for _, shape in self.param_layout())
        theta, grad = np.zeros(size, self.dtype), np.zeros(size, self.dtype)
        at = 0
        for st in self:
            at = st.bind(theta, grad, at)
        assert at == size
        rng = np.random.default_rng(random_state)
        order = list(self)
        for kind in DRAW_ORDER:
            for st in order:
                if type(st) is kind:
                    st.init(rng)
        named = [(st.prefix + n, st.w[n], st.g[n]) for st in self for n in st.names()]
        return (ParamDict(theta, [(n, w) for n, w, _ in named]),
                ParamDict(grad, [(n, g) for n, _, g in named]), rng)

    # ---- buffers -------------------------------------------------------------------
    def lengths(self, t: int) -> list[int]:
        """The steps each stem layer reads, then the tokens (attnx.layers._stem.lengths)."""
        return _stem.lengths(tuple((s.kernel, s.stride) for s in self.stem), t)

    def geometry(self, nb: int, t: int, store: bool, threads: int, drop: bool) -> Geometry:
        lens = self.lengths(t)
        return Geometry(nb, t, lens, lens[-1] + (self.cls is not None), store, threads, drop)

    def buffer_table(self, geo: Geometry) -> BufferTable:
        """The model's one buffer size table: its input x and mask, then the stages'
        entries in order."""
        x = _buffers({"x": [(geo.nb * geo.t, self.n_features)]},
                     ints={"mask": [((geo.nb, geo.t), np.uint8)]})
        return BufferTable.merge([x] + [st.buffers(geo) for st in self])

    def buffer_elements(self, nb: int, t: int, store: bool, threads: int,
                        drop: bool) -> int:
        """Floats the buffers of make_buffers hold (with the backward scratch when
        store)."""
        return self.buffer_table(self.geometry(nb, t, store, threads, drop)).elements(store)

    def make_buffers(self, nb: int, t: int, store: bool, threads: int,
                     drop: bool) -> _Buffers:
        """The buffers of nb sequences of t steps, training (store) or inference, for
        `threads` threads, with dropout masks when drop, allocated from the table."""
        geo = self.geometry(nb, t, store, threads, drop)
        return _Buffers(self.buffer_table(geo), geo, self.dtype, len(self.blocks))
