"""Type stubs for the compiled SiLU MLP kernels (attnx/kernels/_mlp.pyx); row buffers as
in attnx/kernels/_attention.pyi; weights (W1, b1, W2, b2), gradients (dW1, db1, dW2, db2), b1/b2
and db1/db2 None without biases; acts (H, S, sigmoid(H)), the forward's activations."""
import numpy as np
import numpy.typing as npt

_F = npt.NDArray[np.floating]

def dispatch_state() -> tuple[int, int]: ...
def mlp_forward(z: _F, weights: tuple[_F, _F | None, _F, _F | None],
                acts: tuple[_F, _F, _F | None], out: _F, nthreads: int = 0) -> None: ...
def mlp_backward(dout: _F, z: _F, weights: tuple[_F, _F],
                 acts: tuple[_F, _F, _F], dh_buf: _F,
                 grads: tuple[_F, _F | None, _F, _F | None], dz: _F,
                 nthreads: int = 0) -> None: ...
def silu_forward(h: _F, s: _F, sg: _F | None, nthreads: int = 1) -> None: ...
def silu_backward(ds: _F, h: _F, sg: _F, dh: _F, nthreads: int = 1) -> None: ...
