"""The classical candidates a forecaster chooses from (attnx.forecasting._selection).

A candidate is a name and a spec (a JSON-able dict): ``fit(name, y, h, periods)``
runs it on a 1-D series and returns its Forecast (attnx.forecasting._classical) and the spec
that reproduces the model it chose; ``refit(name, spec, y, h, periods)`` runs that
same model on other data (the rolling origins' training parts, or the series
predict(y=...) is given) without choosing again.

attnx's own methods (always there): naive, drift, ses, theta and seasonal naive
(one per seasonal period); with ``_log`` the same on the log of a positive series
whose seasonal spread grows with its level (attnx.forecasting._classical.multiplicative).
attnx's pretrained network (attnx.forecasting._pretrained_forecaster: trained on
synthetic series only; horizons up to 64), ``pretrained``, with its error scale the
series' one-step naive error grown with the square root of the step.
``sar``: a seasonal autoregression of the seasonally differenced series, the
multiplicative ARIMA(p, 0, 0)(1, 1, 0) at the main period estimated by least squares,
any longer periods' indices removed first (attnx.forecasting._seasonal_ar): a seasonal
ARIMA that is cheap at long periods, for a seasonal series on which the seasonal
AutoARIMA search is not run (too costly, or no statsforecast).
statsforecast's, when it is installed (the optional ``forecast`` extra):
  ets      AutoETS (error, trend, damping and season chosen by AICc; the origins
           reuse the chosen form). The seasonal forms are searched only on a series
           whose own autocorrelation at the main period passes the 90% test
           (ets_seasonal): a panel's period given to its series without that season
           costs a tenth of the time (a mixed panel of 1000 short series, quiet
           machine: 82 s -> 49 s). Above ETS_MAX_SEASON (R's ets refuses such
           periods) it runs without a season, on the seasonally adjusted series
           (the indices added back, as arima1 does) when that pays for the
           indices by AICc (each period p counted as p - 1 more parameters, as
           AutoETS's seasonal states would be; a weak period found in a panel of
           growth rates does not), else on the series: its seasonal search at 48 or
           336 half-hours took 3-23 s a fit on 4000 values and mostly chose a
           form without the season (generated two-season series, 36 forecasts:
           MASE 3.05 -> 0.72 at the day, 1.17 -> 0.66 at the week, 16 and 57
           times faster)
  atheta   AutoTheta (the chosen theta model and decomposition), on series of at most
           ATHETA_MAX_LENGTH values: on 36 generated half-hourly series of
           1968-3984 values it took about 40% of method="auto"'s time and
           changed nothing (MASE +0.0008 +- 0.0016 without it, 27 of 36 forecasts
           the same; attnx's own theta on the seasonally adjusted series stays)
  arima    AutoARIMA (the chosen orders and constant; a narrower, approximate search
           than its defaults: ARIMA_SEARCH), only for series short enough that its
           search is cheap (ARIMA_MAX_COST) and long enough that it pays
           (ARIMA_MIN_LENGTH); ``arima1`` when only the non-seasonal search is
           cheap: on the seasonally adjusted series
           (attnx.forecasting._classical.adjust), the seasonal indices added back
  mstl     MSTL over every seasonal period with an AutoETS trend, only with two or
           more periods; its STL smoothers evaluated every tenth of their windows
           and interpolated between (STL_JUMP, R's stl defaults; statsmodels'
           evaluate every point): generated half-hourly and hourly series with two
           seasons, 16 x 3 forecasts, MASE 0.5787 -> 0.5792 (+0.0004 +- 0.0003)
           at a third of the time (4032 values: 1.7 s -> 0.5 s a fit)
Their error scale is their own 90% interval's half-width over z(0.95).
"""
from __future__ import annotations

import importlib
import math
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _classical as cl
from . import _seasonal_ar as sar

if TYPE_CHECKING:
    import numpy.typing as npt

    F64 = npt.NDArray[np.float64]

__all__ = ["available", "fit", "refit", "min_length", "is_candidate", "have_statsforecast"]

