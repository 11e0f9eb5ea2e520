"""The estimators' hyper-parameters: declared constraints, validated in one place.

Each estimator class lists `_parameter_constraints` (name -> Constraint, in the
order they are checked, as scikit-learn does); `validate(est)` checks every
hyper-parameter the class declares and returns a Config of validated copies (the
estimator's attributes stay as given, as scikit-learn requires). Settings that
depend on each other (the scikit-learn aliases, AdamW's group, rope with
positional) are checked by `validate` after the single ones.
"""
from __future__ import annotations

import math
import numbers
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from . import _stem
from ._sequences import LAYOUTS, MISSING
from ._params import check_dtype, check_positive_int
from .losses import REGRESSION_LOSSES
from .optim import _check_hyper

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Literal, Union

    Positional = Literal["none", "sinusoidal", "learned", "rope"]
    Norm = Union[None, Literal["pre"]]
    Pooling = Literal["mean", "last", "max", "cls"]
    InstanceNorm = Union[None, Literal["input", "revin", "auto"]]

POSITIONAL = ("none", "sinusoidal", "learned", "rope")

#: The constructor values of the previous release that TransformerRegressor / TransformerClassifier
#: changed (TransformerRegressor(**LEGACY_DEFAULTS) trains as the previous release did: with y of X's shape,
#: the bare X -> Y model). A model file written before a hyper-parameter existed gets
#: the value here for it (see attnx._state).
LEGACY_DEFAULTS: dict[str, Any] = {
    "n_heads": 1, "d_model": None, "positional": "none", "norm": None, "dropout": 0.0,
    "epochs": 100, "batch_size": 32, "n_iter_no_change": 10,
    "lr_schedule": "constant", "warmup": 0.1, "max_grad_norm": None, "decay": "all",
    "standardize": False, "patch_len": 1, "label_smoothing": 0.0, "distributed": "exact",
    "stem": None, "layout": "ntc", "missing": "error", "instance_norm": None,
    "instance_affine": False, "tokenizer": "patch", "pretrain": None, "pretrain_epochs": None,
}


class Constraint:
    """One hyper-parameter's rule: check(name, value) returns the validated value
    or raises TypeError / ValueError naming the parameter."""

    def check(self, name: str, value: Any) -> Any:
        raise NotImplementedError


class PositiveInt(Constraint):
    """An int >= 1 (None too when optional)."""

    def __init__(self, optional: bool = False) -> None:
        self.optional = optional

    def check(self, name: str, value: Any) -> int | None:
        if value is None and self.optional:
            return None
        return check_positive_int(name, value)


class PositiveReal(Constraint):
    """A finite real number > 0 (None too when optional)."""

    def __init__(self, optional: bool = False) -> None:
        self.optional = optional

    def check(self, name: str, value: Any) -> float | None:
        if value is None and self.optional:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{name} must be a real number > 0, got {value!r}")
        f = float(value)
        if not (math.isfinite(f) and f > 0):
            raise ValueError(f"{name} must be a finite real number > 0, got {value!r}")
        return f


class PatchLen(Constraint):
    """None ("auto"), or an int >= 1 (1: no patches)."""

    def check(self, name: str, value: Any) -> int | str | None:
        if value is None or value == "auto":
            return None
        return check_positive_int(name, value)


class Stem(Constraint):
    """None, "auto" (attnx._stem.auto, resolved at fit from the data), or a
    convolutional stem ((kernel, stride), ...) (attnx._stem)."""

    def check(self, name: str, value: Any) -> _stem.Stem | str | None:
        if isinstance(value, str):
            if value != "auto":
                raise ValueError(f"stem must be None, 'auto' or a sequence of (kernel, "
                                 f"stride) pairs, got the string {value!r}")
            return value
        return _stem.check_stem(value)


class Bool(Constraint):
    def check(self, name: str, value: Any) -> bool:
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        raise TypeError(f"{name} must be True or False, got {value!r}")


