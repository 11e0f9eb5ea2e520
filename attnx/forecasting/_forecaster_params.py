"""TransformerForecaster's parameters, in one table: the constructor (its signature and
defaults), the checks fit runs first and the types a user's type checker sees come from
it (a new parameter is one row here, one line of ForecasterParameters, and its entry in
the class docstring, which a test requires)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, TypedDict

import numpy as np

from ..estimators._hyper import (Bool, Constraint, Dtype, OneOf, PositiveInt, Real, Unchecked,
                                 Verbose, build_init)
from ..runtime._params import check_int
from ._candidates import is_candidate
from ._forecaster_auto import METHODS

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..runtime._typing import RandomStateLike

#: intervals="quantile": the levels the network learns unless quantile_levels says
QUANTILE_LEVELS = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95)
BASELINES = ("auto", "seasonal_naive", "seasonal_mean", "combined", "none")
INTERVALS = ("conformal", "quantile", None)


class ForecasterParameters(TypedDict, total=False):
    """The types of TransformerForecaster's parameters (its keyword arguments)."""

    horizon: int
    window: int | None
    patch_len: int | None
    patch_stride: int | None
    season: int | None
    baseline: str
    d_model: int
    n_heads: int
    n_layers: int
    d_hidden: int | None
    dropout: float
    channel_independent: bool
    intervals: str | None
    quantile_levels: Any
    calibration: int | None
    steps: int
    epochs: int | None
    batch_size: int
    lr: float
    weight_decay: float
    random_state: RandomStateLike
    verbose: int
    dtype: npt.DTypeLike
    method: str | None
    n_jobs: int | None


class AtLeast(Constraint):
    """An int >= lo (None too when optional)."""

    def __init__(self, lo: int, optional: bool = False) -> None:
        self.lo, self.optional = lo, optional

    def check(self, name: str, value: Any) -> int | None:
        if value is None and self.optional:
            return None
        return check_int(name, value, self.lo)


class Jobs(Constraint):
    """None, -1 (one per CPU) or an int >= 1."""

    def check(self, name: str, value: Any) -> int | None:
        if value is None:
            return None
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool) \
                and int(value) < 1:
            if int(value) == -1:
                return -1
            raise ValueError(f"{name} must be >= 1 (or -1: one worker per CPU; None: "
                             f"this process only), got {int(value)}")
        return check_int(name, value, 1)


class Method(Constraint):
    """None (chosen at fit), "network", "auto" or the name of one classical candidate."""

    def check(self, name: str, value: Any) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or (value not in METHODS and not is_candidate(value)):
            raise ValueError(f"{name} must be None, one of {METHODS} or a candidate's name, "
                             f"got {value!r}")
        return value


#: name -> (default, rule), in the constructor's order (horizon is positional);
#: quantile_levels is checked with intervals="quantile" only (TransformerForecaster._check)
PARAMETERS: dict[str, tuple[Any, Constraint]] = {
    "horizon": (1, AtLeast(1)),
    "window": (None, AtLeast(1, optional=True)),
    "patch_len": (None, AtLeast(1, optional=True)),
    "patch_stride": (None, AtLeast(1, optional=True)),
    "season": (None, AtLeast(1, optional=True)),
    "baseline": ("auto", OneOf(BASELINES, "{name} must be one of {options}, got {value!r}")),
    "d_model": (64, PositiveInt()),
    "n_heads": (4, PositiveInt()),
    "n_layers": (2, PositiveInt()),
    "d_hidden": (None, PositiveInt(optional=True)),
    "dropout": (0.1, Real(0.0, 1.0, "in [0, 1)")),
    "channel_independent": (True, Bool()),
    "intervals": ("conformal", OneOf(INTERVALS, "{name} must be one of {options}, "
                                                "got {value!r}")),
    "quantile_levels": (QUANTILE_LEVELS, Unchecked()),
    "calibration": (None, AtLeast(1, optional=True)),
    "steps": (500, AtLeast(1)),
    "epochs": (None, AtLeast(1, optional=True)),
    "batch_size": (32, AtLeast(1)),
    "lr": (1e-3, Unchecked()),            # with weight_decay: AdamW's checks, at fit
    "weight_decay": (0.01, Unchecked()),
    "random_state": (None, Unchecked()),  # where the seeds are drawn
    "verbose": (0, Verbose()),
    "dtype": (np.float32, Dtype()),
    "method": (None, Method()),
    "n_jobs": (None, Jobs()),
}
POSITIONAL = ("horizon",)


def signature() -> list[tuple[str, Any, bool]]:
    """(name, default, positional) of every parameter, in the constructor's order."""
    return [(name, default, name in POSITIONAL) for name, (default, _) in PARAMETERS.items()]


def make_init() -> Callable[..., None]:
    """TransformerForecaster's constructor, from PARAMETERS."""
    return build_init("TransformerForecaster", signature(),
                      ForecasterParameters.__annotations__)


def check(params: dict[str, Any]) -> dict[str, Any]:
    """Every parameter's rule, in the table's order: the checked values (ValueError /
    TypeError naming the parameter)."""
    return {name: rule.check(name, params[name]) for name, (_, rule) in PARAMETERS.items()}
