"""SequenceModel's activations and backward scratch (one size table, allocated from
it) and the state a training forward leaves for backward."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from . import _instance_norm, _stem
from ..kernels import _seq

if TYPE_CHECKING:
    import numpy.typing as npt

    from collections.abc import Mapping

    from ..runtime._typing import FloatArray

    _Shapes = dict[str, list[tuple[int, ...]]]
    _Index = dict[str, list[tuple[tuple[int, ...], type[np.generic]]]]
    _U8Array = npt.NDArray[np.uint8]


# backward scratch held as one array per stem layer
_PER_LAYER = ("dss", "dsu")


class Sizes(NamedTuple):
    """What a SequenceModel's buffers are sized by, read from its get_config()."""

    n_features: int
    d_model: int
    d_hidden: int
    n_layers: int
    n_outputs: int
    stem: tuple[tuple[int, int], ...] | None
    pooling: str | None
    norm: str | None
    dropout: bool        # whether there are dropout masks
    instance_norm: str | None
    instance_affine: bool
    instance_steps: int
    dtype: np.dtype[Any]

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> Sizes:
        d = int(config["d_model"])
        stem = config.get("stem")
        return cls(int(config["n_features"]), d,
                   4 * d if config["d_hidden"] is None else int(config["d_hidden"]),
                   int(config["n_layers"]), int(config["n_outputs"]),
                   None if stem is None else tuple((int(k), int(s)) for k, s in stem),
                   config.get("pooling"), config.get("norm"),
                   float(config.get("dropout", 0.0)) > 0,
                   config.get("instance_norm"), bool(config.get("instance_affine", False)),
                   int(config.get("instance_steps", 1)), np.dtype(config["dtype"]))


