"""Type stubs for the vectorised AdamW kernel (attnx/_optim.pyx)."""
import numpy as np
import numpy.typing as npt

_F = npt.NDArray[np.floating]

def _detected_level() -> int: ...
def cpu_level() -> int: ...
def adamw_step(p: _F, g: _F, m: _F, v: _F, lr: float, beta1: float, beta2: float,
               eps: float, weight_decay: float, step: int, nthreads: int = 1) -> None: ...
