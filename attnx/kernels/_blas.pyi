"""Type stubs for attnx/kernels/_blas.pyx (the BLAS int limit check, the small-GEMM dispatch state)."""
import numpy as np
import numpy.typing as npt

_F = npt.NDArray[np.floating]

BLAS_INT_MAX: int

def check_blas_int(what: str, *sizes: tuple[str, int]) -> None: ...
def dispatch_state() -> tuple[int, int]: ...
def _attach_for_benchmarks(level: int) -> int: ...
