"""The buffers a MultiHeadAttention layer runs its kernels on, one set per shape."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..kernels import _attention, _attnargs, _flash
from ..runtime._validate import cast_into

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..runtime._typing import AnyArray, FloatArray


def _copy_rows(buf: FloatArray | None, a: AnyArray, dtype: npt.DTypeLike,
               name: str = "x") -> FloatArray:
    """Copy a (B, T, w) array into the 2-D buffer buf (made on first use), cast to dtype;
    ValueError naming `name` when the cast overflows."""
    rows = a.shape[0] * a.shape[1]
    if buf is None:
        buf = np.empty((rows, a.shape[2]), dtype=dtype)
    return cast_into(name, buf, a.reshape(rows, a.shape[2]))


class _Workspace:
    """Buffers for one attnx.kernels._attnargs.AttnShape (batch, Tq, Tk, cross, store, path,
    threads), reused across steps: the kernels' AttnBuffers (sized from the shape's
    size table, see there for which fields each path uses), the layer's AttnParams,
    the forward's input copies and the key padding mask. parallel: whether a kernel
    call at this shape starts OpenMP regions (MultiHeadAttention._goes_parallel, fixed
    by the shape), so that it runs with the caller's thread count, else with one."""

    x: FloatArray | None
    ctx: FloatArray | None

    def __init__(self, shape: _attnargs.AttnShape, params: _attnargs.AttnParams,
                 parallel: bool) -> None:
        self.shape = shape
        self.bufs = _attnargs.AttnBuffers(shape)
        self.params = params
        self.parallel = parallel
        self.kernels = _flash if shape.path == _attnargs.FUSED else _attention
        self.x = self.ctx = None  # copies of the public forward's inputs, made there
        self.mask = np.empty((shape.nb, shape.tk), dtype=np.uint8)

    @property
    def nbytes(self) -> int:
        """Bytes of the buffers (the shape's size table; for the workspace cache)."""
        return int(self.shape.elements()) * int(self.shape.itemsize) + self.mask.nbytes

    @property
    def q(self) -> FloatArray:
        """Q (cross) or [Q | K | V] (self) of the last forward."""
        q: FloatArray = self.bufs.q
        return q

    @property
    def kv(self) -> FloatArray | None:
        """[K | V] of the last cross-attention forward (None for self-attention)."""
        kv: FloatArray | None = self.bufs.kv
        return kv

    @property
    def probs(self) -> FloatArray:
        """The dense path's attention probabilities (B*H*Tq*Tk) kept by the last
        training forward (RuntimeError on the other paths, which keep none)."""
        probs: FloatArray | None = self.bufs.probs
        if probs is None or not self.keeps_probs:
            raise RuntimeError(f"a {self.shape.path_name} workspace keeps no probabilities")
        return probs

    @property
    def keeps_probs(self) -> bool:
        """Whether the probabilities of the last forward are kept (dense training
        forward); else attention_weights recomputes them from Q and K."""
        return bool(self.shape.path == _attnargs.DENSE and self.shape.store)

    def for_backward(self, threads: int) -> _Workspace:
        self.bufs.for_backward()
        return self