Spec = dict[str, Any]
Z95 = 1.6448536269514722
#: AutoARIMA runs when len(y) * max(period, 1) is at most this (its search grows with
#: both, and varies: 1-14 s for 150-220 monthly values on one core)
ARIMA_MAX_COST = 1200
#: AutoARIMA runs on series of more than this many values only: on shorter ones its
#: search took 60-95% of method="auto"'s time and gained nothing (without it, "sar"
#: standing in on seasonal ones: per-series mean MASE 1.327 against 1.331 over 660
#: generated series of six kinds, two draws, at a third of the time; M1's 181 yearly
#: series 3.338 against 3.365, nile 1.292 against 1.290)
ARIMA_MIN_LENGTH = 130
#: AutoARIMA's search: approximate (CSS) likelihoods, small orders, at most 30 models
ARIMA_SEARCH = {"approximation": True, "max_p": 3, "max_q": 3, "max_P": 1, "max_Q": 1,
                "nmodels": 30}
#: AutoTheta runs on series of at most this many values
ATHETA_MAX_LENGTH = 1500
#: statsforecast's models need this many values (AutoETS refuses fewer)
SF_MIN_LENGTH = 8
#: the pretrained network forecasts from this many values on
PRETRAINED_MIN_LENGTH = 3
_SF = ("ets", "atheta", "arima", "arima1", "mstl")
#: MSTL's STL smoothers are evaluated every STL_JUMP of their window (at the shortest
#: period, whose windows are the narrowest) and interpolated between
STL_JUMP = 0.1
#: MSTL's seasonal window at the shortest period (statsforecast's mstl: 7 + 4)
_STL_SEASONAL = 11


def have_statsforecast() -> bool:
    try:
        _statsforecast_models()
    except ImportError:
        return False
    return True


def _statsforecast_models() -> Any:
    """statsforecast.models (an optional dependency, imported when first used)."""
    return importlib.import_module("statsforecast.models")


def available(y: F64, periods: tuple[int, ...], *, use_statsforecast: bool = True
              ) -> list[str]:
    """The candidates worth trying on the 1-D series y with these seasonal periods."""
    names = ["naive", "drift", "ses", "theta", "pretrained"]
    names += [f"seasonal_naive{p}" for p in sorted(set(periods)) if 1 < p < y.shape[0]]
    main = min(periods) if periods else 1
    if cl.multiplicative(y, main):
        names += ["drift_log", "ses_log", "theta_log"]
    sf = use_statsforecast and have_statsforecast()
    arima = sf and ARIMA_MIN_LENGTH < y.shape[0] <= ARIMA_MAX_COST
    if (main > 1 and y.shape[0] >= sar.min_length(main)
            and not (arima and y.shape[0] * main <= ARIMA_MAX_COST)):
        names.append("sar")   # where the seasonal AutoARIMA search does not run
    if sf:
        names += ["ets"] + (["atheta"] if y.shape[0] <= ATHETA_MAX_LENGTH else [])
        if arima:   # a seasonal search only when it is cheap
            names.append("arima" if y.shape[0] * max(main, 1) <= ARIMA_MAX_COST
                         else "arima1")
        if len([p for p in periods if p > 1]) >= 2:
            names.append("mstl")
    return names


def is_candidate(name: str) -> bool:
    """Whether `name` is a candidate's name (seasonal naive with its period)."""
    base = name.removesuffix("_log")
    if base.startswith("seasonal_naive"):
        return base[len("seasonal_naive"):].isdigit() and int(base[14:]) >= 1
    return name in _SF or name in ("pretrained", "sar") or base in cl.METHODS


def min_length(name: str, periods: tuple[int, ...]) -> int:
    """The fewest values candidate `name` runs on."""
    if name in _SF:
        return SF_MIN_LENGTH
    if name == "pretrained":
        return PRETRAINED_MIN_LENGTH
    if name == "sar":
        return sar.min_length(max(min([p for p in periods if p > 1], default=2), 2))
    base = name.removesuffix("_log")
    if base.startswith("seasonal_naive"):
        return int(base[len("seasonal_naive"):]) + 1
    return cl.MIN_LENGTH[base]


def fit(name: str, y: F64, h: int, periods: tuple[int, ...]) -> tuple[cl.Forecast, Spec]:
    """Candidate `name` chosen and run on y: (its forecast, its spec)."""
    if name in _SF:
        return _sf_fit(name, y, h, periods, None)
    if name == "sar":
        return sar.run(y, h, periods)
    return _own(name, {}, y, h, periods), {}


