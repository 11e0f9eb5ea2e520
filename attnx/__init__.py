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
    if _os.path.exists(_os.path.join(_os.path.dirname(__file__), "kernels", "_ops.pyx")):
        raise ImportError(
            "attnx's compiled kernels are missing: this is the unbuilt source folder "
            f"({_os.path.dirname(__file__)}). Run from another directory to use the "
            "installed attnx, or build in place: python setup.py build_ext --inplace"
        ) from exc
    raise
import importlib as _importlib
import importlib.abc as _abc
import importlib.util as _util
import sys as _sys
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

#: modules that lived at the package root before the layers became subpackages: their old
#: names still import (and pickles written then still load), as the same module objects
MOVED = {"attention": "layers.attention", "transformer": "layers.transformer",
         "sequence": "layers.sequence", "losses": "layers.losses", "optim": "layers.optim",
         "schedules": "layers.schedules", "ensemble": "estimators.ensemble",
         "forecaster": "forecasting.forecaster", "sktime": "forecasting.sktime",
         "onnx": "io.onnx",
         # pickles of MultiHeadAttention and Transformer name its rebuild function
         "_params": "runtime._params"}


class _MovedFinder(_abc.MetaPathFinder, _abc.Loader):
    """`import attnx.sequence` (an old path) gives the module attnx.layers.sequence."""

    def find_spec(self, fullname: str, path: object,
                  target: object = None) -> _typing.Any:
        head, _, name = fullname.rpartition(".")
        if head == __name__ and name in MOVED:
            return _util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec: _typing.Any) -> _typing.Any:
        module = _importlib.import_module(f"{__name__}.{MOVED[spec.name.rpartition('.')[2]]}")
        spec.loader_state = module.__spec__   # import sets __spec__ to the old path's
        return module

    def exec_module(self, module: _typing.Any) -> None:
        """Nothing to run (the module is the one at its new place): its own spec back."""
        module.__spec__ = module.__spec__.loader_state


if not any(isinstance(f, _MovedFinder) for f in _sys.meta_path):
    _sys.meta_path.append(_MovedFinder())


def __getattr__(name: str) -> object:
    """`attnx.plot` on first access (matplotlib stays optional: importing attnx never
    imports attnx.plot, and attnx.plot imports matplotlib only when a function draws);
    the old module names of MOVED."""
    if name == "plot" or name in MOVED:
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
