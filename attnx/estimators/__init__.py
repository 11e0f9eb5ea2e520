"""scikit-learn style estimators over sequences: parameters, inputs and targets, the
networks they train, the Trainer, classifiers, regressors and ensembles."""
from typing import Any

from ._base import sklearn_class
from ._inference import ExportSpec
from ._registry import ESTIMATORS
from ._training import TrainingDivergedError
from .classifiers import AttentionClassifier, TransformerClassifier
from .regressors import AttentionRegressor, TransformerRegressor
from .ensemble import EnsembleClassifier, EnsembleRegressor

__all__ = ["AttentionRegressor", "TransformerRegressor", "AttentionClassifier",
           "TransformerClassifier", "EnsembleClassifier", "EnsembleRegressor",
           "NotFittedError", "TrainingDivergedError", "ExportSpec", "ESTIMATORS"]


def __getattr__(name: str) -> Any:  # NotFittedError is scikit-learn's class, resolved on first use
    if name == "NotFittedError":
        return sklearn_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