def refit(name: str, spec: Spec, y: F64, h: int, periods: tuple[int, ...]) -> cl.Forecast:
    """Candidate `name` with the model `spec` (from fit) run on y; a statsforecast
    model whose chosen form cannot be fitted to y (a seasonal form on too few
    values) searches again."""
    if name in _SF:
        try:
            return _sf_fit(name, y, h, periods, spec)[0]
        except ValueError:   # the chosen form does not fit these data: search again
            return _sf_fit(name, y, h, periods, None)[0]
    return _own(name, spec, y, h, periods)


def _own(name: str, spec: Spec, y: F64, h: int, periods: tuple[int, ...]) -> cl.Forecast:
    if name == "pretrained":
        return _pretrained(y, h, periods)
    if name == "sar":
        return sar.run(y, h, periods, spec)[0]
    log = name.endswith("_log")
    base = name.removesuffix("_log")
    if base.startswith("seasonal_naive"):
        return cl.run("seasonal_naive", y, h, (int(base[len("seasonal_naive"):]),), log=log)
    return cl.run(base, y, h, periods, log=log)


def _pretrained(y: F64, h: int, periods: tuple[int, ...]) -> cl.Forecast:
    """The pretrained network's forecast (ValueError beyond its longest horizon)."""
    from . import _pretrained_forecaster as pf
    if h > pf.HORIZON:
        raise ValueError(f"pretrained forecasts at most {pf.HORIZON} steps, asked {h}")
    main = min(periods) if periods else 1
    mean = np.asarray(pf.forecast(y, h, season=main), dtype=np.float64)
    scale = cl._spread(np.diff(y), y) if y.shape[0] > 1 else 1.0
    return cl.Forecast(mean, scale * np.sqrt(np.arange(1, h + 1)))


#: AutoETS searches the seasonal forms only on a series whose own autocorrelation at
#: the main period passes the 90% test (attnx.forecasting._classical.seasonal); None: always
ETS_SEASON_Z: float | None = 1.645
#: AutoETS's longest seasonal period; beyond it, AutoETS without a season on the
#: seasonally adjusted series
ETS_MAX_SEASON = 24


def ets_seasonal(y: F64, main: int) -> bool:
    """Whether AutoETS searches y's seasonal forms at period `main` (ETS_SEASON_Z)."""
    if main < 2 or ETS_SEASON_Z is None:
        return main >= 2
    return cl.seasonal(np.asarray(y, dtype=np.float64), main, ETS_SEASON_Z)


