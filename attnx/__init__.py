"""attnx: multi-head attention and small transformers trained on the CPU.

Forward and backward passes are hand-written Cython kernels calling BLAS
(scipy.linalg.cython_blas) directly; the optimizer is AdamW, the loss MSE.
"""
try:
    from . import _threads  # noqa: F401  (the thread policy; loads the compiled kernels)
except ImportError as exc:  # pragma: no cover - only in an unbuilt source checkout
    import os as _os
    if _os.path.exists(_os.path.join(_os.path.dirname(__file__), "_ops.pyx")):
        raise ImportError(
            "attnx's compiled kernels are missing: this is the unbuilt source folder "
            f"({_os.path.dirname(__file__)}). Run from another directory to use the "
            "installed attnx, or build in place: python setup.py build_ext --inplace"
        ) from exc
    raise
from .attention import MultiHeadAttention
from .losses import cross_entropy_loss, huber_loss, mae_loss, mse_loss, pinball_loss
from .optim import AdamW
from .sequence import SequenceModel
from .transformer import Transformer
from ._threads import get_num_threads, set_num_threads
from ._version import __version__
__all__ = ["MultiHeadAttention", "Transformer", "SequenceModel", "AdamW", "mse_loss",
           "cross_entropy_loss", "mae_loss", "huber_loss", "pinball_loss",
           "set_num_threads", "get_num_threads", "__version__"]

from . import datasets, forecasting, schedules  # noqa: E402
from .estimators import (AttentionClassifier, AttentionRegressor,  # noqa: E402
                         TransformerClassifier, TransformerRegressor)
from .ensemble import EnsembleClassifier, EnsembleRegressor  # noqa: E402
from .forecaster import TransformerForecaster  # noqa: E402
from .io import load  # noqa: E402

__all__ += ["AttentionRegressor", "TransformerRegressor", "AttentionClassifier",
            "TransformerClassifier", "EnsembleClassifier", "EnsembleRegressor",
            "TransformerForecaster", "load", "datasets",
            "forecasting", "schedules"]

import typing as _typing  # noqa: E402

if _typing.TYPE_CHECKING:
    from . import plot as plot  # noqa: F401  (type checkers see the lazy module below)


def __getattr__(name: str) -> object:
    """`attnx.plot` on first access (matplotlib stays optional: importing attnx never
    imports attnx.plot, and attnx.plot imports matplotlib only when a function draws)."""
    if name == "plot":
        import importlib

        return importlib.import_module(".plot", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
