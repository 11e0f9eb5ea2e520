"""Type stubs for the compiled PPV tokens kernel (attnx/kernels/_ppv.pyx): x (B, T, C)
C-contiguous float32 or float64; lengths (B,) int32; missing (B, T) uint8 or None;
dilations (D,) int32 or (B, D) (each series' own); comb (K, 3) int32; window an int
or (B,) int32 (each series' own); bias (D, C, K, Q) and out (B, N, D * C * K * Q) in
x's dtype (N = ceil(T / window) with one window), out passed in by the caller."""
import numpy as np
import numpy.typing as npt

_F = npt.NDArray[np.floating]
_I = npt.NDArray[np.int32]
_M = npt.NDArray[np.uint8]

def ppv(x: _F, lengths: _I, missing: _M | None, dilations: _I, comb: _I, bias: _F,
        window: int | _I, out: _F, nthreads: int = 1) -> None: ...
