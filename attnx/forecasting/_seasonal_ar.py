"""A seasonal ARIMA that is cheap at any period: a seasonal autoregression of the
seasonally differenced series (the classical candidate ``sar``; attnx.forecasting._candidates).

With z_t = y_t - y_{t-m} (m: the seasonal period) and mu the mean of z (or 0),

    (1 - phi_1 B - ... - phi_p B^p) (1 - Phi B^m) (z_t - mu) = e_t,

the multiplicative ARIMA(p, 0, 0)(1, 1, 0)_m. It is estimated in two least-squares
stages instead of by a likelihood over a state of 2m values (what makes a seasonal
ARIMA search cost minutes at m = 48): Phi from regressing z_t - mu on z_{t-m} - mu
(0 when fewer than MIN_PAIRS such pairs exist), then phi_1..phi_p from the
autoregression of u_t = (z_t - mu) - Phi (z_{t-m} - mu). Phi is kept inside
(-PHI_MAX, PHI_MAX) and an autoregression whose polynomial has a root on or inside
the unit circle drops to the next lower order.

The forecast carries the seasonal difference forward: y_{t+j} = y_{t+j-m} + z_{t+j}.
With Phi < 0 (day-to-day changes that revert) it is a weighted mean of the last two
cycles; with Phi = 0 and p = 0 it is seasonal naive plus mu (a seasonal drift).
Its error scale is the residuals' spread times the square root of the cumulative
squared psi-weights of the whole model (the MA(infinity) form of y).

``fit`` chooses p in 0..MAX_P and whether mu is estimated by AIC on a common sample;
``refit`` re-estimates the coefficients of a chosen (p, mean) on other data. ``run``
takes several seasonal periods: the model runs at the shortest, on the series without
the longer ones' classical-decomposition indices (attnx.forecasting._classical.adjust:
a weekly cycle on top of a daily one), which are added back to its forecast.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ._classical import Forecast, adjust

if TYPE_CHECKING:
    import numpy.typing as npt

    F64 = npt.NDArray[np.float64]

__all__ = ["fit", "refit", "run", "min_length", "MAX_P"]

#: the largest order of the short-lag autoregression
MAX_P = 3
#: Phi is estimated from at least this many (z_t, z_{t-m}) pairs, else it is 0
MIN_PAIRS = 8
#: |Phi| stays below this (a unit seasonal root of z would be a second seasonal difference)
PHI_MAX = 0.98


def min_length(m: int) -> int:
    """The fewest values the model runs on with period m (m + 4: z has 4 values)."""
    return m + 4


def _coefficients(y: F64, m: int, p: int, mean: bool
                  ) -> tuple[float, float, F64, F64]:
    """(mu, Phi, phi (p,), residuals) of the model on y; p is lowered while the
    autoregression is not stationary or the data are too few for it."""
    z = y[m:] - y[:-m]
    mu = float(np.mean(z)) if mean else 0.0
    d = z - mu
    a, b = d[m:], d[:-m]
    den = float(b @ b)
    phi_s = float(np.clip(a @ b / den, -PHI_MAX, PHI_MAX)) if (
        a.shape[0] >= MIN_PAIRS and den > 0) else 0.0
    u = d.copy()
    u[m:] = a - phi_s * b
    while True:
        p = min(p, max(0, (u.shape[0] - 2) // 2))
        if p == 0:
            return mu, phi_s, np.zeros(0), u
        x = np.column_stack([u[p - k: u.shape[0] - k] for k in range(1, p + 1)])
        phi: F64 = np.asarray(np.linalg.lstsq(x, u[p:], rcond=None)[0], dtype=np.float64)
        if np.all(np.isfinite(phi)) and np.all(np.abs(np.roots(np.r_[1.0, -phi])) < 1.0):
            return mu, phi_s, phi, u[p:] - x @ phi
        p -= 1


def _forecast(y: F64, m: int, h: int, mu: float, phi_s: float, phi: F64,
              resid: F64) -> Forecast:
    n = y.shape[0]
    ext = np.r_[y, np.zeros(h)]
    d = np.r_[y[m:] - y[:-m] - mu, np.zeros(h)]   # z - mu, index t - m
    u = d.copy()
    if n > 2 * m:
        u[m:n - m] = d[m:n - m] - phi_s * d[:n - 2 * m]
    p = phi.shape[0]
    for j in range(h):
        t = n - m + j   # the index of z_{n + j} in d
        un = float(phi @ u[t - p:t][::-1]) if p and t - p >= 0 else 0.0
        dn = un + (phi_s * d[t - m] if t - m >= 0 else 0.0)
        u[t], d[t] = un, dn
        ext[n + j] = ext[n + j - m] + dn + mu
    # psi weights of y: the product of the AR polynomials (1 - B^m)(1 - Phi B^m)(1 - phi(B))
    poly = np.convolve(np.convolve(np.r_[1.0, np.zeros(m - 1), -1.0],
                                   np.r_[1.0, np.zeros(m - 1), -phi_s]), np.r_[1.0, -phi])
    psi = np.zeros(h)
    psi[0] = 1.0
    for j in range(1, h):
        k = min(j, poly.shape[0] - 1)
        psi[j] = -float(poly[1:k + 1] @ psi[j - 1::-1][:k])
    r = resid[np.isfinite(resid)]
    s = max(float(np.sqrt(np.mean(r * r))) if r.size else 0.0,
            1e-6 * (float(np.mean(np.abs(y))) + 1e-12))
    return Forecast(ext[n:], s * np.sqrt(np.cumsum(psi * psi)))


def _check(y: F64, m: int) -> F64:
    y = np.asarray(y, dtype=np.float64)
    if m < 2:
        raise ValueError(f"sar needs a seasonal period of at least 2, got {m}")
    if y.ndim != 1 or y.shape[0] < min_length(m):
        raise ValueError(f"sar needs a 1-D series of at least {min_length(m)} values "
                         f"with period {m}")
    return y


def refit(spec: dict[str, Any], y: F64, h: int, m: int) -> Forecast:
    """The model of order spec["p"], with a mean when spec["mean"], on y."""
    y = _check(y, m)
    mu, phi_s, phi, resid = _coefficients(y, m, int(spec["p"]), bool(spec["mean"]))
    return _forecast(y, m, h, mu, phi_s, phi, resid)


def fit(y: F64, h: int, m: int) -> tuple[Forecast, dict[str, Any]]:
    """The order p (0..MAX_P) and the mean chosen by AIC on y: (forecast, spec)."""
    y = _check(y, m)
    best: tuple[float, dict[str, Any]] | None = None
    for mean in (False, True):
        for p in range(MAX_P + 1):
            _, _, phi, resid = _coefficients(y, m, p, mean)
            if phi.shape[0] != p:   # lowered: that order is not fitted
                continue
            r = resid[MAX_P - p:] if resid.shape[0] > MAX_P else resid   # a common sample
            k = p + 1 + int(mean)
            aic = r.shape[0] * float(np.log(np.mean(r * r) + 1e-300)) + 2.0 * k
            if best is None or aic < best[0]:
                best = (aic, {"p": p, "mean": mean})
    spec = best[1] if best is not None else {"p": 0, "mean": False}
    return refit(spec, y, h, m), spec


def run(y: F64, h: int, periods: tuple[int, ...], spec: dict[str, Any] | None = None
        ) -> tuple[Forecast, dict[str, Any]]:
    """The model at the shortest period > 1 of `periods`, the longer ones removed first
    and added back (module docstring); spec None: chosen by fit. (forecast, spec)"""
    y = np.asarray(y, dtype=np.float64)
    seasons = sorted(set(p for p in periods if p > 1))
    main = seasons[0] if seasons else 1
    future = np.zeros(h)
    if len(seasons) > 1:
        y, future = adjust(y, tuple(seasons[1:]), h)
    if spec is None:
        f, spec = fit(y, h, main)
    else:
        f = refit(spec, y, h, main)
    return Forecast(f.mean + future, f.sigma), spec