def _adjustment_pays(sfm: Any, y: F64, periods: tuple[int, ...], h: int) -> bool:
    """Whether AutoETS without a season has a lower AICc on y seasonally adjusted,
    each removed period p counted as p - 1 more parameters, than on y itself."""
    adj, _, kept = cl.adjust_kept(y, periods, h)
    if not kept:
        return False
    n = y.shape[0]
    aicc = []
    for z, extra in ((y, 0), (adj, sum(p - 1 for p in kept))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with np.errstate(all="ignore"):
                try:
                    fitted = sfm.AutoETS(season_length=1).fit(z).model_
                except Exception:   # statsforecast raises bare Exceptions too
                    return False
        k = int(fitted["n_params"]) + extra
        if n - k - 1 <= 0:
            return False
        aicc.append(-2.0 * float(fitted["loglik"]) + 2.0 * k + 2.0 * k * (k + 1) / (n - k - 1))
    return bool(aicc[1] < aicc[0])


def _odd(k: int) -> int:
    return k + (k % 2 == 0)


def stl_jumps(period: int) -> dict[str, int]:
    """STL's jumps (statsmodels.tsa.seasonal.STL) for MSTL: STL_JUMP of each smoother's
    window at the shortest seasonal period, whose windows statsmodels' defaults give
    (the trend's ceil(1.5 p / (1 - 1.5 / s)), the low pass's p + 1, both odd)."""
    s = _STL_SEASONAL
    trend = _odd(math.ceil(1.5 * period / (1.0 - 1.5 / s)))
    low = _odd(period + 1)
    return {name: max(1, math.ceil(STL_JUMP * w)) for name, w in
            (("seasonal_jump", s), ("trend_jump", trend), ("low_pass_jump", low))}


def _sf_fit(name: str, y: F64, h: int, periods: tuple[int, ...], spec: Spec | None
            ) -> tuple[cl.Forecast, Spec]:
    sfm = _statsforecast_models()
    main = min(periods) if periods else 1
    adjusted = name == "arima1"
    if name == "ets":
        if spec is None:
            long = main > ETS_MAX_SEASON
            adjusted = long and _adjustment_pays(sfm, np.asarray(y, dtype=np.float64),
                                                 periods, h)
            m_ets = main if not long and ets_seasonal(y, main) else 1
            model: Any = sfm.AutoETS(season_length=m_ets)
        else:   # specs saved before "m" was recorded searched at the main period
            adjusted = bool(spec.get("adjusted", False))
            m_ets = int(spec.get("m", main))
            model = sfm.AutoETS(season_length=m_ets, model=spec["model"],
                                damped=spec["damped"])
    elif name == "atheta":
        model = sfm.AutoTheta(season_length=main, **(spec or {}))
    elif name in ("arima", "arima1"):
        m = main if name == "arima" else 1
        model = (sfm.AutoARIMA(season_length=m, **ARIMA_SEARCH) if spec is None else
                 sfm.ARIMA(order=tuple(spec["order"]), season_length=spec["m"],
                           seasonal_order=tuple(spec["seasonal_order"]),
                           include_mean=spec["mean"], include_drift=spec["drift"]))
    elif name == "mstl":
        seasons = sorted(set(p for p in periods if p > 1))
        model = sfm.MSTL(season_length=seasons, trend_forecaster=sfm.AutoETS(model="ZZN"),
                         stl_kwargs=stl_jumps(seasons[0]))
    else:
        raise ValueError(f"unknown candidate {name!r}")
    future = np.zeros(h)
    if adjusted:   # the non-seasonal search on the seasonally adjusted series
        y, future = cl.adjust(np.asarray(y, dtype=np.float64), periods, h)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            try:
                model.fit(np.ascontiguousarray(y, dtype=np.float64))
                out = model.predict(h=h, level=[90])
            except Exception as exc:   # statsforecast raises bare Exceptions too
                raise ValueError(f"{name} failed: {exc}") from exc
    mean = np.asarray(out["mean"], dtype=np.float64) + future
    half = 0.5 * (np.asarray(out["hi-90"], dtype=np.float64)
                  - np.asarray(out["lo-90"], dtype=np.float64))
    if mean.shape != (h,) or not np.all(np.isfinite(mean)):
        raise ValueError(f"{name} gave no finite forecast")
    floor = 1e-6 * (float(np.mean(np.abs(y))) + 1e-12)
    sigma = np.where(np.isfinite(half), np.maximum(half / Z95, floor), np.nan)
    if np.isnan(sigma).any():   # no interval from the model: grow its last known scale
        sigma = np.full(h, floor) * np.sqrt(np.arange(1, h + 1))
    try:
        found = spec if spec is not None else _spec_of(name, model)
        if name == "ets" and spec is None and main > ETS_MAX_SEASON:
            found["adjusted"] = adjusted
    except (KeyError, IndexError, TypeError) as exc:   # a degenerate fit (a constant)
        raise ValueError(f"{name} chose no model form: {exc!r}") from exc
    return cl.Forecast(mean, sigma), found


def _spec_of(name: str, model: Any) -> Spec:
    """The spec that refits the model an Auto* search chose."""
    fitted = model.model_
    if name == "ets":
        parts = str(fitted["method"])[4:-1].split(",")   # "ETS(A,Ad,M)"
        return {"model": parts[0] + parts[1][0] + parts[2], "damped": parts[1].endswith("d"),
                "m": int(model.season_length)}
    if name == "atheta":
        return {"model": str(fitted["modeltype"]),
                "decomposition_type": str(fitted.get("decomposition_type",
                                                     "multiplicative"))}
    if name in ("arima", "arima1"):
        p, q, sp, sq, m, d, sd = (int(v) for v in fitted["arma"])
        coef = fitted["coef"]
        return {"order": [p, d, q], "seasonal_order": [sp, sd, sq], "m": max(m, 1),
                "mean": "intercept" in coef, "drift": "drift" in coef}
    return {}


def is_finite(f: cl.Forecast) -> bool:
    return bool(np.all(np.isfinite(f.mean)) and np.all(np.isfinite(f.sigma))
                and not math.isnan(float(np.sum(f.sigma))))
