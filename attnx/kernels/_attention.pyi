"""Type stubs for the compiled dense and blocked attention kernels
(attnx/kernels/_attention.pyx). Arguments in the order of every attention entry point
(attnx/kernels/_attnargs.pyx); arrays are C-contiguous row buffers (rows = batch *
positions) of the shape's dtype; optional arrays are None when unused."""
import numpy as np
import numpy.typing as npt

from ._attnargs import AttnBuffers, AttnParams, AttnShape

_F = npt.NDArray[np.floating]
_M = npt.NDArray[np.uint8]

def dispatch_state() -> tuple[int, int]: ...
def attention_forward(shape: AttnShape, buffers: AttnBuffers, params: AttnParams, x: _F,
                      ctx: _F | None, key_padding_mask: _M | None,
                      rope: tuple[_F, _F] | None, residual: _F | None, y: _F,
                      nthreads: int) -> None: ...
def attention_backward(shape: AttnShape, buffers: AttnBuffers, params: AttnParams, x: _F,
                       ctx: _F | None, key_padding_mask: _M | None,
                       rope: tuple[_F, _F] | None, dy: _F, dx: _F | None, dctx: _F | None,
                       accumulate: int, nthreads: int) -> None: ...
