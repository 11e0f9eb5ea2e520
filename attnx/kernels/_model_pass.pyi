"""Type stubs for attnx/kernels/_model_pass.pyx: a SequenceModel's whole pass (stem,
embedding, class token, blocks, final norm, pooling, head) as one compiled call each way,
built from typed operands (see the module docstring)."""
from typing import Any

import numpy as np
import numpy.typing as npt
from typing_extensions import disjoint_base

from ._blocks import BlockStack, NormWeights

_F = npt.NDArray[np.floating[Any]]
_U8 = npt.NDArray[np.uint8]

POOLINGS: tuple[str | None, ...]

@disjoint_base
class StemActivations:
    su: _F
    sz: _F
    ss: _F
    ssg: _F | None
    dss: _F | None
    dsu: _F | None
    def __init__(self, su: _F, sz: _F, ss: _F, ssg: _F | None, dss: _F | None,
                 dsu: _F | None) -> None: ...

@disjoint_base
class StemOperands:
    kernel: int
    stride: int
    pad_left: int
    pad_right: int
    t_in: int
    km: _U8 | None
    W: _F
    b: _F
    dW: _F | None
    db: _F | None
    acts: StemActivations
    def __init__(self, kernel: int, stride: int, pad_left: int, pad_right: int, t_in: int,
                 km: _U8 | None, W: _F, b: _F, dW: _F | None, db: _F | None,
                 acts: StemActivations) -> None: ...

@disjoint_base
class EmbedEnd:
    x_in: _F
    x: _F
    W: _F
    b: _F
    dW: _F | None
    db: _F | None
    pos: _F | None
    dpos: _F | None
    h0: _F
    def __init__(self, x_in: _F, x: _F, W: _F, b: _F, dW: _F | None, db: _F | None,
                 pos: _F | None, dpos: _F | None, h0: _F) -> None: ...

@disjoint_base
class ClassToken:
    cls: _F
    dcls: _F | None
    emb: _F | None
    demb: _F | None
    def __init__(self, cls: _F, dcls: _F | None, emb: _F | None, demb: _F | None) -> None: ...

@disjoint_base
class PoolEnd:
    pooling: str | None
    norm: NormWeights | None
    h_top: _F
    hf: _F
    stf: _F | None
    pooled: _F
    idx: npt.NDArray[np.int64] | None
    dhf: _F | None
    dpooled: _F | None
    def __init__(self, pooling: str | None, norm: NormWeights | None, h_top: _F, hf: _F,
                 stf: _F | None, pooled: _F, idx: npt.NDArray[np.int64] | None,
                 dhf: _F | None, dpooled: _F | None) -> None: ...

@disjoint_base
class HeadEnd:
    W: _F
    b: _F
    dW: _F | None
    db: _F | None
    dy: _F | None
    zero_padded: bool
    def __init__(self, W: _F, b: _F, dW: _F | None, db: _F | None, dy: _F | None,
                 zero_padded: bool) -> None: ...

@disjoint_base
class ModelPass:
    f64: bool
    def __init__(self, stack: BlockStack, nb: int, km: _U8 | None, nth: int,
                 stem: list[StemOperands], embed: EmbedEnd, cls: ClassToken | None,
                 pool: PoolEnd, head: HeadEnd) -> None: ...
    def forward(self, y: _F) -> None: ...
    def backward(self, dx: _F | None = None) -> None: ...
