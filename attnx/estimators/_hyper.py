"""The estimators' parameters, declared once: PARAMETERS.

Each row is one parameter: its rule (a Constraint: the check at fit and the type its
documentation shows), its one line of documentation, its default per family (and per
class where one differs), the estimators that take it, and whether it is a keyword of
the constructors or a key of their structured parameter `options` (the settings that
are rarely changed). The constructors are written out by hand in classifiers.py and
regressors.py (tests/estimators/test_parameters.py checks them against this table); their
`_parameter_constraints` (parameters_of), the Parameters sections of their docstrings
(attnx.estimators._docs) and the validation of a fit (validate, which returns a Config
of validated copies: the estimator's attributes stay as given, as scikit-learn
requires) all read it.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np

from ..layers import _stem
from ._sequences import LAYOUTS, MISSING
from ..runtime._params import check_dtype, check_positive_int
from ..layers.losses import REGRESSION_LOSSES
from ..layers.optim import _check_hyper

if TYPE_CHECKING:
    from typing import Literal, Union

    #: class_weight: None, "balanced" or a dict label -> weight.
    ClassWeight = Union[None, Literal["balanced"], Mapping[Any, float]]
    Positional = Literal["none", "sinusoidal", "learned", "rope"]
    Norm = Union[None, Literal["pre"]]
    Pooling = Literal["mean", "last", "max", "cls"]
    InstanceNorm = Union[None, Literal["input", "revin", "auto"]]

POSITIONAL = ("none", "sinusoidal", "learned", "rope")


class Constraint:
    """One parameter's rule: check(name, value) returns the validated value or raises
    TypeError / ValueError naming the parameter; describe() is the type its
    documentation shows."""

    def check(self, name: str, value: Any) -> Any:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


class PositiveInt(Constraint):
    """An int >= 1 (None too when optional)."""

    def __init__(self, optional: bool = False) -> None:
        self.optional = optional

    def check(self, name: str, value: Any) -> int | None:
        if value is None and self.optional:
            return None
        return check_positive_int(name, value)

    def describe(self) -> str:
        return "None or int >= 1" if self.optional else "int >= 1"


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

    def describe(self) -> str:
        return "None or float > 0" if self.optional else "float > 0"


class PatchLen(Constraint):
    """None ("auto"), or an int >= 1 (1: no patches)."""

    def check(self, name: str, value: Any) -> int | str | None:
        if value is None or value == "auto":
            return None
        return check_positive_int(name, value)

    def describe(self) -> str:
        return "None or int >= 1"


class Stem(Constraint):
    """None, "auto" (attnx.layers._stem.auto, resolved at fit from the data), or a
    convolutional stem ((kernel, stride), ...) (attnx.layers._stem)."""

    def check(self, name: str, value: Any) -> _stem.Stem | str | None:
        if isinstance(value, str):
            if value != "auto":
                raise ValueError(f"{name} must be None, 'auto' or a sequence of (kernel, "
                                 f"stride) pairs, got the string {value!r}")
            return value
        return _stem.check_stem(value)

    def describe(self) -> str:
        return 'None, "auto" or ((kernel, stride), ...)'


class Bool(Constraint):
    def check(self, name: str, value: Any) -> bool:
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        raise TypeError(f"{name} must be True or False, got {value!r}")

    def describe(self) -> str:
        return "bool"


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

    def describe(self) -> str:
        return f"float {self.what}"


class Betas(Constraint):
    """AdamW's pair (beta1, beta2), each a real number in [0, 1)."""

    def check(self, name: str, value: Any) -> tuple[float, float]:
        if isinstance(value, (str, bytes)) or np.ndim(value) != 1 or np.size(value) != 2:
            raise TypeError(f"{name} must be a pair (beta1, beta2) of real numbers in "
                            f"[0, 1), got {value!r}")
        b = Real(0.0, 1.0, "in [0, 1)")
        return (b.check(f"{name}[0]", value[0]), b.check(f"{name}[1]", value[1]))

    def describe(self) -> str:
        return "(float, float) in [0, 1)"


