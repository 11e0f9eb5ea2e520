"""Type stubs for attnx/kernels/_blocks.pyx: a model's blocks as one compiled call each
way, built from typed operands (see the module docstring)."""
from typing import Any

import numpy as np
import numpy.typing as npt
from typing_extensions import disjoint_base

from ._attnargs import AttnBuffers, AttnParams, AttnShape

_F = npt.NDArray[np.floating[Any]]
_U8 = npt.NDArray[np.uint8]

@disjoint_base
class NormWeights:
    g: _F
    b: _F
    dg: _F
    db: _F
    eps: float
    def __init__(self, g: _F, b: _F, dg: _F, db: _F, eps: float) -> None: ...

@disjoint_base
class AttentionOperands:
    shape: AttnShape
    bufs: AttnBuffers
    params: AttnParams
    threads: int
    mask: _U8 | None
    rope: tuple[_F, _F] | None
    ctx: _F | None
    def __init__(self, shape: AttnShape, bufs: AttnBuffers, params: AttnParams, threads: int,
                 mask: _U8 | None, rope: tuple[_F, _F] | None, ctx: _F | None) -> None: ...

@disjoint_base
class BlockWeights:
    ln1: NormWeights | None
    ln2: NormWeights | None
    W1: _F
    b1: _F | None
    W2: _F
    b2: _F | None
    dW1: _F
    db1: _F | None
    dW2: _F
    db2: _F | None
    def __init__(self, ln1: NormWeights | None, ln2: NormWeights | None, W1: _F,
                 b1: _F | None, W2: _F, b2: _F | None, dW1: _F, db1: _F | None, dW2: _F,
                 db2: _F | None) -> None: ...

@disjoint_base
class BlockActivations:
    h: _F
    h_out: _F
    zt: _F
    u1: _F | None
    u2: _F | None
    st1: _F | None
    st2: _F | None
    hid: _F
    s: _F
    sg: _F | None
    m1: _F | None
    m2: _F | None
    def __init__(self, h: _F, h_out: _F, zt: _F, u1: _F | None, u2: _F | None,
                 st1: _F | None, st2: _F | None, hid: _F, s: _F, sg: _F | None,
                 m1: _F | None, m2: _F | None) -> None: ...

@disjoint_base
class StackScratch:
    branch: _F | None
    dcur: _F | None
    dbr: _F | None
    db: _F | None
    dzt: _F | None
    dhid: _F | None
    part: _F | None
    def __init__(self, branch: _F | None, dcur: _F | None, dbr: _F | None, db: _F | None,
                 dzt: _F | None, dhid: _F | None, part: _F | None) -> None: ...

@disjoint_base
class BlockStack:
    f64: bool
    scratch: StackScratch
    ctx_rows: int
    def __init__(self, attention: list[AttentionOperands], weights: list[BlockWeights],
                 acts: list[BlockActivations], scratch: StackScratch, pre: bool, drop: bool,
                 store: bool, nth: int, mlp_threads: int) -> None: ...
    def forward(self, x: _F | None = None, y: _F | None = None) -> None: ...
    def backward(self, dy: _F | None = None, dx: _F | None = None, dctx: _F | None = None,
                 input_grad: bool = True) -> None: ...
