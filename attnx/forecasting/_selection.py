"""Choosing a classical candidate by rolling-origin cross-validation, and calibrating
its intervals on the same origins (the forecaster's method="auto").

For one 1-D series y of n values and horizon h:

1. Origins (``origins``): up to N_ORIGINS forecast origins t (train on y[:t], score
   y[t:t + h]), the last one h before the end and the others `step` apart
   (step = h // 2, less when the series is short, at least 1), each leaving at least
   `min_train` values to train on. A short series with fewer than MIN_FULL such
   origins adds origins after n - h whose horizon is only partly observed (the
   steps past the end are not scored), so a series of h + 2 values still has a few.
2. Every candidate (attnx.forecasting._candidates) is chosen and run once on the whole series
   (its spec: the model its search picked) and run with that spec at every origin;
   a candidate that fails anywhere, or needs more values than an origin has, drops out.
3. The choice: the candidate with the smallest mean absolute error over every scored
   (origin, step), when that error is below DOMINANCE times the second best's; else
   the combination of the TOP best whose error is within RATIO times the best's,
   each weighted by 1 / its error squared (scored on the same origins; no extra
   fits); the best seasonal naive (a period > 1) joins it whenever its error is within
   RATIO times the best's, among the TOP or not (where the origins cannot tell the
   candidates apart, this cut the series that lose to seasonal naive on the synthetic
   panels, 111 -> 105 over three seeds, at no cost in mean error). A clear winner
   keeps its exactness (a count series that stopped at zeros), a close race hedges
   the choice the few origins cannot make, and a candidate far behind does not dilute
   it (tuned on the development and synthetic panels of benchmarks/forecasting.py).
4. The chosen candidate, or the combination's parts, are run on the whole series.
5. Intervals (split-conformal, normalised, per step): the chosen candidate's scores
   are its absolute errors at the origins divided by its own error scale at that
   origin and step (attnx.forecasting._classical.Forecast.sigma: the method's error growth along
   the horizon; at least SCALE_FLOOR times the series' mean absolute step), an
   (origins, h) array (NaN where a step is past the series' end). The interval at
   predict is the forecast plus / minus q_j times the final fit's scale at step j,
   where q_j is the conformal quantile (the ceil((N + 1) c)-th smallest of N scores,
   coverage c) of the scores at step j, shrunk toward that of all steps with
   STEP_SHRINK pseudo-scores: (N_j q_j + STEP_SHRINK q) / (N_j + STEP_SHRINK). The
   errors grow faster along the horizon than the methods' textbook scales say on
   series whose trend bends, and the steps' own quantiles follow that when there are
   scores enough. A series with fewer than MIN_SCORES scores borrows those of the
   other series fitted with it; with too few for the level, the largest score or
   the normal quantile, whichever is larger. The quantiles are taken at
   c + MARGIN (1 - c) (0.94 for c = 0.9): the rolling origins understate the final
   origin's errors on series whose level drifts or jumps (on the development and
   synthetic panels 0.9 itself covered 0.83-0.86 of the held-out values).
"""
from __future__ import annotations

import math
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from . import _candidates as cand
from . import _classical as cl
from . import _gaps

if TYPE_CHECKING:
    import numpy.typing as npt

    F64 = npt.NDArray[np.float64]

__all__ = ["origins", "evaluate", "pick", "choose", "Choice", "half_width", "step_quantiles",
           "borrow", "pool", "quantile_from", "step_quantiles_from", "N_ORIGINS", "TOP", "RATIO"]

#: how many rolling origins score the candidates (at most)
N_ORIGINS = 5
#: a short series adds partly observed origins while it has fewer full ones than this
MIN_FULL = 3
#: a series with fewer conformal scores than this borrows the other series' scores
MIN_SCORES = 30
#: the best candidate forecasts alone when its error is below this fraction of the
#: second best's; else the TOP best are combined
DOMINANCE = 0.8
#: the combination weighs this many of the best candidates, those whose error is
#: within RATIO times the best's
TOP = 5
RATIO = 1.5
#: every error scale is at least this fraction of the series' mean absolute step
SCALE_FLOOR = 0.05
#: the intervals' scores are taken at coverage c + MARGIN * (1 - c) (0.94 for 0.9)
MARGIN = 0.4
#: each step's quantile is shrunk toward that of all steps with this many pseudo-scores
STEP_SHRINK = 20.0
#: the combination's name
COMBO = "combination"


