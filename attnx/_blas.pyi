"""Type stubs for attnx/_blas.pyx (the BLAS int limit check)."""
import numpy as np
import numpy.typing as npt

_F = npt.NDArray[np.floating]

BLAS_INT_MAX: int

def check_blas_int(what: str, **sizes: int) -> None: ...
