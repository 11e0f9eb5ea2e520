"""Type stubs for attnx/kernels/_model_pass.pyx: a SequenceModel's whole pass (stem,
embedding, class token, blocks, final norm, pooling, head) as one compiled call each way
(see the module docstring)."""
from typing import Any

import numpy as np
import numpy.typing as npt
from typing_extensions import disjoint_base

from ._blocks import BlockStack

@disjoint_base
class ModelPass:
    f64: bool
    def __init__(self, stack: BlockStack, ends: dict[str, Any]) -> None: ...
    def forward(self, y: npt.NDArray[np.floating[Any]]) -> None: ...
    def backward(self, dx: npt.NDArray[np.floating[Any]] | None = None) -> None: ...