def origins(n: int, h: int, min_train: int, k: int = N_ORIGINS) -> list[int]:
    """The forecast origins (descending) for a series of n values (module point 1)."""
    room = n - h - min_train
    out: list[int] = []
    if room >= 0:
        step = max(1, min(h // 2 if h > 1 else 1, room // max(k - 1, 1) if k > 1 else 1))
        out = [n - h - i * step for i in range(k) if n - h - i * step >= min_train]
    if len(out) < MIN_FULL:
        first = max(n - h + 1, min_train)
        extra = [t for t in range(first, n) if t not in out][:k - len(out)]
        out = sorted(set(out) | set(extra), reverse=True)
    return out


class Choice:
    """A chosen candidate for one series: its name and spec (a combination: its
    parts' names and specs), the final forecast and error scale (h,), the
    conformal scores (origins, h; NaN past the series' end) and the cross-validated
    mean absolute error of every candidate."""

    def __init__(self, name: str, spec: dict[str, Any], forecast: cl.Forecast,
                 scores: F64, errors: dict[str, float]) -> None:
        self.name, self.spec, self.forecast = name, spec, forecast
        self.scores, self.errors = scores, errors

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "spec": self.spec,
                "errors": {k: float(v) for k, v in self.errors.items()}}


def _run(name: str, spec: dict[str, Any], y: F64, h: int, periods: tuple[int, ...]
         ) -> cl.Forecast:
    if name == COMBO:
        parts = [_pair(cand.refit(p, s, y, h, periods)) for p, s, _ in spec["parts"]]
        w = np.array([float(x) for _, _, x in spec["parts"]])
        return cl.Forecast(*_weighted(parts, w))
    return cand.refit(name, spec, y, h, periods)


def rerun(choice: dict[str, Any], y: F64, h: int, periods: tuple[int, ...]) -> cl.Forecast:
    """The chosen model (Choice.to_dict) run on another series y (its interior NaNs
    filled as evaluate fills them)."""
    y = np.asarray(y, np.float64)
    if _gaps.has_gaps(y):
        y = _gaps.fill(y, min(periods) if periods else 1)
    f = _run(str(choice["name"]), choice["spec"], y, h, periods)
    return cl.Forecast(f.mean, np.maximum(f.sigma, scale_floor(y)))


def scale_floor(y: F64) -> float:
    """The smallest error scale a forecast of y gets: SCALE_FLOOR times the mean
    absolute step of y (a flat stretch before a jump gets no near-zero scale, whose
    scores would blow every interval up), or a tiny fraction of its level."""
    step = float(np.mean(np.abs(np.diff(y)))) if y.shape[0] > 1 else 0.0
    return SCALE_FLOOR * step if step > 0 else 1e-6 * (float(np.mean(np.abs(y))) + 1e-12)


class Evaluation:
    """Every candidate that ran on a series: its final forecast and spec, its
    forecasts and error scales at the origins (o, h), and the origins' truth and
    which (origin, step) pairs are observed."""

    def __init__(self, final: dict[str, tuple[cl.Forecast, dict[str, Any]]],
                 pred: dict[str, tuple[F64, F64]], truth: F64,
                 obs: npt.NDArray[np.bool_]) -> None:
        self.final, self.pred, self.truth, self.obs = final, pred, truth, obs

    def error(self, mean: F64) -> float:
        """The mean absolute error of origin forecasts (o, h) over the observed pairs."""
        return float(np.mean(np.abs(mean - self.truth)[self.obs]))


def evaluate(y: F64, h: int, periods: tuple[int, ...], names: list[str] | None = None,
             *, use_statsforecast: bool = True) -> Evaluation:
    """Run every candidate on y and at its rolling origins (module points 1-2).
    Interior NaNs in y (observed first and last values) are filled
    (attnx.forecasting._gaps.fill at the main period) and the filled values are not
    scored at the origins."""
    y = np.asarray(y, dtype=np.float64)
    n = y.shape[0]
    seen = None
    if _gaps.has_gaps(y):
        seen = ~np.isnan(y)
        y = _gaps.fill(y, min(periods) if periods else 1)
    if names is None:
        names = cand.available(y, periods, use_statsforecast=use_statsforecast)
    need = {nm: cand.min_length(nm, periods) for nm in names}
    # the origins leave the statsforecast models their values when the series allows
    pref = max(need.values())
    min_train = pref if n - pref >= MIN_FULL else max(2, min(need.values()))
    orgs = origins(n, h, min_train)
    steps = np.arange(h)
    obs = np.array([[t + j < n for j in steps] for t in orgs])                 # (o, h)
    if seen is not None:   # filled values are not scored
        obs &= np.array([[t + j < n and bool(seen[t + j]) for j in steps] for t in orgs])
    truth = np.array([[y[t + j] if t + j < n else np.nan for j in steps] for t in orgs])
    final: dict[str, tuple[cl.Forecast, dict[str, Any]]] = {}
    pred: dict[str, tuple[F64, F64]] = {}
    floor = scale_floor(y)
    for nm in names:
        if need[nm] > min(orgs, default=0) or need[nm] > n:
            continue
        try:
            f, spec = cand.fit(nm, y, h, periods)
            at = [cand.refit(nm, spec, y[:t], h, periods) for t in orgs]
        except (ValueError, ArithmeticError, np.linalg.LinAlgError, NotImplementedError):
            continue
        if not cand.is_finite(f) or not all(cand.is_finite(a) for a in at):
            continue
        final[nm] = (cl.Forecast(f.mean, np.maximum(f.sigma, floor)), spec)
        pred[nm] = (np.array([a.mean for a in at]),
                    np.maximum(np.array([a.sigma for a in at]), floor))
    if not final:   # nothing ran (cannot happen with n >= 2): the last value
        f = cl.run("naive", y, h)
        final["naive"] = (f, {})
        pred["naive"] = (np.full(truth.shape, y[-1]), np.ones(truth.shape))
    return Evaluation(final, pred, truth, obs)


def pick(ev: Evaluation) -> Choice:
    """The best candidate when its rolling-origin error is clearly the smallest, else
    the weighted combination of the best few (module points 3-5)."""
    final, pred = dict(ev.final), dict(ev.pred)
    errors = {nm: ev.error(p[0]) for nm, p in pred.items()}
    singles = sorted(errors, key=lambda k: (errors[k], k))
    best = singles[0]
    top = [k for k in singles[:TOP] if errors[k] <= RATIO * errors[best]]
    snaive = [k for k in singles if k.startswith("seasonal_naive") and k[14:].isdigit()
              and int(k[14:]) > 1 and errors[k] <= RATIO * errors[best]]
    if snaive and snaive[0] not in top:
        top.append(snaive[0])
    if len(top) >= 2 and not errors[best] < DOMINANCE * errors[singles[1]]:
        w = np.array([1.0 / max(errors[k], 1e-12) ** 2 for k in top])
        w /= w.sum()
        pred[COMBO] = _weighted([pred[k] for k in top], w)
        f = _weighted([_pair(final[k][0]) for k in top], w)
        final[COMBO] = (cl.Forecast(*f), {"parts": [[k, final[k][1], float(x)]
                                                     for k, x in zip(top, w)]})
        errors[COMBO] = ev.error(pred[COMBO][0])
        best = COMBO
    mean, sigma = pred[best]
    with np.errstate(all="ignore"):
        scores = np.abs(mean - ev.truth) / sigma
    scores[~(ev.obs & np.isfinite(scores))] = np.nan
    f, spec = final[best]
    return Choice(best, spec, f, scores, errors)


def _pair(f: cl.Forecast) -> tuple[F64, F64]:
    return f.mean, f.sigma


def _weighted(items: list[tuple[F64, F64]], w: F64) -> tuple[F64, F64]:
    """The weighted means of (forecasts, error scales) pairs."""
    mean: F64 = sum((x * m for x, (m, _) in zip(w, items)), np.zeros_like(items[0][0]))
    sigma: F64 = sum((x * s for x, (_, s) in zip(w, items)), np.zeros_like(items[0][1]))
    return mean, sigma


def choose(y: F64, h: int, periods: tuple[int, ...], names: list[str] | None = None,
           *, use_statsforecast: bool = True) -> Choice:
    """The candidate with the smallest rolling-origin error on y (module docstring)."""
    return pick(evaluate(y, h, periods, names, use_statsforecast=use_statsforecast))


def quantile(scores: F64, coverage: float) -> float:
    """The conformal quantile of normalised scores for `coverage` (module point 5;
    the caller adds the margin; NaN scores are left out)."""
    scores = scores[~np.isnan(scores)]
    return quantile_from(scores.shape[0], coverage,
                         lambda rank: float(np.partition(scores, rank - 1)[rank - 1]))


def quantile_from(n: int, coverage: float, kth: Callable[[int], float]) -> float:
    """quantile() of n scores, given kth(rank): their rank-th smallest (1-based). Which
    ranks it asks for depends on n and coverage only (a panel on several processes
    selects them there: attnx.forecasting.dask)."""
    z = NormalDist().inv_cdf(0.5 + coverage / 2.0)
    if n == 0:
        return z
    rank = math.ceil((n + 1) * coverage)   # the rank-th smallest score
    if rank > n:
        return max(kth(n), z)
    return kth(rank)


def step_quantiles(scores: F64, h: int, coverage: float) -> F64:
    """The conformal quantile at each of the h steps (module point 5): that of the
    step's own scores shrunk toward that of all steps by STEP_SHRINK pseudo-scores.
    1-D scores (no steps known) give the quantile of all at every step."""
    flat = scores.ravel()
    flat = flat[~np.isnan(flat)]
    per_step = scores.ndim == 2 and scores.shape[1] == h
    cols = [scores[:, j][~np.isnan(scores[:, j])] for j in range(h)] if per_step else []

    def count(col: int | None) -> int:
        return flat.shape[0] if col is None else cols[col].shape[0] if per_step else 0

    def kth(col: int | None, rank: int) -> float:
        a = flat if col is None else cols[col]
        return float(np.partition(a, rank - 1)[rank - 1])
    return step_quantiles_from(h, coverage, count, kth)


def step_quantiles_from(h: int, coverage: float, count: Callable[[int | None], int],
                        kth: Callable[[int | None, int], float]) -> F64:
    """step_quantiles() from count(col): how many scores step col has (None: all the
    steps'; 0 for every step of 1-D scores), and kth(col, rank): their rank-th
    smallest."""
    q_all = quantile_from(count(None), coverage, lambda r: kth(None, r))
    out: F64 = np.full(h, q_all)
    for j in range(h):
        n_j = count(j)
        if n_j:
            q_j = quantile_from(n_j, coverage, lambda r: kth(j, r))
            out[j] = (n_j * q_j + STEP_SHRINK * q_all) / (n_j + STEP_SHRINK)
    return out


def half_width(sigma: F64, scores: F64, coverage: float) -> F64:
    """The interval's half-width at each step: the scores' conformal quantile of that
    step at coverage + MARGIN (1 - coverage) times the forecast's error scale."""
    level = coverage + MARGIN * (1.0 - coverage)
    out: F64 = step_quantiles(scores, sigma.shape[0], level) * sigma
    return out


def count(scores: F64) -> int:
    """How many scores there are (NaN ones left out)."""
    return int(np.sum(~np.isnan(scores)))


def pool(scores: list[F64]) -> F64:
    """The scores of several series together: their (origins, h) arrays stacked when
    they all have h steps, else every score flattened."""
    if not scores:
        return np.zeros(0)
    if all(s.ndim == 2 and s.shape[1] == scores[0].shape[1] for s in scores):
        return np.concatenate(scores, axis=0)
    return np.concatenate([s.ravel() for s in scores])


def borrow(scores: list[F64]) -> list[F64]:
    """Each series' scores; those of every series together for a series with fewer
    than MIN_SCORES (module point 5)."""
    pooled = pool(scores)
    return [s if count(s) >= MIN_SCORES else pooled for s in scores]
