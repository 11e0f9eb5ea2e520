"""The estimator classes a model file may name (attnx.io looks classes up here)."""
from __future__ import annotations

from . import _model_file
from ._estimator import SequenceEstimator
from .classifiers import AttentionClassifier, TransformerClassifier
from .regressors import AttentionRegressor, TransformerRegressor

#: every estimator class a model file may name: attnx.io looks classes up here
ESTIMATORS: dict[str, type[SequenceEstimator]] = {
    cls.__name__: cls for cls in (AttentionRegressor, TransformerRegressor,
                                  AttentionClassifier, TransformerClassifier)}
_model_file.register(*ESTIMATORS.values())
