"""Type stubs for attnx/kernels/_attnargs.pyx: the attention kernels' shapes, buffers and
parameters (see the module docstring for the entry points' argument order)."""
from typing import Any

import numpy as np
import numpy.typing as npt
from typing_extensions import disjoint_base

_F = npt.NDArray[np.floating]

PATHS: tuple[str, str, str]
DENSE: int
BLOCKED: int
FUSED: int
ACCUMULATE_DX: int
ACCUMULATE_DCTX: int

def block_sizes() -> tuple[int, int]: ...
def fused_block_sizes() -> tuple[int, int]: ...
def check_sizes(nb: int, tq: int, tk: int, d_model: int) -> None: ...

@disjoint_base
class AttnShape:
    path: int
    threads: int
    type_num: int
    nb: int
    tq: int
    tk: int
    d: int
    n_heads: int
    d_head: int
    itemsize: int
    cross: bool
    causal: bool
    store: bool
    dtype: np.dtype[Any]
    n_q: int
    n_kv: int
    n_zcat: int
    n_probs: int
    n_tbuf: int
    n_lse: int
    n_fwd_scratch: int
    n_dzcat: int
    n_dq: int
    n_dkv: int
    n_bwd_scratch: int
    n_dq_parts: int
    n_inputs: int
    def __init__(self, path: str, nb: int, tq: int, tk: int, d_model: int, n_heads: int,
                 cross: bool, causal: bool, store: bool, threads: int,
                 dtype: npt.DTypeLike) -> None: ...
    @property
    def path_name(self) -> str: ...
    @property
    def block_sizes(self) -> tuple[int, int]: ...
    def elements(self) -> int: ...

@disjoint_base
class AttnBuffers:
    shape: AttnShape
    q: _F
    kv: _F | None
    zcat: _F
    probs: _F | None
    tbuf: _F | None
    lse: _F | None
    fwd_scratch: _F | None
    dzcat: _F | None
    dq: _F | None
    dkv: _F | None
    bwd_scratch: _F | None
    dq_parts: _F | None
    has_backward: bool
    def __init__(self, shape: AttnShape) -> None: ...
    def for_backward(self) -> AttnBuffers: ...

@disjoint_base
class AttnParams:
    d: int
    type_num: int
    w_qkv: _F
    w_o: _F
    b_qkv: _F | None
    b_o: _F | None
    dw_qkv: _F
    dw_o: _F
    db_qkv: _F | None
    db_o: _F | None
    def __init__(self, w_qkv: _F, w_o: _F, b_qkv: _F | None, b_o: _F | None, dw_qkv: _F,
                 dw_o: _F, db_qkv: _F | None, db_o: _F | None) -> None: ...
