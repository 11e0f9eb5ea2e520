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
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, TypedDict, cast

import numpy as np

from ..layers import _stem
from ._sequences import LAYOUTS, MISSING
from ..runtime._params import check_dtype, check_positive_int
from ..layers.losses import REGRESSION_LOSSES
from ..layers.optim import _check_hyper

from collections.abc import Mapping

if TYPE_CHECKING:
    from typing import Literal, Union

    from numpy.typing import DTypeLike

    from ..runtime._typing import RandomStateLike

    #: class_weight: None, "balanced" or a dict label -> weight.
    ClassWeight = Union[None, Literal["balanced"], Mapping[Any, float]]
    Positional = Literal["none", "sinusoidal", "learned", "rope"]
    Norm = Union[None, Literal["pre"]]
    Pooling = Literal["mean", "last", "max", "cls"]
    InstanceNorm = Union[None, Literal["input", "revin", "auto"]]

POSITIONAL = ("none", "sinusoidal", "learned", "rope")

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
    """None, "auto" (attnx.layers._stem.auto, resolved at fit from the data), or a
    convolutional stem ((kernel, stride), ...) (attnx.layers._stem)."""

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


class HyperParameters(TypedDict, total=False):
    """The types of the estimators' hyper-parameters, keyed by name: what a type checker
    checks a constructor's keyword arguments against (every estimator takes those of
    PARAMETERS whose `only` admits it), and the annotations of the signatures."""

    n_heads: int
    n_layers: int
    d_hidden: int | None
    d_model: int | None
    positional: Positional
    norm: Norm
    pooling: Pooling
    dropout: float
    max_len: int | None
    causal: bool
    bias: bool
    rope: bool
    epochs: int | None
    batch_size: int
    lr: float
    betas: tuple[float, float]
    eps: float
    weight_decay: float
    shuffle: bool
    validation_fraction: float
    early_stopping: bool
    n_iter_no_change: int | None
    tol: float
    warm_start: bool
    max_iter: int | None
    learning_rate_init: float | None
    random_state: RandomStateLike
    verbose: int
    dtype: DTypeLike
    lr_schedule: str
    warmup: float
    max_grad_norm: float | None
    decay: str
    standardize: bool
    patch_len: int | None
    distributed: str
    stem: _stem.Stem | str | None
    layout: str
    missing: str
    instance_norm: InstanceNorm
    instance_affine: bool
    tokenizer: str
    loss: str
    quantiles: Any
    class_weight: ClassWeight
    label_smoothing: float
    pretrain: str | None
    pretrain_epochs: int | None


class Param(NamedTuple):
    """One hyper-parameter of the estimators (its type: HyperParameters): its rule, its default in AttentionRegressor /
    AttentionClassifier (`attention`) and in TransformerRegressor /
    TransformerClassifier (`transformer`), the estimators that have it (`only`:
    "layers" for the Transformer ones, "regressors", "classifiers"; "" all) and
    defaults of single classes that differ from their family's (`defaults`)."""

    rule: Constraint
    attention: Any
    transformer: Any
    only: str = ""
    defaults: Mapping[str, Any] | None = None


def _same(rule: Constraint, default: Any) -> Param:
    return Param(rule, default, default)


