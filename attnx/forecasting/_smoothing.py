"""Exponential smoothing with the model chosen by AICc: the classical half of the
pretrained forecaster's zero-shot forecast (attnx.forecasting._pretrained_forecaster).

``smoothing_forecast(y, h, season)`` forecasts the 1-D series y (at least 2 values):

1. Only the last ``WINDOW`` values are used (the network's context length), so the
   cost is bounded whatever the series' length.
2. When y is positive and its spread within a cycle grows with its level
   (attnx.forecasting._classical.multiplicative), the method runs on log(y) and the
   forecast is exponentiated (multiplicative season and trend).
3. The season (when it passes the autocorrelation test of
   attnx.forecasting._classical.adjust) is removed with classical-decomposition indices
   and added back to the forecast.
4. Three models of the adjusted series are fitted, each by the smallest sum of squared
   one-step errors over a grid of smoothing weights: simple exponential smoothing
   (level only), Holt's linear trend and Holt's damped trend (damping 0.8-0.98). The
   trend models start from a least-squares line through the first values. The model
   with the smallest AICc, n log(SSE / n) + 2k + 2k(k + 1) / (n - k - 1) with k = 2, 4
   and 5 parameters, gives the forecast.

It is the ETS idea (Hyndman et al.) reduced to additive errors, a grid instead of an
optimiser and a decomposition instead of a smoothed season: a few milliseconds a series.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from . import _classical as cl

if TYPE_CHECKING:
    import numpy.typing as npt

    F64 = npt.NDArray[np.float64]

__all__ = ["smoothing_forecast", "exponential_smoothing", "WINDOW"]

#: the values of the series' end that are used
WINDOW = 256
#: the grids: level weights alpha, trend weights beta (as a share of alpha), damping
ALPHAS = np.array([0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9])
BETA_SHARES = np.array([0.01, 0.05, 0.1, 0.2])
DAMPING = np.array([0.8, 0.9, 0.95, 0.98])
#: values of the series' start that set the trend models' first level and slope
N_INIT = 10


def _smooth(a: F64, alpha: F64, beta: F64, phi: F64, level0: float,
            slope0: float) -> tuple[F64, F64, F64]:
    """Holt's recursions for every (alpha, beta, phi) at once: the final level and
    slope and the sum of squared one-step errors over all of a."""
    level = np.full(alpha.shape, level0)
    slope = np.full(alpha.shape, slope0)
    sse = np.zeros(alpha.shape)
    for x in a:
        f = level + phi * slope
        e = x - f
        sse += e * e
        level = f + alpha * e
        slope = phi * slope + beta * e
    return level, slope, sse


def _aicc(sse: float, n: int, k: int) -> float:
    v = n * math.log(max(sse, 1e-300) / n) + 2 * k
    if n - k - 1 > 0:
        v += 2 * k * (k + 1) / (n - k - 1)
    return v


def exponential_smoothing(a: F64, h: int) -> tuple[F64, str]:
    """(forecast (h,), chosen model: "ses", "holt" or "damped") of the 1-D series a
    (no season) by the smallest AICc of the three models."""
    n = a.shape[0]
    k0 = min(n, N_INIT)
    if k0 >= 3:
        slope0, intercept = np.polyfit(np.arange(k0, dtype=np.float64), a[:k0], 1)
        level0, slope0 = float(intercept - slope0), float(slope0)   # at time -1
    else:
        level0, slope0 = float(a[0]), 0.0
    j = np.arange(1, h + 1, dtype=np.float64)
    zero = np.zeros_like(ALPHAS)
    level, _, sse = _smooth(a, ALPHAS, zero, zero, float(a[:k0].mean()), 0.0)
    i = int(np.argmin(sse))
    best = (_aicc(float(sse[i]), n, 2), "ses", np.full(h, level[i]))
    for name, phis, k in (("holt", np.array([1.0]), 4), ("damped", DAMPING, 5)):
        al, sh, ph = (g.ravel() for g in np.meshgrid(ALPHAS, BETA_SHARES, phis,
                                                      indexing="ij"))
        level, slope, sse = _smooth(a, al, al * sh, ph, level0, slope0)
        i = int(np.argmin(sse))
        p = float(ph[i])
        steps = j if p == 1.0 else p * (1.0 - p ** j) / (1.0 - p)
        score = _aicc(float(sse[i]), n, k)
        if score < best[0]:
            best = (score, name, level[i] + steps * slope[i])
    return best[2], best[1]


def smoothing_forecast(y: F64, h: int, season: int) -> F64:
    """The forecast (h,) of the 1-D series y (>= 2 finite values) with seasonal period
    `season` (1: none) by the steps of the module docstring."""
    y = np.asarray(y, dtype=np.float64)[-WINDOW:]
    log = bool(np.all(y > 0)) and cl.multiplicative(y, season)
    z = np.log(y) if log else y
    adj, future = cl.adjust(z, (season,) if season > 1 else (), h)
    out = exponential_smoothing(adj, h)[0] + future
    if log:
        out = np.exp(np.clip(out, -700.0, 700.0))
    res: F64 = np.asarray(out, dtype=np.float64)
    return res
