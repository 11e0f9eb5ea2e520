"""Type stubs for the compiled attention kernels (attnx/_attention.pyx).

Arrays are C-contiguous float32 or float64 (one dtype per call); 2-D arrays are
row buffers (rows = batch * positions). Optional buffers are None when unused.
"""
import numpy as np
import numpy.typing as npt

_F = npt.NDArray[np.floating]
_M = npt.NDArray[np.uint8]

def dispatch_state() -> tuple[int, int]: ...
def set_block_sizes(bq: int, bk: int) -> None: ...
def block_sizes() -> tuple[int, int]: ...
def blocked_scratch_sizes(tq: int, d_head: int, bq: int | None = None,
                          bk: int | None = None) -> tuple[int, int]: ...
def check_sizes(nb: int, tq: int, tk: int, d_model: int) -> None: ...
def attention_forward(
    x: _F, ctx: _F | None, w_qkv: _F, b_qkv: _F | None, w_o: _F, b_o: _F | None,
    qbuf: _F, kvbuf: _F | None, zcat: _F, probs: _F, y: _F,
    nb: int, n_heads: int, causal: bool, store: bool,
    key_padding_mask: _M | None, rope_cos: _F | None, rope_sin: _F | None,
    residual: _F | None = None, lse: _F | None = None, tbuf: _F | None = None,
    nthreads: int = 0,
) -> None: ...
def attention_backward(
    x: _F, ctx: _F | None, w_qkv: _F, w_o: _F, qbuf: _F, kvbuf: _F | None,
    zcat: _F, probs: _F, dy: _F, dzcat: _F, dqbuf: _F, dkvbuf: _F | None, scratch: _F,
    dw_qkv: _F, db_qkv: _F | None, dw_o: _F, db_o: _F | None,
    dx: _F | None, dctx: _F | None, nb: int, n_heads: int, causal: bool,
    rope_cos: _F | None, rope_sin: _F | None,
    dx_accumulate: bool = False, dctx_accumulate: bool = False,
    lse: _F | None = None, key_padding_mask: _M | None = None, tbuf: _F | None = None,
    nthreads: int = 0,
) -> None: ...
