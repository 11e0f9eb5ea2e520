"""Type stubs for attnx/kernels/_blocks.pyx: a SequenceModel's blocks as one compiled call
each way (see the module docstring)."""
from typing import Any

from typing_extensions import disjoint_base

@disjoint_base
class BlockStack:
    f64: bool
    def __init__(self, layers: list[dict[str, Any]], shared: dict[str, Any], pre: bool,
                 drop: bool, store: bool, nth: int) -> None: ...
    def forward(self) -> None: ...
    def backward(self) -> None: ...
