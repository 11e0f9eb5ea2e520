"""attnx's own small classical forecasting methods (no dependency beyond numpy).

Every method maps a 1-D float64 series y (n values) and a horizon h to a Forecast:
the point forecast (h,) and a one-sigma scale of its error at each step (h,), the
textbook error growth of the method times the spread of its in-sample one-step errors.
The forecaster calibrates the intervals on top of that scale (attnx.forecasting._selection: the
scale only shapes them along the horizon).

Methods (``METHODS``; m: a seasonal period)
  naive           the last value; error scale s * sqrt(j) at step j
  seasonal_naive  the value one period m before; s * sqrt(floor((j - 1) / m) + 1)
  drift           the last value plus the mean step of the series; s * sqrt(j (1 + j / n))
  ses             simple exponential smoothing (alpha on a grid, smallest one-step
                  squared error); s * sqrt(1 + (j - 1) alpha^2)
  theta           the Theta method as SES with drift: the SES level plus half the
                  least-squares slope b of the series times (j - 1 + (1 - (1 - alpha)^n)
                  / alpha) (Hyndman & Billah's form); the SES error scale

naive, drift, ses and theta run on the seasonally adjusted series when `periods` is
given: each period's classical-decomposition indices (the mean deviation of each phase
from a centred moving average, shifted to mean 0) are removed one period after the
other, shortest first, and added back to the forecast. A period is kept only when the
series holds two of its cycles and its autocorrelation at that lag passes a 90% test
(``seasonal``, on the linearly detrended series). ``log=True`` runs a method on log(y) (multiplicative seasonality and
trend; the forecast is the exponential of the log forecast, its scale by the delta
method); ``multiplicative`` tells when that is worth trying.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, NamedTuple

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

    F64 = npt.NDArray[np.float64]

__all__ = ["Forecast", "METHODS", "run", "seasonal", "multiplicative", "seasonal_indices",
           "adjust"]

#: the smoothing weights simple exponential smoothing and theta choose from
ALPHAS = np.linspace(0.02, 1.0, 50)
#: a z value of the 90% autocorrelation test for a seasonal period
Z_SEASONAL = 1.645


class Forecast(NamedTuple):
    mean: F64    # (h,) point forecast
    sigma: F64   # (h,) one-sigma scale of the error at each step (> 0)


def _spread(resid: F64, y: F64) -> float:
    """The root mean square of one-step errors, floored at a tiny fraction of the
    series' level (a perfectly fitted series still gets a positive scale)."""
    r = resid[np.isfinite(resid)]
    s = float(np.sqrt(np.mean(r * r))) if r.size else 0.0
    floor = 1e-6 * (float(np.mean(np.abs(y))) + 1e-12)
    return max(s, floor)


def seasonal_indices(z: F64, period: int) -> F64 | None:
    """The classical decomposition's seasonal indices of z for `period` (period,),
    indexed by position % period, mean 0; None without two full cycles."""
    n = z.shape[0]
    if period < 2 or n < 2 * period:
        return None
    if period % 2:
        kernel = np.full(period, 1.0 / period)
    else:   # a 2 x period moving average: centred on a time step
        kernel = np.r_[0.5, np.ones(period - 1), 0.5] / period
    ma = np.convolve(z, kernel, mode="valid")
    off = (kernel.shape[0] - 1) // 2
    pos = np.arange(off, off + ma.shape[0])
    dev = z[pos] - ma
    tot = np.bincount(pos % period, weights=dev, minlength=period)
    cnt = np.bincount(pos % period, minlength=period)
    idx = tot / np.maximum(cnt, 1)
    out: F64 = idx - idx.mean()
    return out


def seasonal(z: F64, period: int, z_value: float = Z_SEASONAL) -> bool:
    """Whether the autocorrelation of the linearly detrended z at lag `period` passes a
    90% one-sided test (Bartlett's standard error from the shorter lags), on two or
    more cycles."""
    n = z.shape[0]
    if period < 2 or n < 2 * period + 1:
        return False
    t = np.arange(n, dtype=np.float64)
    x = z - np.polyval(np.polyfit(t, z, 1), t)   # a trend correlates every lag
    den = float(x @ x)
    if den <= 0:
        return False
    r = np.array([float(x[k:] @ x[:-k]) / den for k in range(1, period + 1)])
    se = math.sqrt((1.0 + 2.0 * float(np.sum(r[:-1] ** 2))) / n)
    return bool(r[-1] > z_value * se)


def multiplicative(y: F64, period: int) -> bool:
    """Whether a log transform is worth trying: y is positive, spans a range of levels
    (max / min of its cycles' means at least 1.2) and the spread within a cycle grows
    with the cycle's level (correlation above 0.5 over at least three cycles; with
    period 1, cycles of 4 steps)."""
    if np.any(y <= 0):
        return False
    p = max(period, 4)
    c = y.shape[0] // p
    if c < 3:
        return False
    cyc = y[y.shape[0] - c * p:].reshape(c, p)
    mean, sd = cyc.mean(axis=1), cyc.std(axis=1)
    if mean.max() < 1.2 * mean.min() or np.ptp(sd) == 0:
        return False
    return bool(np.corrcoef(mean, sd)[0, 1] > 0.5)