class Real(Constraint):
    """A real number in [lo, hi) (`what` says so in the message)."""

    def __init__(self, lo: float, hi: float, what: str) -> None:
        self.lo, self.hi, self.what = lo, hi, what

    def check(self, name: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{name} must be a real number {self.what}, got {value!r}")
        # numbers.Real declares no ordering for the type checker; every Real compares
        if not self.lo <= cast(float, value) < self.hi:
            raise ValueError(f"{name} must be {self.what}, got {value!r}")
        return float(value)


class OneOf(Constraint):
    """One of `options`; `message` is formatted with name, options and value."""

    def __init__(self, options: tuple[Any, ...], message: str) -> None:
        self.options, self.message = options, message

    def check(self, name: str, value: Any) -> Any:
        if value not in self.options:
            raise ValueError(self.message.format(name=name, options=self.options,
                                                 value=value))
        return value


class Quantiles(Constraint):
    """None, or a non-empty sequence of levels in (0, 1) (returned as a float64 tuple)."""

    def check(self, name: str, value: Any) -> tuple[float, ...] | None:
        if value is None:
            return None
        if isinstance(value, (str, bytes)) or np.ndim(value) != 1 or np.size(value) == 0:
            raise ValueError(f"{name} must be None or a non-empty 1-D sequence of levels in "
                             f"(0, 1), one per output column, got {value!r}")
        try:
            q = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must hold real numbers, got {value!r}") from None
        if not np.all((q > 0) & (q < 1)):
            raise ValueError(f"{name} must hold levels in (0, 1), got {value!r}")
        return tuple(float(v) for v in q)


class Verbose(Constraint):
    def check(self, name: str, value: Any) -> int:
        if isinstance(value, (bool, np.bool_)):
            return int(value)
        if not isinstance(value, numbers.Integral) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        return int(value)


class Dtype(Constraint):
    def check(self, name: str, value: Any) -> np.dtype[Any]:
        return check_dtype(value)


class Alias(Constraint):
    """A canonical hyper-parameter with a scikit-learn alias (None = not given):
    giving both spellings different values is an error."""

    def __init__(self, alias: str, default: Any, then: Constraint | None = None) -> None:
        self.alias, self.default, self.then = alias, default, then

    def resolve(self, name: str, value: Any, alias_value: Any) -> Any:
        if alias_value is None:
            return value if self.then is None else self.then.check(name, value)
        if (value is not None and not _equal(value, self.default)
                and not _equal(value, alias_value)):
            raise ValueError(f"{name}={value!r} and {self.alias}={alias_value!r} are two "
                             f"spellings of one setting: give only one ({name} is the "
                             f"canonical one)")
        return alias_value if self.then is None else self.then.check(self.alias, alias_value)


class Unchecked(Constraint):
    """Checked elsewhere (random_state when seeds are drawn; class_weight against
    the classes; betas, eps and weight_decay with lr as AdamW's group)."""

    def check(self, name: str, value: Any) -> Any:
        return value


#: the constraints every estimator shares, in the order they are checked
COMMON: dict[str, Constraint] = {
    "n_heads": PositiveInt(),
    "causal": Bool(), "bias": Bool(), "rope": Bool(), "shuffle": Bool(),
    "early_stopping": Bool(), "warm_start": Bool(),
    "epochs": Alias("max_iter", 100, PositiveInt(optional=True)),
    "batch_size": PositiveInt(),
    "lr": Alias("learning_rate_init", 1e-3),
    "betas": Unchecked(), "eps": Unchecked(), "weight_decay": Unchecked(),
    "validation_fraction": Real(0.0, 1.0, "in [0, 1)"),
    "n_iter_no_change": PositiveInt(optional=True),
    "tol": Real(0.0, math.inf, ">= 0"),
    "verbose": Verbose(),
    "dtype": Dtype(),
    "d_model": PositiveInt(optional=True),
    "d_hidden": PositiveInt(optional=True),
    "positional": OneOf(POSITIONAL, "positional must be one of {options}, got {value!r}"),
    "norm": OneOf((None, "pre"), "norm must be None or 'pre', got {value!r}"),
    "pooling": OneOf(("mean", "last", "max", "cls"),
                     "pooling must be one of {options} (how one output per sequence is "
                     "made; per-position targets use no pooling), got {value!r}"),
    "dropout": Real(0.0, 1.0, "in [0, 1)"),
    "max_len": PositiveInt(optional=True),
    "max_iter": Unchecked(), "learning_rate_init": Unchecked(),
    "random_state": Unchecked(),
    "lr_schedule": OneOf(("constant", "warmup_cosine", "one_cycle"),
                         "lr_schedule must be one of {options}, got {value!r}"),
    "warmup": Real(0.0, 1.0, "in [0, 1) (a fraction of the fit's steps)"),
    "max_grad_norm": PositiveReal(optional=True),
    "decay": OneOf(("all", "matrices"), "decay must be one of {options} (which parameters "
                   "weight_decay applies to), got {value!r}"),
    "standardize": Bool(),
    "patch_len": PatchLen(),
    "distributed": OneOf(("balanced", "exact"),
                         "distributed must be 'balanced' (each rank batches its own shard) or "
                         "'exact' (the global batches of one process, split over the ranks), "
                         "got {value!r}"),
    "stem": Stem(),
    "instance_norm": OneOf((None, "input", "revin", "auto"),
                           "instance_norm must be one of {options} (None: off; 'input': each "
                           "input series normalised by its own mean and std; 'revin': and "
                           "the outputs de-normalised; 'auto': 'revin' for a regressor whose "
                           "targets are in the units of X's series, else None), "
                           "got {value!r}"),
    "instance_affine": Bool(),
    "tokenizer": OneOf(("auto", "patch", "ppv"),
                       "tokenizer must be one of {options} ('patch': a token holds its "
                       "window's raw values; 'ppv': fixed dilated convolutions' proportions "
                       "of positive values over the window; 'auto': 'ppv' for classifiers "
                       "whose shortest training series has at least 64 steps), got {value!r}"),
    "layout": OneOf(LAYOUTS, "layout must be one of {options} ('ntc': X is (n_samples, "
                    "seq_len, n_features); 'nct': aeon's (n_cases, n_channels, "
                    "n_timepoints)), got {value!r}"),
    "pretrain": OneOf((None, "masked"), "pretrain must be None or 'masked' (self-supervised "
                      "masked-value reconstruction before the supervised fit), got {value!r}"),
    "pretrain_epochs": PositiveInt(optional=True),
    "missing": OneOf(MISSING, "missing must be one of {options} ('error': NaN in X is a "
                     "ValueError; 'mask': a time step with NaN in any channel is masked as "
                     "padding is), got {value!r}"),
}


def constraints(layers: bool, classes: bool) -> dict[str, Constraint]:
    """An estimator class's table: COMMON, with n_layers (the stacks) after
    d_model and class_weight (the classifiers)."""
    out: dict[str, Constraint] = {}
    for name, rule in COMMON.items():
        out[name] = rule
        if name == "d_model" and layers:
            out["n_layers"] = PositiveInt()
    if classes:
        out["class_weight"] = Unchecked()
        out["label_smoothing"] = Real(0.0, 1.0, "in [0, 1)")
    else:
        out["loss"] = OneOf(REGRESSION_LOSSES, "loss must be one of {options}, got {value!r}")
        out["quantiles"] = Quantiles()
    return out


class Config(SimpleNamespace):
    """The validated hyper-parameters of one fit."""

    n_heads: int
    causal: bool
    bias: bool
    rope: bool
    shuffle: bool
    early_stopping: bool
    warm_start: bool
    epochs: int | None
    batch_size: int
    lr: float
    betas: tuple[float, float]
    eps: float
    weight_decay: float
    validation_fraction: float
    n_iter_no_change: int | None
    tol: float
    verbose: int
    dtype: np.dtype[Any]
    d_model: int | None
    n_layers: int
    d_hidden: int | None
    positional: Positional
    norm: Norm
    pooling: Pooling
    dropout: float
    max_len: int | None
    lr_schedule: str
    warmup: float
    max_grad_norm: float | None
    decay: str
    standardize: bool
    patch_len: int | None
    stem: Any   # a Stem, None, or "auto" until the fit resolves it (_estimator._prepare)
    instance_norm: str | None
    instance_affine: bool
    tokenizer: str   # "auto" until the fit resolves it (_estimator._prepare)
    layout: str
    missing: str
    label_smoothing: float
    loss: str
    quantiles: tuple[float, ...] | None
    distributed: str
    pretrain: str | None
    pretrain_epochs: int | None


def validate(params: Mapping[str, Any], constraints: Mapping[str, Constraint]) -> Config:
    """Config of the validated hyper-parameters `params` (get_params()) under
    `constraints`; n_layers is 1 where it is not a hyper-parameter."""
    c = Config(n_layers=1, label_smoothing=0.0, loss="squared_error", quantiles=None)
    for name, rule in constraints.items():
        value = params[name]
        if isinstance(rule, Alias):
            value = rule.resolve(name, value, params[rule.alias])
        else:
            value = rule.check(name, value)
        setattr(c, name, value)
        if name == "weight_decay":  # the end of AdamW's group
            c.lr, c.betas, c.eps, c.weight_decay = _check_hyper(c.lr, c.betas, c.eps,
                                                                c.weight_decay)
        elif name == "positional" and c.rope and c.positional == "sinusoidal":
            c.positional = "rope"   # rope=True replaces the default sinusoidal positions
        elif name == "instance_affine" and c.instance_affine and c.instance_norm is None:
            raise ValueError("instance_affine=True needs instance_norm 'input' or 'revin' "
                             "(the affine map follows the normalisation), got "
                             "instance_norm=None")
        elif name == "quantiles" and (c.quantiles is None) != (c.loss != "pinball"):
            raise ValueError(f"quantiles (one level per output column) go with "
                             f"loss='pinball' and only with it; got loss={c.loss!r} and "
                             f"quantiles={c.quantiles!r}")
        elif name == "positional" and c.rope and c.positional not in ("none", "rope"):
            raise ValueError(f"rope=True is positional='rope'; it cannot be combined with "
                             f"positional={c.positional!r}")
    return c


def _equal(a: object, b: object) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # arrays and other objects without a plain truth value
        return False
