"""Type stubs for the compiled SiLU MLP kernels (attnx/_mlp.pyx); row buffers as
in attnx/_attention.pyi, b1/b2 and db1/db2 None without biases."""
import numpy as np
import numpy.typing as npt

_F = npt.NDArray[np.floating]

def dispatch_state() -> tuple[int, int]: ...
def mlp_forward(z: _F, w1: _F, b1: _F | None, w2: _F, b2: _F | None,
                h: _F, s: _F, sg: _F | None, out: _F, nthreads: int = 0) -> None: ...
def mlp_backward(dout: _F, z: _F, w1: _F, w2: _F, h: _F, s: _F, sg: _F, dh_buf: _F,
                 grads: tuple[_F, _F | None, _F, _F | None], dz: _F,
                 nthreads: int = 0) -> None: ...