class OneOf(Constraint):
    """One of `options`; `why` (optional) is said in the message after them."""

    def __init__(self, options: tuple[Any, ...], why: str = "") -> None:
        self.options, self.why = options, why

    def check(self, name: str, value: Any) -> Any:
        if value not in self.options:
            why = f" ({self.why})" if self.why else ""
            raise ValueError(f"{name} must be one of {self.options}{why}, got {value!r}")
        return value

    def describe(self) -> str:
        text = [repr(o).replace("'", '"') for o in self.options]
        return ", ".join(text[:-1]) + " or " + text[-1]


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

    def describe(self) -> str:
        return "None or sequence of floats in (0, 1)"


class Verbose(Constraint):
    def check(self, name: str, value: Any) -> int:
        if isinstance(value, (bool, np.bool_)):
            return int(value)
        if not isinstance(value, numbers.Integral) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        return int(value)

    def describe(self) -> str:
        return "int >= 0"


class Dtype(Constraint):
    def check(self, name: str, value: Any) -> np.dtype[Any]:
        return check_dtype(value)

    def describe(self) -> str:
        return "float32 or float64"


class Unchecked(Constraint):
    """Checked elsewhere (random_state when seeds are drawn; class_weight against the
    classes; lr and weight_decay with betas and eps as AdamW's group); `what` is the
    type its documentation shows."""

    def __init__(self, what: str) -> None:
        self.what = what

    def check(self, name: str, value: Any) -> Any:
        return value

    def describe(self) -> str:
        return self.what


class Param(NamedTuple):
    """One parameter: its rule, its one line of documentation, its default in
    AttentionRegressor / AttentionClassifier (`default`) and in TransformerRegressor /
    TransformerClassifier (`transformer`; SAME: the same), the estimators that have it
    (`only`: "layers" for the Transformer ones, "regressors", "classifiers"; "" all),
    defaults of single classes that differ from their family's (`defaults`), and
    whether it is a key of `options` rather than a constructor keyword (`option`)."""

    rule: Constraint
    doc: str
    default: Any
    transformer: Any = "same"
    only: str = ""
    defaults: Mapping[str, Any] | None = None
    option: bool = False


def _option(rule: Constraint, doc: str, default: Any, transformer: Any = "same",
            only: str = "") -> Param:
    return Param(rule, doc, default, transformer, only, option=True)