def adjust(z: F64, periods: tuple[int, ...], h: int) -> tuple[F64, F64]:
    """(z without its seasonal components, their sum over the next h steps)."""
    adj, future, _ = adjust_kept(z, periods, h)
    return adj, future


def adjust_kept(z: F64, periods: tuple[int, ...], h: int) -> tuple[F64, F64, list[int]]:
    """adjust, and the periods whose indices it removed."""
    n = z.shape[0]
    adj, future, kept = z.copy(), np.zeros(h), []
    for p in sorted(set(periods)):
        if not seasonal(adj, p):
            continue
        idx = seasonal_indices(adj, p)
        if idx is None:
            continue
        adj = adj - idx[np.arange(n) % p]
        future += idx[np.arange(n, n + h) % p]
        kept.append(p)
    return adj, future, kept


def _ses_path(a: F64) -> tuple[F64, F64]:
    """For every alpha of ALPHAS: the one-step errors (len(ALPHAS), n - 1) and the
    final level (len(ALPHAS),), the level starting at the first value."""
    level = np.full(ALPHAS.shape[0], a[0])
    err = np.empty((ALPHAS.shape[0], a.shape[0] - 1))
    for t in range(1, a.shape[0]):
        e = a[t] - level
        err[:, t - 1] = e
        level = level + ALPHAS * e
    return err, level


def _ses_fit(a: F64) -> tuple[float, float, F64]:
    """(alpha, final level, one-step errors) of SES on a (n >= 2)."""
    err, level = _ses_path(a)
    best = int(np.argmin(np.sum(err * err, axis=1)))
    return float(ALPHAS[best]), float(level[best]), err[best]


def _naive(a: F64, h: int) -> Forecast:
    j = np.arange(1, h + 1)
    s = _spread(np.diff(a), a)
    return Forecast(np.full(h, a[-1]), s * np.sqrt(j))


def _drift(a: F64, h: int) -> Forecast:
    n = a.shape[0]
    j = np.arange(1, h + 1)
    slope = (a[-1] - a[0]) / (n - 1)
    s = _spread(np.diff(a) - slope, a)
    return Forecast(a[-1] + slope * j, s * np.sqrt(j * (1.0 + j / (n - 1))))


def _ses(a: F64, h: int) -> Forecast:
    alpha, level, err = _ses_fit(a)
    j = np.arange(1, h + 1)
    return Forecast(np.full(h, level), _spread(err, a) * np.sqrt(1 + (j - 1) * alpha ** 2))


def _theta(a: F64, h: int) -> Forecast:
    n = a.shape[0]
    alpha, level, err = _ses_fit(a)
    slope = float(np.polyfit(np.arange(n, dtype=np.float64), a, 1)[0])
    j = np.arange(1, h + 1)
    mean = level + 0.5 * slope * (j - 1 + (1 - (1 - alpha) ** n) / alpha)
    return Forecast(mean, _spread(err, a) * np.sqrt(1 + (j - 1) * alpha ** 2))


def _seasonal_naive(z: F64, h: int, period: int) -> Forecast:
    n = z.shape[0]
    p = period if 1 <= period <= n - 1 else 1
    j = np.arange(1, h + 1)
    mean = z[n - p + (j - 1) % p]
    return Forecast(mean, _spread(z[p:] - z[:-p], z) * np.sqrt((j - 1) // p + 1))


_ADJUSTED: dict[str, Callable[[F64, int], Forecast]] = {
    "naive": _naive, "drift": _drift, "ses": _ses, "theta": _theta}
#: the method names run accepts
METHODS = ("naive", "seasonal_naive", "drift", "ses", "theta")
#: the fewest values each method needs
MIN_LENGTH = {"naive": 2, "seasonal_naive": 2, "drift": 2, "ses": 2, "theta": 3}


def run(name: str, y: F64, h: int, periods: tuple[int, ...] = (), *,
        log: bool = False) -> Forecast:
    """Method `name` on the 1-D series y for h steps; `periods`: the seasonal periods
    (seasonal_naive uses the longest one that leaves a value before it, the others
    remove them all); log: on log(y) (y must be positive)."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose from {METHODS}")
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 1 or y.shape[0] < MIN_LENGTH[name]:
        raise ValueError(f"{name} needs a 1-D series of at least {MIN_LENGTH[name]} values")
    if log and np.any(y <= 0):
        raise ValueError("log=True needs a positive series")
    z = np.log(y) if log else y
    if name == "seasonal_naive":
        fit = [p for p in periods if p < z.shape[0]]
        out = _seasonal_naive(z, h, max(fit) if fit else 1)
    else:
        adj, future = adjust(z, periods, h)
        f = _ADJUSTED[name](adj, h)
        out = Forecast(f.mean + future, f.sigma)
    if log:
        mean = np.exp(np.clip(out.mean, -700.0, 700.0))
        return Forecast(mean, np.maximum(mean * out.sigma, 1e-12))
    return out
