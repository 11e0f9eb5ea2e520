"""Type stubs for attnx/_blas.pyx (a test hook around the BLAS GEMM)."""
import numpy as np
import numpy.typing as npt

_F = npt.NDArray[np.floating]
def gemm_into(ta: bool, tb: bool, a: _F, b: _F, c: _F, m: int, n: int, k: int,
              alpha: float = 1.0, beta: float = 0.0) -> None: ...
