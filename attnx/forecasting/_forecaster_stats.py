"""The statistics the forecaster's network path decides with (attnx.forecasting.forecaster's
point 6): the held-out windows' evidence, a Diebold-Mariano-style test, the network's
L1-optimal weight, covariate scaling statistics and the weights that interpolate a
quantile level between the learned ones."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _windows as win

if TYPE_CHECKING:
    import numpy.typing as npt

    F64 = npt.NDArray[np.float64]

__all__ = ["evidence", "significantly_positive", "l1_weight", "col_stats", "level_weights"]

# the held-out windows must hold at least this many horizons of distinct time steps
# (independent forecasts' worth) to choose a baseline or to weigh the network on them
MIN_EVIDENCE = 2.0
# another baseline replaces the default one when its held-out absolute error is smaller
# by more than this many standard errors (the evidence counts the independent forecasts)
SIGNIFICANCE = 2.0


def evidence(w: win.Windows, held: npt.NDArray[np.bool_], horizon: int) -> float:
    """How many horizons of distinct time steps the targets of the windows `held`
    cover, summed over the series (overlapping windows of one series are about one
    forecast's worth of evidence per `horizon` origins)."""
    total = 0
    for i in np.unique(w.series[held]):
        org = w.origin[held & (w.series == i)]
        total += int(np.unique((org[:, None] + np.arange(horizon)).ravel()).size)
    return total / horizon


def significantly_positive(d: F64, n_eff: float) -> bool:
    """Whether the mean of the paired differences d (one per held-out window) is
    above 0 by more than SIGNIFICANCE standard errors, the standard error counting
    n_eff independent forecasts (the evidence; overlapping windows are not
    independent): a Diebold-Mariano-style test. Constant differences: their sign."""
    mean = float(np.mean(d))
    sd = float(np.std(d, ddof=1)) if d.shape[0] > 1 else 0.0
    if sd == 0.0:
        return mean > 0.0
    return mean > SIGNIFICANCE * sd / math.sqrt(n_eff)


def l1_weight(pred: F64, target: F64) -> float:
    """The weight c in [0, 1] with the smallest sum |target - c * pred| (the error
    MASE scores): the weighted median of the ratios target / pred, weights |pred|,
    clipped to [0, 1] (0 when pred is all zero)."""
    p, t = pred.ravel(), target.ravel()
    keep = p != 0
    if not keep.any():
        return 0.0
    r, wt = t[keep] / p[keep], np.abs(p[keep])
    order = np.argsort(r, kind="stable")
    cum = np.cumsum(wt[order])
    c = float(r[order][int(np.searchsorted(cum, 0.5 * cum[-1]))])
    return max(0.0, min(1.0, c)) + 0.0   # + 0.0: no -0.0


def col_stats(items: list[F64] | None) -> tuple[Any, Any]:
    if items is None:
        return None, None
    allv = np.concatenate(items, axis=0)
    mu = allv.mean(axis=0)
    sd = allv.std(axis=0)
    return mu, np.where(sd > 0, sd, 1.0)


def level_weights(levels: tuple[float, ...], p: float, coverage: float) -> F64:
    """Weights of the sorted learned `levels` that interpolate level p linearly
    (ValueError naming `coverage` when p is outside them)."""
    lv = np.asarray(levels)
    if np.isclose(p, lv[0], rtol=0, atol=1e-9):
        p = float(lv[0])
    elif np.isclose(p, lv[-1], rtol=0, atol=1e-9):
        p = float(lv[-1])
    if not lv[0] <= p <= lv[-1]:
        raise ValueError(f"coverage={coverage!r} needs the levels {(1 - coverage) / 2:g} "
                         f"and {(1 + coverage) / 2:g}; this forecaster learned the levels "
                         f"{levels} (quantile_levels): give a coverage of at most "
                         f"{lv[-1] - lv[0]:g} or refit with wider levels")
    w = np.zeros(lv.size)
    j = int(np.searchsorted(lv, p, side="right")) - 1
    if j >= lv.size - 1:
        w[-1] = 1.0
    else:
        t = (p - lv[j]) / (lv[j + 1] - lv[j])
        w[j], w[j + 1] = 1.0 - t, t
    return w
