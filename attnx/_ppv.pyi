"""Type stubs for the compiled PPV tokens kernel (attnx/_ppv.pyx): x (B, T, C)
C-contiguous float32 or float64; lengths (B,) int32; missing (B, T) uint8 or None;
dilations (D,) int32; comb (K, 3) int32; bias (D, C, K, Q) and out (B, ceil(T /
window), D * C * K * Q) in x's dtype, out passed in by the caller."""
import numpy as np
import numpy.typing as npt

_F = npt.NDArray[np.floating]
_I = npt.NDArray[np.int32]
_M = npt.NDArray[np.uint8]

def ppv(x: _F, lengths: _I, missing: _M | None, dilations: _I, comb: _I, bias: _F,
        window: int, out: _F, nthreads: int = 1) -> None: ...
