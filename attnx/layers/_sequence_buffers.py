"""SequenceModel's buffer size table (each stage of attnx.layers.stages declares its
entries), its activations and backward scratch allocated from it, and the state a
training forward leaves for backward."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import numpy as np

from ..kernels import _seq

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..runtime._typing import FloatArray

    _U8Array = npt.NDArray[np.uint8]

_Shape = tuple[int, ...]
_T = TypeVar("_T")


class Geometry(NamedTuple):
    """What a set of buffers is sized by: nb sequences of t steps, `lens` the steps of
    each stem layer's input then the tokens, tt the tokens in the blocks (the class
    token's row included), training (store) or inference, the threads, and whether
    there are dropout masks."""

    nb: int
    t: int
    lens: list[int]
    tt: int
    store: bool
    threads: int
    drop: bool

    @property
    def rows(self) -> int:
        """The blocks' rows."""
        return self.nb * self.tt


_Table = dict[str, list[_Shape]]
_Index = dict[str, list[tuple[_Shape, type[np.generic]]]]


class BufferTable(NamedTuple):
    """Buffers by name -> the shapes of their distinct arrays: the forward's, the
    backward scratch, and (shape, dtype) of the integer ones. A name several stages
    declare (one array per stem layer or block) lists theirs in stage order."""

    forward: _Table
    backward: _Table
    ints: _Index

    def elements(self, store: bool) -> int:
        """Floats held by the buffers (with the backward scratch when store: a
        training forward is followed by a backward); the integer buffers aside."""
        tables = (self.forward, self.backward) if store else (self.forward,)
        return sum(math.prod(sh) for tb in tables for shapes in tb.values() for sh in shapes)

    @staticmethod
    def merge(tables: list[BufferTable]) -> BufferTable:
        out = BufferTable({}, {}, {})
        for tab in tables:
            _extend(out.forward, tab.forward)
            _extend(out.backward, tab.backward)
            _extend(out.ints, tab.ints)
        return out


def _extend(mine: dict[str, list[_T]], theirs: dict[str, list[_T]]) -> None:
    for name, items in theirs.items():
        mine.setdefault(name, []).extend(items)


def _buffers(forward: _Table | None = None, backward: _Table | None = None,
             ints: _Index | None = None) -> BufferTable:
    return BufferTable(forward or {}, backward or {}, ints or {})


# backward scratch held as one array per stem layer
_PER_LAYER = ("dss", "dsu")


class _Buffers:
    """Activations and backward scratch of one (batch, T, store, threads) signature.

    Buffers a configuration does not use are None (single arrays) or empty lists
    (per-layer lists)."""

    # backward scratch, made by for_backward (a name the stages do not declare stays
    # None, or [] for the per-layer ones)
    dy: FloatArray
    dhf: FloatArray
    da: FloatArray
    db: FloatArray
    dzt: FloatArray
    dhid: FloatArray
    part: FloatArray
    dpooled: FloatArray | None = None
    dbr: FloatArray | None = None
    demb: FloatArray | None = None
    dss: list[FloatArray]
    dsu: list[FloatArray]
    # forward buffers a configuration may lack (None then)
    xn: FloatArray | None
    rst: FloatArray | None
    yn: FloatArray | None
    emb: FloatArray | None
    stf: FloatArray | None
    branch: FloatArray | None
    hf: FloatArray
    pooled: FloatArray
    cmask: _U8Array | None
    rmask: _U8Array | None
    idx: npt.NDArray[np.int64] | None
    bits: npt.NDArray[np.uint32] | None
    # instance normalisation (attnx.layers.stages.InstanceNorm): None when unused
    dxn: FloatArray | None = None
    rdx: FloatArray | None = None
    rdy: FloatArray | None = None
    rdst: FloatArray | None = None

    def __init__(self, tab: BufferTable, geo: Geometry, dtype: np.dtype[Any],
                 n_layers: int) -> None:
        """The buffers of the size table tab over geo for n_layers blocks. Without
        geo.store (inference) the per-layer activations are one array shared by every
        layer and the block outputs two that alternate."""
        store = geo.store
        self._backward = tab.backward
        self.dtype = dtype
        # the floats held once a training forward's backward scratch exists (the
        # workspace cache weighs entries by it)
        self.nbytes = tab.elements(store) * dtype.itemsize
        a = {name: [np.empty(sh, dtype=dtype) for sh in shapes]
             for name, shapes in tab.forward.items()}
        ints: dict[str, list[npt.NDArray[Any]]] = {
            name: [np.empty(sh, dtype=dt) for sh, dt in v] for name, v in tab.ints.items()}
        L = n_layers

        def every(name: str, of: dict[str, list[Any]] = a) -> list[Any]:
            return of.get(name, [])

        def one(name: str, of: dict[str, list[Any]] = a) -> Any:
            got = of.get(name)
            return got[0] if got else None

        def per_layer(name: str) -> list[FloatArray]:
            # training keeps every layer's activations for backward; inference
            # reuses one set for all layers
            return every(name) if store else every(name) * L

        self.x = a["x"][0]
        self.xn, self.rst, self.yn = one("xn"), one("rst"), one("yn")
        self.su, self.sz, self.ss, self.ssg = (every(k) for k in ("su", "sz", "ss", "ssg"))
        self.emb = one("emb")
        self.hs = a["hs"] if store else [a["hs"][i % 2] for i in range(L + 1)]
        self.zt, self.hid, self.s = per_layer("zt"), per_layer("hid"), per_layer("s")
        self.sg = every("sg")
        self.u1, self.u2 = per_layer("u1"), per_layer("u2")
        self.st1, self.st2 = per_layer("st1"), per_layer("st2")
        self.hf = one("hf") if every("hf") else self.hs[L]
        self.stf = one("stf")
        self.pooled = one("pooled") if every("pooled") else self.hf
        self.mask, self.smask = ints["mask"][0], every("smask", ints)
        self.cmask, self.rmask = one("cmask", ints), one("rmask", ints)
        self.idx, self.bits = one("idx", ints), one("bits", ints)
        self.branch = one("branch")
        self.m1, self.m2 = every("m1"), every("m2")
        self.lens = geo.lens      # steps per stem layer, then tokens
        self.n = geo.lens[-1]     # tokens from the stem (t without)
        self.tt = geo.tt          # tokens in the blocks
        self.dss, self.dsu = [], []
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