#: THE table of the estimators' hyper-parameters, in the order of their signatures:
#: the constructors (make_init), their validation (parameters_of, validate) and the
#: checks of their docstrings (tests/estimators/test_parameters.py) all come from it, so a new
#: hyper-parameter is one row here (and its paragraph in attnx.estimators._docs)
PARAMETERS: dict[str, Param] = {
    "n_heads": Param(PositiveInt(), 1, 4),
    "n_layers": Param(PositiveInt(), None, 2, only="layers"),
    "d_hidden": _same(PositiveInt(optional=True), None),
    "d_model": Param(PositiveInt(optional=True), None, 32),
    "positional": Param(OneOf(POSITIONAL, "positional must be one of {options}, got {value!r}"),
                        "none", "sinusoidal"),
    "norm": Param(OneOf((None, "pre"), "norm must be None or 'pre', got {value!r}"),
                  None, "pre"),
    "pooling": _same(OneOf(("mean", "last", "max", "cls"),
                           "pooling must be one of {options} (how one output per sequence is "
                           "made; per-position targets use no pooling), got {value!r}"),
                     "mean"),
    "dropout": Param(Real(0.0, 1.0, "in [0, 1)"), 0.0, 0.1),
    "max_len": _same(PositiveInt(optional=True), None),
    "causal": _same(Bool(), False),
    "bias": _same(Bool(), True),
    "rope": _same(Bool(), False),
    "epochs": Param(Alias("max_iter", 100, PositiveInt(optional=True)), 100, None),
    "batch_size": Param(PositiveInt(), 32, 16),
    "lr": _same(Alias("learning_rate_init", 1e-3), 1e-3),
    "betas": _same(Unchecked(), (0.9, 0.999)),
    "eps": _same(Unchecked(), 1e-8),
    "weight_decay": _same(Unchecked(), 0.01),
    "shuffle": _same(Bool(), True),
    "validation_fraction": _same(Real(0.0, 1.0, "in [0, 1)"), 0.0),
    "early_stopping": _same(Bool(), False),
    "n_iter_no_change": Param(PositiveInt(optional=True), 10, None),
    "tol": _same(Real(0.0, math.inf, ">= 0"), 1e-4),
    "warm_start": _same(Bool(), False),
    "max_iter": _same(Unchecked(), None),
    "learning_rate_init": _same(Unchecked(), None),
    "random_state": _same(Unchecked(), None),
    "verbose": _same(Verbose(), 0),
    "dtype": _same(Dtype(), np.float32),
    "lr_schedule": Param(OneOf(("constant", "warmup_cosine", "one_cycle"),
                               "lr_schedule must be one of {options}, got {value!r}"),
                         "constant", "warmup_cosine"),
    "warmup": _same(Real(0.0, 1.0, "in [0, 1) (a fraction of the fit's steps)"), 0.1),
    "max_grad_norm": Param(PositiveReal(optional=True), None, 1.0),
    "decay": Param(OneOf(("all", "matrices"), "decay must be one of {options} (which "
                         "parameters weight_decay applies to), got {value!r}"),
                   "all", "matrices"),
    "standardize": Param(Bool(), False, True),
    "patch_len": Param(PatchLen(), 1, None),
    "distributed": _same(OneOf(("balanced", "exact"),
                               "distributed must be 'balanced' (each rank batches its own "
                               "shard) or 'exact' (the global batches of one process, split "
                               "over the ranks), got {value!r}"), "balanced"),
    "stem": _same(Stem(), None),
    "layout": _same(OneOf(LAYOUTS, "layout must be one of {options} ('ntc': X is (n_samples, "
                          "seq_len, n_features); 'nct': aeon's (n_cases, n_channels, "
                          "n_timepoints)), got {value!r}"), "ntc"),
    "missing": _same(OneOf(MISSING, "missing must be one of {options} ('error': NaN in X is "
                           "a ValueError; 'mask': a time step with NaN in any channel is "
                           "masked as padding is), got {value!r}"), "error"),
    "instance_norm": Param(OneOf((None, "input", "revin", "auto"),
                                 "instance_norm must be one of {options} (None: off; 'input': "
                                 "each input series normalised by its own mean and std; "
                                 "'revin': and the outputs de-normalised; 'auto': 'revin' for "
                                 "a regressor whose targets are in the units of X's series, "
                                 "else None), got {value!r}"),
                           None, None,
                           defaults={"TransformerRegressor": "auto"}),
    "instance_affine": _same(Bool(), False),
    "tokenizer": Param(OneOf(("auto", "patch", "ppv", "select"),
                             "tokenizer must be one of {options} ('patch': a token holds its "
                             "window's raw values; 'ppv': fixed dilated convolutions' "
                             "proportions of positive values over the window; 'auto': 'ppv' "
                             "for classifiers whose training series have at least 64 steps, "
                             "a small convolutional stem for univariate ones under 64; 'select' "
                             "(classifiers): the best of these on held-out training series), "
                             "got {value!r}"), "patch", "patch",
                       defaults={"TransformerClassifier": "auto"}),
    "loss": Param(OneOf(REGRESSION_LOSSES, "loss must be one of {options}, got {value!r}"),
                  "squared_error", "squared_error", only="regressors"),
    "quantiles": Param(Quantiles(), None, None, only="regressors"),
    "class_weight": Param(Unchecked(), None, None, only="classifiers"),
    "label_smoothing": Param(Real(0.0, 1.0, "in [0, 1)"), 0.0, 0.0,
                             only="classifiers"),
    "pretrain": _same(OneOf((None, "masked"), "pretrain must be None or 'masked' (self-"
                            "supervised masked-value reconstruction before the supervised "
                            "fit), got {value!r}"), None),
    "pretrain_epochs": _same(PositiveInt(optional=True), None),
}

#: the arguments each family takes by position (the others are keyword-only)
POSITIONAL_ARGS = {"attention": ("n_heads",), "transformer": ("n_heads", "n_layers", "d_hidden")}
ESTIMATOR_NAMES = ("AttentionRegressor", "TransformerRegressor", "AttentionClassifier",
                   "TransformerClassifier")