#: THE table of the estimators' parameters, in the order of their signatures (the
#: options in the order of their documentation): a new parameter is one row here and
#: one argument of each constructor it belongs to (tests/estimators/test_parameters.py checks both)
PARAMETERS: dict[str, Param] = {
    "n_heads": Param(PositiveInt(), "Attention heads per layer (must divide d_model).", 1, 4),
    "n_layers": Param(PositiveInt(), "Transformer blocks.", None, 2, only="layers"),
    "d_hidden": Param(PositiveInt(optional=True), "Width of each block's SiLU MLP (None: "
                      "4 * d_model).", None),
    "d_model": Param(PositiveInt(optional=True), "The model's width (None: X's number of "
                     "features; see Notes for the bare X -> Y model).", None, 32),
    "positional": Param(OneOf(POSITIONAL), "Positions: none, sinusoidal, a learned table "
                        "of max_len rows, or rotary (in every attention layer).",
                        "none", "sinusoidal"),
    "norm": Param(OneOf((None, "pre")), "None: post-residual blocks; \"pre\": pre-LayerNorm "
                  "blocks and a final LayerNorm.", None, "pre"),
    "pooling": Param(OneOf(("mean", "last", "max", "cls"), "how one output per sequence "
                           "is made; per-position targets use no pooling"),
                     "How one output per sequence is made from its valid positions "
                     "(\"cls\": a learned class token; not with causal).", "mean"),
    "dropout": Param(Real(0.0, 1.0, "in [0, 1)"), "Dropout on the attention probabilities "
                     "and the residual branches in training.", 0.0, 0.1),
    "epochs": Param(PositiveInt(optional=True), "Passes over the data in fit (None: about "
                    "1500 AdamW steps; see Notes).", 100, None),
    "batch_size": Param(PositiveInt(), "Samples per AdamW step.", 32, 16),
    "lr": Param(Unchecked("float >= 0"), "AdamW's learning rate.", 1e-3),
    "weight_decay": Param(Unchecked("float >= 0"), "AdamW's decoupled weight decay.", 0.01),
    "warm_start": Param(Bool(), "fit continues from the fitted model instead of starting "
                        "over.", False),
    "random_state": Param(Unchecked("None, int, numpy Generator or RandomState"),
                          "Seeds the initial weights, the shuffling and the validation "
                          "split.", None),
    "verbose": Param(Verbose(), "0: silent; 1: a progress bar per fit (tqdm, on stderr).", 0),
    "dtype": Param(Dtype(), "The weights' and the computation's dtype.", np.float32),
    "patch_len": Param(PatchLen(), "Steps per token (None: about 16 tokens per sequence; 1: "
                       "one per step).", 1, None),
    "stem": Param(Stem(), "A convolutional stem before the embedding (\"auto\": chosen from "
                  "the data; see Notes).", None),
    "layout": Param(OneOf(LAYOUTS, "'ntc': X is (n_samples, seq_len, n_features); 'nct': "
                          "aeon's (n_cases, n_channels, n_timepoints)"),
                    "How X is laid out: \"ntc\" (n, seq_len, features) or \"nct\" (aeon's "
                    "and sktime's (n, channels, timepoints)).", "ntc"),
    "missing": Param(OneOf(MISSING, "'error': NaN in X is a ValueError; 'mask': a time "
                           "step with NaN in any channel is masked as padding is"),
                     "What NaN in X means: \"error\", or \"mask\" (a step with NaN is "
                     "padding; see Notes).", "error"),
    "instance_norm": Param(OneOf((None, "input", "revin", "auto"), "None: off; 'input': "
                                 "each input series normalised by its own mean and std; "
                                 "'revin': and the outputs de-normalised; 'auto': 'revin' "
                                 "for a regressor whose targets are in the units of X's "
                                 "series, else None"),
                           "Each series normalised by its own statistics (\"revin\": and "
                           "the outputs mapped back; see Notes).", None,
                           defaults={"TransformerRegressor": "auto"}),
    "tokenizer": Param(OneOf(("auto", "patch", "ppv", "select"), "'patch': a token holds "
                             "its window's raw values; 'ppv': fixed dilated convolutions' "
                             "proportions of positive values over the window; 'auto': "
                             "chosen from the data; 'select' (classifiers): the best on "
                             "held-out training series"),
                       "What a token holds: raw values (\"patch\"), PPV features (\"ppv\"), "
                       "chosen from the data (\"auto\") or on held-out series (\"select\").",
                       "patch", defaults={"TransformerClassifier": "auto"}),
    "loss": Param(OneOf(REGRESSION_LOSSES), "The training loss, elementwise (see Notes).",
                  "squared_error", only="regressors"),
    "class_weight": Param(Unchecked('None, "balanced" or dict label -> weight'),
                          "Multiplies sample_weight in the loss (\"balanced\": n / "
                          "(n_classes * count of the class)).", None, only="classifiers"),
    "pretrain": Param(OneOf((None, "masked"), "self-supervised masked-value "
                            "reconstruction before the supervised fit"),
                      "\"masked\": self-supervised pre-training of the encoder before the "
                      "supervised fit (see Notes).", None),
    # ---- the keys of `options` ------------------------------------------------------
    "lr_schedule": _option(OneOf(("constant", "warmup_cosine", "one_cycle")),
                           "The learning rate over the fit's steps (\"warmup_cosine\": a "
                           "linear warm-up, then a cosine decay to 0).",
                           "constant", "warmup_cosine"),
    "warmup": _option(Real(0.0, 1.0, "in [0, 1) (a fraction of the fit's steps)"),
                      "The warm-up's share of the fit's steps.", 0.1),
    "max_grad_norm": _option(PositiveReal(optional=True), "Clip the gradient to this global "
                             "L2 norm before each step (None: no clipping).", None, 1.0),
    "decay": _option(OneOf(("all", "matrices"), "which parameters weight_decay applies to"),
                     "Which parameters weight_decay applies to (\"matrices\": weight "
                     "matrices only).", "all", "matrices"),
    "betas": _option(Betas(), "AdamW's moment decay rates.", (0.9, 0.999)),
    "eps": _option(PositiveReal(), "AdamW's epsilon.", 1e-8),
    "standardize": _option(Bool(), "Scale each input channel (and a regressor's targets) "
                           "by the training data's statistics, folded into the weights.",
                           False, True),
    "shuffle": _option(Bool(), "Reshuffle the samples every epoch.", True),
    "validation_fraction": _option(Real(0.0, 1.0, "in [0, 1)"), "Share of the samples fit "
                                   "holds out for validation_loss_curve_ (0: none).", 0.0),
    "early_stopping": _option(Bool(), "Stop when the validation loss stalls and keep the "
                              "best weights.", False),
    "n_iter_no_change": _option(PositiveInt(optional=True), "Epochs without an improvement "
                                "of tol before stopping (None: no plateau stop).", 10, None),
    "tol": _option(Real(0.0, math.inf, ">= 0"), "The smallest improvement of the loss that "
                   "counts.", 1e-4),
    "max_len": _option(PositiveInt(optional=True), "Longest sequence for positional="
                       "\"learned\" (None: the longest training sequence).", None),
    "causal": _option(Bool(), "Position i attends to positions j <= i only.", False),
    "bias": _option(Bool(), "Biases in the attention projections and the MLPs.", True),
    "instance_affine": _option(Bool(), "RevIN's learnable per-channel gain and bias (needs "
                               "instance_norm).", False),
    "distributed": _option(OneOf(("balanced", "exact"), "'balanced': each rank batches its "
                                 "own shard; 'exact': the global batches of one process, "
                                 "split over the ranks"),
                           "With comm: each rank batches its own shard (\"balanced\") or "
                           "the single-process batches are split (\"exact\").", "balanced"),
    "pretrain_epochs": _option(PositiveInt(optional=True), "Passes over the series in "
                               "pre-training (None: about 300 AdamW steps).", None),
    "label_smoothing": _option(Real(0.0, 1.0, "in [0, 1)"), "e: the targets are (1 - e) "
                               "onehot + e / n_classes.", 0.0, only="classifiers"),
    "quantiles": _option(Quantiles(), "With loss=\"pinball\" only: one level per output "
                         "column of y.", None, only="regressors"),
}

