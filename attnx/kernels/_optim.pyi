"""Type stubs for the vectorised AdamW kernel (attnx/kernels/_optim.pyx)."""
import numpy as np
import numpy.typing as npt

_F = npt.NDArray[np.floating]

def dispatch_state() -> tuple[int, int]: ...
def adamw_step(p: _F, g: _F, m: _F, v: _F, lr: float, beta1: float, beta2: float,
               eps: float, weight_decay: float, step: int, nthreads: int = 1) -> None: ...
def adamw_step_runs(p: _F, g: _F, m: _F, v: _F, lr: float, beta1: float, beta2: float,
                    eps: float, weight_decay: float, step: int,
                    runs: npt.NDArray[np.int64]) -> None: ...
