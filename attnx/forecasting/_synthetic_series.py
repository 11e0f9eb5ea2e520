"""Synthetic series for training the pretrained forecaster (attnx.forecasting._pretrained_forecaster).

Every series is drawn from one numpy Generator, so a seed gives the same panel. A
series is a composition of parts, each drawn with its own probability:

- a level and a trend: none, linear, damped (exponential approach to a limit),
  piecewise linear (slope changes at random knots) or a random walk with or without
  drift;
- smooth wiggles: a Gaussian-process-like draw from random Fourier features of a
  squared-exponential kernel with a random length scale;
- one or two seasonal cycles (periods from PERIODS, a second one a multiple of the
  first, 24/168 or 48/336 style), each either a few random harmonics (a smooth
  profile) or a random value per phase (a rough profile, such as weekdays), whose
  amplitude may drift; added to the series or multiplying it (exp-level series);
- regime changes: level shifts and changes of the noise's scale at random times;
- noise: Gaussian, AR(1) or AR(2), heavy-tailed (Student t) or multiplicative
  (log-normal), plus rare outliers; trends, wiggles, shifts and seasons are drawn on
  log-uniform scales from a fraction of the noise to tens of times it;
- stationary series: a mean, AR noise and maybe a weak season;
- random walks (Gaussian or heavy-tailed steps, half with a drift), some with a
  season on top; multiplicative series: exponential growth (up to 6% a step
  without a season) times (1 + a season) times log-normal noise;
- intermittent demand: Bernoulli arrivals times Poisson or gamma sizes, with a
  slowly varying arrival rate.

``panel(n, seed)`` returns (series, seasons): the season is the shortest period put
in (1 for none), i.e. what a user would give as ``season``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

    F64 = npt.NDArray[np.float64]

__all__ = ["PERIODS", "series", "panel"]

#: the seasonal periods drawn (weights in _PERIOD_P): quarterly, weekly-of-days,
#: monthly, hourly days, weekly-of-years, half-hourly days, and 5, 6, 10 for variety
PERIODS = (4, 7, 12, 24, 52, 48, 5, 6, 10)
_PERIOD_P = np.array([0.18, 0.14, 0.26, 0.14, 0.06, 0.08, 0.04, 0.05, 0.05])
#: a second, longer period per first period (a multiple of it)
_SECOND = {7: (28, 364), 12: (60,), 24: (168,), 48: (336,), 4: (20,), 52: (260,)}


def _ar(rng: np.random.Generator, n: int) -> F64:
    """AR(1) or AR(2) noise of unit innovation scale, or white noise."""
    e = rng.standard_normal(n)
    r = rng.random()
    if r < 0.35:
        return e
    if r < 0.8:
        phi = rng.uniform(-0.3, 0.95)
        a, b = phi, 0.0
    else:   # a stationary AR(2): roots inside the unit circle
        a = rng.uniform(-0.5, 1.2)
        b = rng.uniform(-0.8, min(0.9 - a, 0.9 + a))
        b = float(np.clip(b, -0.8, 0.45))
    out = np.empty(n)
    p1 = p2 = 0.0
    for t in range(n):
        v = a * p1 + b * p2 + e[t]
        out[t] = v
        p1, p2 = v, p1
    sd = out.std()
    return out / (sd if sd > 0 else 1.0)


def _gp(rng: np.random.Generator, t: F64) -> F64:
    """A smooth draw like a Gaussian process with a squared-exponential kernel: random
    Fourier features (frequencies ~ N(0, 1 / length^2)), unit scale."""
    length = np.exp(rng.uniform(np.log(3.0), np.log(max(4.0, t.shape[0] / 2))))
    k = 24
    w = rng.standard_normal(k) / length
    b = rng.uniform(0, 2 * np.pi, k)
    out = np.cos(np.outer(t, w) + b) @ rng.standard_normal(k)
    sd = out.std()
    return out / (sd if sd > 0 else 1.0)


def _trend(rng: np.random.Generator, t: F64) -> F64:
    """A trend in units of the series' length (at most about +-3 over the series)."""
    n = t.shape[0]
    u = t / max(n, 1)
    r = rng.random()
    if r < 0.25:
        return np.zeros(n)
    if r < 0.55:
        lin: F64 = float(rng.normal(0, 1.2)) * u
        return lin
    if r < 0.7:   # damped: approaches a limit
        rate = rng.uniform(1.0, 8.0)
        damped: F64 = float(rng.normal(0, 1.5)) * (1 - np.exp(-rate * u))
        return damped
    if r < 0.85:  # piecewise linear
        knots = np.sort(rng.uniform(0.1, 0.9, int(rng.integers(1, 4))))
        out: F64 = float(rng.normal(0, 1.0)) * u
        for kn in knots:
            out += float(rng.normal(0, 1.5)) * np.maximum(u - kn, 0)
        return out
    # a random walk, maybe with drift
    steps = rng.standard_normal(n) * rng.uniform(0.02, 0.15)
    steps += rng.normal(0, 0.01) if rng.random() < 0.5 else 0.0
    return np.cumsum(steps)