#: the arguments each family takes by position (the others are keyword-only)
POSITIONAL_ARGS = {"attention": ("n_heads",), "transformer": ("n_heads", "n_layers", "d_hidden")}
ESTIMATOR_NAMES = ("AttentionRegressor", "TransformerRegressor", "AttentionClassifier",
                   "TransformerClassifier")
#: the structured parameter: a mapping of option name -> value (None: every default)
OPTIONS = "options"


def _family(cls_name: str) -> tuple[str, str]:
    if cls_name not in ESTIMATOR_NAMES:
        raise ValueError(f"no parameter table for {cls_name!r}")
    return (("transformer" if cls_name.startswith("Transformer") else "attention"),
            ("classifiers" if cls_name.endswith("Classifier") else "regressors"))


def _rows(cls_name: str, option: bool) -> dict[str, tuple[Param, Any]]:
    """name -> (row, default in cls_name) of the class's constructor keywords or options."""
    family, kind = _family(cls_name)
    out = {}
    for name, p in PARAMETERS.items():
        if p.option != option or (p.only not in ("", kind)
                                  and not (p.only == "layers" and family == "transformer")):
            continue
        default = p.transformer if family == "transformer" and p.transformer != "same" \
            else p.default
        out[name] = (p, (p.defaults or {}).get(cls_name, default))
    return out


def signature_of(cls_name: str) -> list[tuple[str, Any, bool]]:
    """(name, default, positional) of every constructor parameter of the estimator class
    `cls_name`, in its constructor's order: the positional ones first, options last."""
    family, _ = _family(cls_name)
    out = [(name, default, name in POSITIONAL_ARGS[family])
           for name, (_, default) in _rows(cls_name, False).items()]
    out = sorted(out, key=lambda e: not e[2])   # stable: the table's order otherwise
    return out + [(OPTIONS, None, False)]


