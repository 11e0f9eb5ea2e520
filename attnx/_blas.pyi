"""Type stubs for attnx/_blas.pyx (a test hook around the BLAS GEMM)."""
import numpy as np
import numpy.typing as npt

_F = npt.NDArray[np.floating]

BLAS_INT_MAX: int

def check_blas_int(what: str, **sizes: int) -> None: ...
def gemm_into(ta: bool, tb: bool, a: _F, b: _F, c: _F, m: int, n: int, k: int,
              alpha: float = 1.0, beta: float = 0.0) -> None: ...