def _family(cls_name: str) -> tuple[str, str]:
    if cls_name not in ESTIMATOR_NAMES:
        raise ValueError(f"no hyper-parameter table for {cls_name!r}")
    return (("transformer" if cls_name.startswith("Transformer") else "attention"),
            ("classifiers" if cls_name.endswith("Classifier") else "regressors"))


def signature_of(cls_name: str) -> list[tuple[str, Any, bool]]:
    """(name, default, positional) of every hyper-parameter of the estimator class
    `cls_name`, in its constructor's order: the positional ones first."""
    family, kind = _family(cls_name)
    out = []
    for name, p in PARAMETERS.items():
        if p.only not in ("", kind) and not (p.only == "layers" and family == "transformer"):
            continue
        default = p.attention if family == "attention" else p.transformer
        default = (p.defaults or {}).get(cls_name, default)
        out.append((name, default, name in POSITIONAL_ARGS[family]))
    return sorted(out, key=lambda e: not e[2])   # stable: the table's order otherwise


def parameters_of(cls_name: str) -> dict[str, Constraint]:
    """name -> rule of the estimator class's hyper-parameters (its _parameter_constraints)."""
    return {name: PARAMETERS[name].rule for name, _, _ in signature_of(cls_name)}


def make_init(cls_name: str) -> Callable[..., None]:
    """The constructor of the estimator class `cls_name`, from PARAMETERS."""
    return build_init(cls_name, signature_of(cls_name), HyperParameters.__annotations__)


def build_init(owner: str, sig: list[tuple[str, Any, bool]],
               types: Mapping[str, Any]) -> Callable[..., None]:
    """A constructor taking the parameters `sig` ((name, default, positional), the
    positional ones first) with the annotations `types`: a plain function whose
    signature lists every parameter with its default (scikit-learn's get_params reads
    it) and which stores each argument unchanged, as scikit-learn requires."""
    pos = [n for n, _, positional in sig if positional]
    kw = [n for n, _, positional in sig if not positional]
    src = (f"def __init__(self, {', '.join(pos)}, *, {', '.join(kw)}):\n"
           + "".join(f"    self.{n} = {n}\n" for n, _, _ in sig))
    namespace: dict[str, Any] = {}
    exec(src, namespace)   # a real function: inspect.signature, help() and pickle see it
    init = cast("Callable[..., None]", namespace["__init__"])
    defaults = dict((n, d) for n, d, _ in sig)
    init.__defaults__ = tuple(defaults[n] for n in pos)
    init.__kwdefaults__ = {n: defaults[n] for n in kw}
    init.__annotations__ = {**{n: getattr(types[n], "__forward_arg__", types[n])
                               for n, _, _ in sig}, "return": "None"}
    init.__qualname__ = f"{owner}.__init__"
    init.__doc__ = f"Store the parameters unchanged (see {owner}'s docstring)."
    return init


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
    max_iter: int | None
    learning_rate_init: float | None
    random_state: Any
    class_weight: Any
    pretrain: str | None
    pretrain_epochs: int | None
    #: set by tokenizer="auto"'s short path: the training batches' largest time shift
    #: (attnx.estimators._augment), None: no shifts
    augment_shift: int | None = None


def validate(params: Mapping[str, Any], constraints: Mapping[str, Constraint]) -> Config:
    """Config of the validated hyper-parameters `params` (get_params()) under
    `constraints` (each rule in turn, then the settings that depend on each other);
    n_layers is 1 where it is not a hyper-parameter."""
    c = Config(n_layers=1, label_smoothing=0.0, loss="squared_error", quantiles=None)
    for name, rule in constraints.items():
        value = params[name]
        if isinstance(rule, Alias):
            value = rule.resolve(name, value, params[rule.alias])
        else:
            value = rule.check(name, value)
        setattr(c, name, value)
    # AdamW's group
    c.lr, c.betas, c.eps, c.weight_decay = _check_hyper(c.lr, c.betas, c.eps, c.weight_decay)
    if c.rope and c.positional == "sinusoidal":
        c.positional = "rope"   # rope=True replaces the default sinusoidal positions
    elif c.rope and c.positional not in ("none", "rope"):
        raise ValueError(f"rope=True is positional='rope'; it cannot be combined with "
                         f"positional={c.positional!r}")
    if c.instance_affine and c.instance_norm is None:
        raise ValueError("instance_affine=True needs instance_norm 'input' or 'revin' "
                         "(the affine map follows the normalisation), got "
                         "instance_norm=None")
    if (c.quantiles is None) != (c.loss != "pinball"):
        raise ValueError(f"quantiles (one level per output column) go with "
                         f"loss='pinball' and only with it; got loss={c.loss!r} and "
                         f"quantiles={c.quantiles!r}")
    return c


def _equal(a: object, b: object) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # arrays and other objects without a plain truth value
        return False
