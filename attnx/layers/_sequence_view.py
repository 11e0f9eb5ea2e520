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


class SequenceView(Protocol):
    """A SequenceModel's configuration and weights."""

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
    _windows: list[Windows]
    plan: tuple[Stage, ...]

    def _positions(self, n: int) -> FloatArray | None: ...
    def get_config(self) -> dict[str, Any]: ...