def _season(rng: np.random.Generator, t: F64, period: int) -> F64:
    """A unit-scale seasonal cycle of `period` steps: a few harmonics or a random
    value per phase, its amplitude possibly drifting along the series."""
    phase = (t.astype(np.int64)) % period
    if rng.random() < 0.6 or period > 60:
        k = int(rng.integers(1, min(4, period // 2) + 1)) if period >= 2 else 1
        prof = np.zeros(period)
        ph = np.arange(period)
        for j in range(1, k + 1):
            amp = rng.standard_normal() / j
            prof += amp * np.sin(2 * np.pi * j * ph / period + rng.uniform(0, 2 * np.pi))
    else:
        prof = rng.standard_normal(period)
        if rng.random() < 0.3:   # a few lower phases (weekend days, closed hours)
            prof = np.where(rng.random(period) < 0.3, prof - 2.0, prof)
    prof -= prof.mean()
    sd = prof.std()
    prof = prof / (sd if sd > 0 else 1.0)
    out = prof[phase]
    if rng.random() < 0.25:   # a drifting amplitude
        out = out * np.exp(rng.normal(0, 0.5) * t / max(t.shape[0], 1))
    return out


def _shifts(rng: np.random.Generator, n: int) -> F64:
    """Level shifts at 1-3 random times (unit scale), or none."""
    out = np.zeros(n)
    if rng.random() < 0.25 and n > 10:
        for cut in rng.integers(n // 6, n - 2, size=int(rng.integers(1, 4))):
            out[cut:] += rng.normal(0, 1.5)
    return out


def _demand(rng: np.random.Generator, n: int) -> F64:
    """Intermittent demand: Bernoulli arrivals (rate slowly varying) times sizes."""
    p0 = rng.uniform(0.05, 0.7)
    p = np.clip(p0 * np.exp(0.4 * _gp(rng, np.arange(n, dtype=np.float64))
                            * rng.uniform(0, 1)), 0.01, 0.95)
    if rng.random() < 0.5:
        size = rng.poisson(rng.uniform(1, 15), n).astype(np.float64) + 1.0
    else:
        size = rng.gamma(rng.uniform(0.5, 4), rng.uniform(1, 10), n)
        size = np.round(size) if rng.random() < 0.5 else size
    return (rng.random(n) < p) * size


def _walk(rng: np.random.Generator, n: int) -> F64:
    """A random walk (Gaussian or heavy-tailed steps), half of them with a drift."""
    steps = rng.standard_normal(n) if rng.random() < 0.8 else rng.standard_t(4, n)
    drift = rng.normal(0, 0.4) if rng.random() < 0.5 else 0.0
    return np.cumsum(drift + steps)


def series(rng: np.random.Generator, n: int) -> tuple[F64, int]:
    """One synthetic series of n values and its season (1: none)."""
    t = np.arange(n, dtype=np.float64)
    r = rng.random()
    if r < 0.08:
        return _demand(rng, n), 1
    season = 1
    seas = np.zeros(n)
    if rng.random() < 0.6:
        season = int(rng.choice(PERIODS, p=_PERIOD_P / _PERIOD_P.sum()))
        seas = _season(rng, t, season)
        longer = _SECOND.get(season)
        if longer and rng.random() < 0.35:
            p2 = int(rng.choice(longer))
            if p2 <= n:
                seas += _season(rng, t, p2) * rng.uniform(0.3, 1.5)
    scale = np.exp(rng.uniform(np.log(0.5), np.log(100.0)))
    if r < 0.22:   # a random walk, maybe with a season on top
        walk = _walk(rng, n)
        amp = rng.uniform(0.5, 8.0) if rng.random() < 0.3 else 0.0
        y = walk + amp * seas + rng.normal(0, rng.uniform(0, 1.0), n)
        return _positive(rng, y * scale), season if amp > 0 else 1
    if r < 0.34:
        # multiplicative: exponential growth x (1 + a season) x log-normal noise
        g = rng.uniform(-0.01, 0.06) if season == 1 else rng.uniform(-0.005, 0.025)
        amp = rng.uniform(0.05, 0.5)
        y = (np.exp(g * t + 0.1 * _gp(rng, t) * rng.uniform(0, 1))
             * (1 + amp * np.tanh(seas / 2))
             * np.exp(rng.normal(0, rng.uniform(0.005, 0.1), n)))
        return y * rng.uniform(10, 500), season
    if r < 0.46:   # stationary: a mean, AR noise and maybe a weak season
        y = _ar(rng, n) + np.exp(rng.uniform(np.log(0.05), np.log(2.0))) * seas
        return _positive(rng, y * scale), season
    # additive: trend + wiggles + shifts + season + noise, in units of the noise
    base = _trend(rng, t) * np.exp(rng.uniform(np.log(0.05), np.log(300.0)))
    if rng.random() < 0.4:
        base += _gp(rng, t) * np.exp(rng.uniform(np.log(0.2), np.log(10.0)))
    base += _shifts(rng, n) * rng.uniform(1, 10)
    noise = _ar(rng, n)
    if rng.random() < 0.15:   # heavy tails
        noise = noise * 0.5 + rng.standard_t(3, n) * 0.3
    if rng.random() < 0.2:    # a change of the noise's scale
        cut = int(rng.integers(1, n))
        noise[cut:] *= rng.uniform(0.3, 3.0)
    if rng.random() < 0.1:
        noise[rng.random(n) < 0.01] += rng.normal(0, 6, 1)
    amp = np.exp(rng.uniform(np.log(0.1), np.log(20.0)))
    y = base + amp * seas + noise
    return _positive(rng, y * scale), season


def _positive(rng: np.random.Generator, y: F64) -> F64:
    """Most series are shifted to a positive level; some stay around zero."""
    sd = float(y.std()) + 1e-3
    out: F64
    if rng.random() < 0.7:
        out = y - float(y.min()) + float(rng.uniform(0.05, 3.0)) * sd + 1e-3
    else:
        out = y + float(rng.normal(0, 2)) * sd
    return out


def _length(rng: np.random.Generator) -> int:
    """A series length: short (14-60), medium (60-400) or long (400-1200)."""
    r = rng.random()
    if r < 0.3:
        return int(rng.integers(14, 61))
    if r < 0.8:
        return int(rng.integers(60, 401))
    return int(rng.integers(400, 1201))


def panel(n_series: int, seed: int, *, extra: int = 0) -> tuple[list[F64], list[int]]:
    """n_series synthetic series (lengths from short to long, plus `extra` steps each:
    the future a training window needs) and their seasons, from seed."""
    rng = np.random.default_rng([int(seed), 20261128])
    out, seasons = [], []
    for _ in range(int(n_series)):
        y, m = series(rng, _length(rng) + int(extra))
        out.append(y)
        seasons.append(m)
    return out, seasons
