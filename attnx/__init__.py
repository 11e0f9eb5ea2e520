"""attnx: multi-head attention and small transformers trained on the CPU.

Forward and backward passes are hand-written Cython kernels calling BLAS
(scipy.linalg.cython_blas) directly; the optimizer is AdamW, the loss MSE.

The package by layers, each importing only those below it: ``kernels`` (compiled),
``runtime`` (threads, buffers, checks), ``layers`` (attention, transformer,
SequenceModel, losses, AdamW), ``distributed`` (MPI data parallelism), ``estimators``,
``forecasting``, ``io`` (model files, ONNX); ``plot`` and ``datasets`` beside them.
"""
try:
    from .runtime import _threads  # noqa: F401  (the thread policy; loads the compiled kernels)
except ImportError as exc:  # pragma: no cover - only in an unbuilt source checkout
    import os as _os
    # a missing dependency (threadpoolctl, ...) is reported as itself, not as a build problem
    if (str(getattr(exc, "name", "") or "").startswith("attnx.")
            and _os.path.exists(_os.path.join(_os.path.dirname(__file__), "kernels", "_ops.pyx"))):
        raise ImportError(
            "attnx's compiled kernels are missing: this is the unbuilt source folder "
            f"({_os.path.dirname(__file__)}). Run from another directory to use the "
            "installed attnx, or build in place: python setup.py build_ext --inplace"
        ) from exc
    raise
import importlib as _importlib
import typing as _typing

from .runtime._version import __version__
from .layers.attention import MultiHeadAttention
from .layers.losses import cross_entropy_loss, huber_loss, mae_loss, mse_loss, pinball_loss
from .layers.optim import AdamW
from .layers.sequence import SequenceModel
from .layers.transformer import Transformer
from .layers import schedules
from .runtime._threads import get_num_threads, set_num_threads
from . import datasets, forecasting
from .estimators import (AttentionClassifier, AttentionRegressor, EnsembleClassifier,
                         EnsembleRegressor, TransformerClassifier, TransformerRegressor)
from .forecasting import TransformerForecaster
from .io import load

__all__ = ["MultiHeadAttention", "Transformer", "SequenceModel", "AdamW", "mse_loss",
           "cross_entropy_loss", "mae_loss", "huber_loss", "pinball_loss",
           "set_num_threads", "get_num_threads", "__version__",
           "AttentionRegressor", "TransformerRegressor", "AttentionClassifier",
           "TransformerClassifier", "EnsembleClassifier", "EnsembleRegressor",
           "TransformerForecaster", "load", "datasets", "forecasting", "schedules"]

if _typing.TYPE_CHECKING:
    from . import plot as plot  # noqa: F401  (type checkers see the lazy module below)


def __getattr__(name: str) -> object:
    """`attnx.plot` on first access (matplotlib stays optional: importing attnx never
    imports attnx.plot, and attnx.plot imports matplotlib only when a function draws)."""
    if name == "plot":
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
