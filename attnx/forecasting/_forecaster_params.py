"""TransformerForecaster's parameters, declared once: PARAMETERS (each one's default,
rule and line of documentation). The checks fit runs first and the Parameters section of
the class docstring come from it; the constructor is written out in forecaster.py
(tests/estimators/test_parameters.py checks its names and defaults against the table)."""
from __future__ import annotations

import textwrap
from typing import Any, NamedTuple

import numpy as np

from ..estimators._docs import notes, parameters_section
from ..estimators._hyper import (Bool, Constraint, Dtype, OneOf, PositiveInt, Real, Unchecked,
                                 Verbose)
from ..runtime._params import check_int
from ._candidates import is_candidate
from ._forecaster_auto import METHODS

#: intervals="quantile": the levels the network learns unless quantile_levels says
QUANTILE_LEVELS = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95)
BASELINES = ("auto", "seasonal_naive", "seasonal_mean", "combined", "none")
INTERVALS = ("conformal", "quantile", None)


class AtLeast(Constraint):
    """An int >= lo (None too when optional)."""

    def __init__(self, lo: int, optional: bool = False) -> None:
        self.lo, self.optional = lo, optional

    def check(self, name: str, value: Any) -> int | None:
        if value is None and self.optional:
            return None
        return check_int(name, value, self.lo)

    def describe(self) -> str:
        return f"None or int >= {self.lo}" if self.optional else f"int >= {self.lo}"


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

    def describe(self) -> str:
        return "None, -1 or int >= 1"


class Method(Constraint):
    """None (chosen at fit), "network", "auto" or the name of one classical candidate."""

    def check(self, name: str, value: Any) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or (value not in METHODS and not is_candidate(value)):
            raise ValueError(f"{name} must be None, one of {METHODS} or a candidate's name, "
                             f"got {value!r}")
        return value

    def describe(self) -> str:
        return 'None, "network", "auto" or a candidate\'s name'


class Row(NamedTuple):
    """One parameter: its default, its rule and its line of documentation."""

    default: Any
    rule: Constraint
    doc: str


#: name -> Row, in the constructor's order (horizon is positional); quantile_levels is
#: checked with intervals="quantile" only (TransformerForecaster._check)
PARAMETERS: dict[str, Row] = {
    "horizon": Row(1, AtLeast(1), "How many steps ahead to forecast (all at once)."),
    "window": Row(None, AtLeast(1, optional=True), "Context length (None: chosen from the "
                  "data; see Notes)."),
    "patch_len": Row(None, AtLeast(1, optional=True), "Patch size (None: clip(window // 8, "
                     "1, 16))."),
    "patch_stride": Row(None, AtLeast(1, optional=True), "Patch step (None: half of "
                        "patch_len: half-overlapping patches)."),
    "season": Row(None, AtLeast(1, optional=True), "Seasonal period (1: none; None: from "
                  "the index's frequency or the data; see Notes)."),
    "baseline": Row("auto", OneOf(BASELINES), "What the network forecasts the residual "
                    "from (see Notes)."),
    "d_model": Row(64, PositiveInt(), "The transformer's width."),
    "n_heads": Row(4, PositiveInt(), "Attention heads per layer."),
    "n_layers": Row(2, PositiveInt(), "Transformer blocks."),
    "d_hidden": Row(None, PositiveInt(optional=True), "Width of each block's MLP (None: 4 * "
                    "d_model)."),
    "dropout": Row(0.1, Real(0.0, 1.0, "in [0, 1)"), "Dropout in training."),
    "channel_independent": Row(True, Bool(), "Multivariate y as separate series through "
                               "one model."),
    "intervals": Row("conformal", OneOf(INTERVALS), "Prediction intervals: split-conformal, "
                     "learned quantiles calibrated conformally (CQR), or none."),
    "quantile_levels": Row(QUANTILE_LEVELS, Unchecked("sequence of floats in (0, 1)"),
                           "With intervals=\"quantile\": the levels the network learns "
                           "(0.5 is added when missing)."),
    "calibration": Row(None, AtLeast(1, optional=True), "Origins per series kept for "
                       "calibration (None: about 200 calibration windows in all)."),
    "steps": Row(500, AtLeast(1), "Optimizer steps to train for when epochs is None (see "
                 "Notes)."),
    "epochs": Row(None, AtLeast(1, optional=True), "Passes over the windows (None: from "
                  "steps)."),
    "batch_size": Row(32, AtLeast(1), "Windows per AdamW step."),
    "lr": Row(1e-3, Unchecked("float >= 0"), "AdamW's learning rate (constant)."),
    "weight_decay": Row(0.01, Unchecked("float >= 0"), "AdamW's weight decay, on the weight "
                        "matrices only."),
    "random_state": Row(None, Unchecked("None, int, numpy Generator or RandomState"),
                        "Seeds the network's weights, shuffling and calibration split."),
    "verbose": Row(0, Verbose(), "0: silent; 1: a progress bar per phase."),
    "dtype": Row(np.float32, Dtype(), "The network's dtype."),
    "method": Row(None, Method(), "What forecasts: the network, classical candidates chosen "
                  "per series (\"auto\"), one candidate, or None (see Notes)."),
    "n_jobs": Row(None, Jobs(), "Worker processes of the classical path (None: this "
                  "process; -1: one per CPU)."),
}


def docs_of(summary: str, paragraphs: list[tuple[str, str]]) -> str:
    """TransformerForecaster's docstring: `summary`, the Parameters section from the
    table and the Notes `paragraphs` ((topic, text), prose)."""
    section = parameters_section([(name, row.rule.describe(), row.default, row.doc)
                                  for name, row in PARAMETERS.items()])
    lines = [textwrap.dedent(summary).strip(), "", section, ""]
    lines += notes([(topic, " ".join(text.split())) for topic, text in paragraphs])
    return "\n".join(lines) + "\n"


def check(params: dict[str, Any]) -> dict[str, Any]:
    """Every parameter's rule, in the table's order: the checked values (ValueError /
    TypeError naming the parameter)."""
    return {name: row.rule.check(name, params[name]) for name, row in PARAMETERS.items()}