def options_of(cls_name: str) -> dict[str, tuple[Param, Any]]:
    """name -> (row, default) of the keys `options` takes in the estimator class."""
    return _rows(cls_name, True)


class Options(Constraint):
    """The structured parameter: None (every default) or a mapping of option name ->
    value, each key checked by its own row's rule (its errors name options['key']);
    returns every option's validated value, the defaults filled in."""

    def __init__(self, cls_name: str) -> None:
        self.cls_name = cls_name
        self.rows = options_of(cls_name)

    def check(self, name: str, value: Any) -> dict[str, Any]:
        given = resolve_options(self.cls_name, value, name)
        return {k: p.rule.check(f"{name}[{k!r}]", given[k]) for k, (p, _) in self.rows.items()}

    def describe(self) -> str:
        return "None or dict"


def resolve_options(cls_name: str, value: Any, name: str = OPTIONS) -> dict[str, Any]:
    """Every option of the class: those given in `value` (None or a mapping; the keys
    checked, not the values), the defaults for the rest."""
    rows = options_of(cls_name)
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be None or a dict of option name -> value (the "
                        f"options of {cls_name}: {', '.join(rows)}), got {value!r}")
    unknown = [k for k in value if k not in rows]
    if unknown:
        raise ValueError(f"{name}[{unknown[0]!r}] is not an option of {cls_name}; its "
                         f"options are {', '.join(rows)}")
    return {k: value.get(k, default) for k, (_, default) in rows.items()}


def parameters_of(cls_name: str) -> dict[str, Constraint]:
    """name -> rule of the estimator class's parameters (its _parameter_constraints)."""
    rules: dict[str, Constraint] = {name: PARAMETERS[name].rule
                                    for name, _, _ in signature_of(cls_name)[:-1]}
    rules[OPTIONS] = Options(cls_name)
    return rules


def option(est: Any, name: str) -> Any:
    """The option `name` of the estimator `est` as given (its default when not given);
    unchecked: validate() checks it at fit."""
    return resolve_options(type(est).__name__, est.options)[name]


class Config(SimpleNamespace):
    """The validated hyper-parameters of one fit."""

    n_heads: int
    causal: bool
    bias: bool
    rope: bool   # positional == "rope" (the bare X -> Y network's flag)
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
    random_state: Any
    class_weight: Any
    pretrain: str | None
    pretrain_epochs: int | None
    #: set by tokenizer="auto"'s short path: the training batches' largest time shift
    #: (attnx.estimators._augment), None: no shifts
    augment_shift: int | None = None


def validate(params: Mapping[str, Any], constraints: Mapping[str, Constraint]) -> Config:
    """Config of the validated parameters `params` (get_params()) under `constraints`
    (each rule in turn, the options' keys as fields of their own, then the settings
    that depend on each other); n_layers is 1 where it is not a parameter."""
    c = Config(n_layers=1, label_smoothing=0.0, loss="squared_error", quantiles=None)
    for name, rule in constraints.items():
        value = rule.check(name, params[name])
        if isinstance(rule, Options):
            for key, v in value.items():
                setattr(c, key, v)
        else:
            setattr(c, name, value)
    # AdamW's group
    c.lr, c.betas, c.eps, c.weight_decay = _check_hyper(c.lr, c.betas, c.eps, c.weight_decay)
    c.rope = c.positional == "rope"
    if c.instance_affine and c.instance_norm is None:
        raise ValueError("options['instance_affine']=True needs instance_norm 'input' or "
                         "'revin' (the affine map follows the normalisation), got "
                         "instance_norm=None")
    if (c.quantiles is None) != (c.loss != "pinball"):
        raise ValueError(f"options['quantiles'] (one level per output column) go with "
                         f"loss='pinball' and only with it; got loss={c.loss!r} and "
                         f"quantiles={c.quantiles!r}")
    return c
