"""Ensembles of independently initialised networks (InceptionTime's recipe).

    clf = attnx.EnsembleClassifier(attnx.TransformerClassifier(), n_members=5,
                                   random_state=0).fit(X, y)
    clf.predict_proba(X)      # the mean of the members' class probabilities

Every member is a fresh copy of `estimator` (its hyper-parameters as given) with its
own `random_state`, trained on all of the data; they differ only in their initial
weights, dropout masks and batch order. A classifier averages the members'
probabilities (soft voting), a regressor their predictions. On small data sets this
removes much of the seed-to-seed spread of a single network; it costs n_members fits.
"""
from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

import numpy as np

from ._base import ClassifierParams, EstimatorParams, sklearn_class
from ._metrics import r2_score
from .classifiers import TransformerClassifier
from .regressors import TransformerRegressor

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from ..runtime._typing import AnyArray, FloatArray, RandomStateLike

#: seeds of the members are drawn below this bound (numpy's legacy seed limit)
_SEED_BOUND = 2**31 - 1


def _member_seeds(random_state: RandomStateLike, n: int) -> list[int]:
    """n member seeds from one root: an int, a numpy Generator / RandomState, or None
    (fresh entropy). The same int gives the same members."""
    if isinstance(random_state, np.random.RandomState):
        return [int(s) for s in random_state.randint(0, _SEED_BOUND, size=n)]
    rng = np.random.default_rng(random_state)
    return [int(s) for s in rng.integers(0, _SEED_BOUND, size=n)]


def _mean(outputs: list[Any]) -> FloatArray | list[FloatArray]:
    """The element-wise mean of the members' outputs: arrays, or lists of arrays
    (ragged per-position outputs), summed in member order."""
    first = outputs[0]
    if isinstance(first, list):
        return [_mean_arrays([o[i] for o in outputs]) for i in range(len(first))]
    return _mean_arrays(outputs)


def _mean_arrays(outputs: list[Any]) -> FloatArray:
    acc: FloatArray = np.array(outputs[0], dtype=np.float64)
    for o in outputs[1:]:
        acc += o
    mean: FloatArray = (acc / len(outputs)).astype(np.asarray(outputs[0]).dtype, copy=False)
    return mean


class _Ensemble(EstimatorParams):
    _default_estimator: type = TransformerRegressor

    def __init__(self, estimator: Any = None, n_members: int = 5,
                 random_state: RandomStateLike = None) -> None:
        self.estimator = estimator
        self.n_members = n_members
        self.random_state = random_state

    def _check(self) -> Any:
        if (not isinstance(self.n_members, numbers.Integral)
                or isinstance(self.n_members, bool) or self.n_members < 1):
            raise ValueError(f"n_members must be an int >= 1, got {self.n_members!r}")
        est = self._default_estimator() if self.estimator is None else self.estimator
        for method in ("fit", "predict", "get_params", "set_params"):
            if not callable(getattr(est, method, None)):
                raise TypeError(f"estimator must be an estimator with fit, predict, "
                                f"get_params and set_params, got {type(est).__name__}")
        if "random_state" not in est.get_params(deep=False):
            raise TypeError(f"estimator must take a random_state parameter (the members "
                            f"differ by their seeds); {type(est).__name__} has none")
        return est

    def fit(self, X: ArrayLike, y: ArrayLike, **fit_params: Any) -> _Ensemble:
        """Fit n_members copies of `estimator` on (X, y), each with its own seed drawn
        from random_state (None: the estimator's own random_state is the root).
        fit_params (e.g. sample_weight) go to every member's fit. Returns self."""
        est = self._check()
        root = self.random_state
        if root is None:
            root = est.get_params(deep=False)["random_state"]
        self.seeds_ = _member_seeds(root, int(self.n_members))
        params = est.get_params(deep=False)
        members = []
        for seed in self.seeds_:
            m = type(est)(**{**params, "random_state": seed})
            members.append(m.fit(X, y, **fit_params))
        self.estimators_ = members
        for name in ("n_features_in_", "classes_", "n_outputs_"):
            if hasattr(members[0], name):
                setattr(self, name, getattr(members[0], name))
        return self

    def _fitted(self) -> list[Any]:
        if not hasattr(self, "estimators_"):
            raise sklearn_class("NotFittedError")(
                f"This {type(self).__name__} instance is not fitted yet; call fit first")
        return self.estimators_


class EnsembleRegressor(_Ensemble):
    """The mean prediction of n_members regressors that differ only in their seeds.

    Parameters
    ----------
    estimator : a regressor with a random_state parameter (default
        TransformerRegressor()); not modified (copies are fitted).
    n_members : number of networks (>= 1).
    random_state : root of the members' seeds (int, numpy Generator/RandomState,
        or None: the estimator's own random_state, itself possibly None).

    Attributes: estimators_ (the fitted members), seeds_ (their random_state).
    """

    def predict(self, X: ArrayLike) -> FloatArray | list[FloatArray]:
        return _mean([m.predict(X) for m in self._fitted()])

    def score(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> float:
        """R^2 of predict(X) against y (uniform over outputs), for targets per
        sequence; sample_weight (n_samples,) weights the rows."""
        pred = self.predict(X)
        if isinstance(pred, list):
            raise ValueError("score needs one target row per sequence; per-position "
                             "ragged predictions: score the members or predict() instead")
        true = np.asarray(y, dtype=np.float64).reshape(np.shape(pred))
        w = None if sample_weight is None else np.asarray(sample_weight, np.float64)
        return float(r2_score(true, pred, sample_weight=w))


class EnsembleClassifier(ClassifierParams, _Ensemble):
    """Soft voting over n_members classifiers that differ only in their seeds:
    predict_proba is the mean of the members' probabilities, predict its argmax.

    Parameters: as EnsembleRegressor, with estimator a classifier with
    predict_proba (default TransformerClassifier()).
    Attributes: estimators_, seeds_, classes_.
    """

    _default_estimator = TransformerClassifier

    def predict_proba(self, X: ArrayLike) -> FloatArray | list[FloatArray]:
        members = self._fitted()
        if not callable(getattr(members[0], "predict_proba", None)):
            raise TypeError(f"estimator must have predict_proba for soft voting, "
                            f"{type(members[0]).__name__} has none")
        return _mean([m.predict_proba(X) for m in members])

    def predict(self, X: ArrayLike) -> AnyArray | list[AnyArray]:
        proba = self.predict_proba(X)
        classes: AnyArray = self._fitted()[0].classes_
        if isinstance(proba, list):
            return [classes[np.argmax(p, axis=-1)] for p in proba]
        labels: AnyArray = classes[np.argmax(proba, axis=-1)]
        return labels

    def score(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> float:
        """Mean accuracy of predict(X) (weighted by sample_weight if given), for labels
        per sequence."""
        pred = self.predict(X)
        if isinstance(pred, list):
            raise ValueError("score needs one label per sequence; per-position ragged "
                             "predictions: score the members or predict() instead")
        pred = np.asarray(pred)
        hit = (pred == np.asarray(y)).astype(np.float64)
        if sample_weight is None:
            return float(np.mean(hit))
        w: FloatArray = np.asarray(sample_weight, dtype=np.float64)
        return float(np.average(hit, weights=w))
