"""Parameter handling shared by the estimators, without importing scikit-learn.

scikit-learn's clone, cross_val_score and GridSearchCV need only get_params,
set_params and (from scikit-learn 1.6 on) __sklearn_tags__; older releases read
_estimator_type and _more_tags. The constructor signature is the list of
hyper-parameters, as in scikit-learn.
"""
from __future__ import annotations

import inspect
from typing import Any, TypeVar

import numpy as np

_Self = TypeVar("_Self", bound="EstimatorParams")


class _NotFittedError(ValueError, AttributeError):
    """Raised when predict, score or save needs a fitted estimator (scikit-learn's
    class takes its place whenever scikit-learn is installed)."""


class _ConvergenceWarning(UserWarning):
    """Training stopped on a plateau of the training loss (scikit-learn's class takes
    its place whenever scikit-learn is installed)."""


_LAZY = {"NotFittedError": ("sklearn.exceptions", "NotFittedError", _NotFittedError),
         "ConvergenceWarning": ("sklearn.exceptions", "ConvergenceWarning",
                                _ConvergenceWarning)}
_RESOLVED: dict[str, type[Exception]] = {}


def sklearn_class(name: str) -> type[Exception]:
    """scikit-learn's NotFittedError / ConvergenceWarning when scikit-learn imports,
    else attnx's own class of the same bases. Resolved on first use only, so that
    importing attnx never imports scikit-learn."""
    cls = _RESOLVED.get(name)
    if cls is None:
        module, attr, fallback = _LAZY[name]
        try:
            import importlib
            cls = getattr(importlib.import_module(module), attr)
        except ImportError:
            cls = fallback
        _RESOLVED[name] = cls
    return cls


# PEP 562: `from attnx.estimators._base import NotFittedError` resolves lazily
def __getattr__(name: str) -> type[Exception]:
    if name in _LAZY:
        return sklearn_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class EstimatorParams:
    """get_params / set_params by constructor introspection, and a short repr."""

    _estimator_type = "regressor"  # scikit-learn < 1.6 reads this in is_regressor

    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        names = []
        for p in list(sig.parameters.values())[1:]:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(f"{cls.__name__}.__init__ must list its hyper-parameters "
                                f"explicitly (no *args / **kwargs)")
            names.append(p.name)
        return names

    @classmethod
    def _defaults(cls) -> dict[str, Any]:
        sig = inspect.signature(cls.__init__)
        return {k: p.default for k, p in sig.parameters.items() if k != "self"}

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Hyper-parameters as given to the constructor (deep is accepted for
        scikit-learn; there are no nested estimators)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self: _Self, **params: Any) -> _Self:
        """Set hyper-parameters by name; takes effect at the next fit. Returns self.
        ``options__<key>=value`` sets one key of ``options`` (a new dict: the one given
        before is never modified), so a search grid can name a single option."""
        valid = self._param_names()
        merged: dict[str, Any] = {}
        for key, value in params.items():
            if key.startswith("options__") and "options" in valid:
                merged[key[len("options__"):]] = value
                continue
            if key not in valid:
                raise ValueError(f"invalid parameter {key!r} for {type(self).__name__}; "
                                 f"valid parameters are {sorted(valid)} (a key of options: "
                                 f"options__<key>)")
            setattr(self, key, value)
        if merged:
            base = getattr(self, "options", None)
            setattr(self, "options", {**(dict(base) if base else {}), **merged})
        return self

    def __repr__(self) -> str:
        defaults = self._defaults()
        parts = [f"{k}={_short_repr(v)}" for k, v in self.get_params().items()
                 if not _same(v, defaults[k])]
        return f"{type(self).__name__}({', '.join(parts)})"

    # ---- scikit-learn tags (sklearn is imported only when sklearn asks) ----
    def __sklearn_tags__(self) -> Any:  # sklearn.utils.Tags (sklearn is untyped here)
        from sklearn.utils import InputTags, RegressorTags, Tags, TargetTags

        return Tags(estimator_type="regressor",
                    target_tags=TargetTags(required=True, multi_output=True,
                                           single_output=False),
                    regressor_tags=RegressorTags(),
                    input_tags=InputTags(two_d_array=False, three_d_array=True))

    def _more_tags(self) -> dict[str, Any]:  # scikit-learn < 1.6
        return {"multioutput": True, "requires_y": True, "X_types": ["3darray"]}


class ClassifierParams(EstimatorParams):
    """EstimatorParams with scikit-learn's classifier tags (is_classifier, stratified CV)."""

    _estimator_type = "classifier"

    def __sklearn_tags__(self) -> Any:  # sklearn.utils.Tags (sklearn is untyped here)
        from sklearn.utils import ClassifierTags, InputTags, Tags, TargetTags

        return Tags(estimator_type="classifier",
                    target_tags=TargetTags(required=True, multi_output=False,
                                           single_output=True),
                    classifier_tags=ClassifierTags(),
                    input_tags=InputTags(two_d_array=False, three_d_array=True))

    def _more_tags(self) -> dict[str, Any]:  # scikit-learn < 1.6
        return {"requires_y": True, "X_types": ["3darray"]}


def _same(a: object, b: object) -> bool:
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    try:
        return bool(a == b)
    except Exception:  # arrays and other objects without a plain truth value
        return False


def _short_repr(v: object) -> str:
    if isinstance(v, type) and v.__module__ == "numpy":
        return f"np.{v.__name__}"
    if isinstance(v, np.dtype):
        return f"np.{v.name}"
    return repr(v)
