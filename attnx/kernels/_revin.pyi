"""Type stubs for the compiled RevIN kernel (attnx/kernels/_revin.pyx): buffers as in
attnx/kernels/_embed.pyi (batched (B, T, C), C-contiguous, one float dtype per call; km the
(B, T) uint8 padding mask or None; every output passed in by the caller)."""
import numpy as np
import numpy.typing as npt
from typing_extensions import disjoint_base

_F = npt.NDArray[np.floating]
_M = npt.NDArray[np.uint8]

@disjoint_base
class RevIN:
    @property
    def eps(self) -> float: ...
    @property
    def eps2(self) -> float: ...
    def __init__(self, eps: float = 1e-5, eps2: float | None = None) -> None: ...
    def forward(self, x: _F, km: _M | None, affine: _F | None, xn: _F, stats: _F,
                nthreads: int = 1, check: bool = True) -> None: ...
    def backward(self, dxn: _F, x: _F, km: _M | None, affine: _F | None, stats: _F,
                 dstats: _F | None, dx: _F, daffine: _F | None, accumulate: bool = False,
                 nthreads: int = 1, check: bool = True) -> None: ...
    def denorm(self, yn: _F, affine: _F | None, stats: _F, y: _F, nthreads: int = 1,
               check: bool = True) -> None: ...
    def denorm_backward(self, dy: _F, yn: _F, affine: _F | None, stats: _F, dyn: _F,
                        daffine: _F | None, dstats: _F, accumulate: bool = False,
                        nthreads: int = 1, check: bool = True) -> None: ...