class _Buffers:
    """Activations and backward scratch of one (batch, T, store, threads) signature.

    Buffers a configuration does not use are None (single arrays) or empty lists
    (per-layer lists)."""

    # backward scratch, made by for_backward (dpooled without pooling and dbr
    # without dropout stay None)
    dy: FloatArray
    dpooled: FloatArray | None
    dhf: FloatArray
    da: FloatArray
    db: FloatArray
    dzt: FloatArray
    dhid: FloatArray
    part: FloatArray
    dbr: FloatArray | None
    demb: FloatArray | None
    dss: list[FloatArray]
    idx: npt.NDArray[np.int64] | None
    dsu: list[FloatArray]
    # instance normalisation (attnx.layers._instance_norm): None when unused
    dxn: FloatArray | None
    rdx: FloatArray | None
    rdy: FloatArray | None
    rdst: FloatArray | None

    @staticmethod
    def shapes(config: Mapping[str, Any], nb: int, t: int, store: bool,
               threads: int) -> tuple[_Shapes, _Shapes, _Index]:
        """The one size table of the buffers: name -> the shapes of its distinct
        arrays, for the forward, for the backward scratch, and (shape, dtype) of the
        integer ones (key padding masks, max pooling's indices). __init__ and
        for_backward allocate from it, elements() sums its floats. Without store
        (inference) the per-layer activations are one array shared by every layer and
        the block outputs two that alternate (a block never writes its own input).
        The blocks run over tt tokens per sequence: the stem's output length n (t
        without a stem), plus the class token with pooling="cls". config: the
        model's get_config()."""
        m = Sizes.of(config)
        lens = _stem.lengths(m.stem, t)
        n = lens[-1]
        cls = m.pooling == "cls"
        tt = n + cls
        rows, d, dh, L = nb * tt, m.d_model, m.d_hidden, m.n_layers
        nl = L if store else 1
        pre, pooled, drop = m.norm == "pre", m.pooling is not None, m.dropout
        stem_fwd, stem_bwd = _stem.buffer_shapes(m.stem, m.n_features, d, nb, lens, store)
        inorm_fwd, inorm_bwd = _instance_norm.buffer_shapes(
            m.instance_norm, m.instance_affine, m.instance_steps, m.n_features, m.n_outputs,
            nb, t, nb if pooled else rows)
        forward: _Shapes = {
            "x": [(nb * t, m.n_features)], **inorm_fwd, **stem_fwd,
            "emb": [(nb * n, d)] if cls else [],    # tokens before the class token
            "hs": [(rows, d)] * (L + 1 if store else 2),   # block inputs; hs[L] the output
            "zt": [(rows, d)] * nl,          # Z~ = attention branch + residual
            "hid": [(rows, dh)] * nl,        # Z W1 + b1
            "s": [(rows, dh)] * nl,          # silu
            "sg": [(rows, dh)] * L if store else [],   # sigmoid, for backward
            # pre-norm: LN outputs and their row statistics (mean, 1/std)
            "u1": [(rows, d)] * nl if pre else [], "u2": [(rows, d)] * nl if pre else [],
            "st1": [(2, rows)] * nl if pre else [], "st2": [(2, rows)] * nl if pre else [],
            "hf": [(rows, d)] if pre else [],    # after the final norm (else hs[L])
            "stf": [(2, rows)] if pre else [],
            "pooled": [(nb, d)] if pooled else [],   # (else hf)
            # dropout: a branch's output before it is masked, and the multipliers
            "branch": [(rows, d)] if drop and store else [],
            "m1": [(rows, d)] * L if drop and store else [],
            "m2": [(rows, d)] * L if drop and store else []}
        backward: _Shapes = {
            "dy": [(nb if pooled else rows, m.n_outputs)],
            "dpooled": [(nb, d)] if pooled else [],
            "dhf": [(rows, d)], "da": [(rows, d)], "db": [(rows, d)], "dzt": [(rows, d)],
            "dbr": [(rows, d)] if drop else [],
            "dhid": [(rows, dh)],
            "part": [(max(threads, 1), 2 * d)],   # per-thread LayerNorm gain sums
            "demb": [(nb * n, d)] if cls else [], **stem_bwd, **inorm_bwd}
        u8 = np.uint8
        index: _Index = {
            "mask": [((nb, t), u8)],                                  # the input's
            "smask": [((nb, lens[i + 1]), u8) for i in range(len(lens) - 1)],   # stem's
            "cmask": [((nb, tt), u8)] if cls else [],                 # with the token
            # the input series' steps (instance normalisation over patches)
            "rmask": [((nb, t * m.instance_steps), u8)]
            if m.instance_norm is not None and m.instance_steps > 1 else [],
            "idx": [((nb, d), np.int64)] if m.pooling == "max" else [],
            # the dropout masks' random bits (one 32-bit draw per element)
            "bits": [((2 * L * rows * d,), np.uint32)] if drop and store else []}
        return forward, backward, index

    @classmethod
    def elements(cls, config: Mapping[str, Any], nb: int, t: int, store: bool,
                 threads: int) -> int:
        """Floats held by the buffers (with the backward scratch when store: a
        training forward is followed by a backward); the integer buffers aside."""
        forward, backward, _ = cls.shapes(config, nb, t, store, threads)
        tables = (forward, backward) if store else (forward,)
        return sum(math.prod(sh) for tab in tables for shapes in tab.values() for sh in shapes)

    def __init__(self, config: Mapping[str, Any], nb: int, t: int, store: bool,
                 threads: int) -> None:
        m = Sizes.of(config)
        forward, self._backward, index = self.shapes(config, nb, t, store, threads)
        self.dtype = m.dtype
        # the floats held once a training forward's backward scratch exists (the
        # workspace cache weighs entries by it)
        self.nbytes = self.elements(config, nb, t, store, threads) * m.dtype.itemsize
        a = {name: [np.empty(sh, dtype=m.dtype) for sh in shapes]
             for name, shapes in forward.items()}
        L = m.n_layers

        def per_layer(name: str) -> list[FloatArray]:
            # training keeps every layer's activations for backward; inference
            # reuses one set for all layers
            return a[name] if store else a[name] * L

        self.x = a["x"][0]
        self.xn, self.rst, self.yn = (a[k][0] if a.get(k) else None
                                      for k in ("xn", "rst", "yn"))
        self.su, self.sz, self.ss, self.ssg = a["su"], a["sz"], a["ss"], a["ssg"]
        self.emb = a["emb"][0] if a["emb"] else None
        self.hs = a["hs"] if store else [a["hs"][i % 2] for i in range(L + 1)]
        self.zt, self.hid, self.s = per_layer("zt"), per_layer("hid"), per_layer("s")
        self.sg = a["sg"]
        self.u1, self.u2 = per_layer("u1"), per_layer("u2")
        self.st1, self.st2 = per_layer("st1"), per_layer("st2")
        self.hf = a["hf"][0] if a["hf"] else self.hs[L]
        self.stf = a["stf"][0] if a["stf"] else None
        self.pooled = a["pooled"][0] if a["pooled"] else self.hf
        ints: dict[str, list[npt.NDArray[Any]]] = {
            name: [np.empty(sh, dtype=dt) for sh, dt in v] for name, v in index.items()}
        self.mask, self.smask = ints["mask"][0], ints["smask"]
        self.cmask = ints["cmask"][0] if ints["cmask"] else None
        self.rmask = ints["rmask"][0] if ints["rmask"] else None
        self.idx = ints["idx"][0] if ints["idx"] else None
        self.bits = ints["bits"][0] if ints["bits"] else None
        self.branch = a["branch"][0] if a["branch"] else None
        self.m1, self.m2 = a["m1"], a["m2"]
        self.lens = _stem.lengths(m.stem, t)   # steps per stem layer, then tokens
        self.n = self.lens[-1]                 # tokens from the stem (t without)
        self.tt = self.n + (m.pooling == "cls")   # tokens in the blocks
        self._has_backward = False
        # compiled block stacks over these buffers (attnx.layers._sequence_blocks)
        self.stacks: dict[tuple[Any, ...], Any] = {}

    def draw_masks(self, rng: np.random.Generator, p: float) -> None:
        """New dropout multipliers (0 or 1/(1-p)) from the generator: 32 random bits per
        element, the bits and every mask in one call (one 64-bit draw)."""
        assert self.bits is not None   # buffers with masks have their bits
        _seq.dropout_masks(rng.bit_generator, self.bits, self.m1 + self.m2, p)

    def for_backward(self) -> _Buffers:
        """The backward scratch, made on first use."""
        if not self._has_backward:
            for name, shapes in self._backward.items():
                if name in _PER_LAYER:
                    setattr(self, name, [np.empty(sh, dtype=self.dtype) for sh in shapes])
                else:
                    setattr(self, name,
                            np.empty(shapes[0], dtype=self.dtype) if shapes else None)
            self._has_backward = True
        return self


class _Last(NamedTuple):
    """What backward needs from the last training forward."""

    nb: int
    t: int                       # the input's steps (the blocks run on bufs.tt tokens)
    bufs: _Buffers
    threads: int                 # the forward's thread count
    km: _U8Array | None          # the blocks' key padding mask (uint8; tokens)
    dropout: bool                # whether it drew dropout masks
