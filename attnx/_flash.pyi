"""Type stubs for the fused small-head attention kernels (attnx/_flash.pyx): row
buffers as in attnx/_attention.pyi; optional arrays None when unused."""
from typing import Any

import numpy as np
import numpy.typing as npt

_F = npt.NDArray[np.floating]
_M = npt.NDArray[np.uint8]

def _detected_level() -> int: ...
def cpu_level() -> int: ...
def scratch_elements(tk: int, d_head: int, dtype: Any) -> int: ...
def block_sizes() -> tuple[int, int]: ...
def dq_parts_elements(nb: int, tq: int, tk: int, n_heads: int, d_head: int,
                      nthreads: int) -> int: ...
def attention_forward(
    x: _F, ctx: _F | None, w_qkv: _F, b_qkv: _F | None, w_o: _F, b_o: _F | None,
    qbuf: _F, kvbuf: _F | None, zcat: _F, lse: _F | None, scratch: _F, y: _F,
    nb: int, n_heads: int, causal: bool, key_padding_mask: _M | None,
    rope_cos: _F | None, rope_sin: _F | None, residual: _F | None, nthreads: int,
) -> None: ...
def attention_backward(
    x: _F, ctx: _F | None, w_qkv: _F, w_o: _F, qbuf: _F, kvbuf: _F | None,
    zcat: _F, lse: _F, dy: _F, dzcat: _F, dqbuf: _F, dkvbuf: _F | None, scratch: _F,
    dq_parts: _F | None, dw_qkv: _F, db_qkv: _F | None, dw_o: _F, db_o: _F | None,
    dx: _F | None, dctx: _F | None, nb: int, n_heads: int, causal: bool,
    key_padding_mask: _M | None, rope_cos: _F | None, rope_sin: _F | None,
    dx_accumulate: bool, dctx_accumulate: bool, nthreads: int,
) -> None: ...
def exp_array(x: _F, shift: float = ...) -> _F: ...
