"""SequenceModel as the modules of its parts see it (its stem, instance normalisation,
pooling, blocks, buffers and weights): the attributes they read, declared here below them
all, so that they need not import the model they serve; SequenceModel satisfies it."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..kernels._embed import Windows
    from ..runtime._params import ParamDict
    from ..runtime._typing import FloatArray
    from ._model_plan import Stage
    from .attention import MultiHeadAttention

    _U8Array = npt.NDArray[np.uint8]


class RowKernels(Protocol):
    """The row kernels a SequenceModel calls: attnx.kernels._seq, or a test's NumPy
    stand-in with the same functions (see attnx/kernels/_seq.pyi for the contract)."""

    def linear_forward(self, x: FloatArray, w: FloatArray, b: FloatArray, y: FloatArray,
                       nthreads: int = 1, pos: FloatArray | None = None,
                       t: int = 1) -> None: ...
    def linear_backward(self, dy: FloatArray, x: FloatArray, w: FloatArray,
                        dw: FloatArray, db: FloatArray, dx: FloatArray | None,
                        nthreads: int = 1) -> None: ...
    def positions_backward(self, dh: FloatArray, dp: FloatArray, t: int,
                           nthreads: int = 1) -> None: ...
    def layernorm_forward(self, x: FloatArray, g: FloatArray, b: FloatArray,
                          y: FloatArray, st: FloatArray, eps: float,
                          nthreads: int = 1) -> None: ...
    def layernorm_backward(self, dy: FloatArray, x: FloatArray, g: FloatArray,
                           grads: tuple[FloatArray, FloatArray],
                           work: tuple[FloatArray, FloatArray], dx: FloatArray,
                           add: FloatArray | None, nthreads: int = 1) -> None: ...
    def pool_forward(self, h: FloatArray, km: _U8Array | None, pooled: FloatArray,
                     nb: int, t: int, last: bool, nthreads: int = 1) -> None: ...
    def pool_backward(self, dpooled: FloatArray, km: _U8Array | None, dh: FloatArray,
                      nb: int, t: int, last: bool, nthreads: int = 1) -> None: ...
    def zero_masked_rows(self, y: FloatArray, km: _U8Array, nthreads: int = 1) -> None: ...
    def add_sub(self, out: FloatArray, a: FloatArray | None, b: FloatArray | None,
                nthreads: int = 1) -> None: ...
    def masked_add(self, out: FloatArray, res: FloatArray | None, a: FloatArray,
                   b: FloatArray | None, mult: FloatArray, nthreads: int = 1) -> None: ...
    def dropout_mask(self, bits: npt.NDArray[np.uint32], out: FloatArray, p: float,
                     nthreads: int = 1) -> None: ...


class SequenceView(Protocol):
    """A SequenceModel's configuration, weights and kernels."""

    n_features: int
    d_model: int
    n_heads: int
    n_layers: int
    n_outputs: int
    d_hidden: int
    pooling: str | None
    positional: str
    position_scale: float
    norm: str | None
    causal: bool
    bias: bool
    stem: tuple[tuple[int, int], ...] | None
    instance_norm: str | None
    instance_affine: bool
    instance_steps: int
    dropout: float
    max_len: int | None
    dtype: np.dtype[np.floating[Any]]
    input_grad: bool
    attn: list[MultiHeadAttention]
    dropout_rng: np.random.Generator
    params: ParamDict
    grads: ParamDict
    _w: dict[str, FloatArray]
    _g: dict[str, FloatArray]
    _k: RowKernels
    _windows: list[Windows]
    plan: tuple[Stage, ...]

    def _positions(self, n: int) -> FloatArray | None: ...
    def get_config(self) -> dict[str, Any]: ...
