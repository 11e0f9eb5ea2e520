"""attnx: multi-head attention and small transformers trained on the CPU.

Forward and backward passes are hand-written Cython kernels calling BLAS
(scipy.linalg.cython_blas) directly; the optimizer is AdamW, the loss MSE.
"""
from . import _threads  # noqa: F401  (registers BLAS thread control for the kernels)
from .attention import MultiHeadAttention
from .losses import mse_loss
from .optim import AdamW
from .transformer import Transformer

__version__ = "0.1.0"
__all__ = ["MultiHeadAttention", "Transformer", "AdamW", "mse_loss", "__version__"]
