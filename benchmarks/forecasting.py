#!/usr/bin/env python3
"""Forecasting benchmark: the development panel of issue 24, held-out last h points.

Every series is loaded OFFLINE from data bundled with installed packages; the last
`h` values are held out and every peer forecasts them from the rest in one run.

Development panel (tune on these only; any other series is a hold-out)

  set        source                                   freq        m    h   series
  sunspots   statsmodels.datasets.sunspots            yearly      1    6   1 (309 values)
  co2        statsmodels.datasets.co2, weekly means   monthly    12   18   1 (526 values)
             resampled to month starts, the few empty
             months filled forward
  nile       statsmodels.datasets.nile                yearly      1    6   1 (100 values)
  uschange   aeon load_uschange: 5 channels           quarterly   4    8   5 (187 values each)
             (Consumption, Income, Production,
             Savings, Unemployment), each its own series
  solar      aeon load_solar: GB solar generation     half-hourly 48  48   1 (289 values)
  pbs        aeon PBS_dataset.csv: monthly scripts    monthly    12   18   1 (204 values)
             (a single intermittent count series in
             aeon, not a panel; its last 38 months are
             all 0, so the held-out part is all zeros:
             a forecast scores sMAPE 0 where it says 0
             and 200 where it does not)
  m1_yearly  aeon m1_yearly_dataset.tsf (read with    yearly      1    6   181 (15-58 values)
             aeon's load_from_tsf_file from the
             bundled file: no download)

Horizons follow the M4 competition's rule per frequency (yearly 6, quarterly 8,
monthly 18) and one day (48 steps) for the half-hourly series; the seasonal period m is
M4's too (1 for yearly series, so the 11-year sunspot cycle is not given to anybody).
MASE's scale is the in-sample seasonal naive MAE with that m on the training part,
sMAPE is M4's, in percent (attnx.forecasting.mase / smape; a step where truth and
forecast are both 0 counts 0, a non-zero forecast of a 0 counts 200: solar's nights). For multi-series sets
(uschange, m1_yearly) the table shows the mean over the series of each metric;
coverage is the share of all held-out points inside the 90% interval.

Peers (statsforecast models are fitted per series, level=[90] intervals):
  seasonal_naive  statsforecast SeasonalNaive(season_length=m)
  auto_ets        statsforecast AutoETS(season_length=m)
  auto_arima      statsforecast AutoARIMA(season_length=m)
  auto_theta      statsforecast AutoTheta(season_length=m)
  ridge_ar        scikit-learn RidgeCV (alphas 1e-4..1e2, leave-one-out) on the last
                  L = min(max(2m, 12), n_train // 2) standardised values, one step
                  ahead, applied recursively for h steps; no intervals
  attnx           (--peers only) attnx.TransformerForecaster(horizon=h, random_state=seed)
                  with its defaults: method="auto" on series alone (the same forecasts
                  as attnx_auto). Skipped (with a note) until the class exists.
  attnx_auto      attnx.TransformerForecaster(horizon=h, method="auto"): candidates
                  chosen per series on rolling origins (deterministic: no seed enters)
  attnx_network   attnx.TransformerForecaster(horizon=h, method="network",
                  random_state=seed): the transformer, one global model over all series
                  of a multi-series set (the forecaster's default before method=None;
                  older result files call it "attnx")
  attnx_quantile  (--peers only) attnx with intervals="quantile": the network learns
                  7 quantile levels with the pinball loss, calibrated conformally
  attnx_pretrained (--peers only) attnx's pretrained network
                  (TransformerForecaster.pretrained(horizon=h, season=m)), zero-shot:
                  fit only stores the series and calibrates the interval on its own
                  last origins; the network is never trained on the set
  patchtst        (--peers only) neuralforecast's PatchTST (pip install neuralforecast, in
                  an environment of its own: it brings ray, lightning and optuna) on
                  each series: its defaults but input_size (attnx's default window) and
                  max_steps (--patchtst-steps, default 500 of its 5000: it trains at
                  0.3-0.65 s a step on one core here, its default 1024 windows a step)
  torch_twin      the PyTorch twin of attnx's forecaster (benchmarks/torch_forecaster.py):
                  attnx's pipeline with every network it trains (the calibration run and
                  the final fit) trained by PyTorch from the same initial weights, on
                  the same tokens, batches and recipe; skipped (with a note) without torch.
  (neuralforecast's PatchTST is not a peer yet: neuralforecast 3.3.0 requires
  ray[train,tune], pytorch-lightning and optuna besides torch>=2.9.1; not installed in
  the benchmark environment so far.)

Synthetic panel (--synthetic; tune on it and on the development panel only)

  set             m    h   series  lengths  what
  synth_trend     12   18  60      60-240   level + linear or damped trend + additive
                                            yearly season + Gaussian or AR(1) noise
  synth_mult      12   18  50      72-240   exponential growth x (1 + a sin) seasonal
                                            factor x log-normal noise (multiplicative)
  synth_multi     24   24  12      504-840  hourly: a daily and a weekly cycle
                                            (weekend days lower), noise; the peers get
                                            m = 24 only
  synth_shift     4    8   50      40-120   quarterly season on a level that jumps at
                                            1-3 random times (regime changes)
  synth_demand    1    12  50      36-120   intermittent demand: Bernoulli arrivals
                                            (p 0.2-0.7) x Poisson sizes
  synth_walk      1    14  50      50-300   random walks, half of them with drift
  synth_short_q   4    4   60      14-40    short quarterly: trend + season + noise, or
                                            a random walk
  synth_short_y   1    6   60      14-40    short yearly: trend, random walk or AR(1)

  synth_long      48   48  12      2016-    (--synthetic --sets synth_long; not in the
                                   4032     panel's mean) half-hourly, 6-12 weeks: a
                                            daily cycle (its amplitude drifting on half
                                            the series), one random offset per weekday,
                                            a wandering level and noise. Each series is
                                            fitted on its own by every peer, as a user
                                            with one long series would (attnx finds the
                                            periods from that series); the peers get
                                            m = 48 and MASE's scale is seasonal naive at
                                            the week (336)

Every series comes from one numpy Generator per set, seeded by (--panel-seed, set);
values are shifted to stay positive where the kind is a level (demand counts may be
0). The table adds a "targets" section for each attnx peer: mean MASE against the best
of AutoETS / AutoARIMA / AutoTheta, the series where a classical model beats seasonal
naive but attnx does not, pooled 90% coverage and the share of h >= 8 series with
coverage >= 0.75, and the short sets' MASE against the best classical one.

Rolling-origin backtest (--origins k, default 3): every peer also goes through
attnx.forecasting.backtest over the last k windows of h (origins h apart, a fresh fit
at each; k is lowered for a set whose shortest series would leave fewer than
max(2m + 1, 8, h + 2) values to the first training window: M1 yearly keeps 1), giving the
mean MASE and the 90% coverage over k*h held-out points per series.

Fit time is the wall time of fit + predict of one series (summed over a set's series;
for the global attnx model, of its one fit + predict). Timings on a loaded machine
are indicative only. statsforecast's numba functions are compiled before the clock
starts (each model is run once on a throw-away series).

--reuse PREFIX.json takes the rows (and backtests) of the peers that do not involve
attnx (seasonal naive, the statsforecast models, ridge_ar, patchtst) and are not in
--peers from an earlier run on the same sets: they are deterministic, so rerunning
only attnx_auto after a change gives the whole table (the header names the file).

Examples
  OMP_NUM_THREADS=1 python benchmarks/forecasting.py               # full panel
  python benchmarks/forecasting.py --quick                         # smoke run, seconds
  python benchmarks/forecasting.py --sets nile,sunspots --out /tmp/fc
  OMP_NUM_THREADS=1 python benchmarks/forecasting.py --synthetic --panel-seed 1
  OMP_NUM_THREADS=1 python benchmarks/forecasting.py --timing      # 500-point monthly fits
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
import time
import traceback
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if os.path.exists(os.path.join(REPO, "attnx", "__init__.py")):
    sys.path.insert(0, REPO)  # the in-place build of this checkout

from attnx.forecasting import (backtest, interval_coverage, mase,  # noqa: E402
                               scaled_quantile_loss, smape)

SETS = ("sunspots", "co2", "nile", "uschange", "solar", "pbs", "m1_yearly")
SYNTH_SETS = ("synth_trend", "synth_mult", "synth_multi", "synth_shift", "synth_demand",
              "synth_walk", "synth_short_q", "synth_short_y")
#: synthetic sets run only when named in --sets (each series fitted on its own)
LONG_SETS = ("synth_long",)
PEERS = ("seasonal_naive", "auto_ets", "auto_arima", "auto_theta", "ridge_ar",
         "attnx_auto", "attnx_network", "torch_twin")
#: the peers the targets compare with
CLASSICAL = ("auto_ets", "auto_arima", "auto_theta")
#: more peers one may ask for with --peers: the defaults (the same as attnx_auto on
#: series alone), attnx with quantile intervals, PatchTST, the pretrained network
EXTRA_PEERS = ("attnx", "attnx_quantile", "patchtst", "attnx_pretrained")
#: patchtst's training steps (neuralforecast's default is 5000; --patchtst-steps)
PATCHTST_STEPS = 500
LEVEL = 90
#: the levels of the backtests' pinball loss (attnx's predict_quantiles)
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
#: the levels of the held-out scaled quantile loss ("sql"); statsforecast's come from
#: its central intervals at 20, 40, 60 and 80% and the mean
SQL_LEVELS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


# ---------------------------------------------------------------- the panel
class Dataset:
    """One set of the panel: a list of 1-D float64 series, its season and horizon."""

    def __init__(self, name, series, names, freq, season, horizon, source, *,
                 alone=False, scale_season=None):
        self.name, self.series, self.names = name, series, names
        self.freq, self.season, self.horizon, self.source = freq, season, horizon, source
        #: attnx fits each series on its own (not one model over the set)
        self.alone = alone
        #: MASE's seasonal-naive scale period (default: season)
        self.scale_season = scale_season or season


def _aeon_data(*parts):
    import aeon.datasets
    return os.path.join(os.path.dirname(aeon.datasets.__file__), "data", *parts)


def load_set(name, quick=False):
    """The set `name` as a Dataset (offline; see the module docstring)."""
    if name == "sunspots":
        import statsmodels.api as sm
        y = sm.datasets.sunspots.load_pandas().data["SUNACTIVITY"].to_numpy(float)
        return Dataset(name, [y], ["sunspots"], "yearly", 1, 6, "statsmodels sunspots")
    if name == "co2":
        import statsmodels.api as sm
        w = sm.datasets.co2.load_pandas().data["co2"]
        y = w.resample("MS").mean().ffill().to_numpy(float)
        return Dataset(name, [y], ["co2"], "monthly", 12, 18,
                       "statsmodels co2, weekly -> monthly means, ffill")
    if name == "nile":
        import statsmodels.api as sm
        y = sm.datasets.nile.load_pandas().data["volume"].to_numpy(float)
        return Dataset(name, [y], ["nile"], "yearly", 1, 6, "statsmodels nile")
    if name == "uschange":
        from aeon.datasets import load_uschange
        df = load_uschange(return_array=False)  # (5 channels, 187)
        series = [df.loc[c].to_numpy(float) for c in df.index]
        return Dataset(name, series, [str(c) for c in df.index], "quarterly", 4, 8,
                       "aeon load_uschange (5 channels as 5 series)")
    if name == "solar":
        from aeon.datasets import load_solar
        y = np.asarray(load_solar(), dtype=float)
        return Dataset(name, [y], ["solar"], "half-hourly", 48, 48, "aeon load_solar")
    if name == "pbs":
        import pandas as pd
        y = pd.read_csv(_aeon_data("PBS_dataset", "PBS_dataset.csv"))["Scripts"]
        return Dataset(name, [y.to_numpy(float)], ["pbs"], "monthly", 12, 18,
                       "aeon PBS_dataset.csv")
    if name == "m1_yearly":
        from aeon.datasets import load_from_tsf_file
        df, meta = load_from_tsf_file(_aeon_data("m1_yearly_dataset",
                                                 "m1_yearly_dataset.tsf"))
        series = [np.asarray(v, dtype=float) for v in df["series_value"]]
        names = [str(n) for n in df["series_name"]]
        if quick:
            series, names = series[:12], names[:12]
        return Dataset(name, series, names, "yearly", 1, int(meta["forecast_horizon"]),
                       "aeon m1_yearly_dataset.tsf (bundled)")
    if name in SYNTH_SETS + LONG_SETS:
        return synthetic_set(name, PANEL_SEED)
    raise ValueError(f"unknown set {name!r}; choose from "
                     f"{', '.join(SETS + SYNTH_SETS + LONG_SETS)}")


#: the synthetic panel's seed (--panel-seed)
PANEL_SEED = 0
#: per synthetic set: (freq, m, h, number of series, shortest, longest)
SYNTH_SPEC = {"synth_trend": ("monthly", 12, 18, 60, 60, 240),
              "synth_mult": ("monthly", 12, 18, 50, 72, 240),
              "synth_multi": ("hourly", 24, 24, 12, 504, 840),
              "synth_shift": ("quarterly", 4, 8, 50, 40, 120),
              "synth_demand": ("monthly", 1, 12, 50, 36, 120),
              "synth_walk": ("daily", 1, 14, 50, 50, 300),
              "synth_short_q": ("quarterly", 4, 4, 60, 14, 40),
              "synth_short_y": ("yearly", 1, 6, 60, 14, 40),
              "synth_long": ("half-hourly", 48, 48, 12, 2016, 4032)}


def _ar1(rng, n, phi, sd):
    e = rng.normal(0, sd, n)
    out = np.empty(n)
    out[0] = e[0]
    for t in range(1, n):
        out[t] = phi * out[t - 1] + e[t]
    return out


def _synth_series(kind, rng, n, m):
    """One synthetic series of `kind` with n values (the module docstring's table)."""
    t = np.arange(n, dtype=float)
    if kind == "synth_trend":
        slope = rng.normal(0, 0.3)
        trend = slope * t if rng.random() < 0.5 else slope * 20 * (1 - 0.95 ** t)
        season = rng.uniform(0, 8) * np.sin(2 * np.pi * t / m + rng.uniform(0, 6.3))
        noise = (_ar1(rng, n, rng.uniform(0.2, 0.7), rng.uniform(0.5, 3)) if rng.random() < 0.5
                 else rng.normal(0, rng.uniform(0.5, 3), n))
        y = 100 + trend + season + noise
    elif kind == "synth_mult":
        growth = rng.uniform(0.0, 0.02)
        amp = rng.uniform(0.1, 0.45)
        y = (rng.uniform(20, 200) * np.exp(growth * t)
             * (1 + amp * np.sin(2 * np.pi * t / m + rng.uniform(0, 6.3)))
             * np.exp(rng.normal(0, rng.uniform(0.01, 0.08), n)))
    elif kind == "synth_multi":
        day = (t // m) % 7
        daily = rng.uniform(2, 6) * np.sin(2 * np.pi * t / m)
        weekly = np.where(day >= 5, -rng.uniform(2, 6), 0.0)
        y = 50 + daily + weekly + _ar1(rng, n, 0.5, rng.uniform(0.3, 1.5))
    elif kind == "synth_shift":
        level = np.full(n, 50.0)
        for cut in rng.integers(n // 5, n - 4, size=int(rng.integers(1, 4))):
            level[cut:] += rng.normal(0, 15)
        y = (level + rng.uniform(0, 6) * np.sin(2 * np.pi * t / m)
             + rng.normal(0, rng.uniform(1, 4), n))
    elif kind == "synth_demand":
        p = rng.uniform(0.2, 0.7)
        y = (rng.random(n) < p) * rng.poisson(rng.uniform(2, 12), n).astype(float)
    elif kind == "synth_walk":
        drift = rng.normal(0, 0.5) if rng.random() < 0.5 else 0.0
        y = 100 + np.cumsum(drift + rng.normal(0, rng.uniform(0.5, 3), n))
    elif kind == "synth_short_q":
        if rng.random() < 0.6:
            y = (50 + rng.normal(0, 1) * t + rng.uniform(0, 8) * np.sin(2 * np.pi * t / m)
                 + rng.normal(0, rng.uniform(0.5, 3), n))
        else:
            y = 50 + np.cumsum(rng.normal(0, 2, n))
    elif kind == "synth_long":
        daily = (rng.uniform(1, 3) * np.sin(2 * np.pi * t / m + rng.uniform(0, 6))
                 + rng.uniform(0, 1) * np.sin(4 * np.pi * t / m + 1))
        drift = (1 + 0.3 * np.sin(2 * np.pi * t / (n * rng.uniform(1, 3)))
                 if rng.random() < 0.5 else 1.0)
        weekly = rng.uniform(0.5, 2) * rng.normal(0, 1, 7)[(t.astype(int) // m) % 7]
        level = np.cumsum(rng.uniform(0.01, 0.1) * rng.standard_normal(n))
        y = 30 + drift * daily + weekly + level + rng.uniform(0.1, 0.6) * rng.standard_normal(n)
    else:   # synth_short_y
        r = rng.random()
        if r < 0.4:
            y = 50 + rng.normal(0, 2) * t + rng.normal(0, rng.uniform(1, 4), n)
        elif r < 0.7:
            y = 50 + np.cumsum(rng.normal(rng.normal(0, 1), 2, n))
        else:
            y = 50 + _ar1(rng, n, rng.uniform(0.3, 0.9), 3.0)
    if kind != "synth_demand":
        y = y - min(0.0, float(y.min())) + 1.0 if y.min() <= 0 else y
    return y.astype(float)


def synthetic_set(name, seed=0):
    """The synthetic set `name` (SYNTH_SPEC) drawn with the panel seed `seed`."""
    freq, m, h, count, lo, hi = SYNTH_SPEC[name]
    rng = np.random.default_rng([seed, (SYNTH_SETS + LONG_SETS).index(name)])
    series = [_synth_series(name, rng, int(rng.integers(lo, hi + 1)), m)
              for _ in range(count)]
    long = name in LONG_SETS
    return Dataset(name, series, [f"{name}_{i}" for i in range(count)], freq, m, h,
                   f"synthetic ({name}, panel seed {seed})", alone=long,
                   scale_season=7 * m if long else None)


# ---------------------------------------------------------------- peers
def _statsforecast(model_name):
    import statsforecast.models as sfm
    cls = {"seasonal_naive": sfm.SeasonalNaive, "auto_ets": sfm.AutoETS,
           "auto_arima": sfm.AutoARIMA, "auto_theta": sfm.AutoTheta}[model_name]

    central = sorted({round(abs(2 * q - 1) * 100) for q in SQL_LEVELS} - {0})

    def run(y, h, m):
        out = cls(season_length=m).forecast(y=y, h=h, level=[LEVEL] + central)
        quants = np.stack([np.asarray(out["mean"], dtype=float) if q == 0.5 else
                           np.asarray(out[f"{'lo' if q < 0.5 else 'hi'}-"
                                          f"{round(abs(2 * q - 1) * 100)}"], dtype=float)
                           for q in SQL_LEVELS], axis=-1)
        return out["mean"], out[f"lo-{LEVEL}"], out[f"hi-{LEVEL}"], quants
    return run


def _four(out):
    """(mean, lower, upper, quantiles or None) from a peer's run."""
    return tuple(out) if len(out) == 4 else (*out, None)


def set_patchtst_steps(steps):
    global PATCHTST_STEPS
    PATCHTST_STEPS = int(steps)


def patchtst(y, h, m):
    """neuralforecast's PatchTST on one series: its defaults but input_size (attnx's
    default window for this series: neuralforecast requires one) and max_steps
    (PATCHTST_STEPS); MAE loss, so no intervals. One thread (torch.set_num_threads)."""
    import logging

    import pandas as pd
    import torch
    from neuralforecast import NeuralForecast
    from neuralforecast.models import PatchTST

    from attnx.forecasting._windows import default_window

    logging.disable(logging.WARNING)   # lightning's banners
    torch.set_num_threads(1)
    window = default_window([len(y)], h, m)
    df = pd.DataFrame({"unique_id": "s", "ds": np.arange(len(y)), "y": np.asarray(y, float)})
    model = PatchTST(h=h, input_size=window, max_steps=PATCHTST_STEPS, random_seed=0,
                     enable_progress_bar=False, enable_model_summary=False, logger=False)
    nf = NeuralForecast(models=[model], freq=1)
    nf.fit(df)
    return nf.predict()["PatchTST"].to_numpy(np.float64), None, None


def ridge_ar(y, h, m):
    """Recursive one-step ridge autoregression on standardised lags (no intervals)."""
    from sklearn.linear_model import RidgeCV
    lags = max(1, min(max(2 * m, 12), len(y) // 2))
    mu, sd = y.mean(), y.std()
    z = (y - mu) / (sd if sd > 0 else 1.0)
    Xw = np.lib.stride_tricks.sliding_window_view(z[:-1], lags)
    model = RidgeCV(alphas=np.logspace(-4, 2, 13)).fit(Xw, z[lags:])
    hist = list(z[-lags:])
    out = []
    for _ in range(h):
        nxt = float(model.predict(np.asarray(hist[-lags:])[None, :])[0])
        out.append(nxt)
        hist.append(nxt)
    return np.asarray(out) * (sd if sd > 0 else 1.0) + mu, None, None


def attnx_pretrained(y, h, m):
    """attnx's pretrained network, zero-shot (its interval calibrated on the series'
    own last origins)."""
    import attnx
    est = attnx.TransformerForecaster.pretrained(horizon=h, season=m).fit(y)
    lo, hi = est.predict_interval(coverage=LEVEL / 100)
    return est.predict(), lo, hi


def attnx_forecaster(horizon, seed):
    """attnx's forecaster with its defaults, or None while attnx has none."""
    import attnx
    if not hasattr(attnx, "TransformerForecaster"):
        return None
    return attnx.TransformerForecaster(horizon=horizon, random_state=seed)


def attnx_auto(horizon, seed):
    """attnx's forecaster choosing among classical candidates (method="auto")."""
    est = attnx_forecaster(horizon, seed)
    return None if est is None else est.set_params(method="auto")


def attnx_network(horizon, seed):
    """attnx's transformer forecaster (method="network"): one global model."""
    est = attnx_forecaster(horizon, seed)
    return None if est is None else est.set_params(method="network")


def attnx_quantile(horizon, seed):
    """attnx's forecaster with intervals="quantile" (a network trained with the pinball
    loss on several levels, calibrated conformally)."""
    est = attnx_forecaster(horizon, seed)
    return None if est is None else est.set_params(intervals="quantile")


def torch_twin(horizon, seed):
    """The PyTorch twin of attnx's forecaster (benchmarks/torch_forecaster.py), or None
    while it or attnx's forecaster does not exist."""
    if attnx_forecaster(horizon, seed) is None:
        return None
    try:
        import torch_forecaster  # benchmarks/ is on sys.path when run as a script
    except ImportError:
        return None
    return torch_forecaster.TorchForecaster(horizon=horizon, random_state=seed,
                                            method="network")


#: the peers that are attnx forecasters (or its twin), by name
FACTORIES = {"attnx": attnx_forecaster, "attnx_auto": attnx_auto,
             "attnx_network": attnx_network,
             "attnx_quantile": attnx_quantile,
             "torch_twin": torch_twin}


def _split_interval(item):
    """(lower, upper) from a forecaster's interval output: a pair, or an array whose
    last axis holds (lower, upper)."""
    if isinstance(item, (tuple, list)) and len(item) == 2:
        return item
    a = np.asarray(item, dtype=float)
    return a[..., 0], a[..., 1]


def run_global(factory, ds, seed):
    """One model over all series of the set (a single series: fit on it alone).
    Returns per-series (mean, lower, upper) and the one fit + predict time, or None
    when the factory gives no model."""
    h = ds.horizon
    est = factory(h, seed)
    if est is None:
        return None
    train = [s[:-h] for s in ds.series]
    if ds.alone and len(train) > 1:   # each series on its own
        out, elapsed = [], 0.0
        for i, y in enumerate(ds.series):
            one = Dataset(ds.name, [y], [ds.names[i]], ds.freq, ds.season, h, ds.source)
            got = run_global(factory, one, seed)
            out += got[0]
            elapsed += got[1]
        return out, elapsed
    single = len(train) == 1
    t0 = time.perf_counter()
    est.fit(train[0] if single else train)
    means = est.predict()
    elapsed = time.perf_counter() - t0
    means = [means] if single else list(means)
    bounds = [(None, None)] * len(train)
    if hasattr(est, "predict_interval"):
        out = est.predict_interval(coverage=LEVEL / 100)
        bounds = [_split_interval(o) for o in ([out] if single else out)]
    quants = [None] * len(train)
    if hasattr(est, "predict_quantiles"):
        try:
            out = est.predict_quantiles(quantiles=SQL_LEVELS)
            quants = [out] if single else list(out)
        except ValueError:   # fitted without intervals: no quantiles
            pass
    return [(m_, lo, hi, q) for m_, (lo, hi), q in zip(means, bounds, quants)], elapsed


STATSFORECAST = ("seasonal_naive", "auto_ets", "auto_arima", "auto_theta")


def warm_up(peers):
    """Compile the numba code of the statsforecast peers before any timing."""
    rng = np.random.default_rng(0)
    y = 10 + np.sin(np.arange(60) * 2 * np.pi / 12) + rng.normal(0, 0.1, 60)
    for name in (p for p in peers if p in STATSFORECAST):
        for m in (1, 12):
            _statsforecast(name)(y, 6, m)


# ---------------------------------------------------------------- scoring
def score(ds, i, mean, lo, hi, quants=None):
    h = ds.horizon
    y = ds.series[i]
    train, truth = y[:-h], y[-h:]
    mean = np.asarray(mean, dtype=float).reshape(h)
    row = {"mase": mase(truth, mean, train, ds.scale_season), "smape": smape(truth, mean)}
    if lo is not None and hi is not None:
        row["coverage"] = interval_coverage(truth, np.reshape(lo, h), np.reshape(hi, h))
    if quants is not None:
        q = np.sort(np.asarray(quants, dtype=float).reshape(h, len(SQL_LEVELS)), axis=1)
        if np.all(np.isfinite(q)):
            row["sql"] = scaled_quantile_loss(truth, q, train, SQL_LEVELS, ds.scale_season)
    return row


def summarise(rows):
    """Mean of each metric over the series that produced it."""
    out = {"n_series": len(rows)}
    for k in ("mase", "smape", "coverage", "sql"):
        vals = [r[k] for r in rows if k in r]
        out[k] = float(np.mean(vals)) if vals else None
    return out


def run_set(ds, peers, seed, log):
    result = {"set": ds.name, "source": ds.source, "freq": ds.freq, "season": ds.season,
              "horizon": ds.horizon, "n_series": len(ds.series),
              "lengths": [len(s) for s in ds.series], "peers": {}}
    for peer in peers:
        rows, errors, fit_time = [], [], 0.0
        note = None
        if peer in FACTORIES:
            factory = FACTORIES[peer]
            try:
                got = run_global(factory, ds, seed)
            except Exception as exc:  # noqa: BLE001 - reported, not hidden
                got, note = None, f"failed: {type(exc).__name__}: {exc}"
                log(traceback.format_exc())
            if got is None:
                note = note or ("skipped: attnx.TransformerForecaster does not exist yet"
                                if peer != "torch_twin" else
                                "skipped: torch is not installed")
            else:
                preds, fit_time = got
                for i, (mean_, lo, hi, q) in enumerate(preds):
                    rows.append(dict(series=ds.names[i], **score(ds, i, mean_, lo, hi, q)))
        else:
            run = ({"ridge_ar": ridge_ar, "patchtst": patchtst,
                    "attnx_pretrained": attnx_pretrained}.get(peer)
                   or _statsforecast(peer))
            for i, y in enumerate(ds.series):
                train = y[:-ds.horizon]
                t0 = time.perf_counter()
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        mean_, lo, hi, q = _four(run(train, ds.horizon, ds.season))
                except Exception as exc:  # noqa: BLE001 - counted in the table
                    errors.append(f"{ds.names[i]}: {type(exc).__name__}: {exc}")
                    continue
                elapsed = time.perf_counter() - t0
                fit_time += elapsed
                rows.append(dict(series=ds.names[i], fit_time=elapsed,
                                 **score(ds, i, mean_, lo, hi, q)))
        entry = summarise(rows) if rows else {"n_series": 0}
        entry.update(fit_time=fit_time, errors=errors, note=note, rows=rows)
        result["peers"][peer] = entry
        if rows:
            cov = entry["coverage"]
            log(f"  {ds.name:10s} {peer:15s} MASE {entry['mase']:.3f}  sMAPE "
                f"{entry['smape']:.2f}  cov90 {'-' if cov is None else f'{cov:.2f}'}  "
                f"SQL {_fmt(entry.get('sql'), '.3f')}  "
                f"{fit_time:.2f}s" + (f"  ({len(errors)} failed)" if errors else ""))
        else:
            log(f"  {ds.name:10s} {peer:15s} {note or 'no result'}")
    return result


# ---------------------------------------------------------------- rolling-origin backtest
class PeerForecaster:
    """A peer behind attnx.forecasting.backtest's protocol. fit(y) forecasts at once
    (statsforecast's forecast() is fit + predict in one call); predict() and
    predict_interval(coverage=0.9) return what fit computed. One series or a list
    (each series fitted on its own)."""

    def __init__(self, peer="seasonal_naive", horizon=6, season=1):
        self.peer, self.horizon, self.season = peer, horizon, season

    def get_params(self, deep=True):
        return {"peer": self.peer, "horizon": self.horizon, "season": self.season}

    def fit(self, y, X=None):
        run = ridge_ar if self.peer == "ridge_ar" else _statsforecast(self.peer)
        self.single_ = not isinstance(y, list)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.out_ = [_four(run(np.asarray(s, dtype=float), self.horizon, self.season))[:3]
                         for s in ([y] if self.single_ else y)]
        return self

    def _pack(self, items):
        return items[0] if self.single_ else items

    def predict(self, y=None, X=None):
        if y is not None:
            raise ValueError("PeerForecaster forecasts from the series seen at fit only "
                             "(use backtest(refit=True))")
        return self._pack([np.asarray(m) for m, _, _ in self.out_])

    def predict_interval(self, coverage=LEVEL / 100, y=None, X=None):
        if abs(coverage - LEVEL / 100) > 1e-12 or self.out_[0][1] is None:
            raise ValueError(f"{self.peer} has only {LEVEL}% intervals here, if any")
        return self._pack([(np.asarray(lo), np.asarray(hi)) for _, lo, hi in self.out_])


def run_backtests(ds, peers, origins, seed, log):
    """attnx.forecasting.backtest of every peer over the last `origins` windows of h
    (h apart, refit at each; fewer when the shortest series leaves less than
    max(2m + 1, 8, h + 2) values to the first training window)."""
    h = ds.horizon
    t_min = min(len(s) for s in ds.series)
    min_train = max(2 * ds.season + 1, 8, h + 2)   # h + 2: the fewest a forecaster must take
    k = origins
    while k > 1 and t_min - h * k < min_train:
        k -= 1
    initial = t_min - h * k
    out = {"origins": k, "step": h, "initial": initial, "peers": {}}
    y = ds.series[0] if len(ds.series) == 1 else list(ds.series)
    for peer in peers:
        if peer in FACTORIES:
            est = FACTORIES[peer](h, seed)
            if est is None:
                out["peers"][peer] = {"note": "skipped"}
                continue
            cov = LEVEL / 100 if hasattr(est, "predict_interval") else None
            qs = QUANTILES if hasattr(est, "predict_quantiles") else None
        else:
            est = PeerForecaster(peer, h, ds.season)
            cov = None if peer == "ridge_ar" else LEVEL / 100
            qs = None
        try:
            res = backtest(est, y, horizon=h, initial=initial, step=h, season=ds.season,
                           coverage=cov, quantiles=qs)
        except Exception as exc:  # noqa: BLE001 - reported, not hidden
            out["peers"][peer] = {"note": f"failed: {type(exc).__name__}: {exc}"}
            log(f"  {ds.name:10s} {peer:15s} backtest failed: {exc}")
            continue
        mean = res.mean()
        entry = {"mase": mean["mase"], "smape": mean["smape"],
                 "coverage": mean.get("coverage"), "width": mean.get("width"),
                 "pinball": mean.get("pinball"), "n_scores": len(res.rows),
                 "time": sum(o["fit_time"] + o["predict_time"] for o in res.per_origin())}
        if cov is not None:   # each series' coverage pooled over its origins
            by = {}
            for row in res.rows:
                by.setdefault(row["series"], []).append(row["coverage"])
            entry["series_coverage"] = [float(np.mean(by[i])) for i in sorted(by)]
        out["peers"][peer] = entry
        log(f"  {ds.name:10s} {peer:15s} backtest x{k}: MASE {entry['mase']:.3f}  cov90 "
            f"{_fmt(entry['coverage'], '.2f')}")
    return out


# ---------------------------------------------------------------- targets (issue 39)
def targets(results, peer):
    """The issue's targets for `peer` over the sets of `results` (module docstring):
    None when the peer or the classical peers did not run."""
    per_series, short, by_set = [], [], {}
    for r in results:
        ps = r["peers"]
        if peer not in ps or not ps[peer].get("rows"):
            continue
        rows = {name: {x["series"]: x for x in ps[name].get("rows", [])}
                for name in (peer, "seasonal_naive") + CLASSICAL if name in ps}
        have = [c for c in CLASSICAL if c in rows]
        if not have:
            continue
        for name, row in rows[peer].items():
            classic = {c: rows[c][name]["mase"] for c in have if name in rows[c]}
            sn = rows.get("seasonal_naive", {}).get(name, {}).get("mase")
            item = {"set": r["set"], "series": name, "h": r["horizon"], "mase": row["mase"],
                    "coverage": row.get("coverage"), "classical": classic, "snaive": sn}
            per_series.append(item)
        means = {c: ps[c]["mase"] for c in have if ps[c].get("rows")}
        by_set[r["set"]] = {"mase": ps[peer]["mase"], "best_classical": min(means.values()),
                            "best_name": min(means, key=means.get)}
        if r["set"].startswith("synth_short"):
            short.append(r["set"])
    if not per_series:
        return None
    mean = float(np.mean([x["mase"] for x in per_series]))
    classical_means = {c: float(np.mean([x["classical"][c] for x in per_series
                                         if c in x["classical"]])) for c in CLASSICAL
                       if any(c in x["classical"] for x in per_series)}
    worse = [x["series"] for x in per_series if x["snaive"] is not None and x["classical"]
             and min(x["classical"].values()) < x["snaive"] and x["mase"] >= x["snaive"]]
    with_cov = [x for x in per_series if x["coverage"] is not None]
    pooled = (sum(x["coverage"] * x["h"] for x in with_cov) / sum(x["h"] for x in with_cov)
              if with_cov else None)
    long_h = [x for x in with_cov if x["h"] >= 8]
    over = [c for r in results if r["horizon"] >= 8 and r.get("backtest")
            for c in r["backtest"]["peers"].get(peer, {}).get("series_coverage", [])]
    return {"n_series": len(per_series), "mase": mean, "classical_mase": classical_means,
            "snaive_beaten_by_classical_not_by_peer": len(worse),
            "snaive_cases": sum(1 for x in per_series if x["snaive"] is not None
                                and x["classical"]
                                and min(x["classical"].values()) < x["snaive"]),
            "coverage_pooled": pooled,
            "share_h8_series_cov75": (float(np.mean([x["coverage"] >= 0.75 for x in long_h]))
                                      if long_h else None),
            "share_h8_series_cov75_origins": (float(np.mean([c >= 0.75 for c in over]))
                                              if over else None),
            "n_h8_series_origins": len(over),
            "by_set": by_set,
            "short_ratio": {s_: by_set[s_]["mase"] / by_set[s_]["best_classical"]
                            for s_ in short}}


def targets_markdown(results):
    lines = []
    for peer in ("attnx_auto", "attnx", "attnx_network", "attnx_pretrained"):
        t = targets(results, peer)
        if t is None:
            continue
        best = min(t["classical_mase"].values()) if t["classical_mase"] else float("nan")
        cls = ", ".join(f"{k} {v:.3f}" for k, v in t["classical_mase"].items())
        lines += [f"## Targets: {peer}", "",
                  f"- mean MASE over {t['n_series']} series: {t['mase']:.3f} (classical on "
                  f"the same series: {cls}; best {best:.3f})",
                  f"- series where a classical model beats seasonal naive but {peer} does "
                  f"not: {t['snaive_beaten_by_classical_not_by_peer']} of "
                  f"{t['snaive_cases']}",
                  f"- 90% coverage pooled over every held-out point: "
                  f"{_fmt(t['coverage_pooled'], '.3f')}; share of h >= 8 series with "
                  f"coverage >= 0.75: {_fmt(t['share_h8_series_cov75'], '.3f')}"]
        if t["n_h8_series_origins"]:
            lines.append(f"- the same share with each series' coverage pooled over the "
                         f"backtest origins: {t['share_h8_series_cov75_origins']:.3f} "
                         f"({t['n_h8_series_origins']} series)")
        for s_, ratio in t["short_ratio"].items():
            lines.append(f"- {s_}: MASE / best classical = {ratio:.3f}")
        lines += ["", "| set | " + peer + " | best classical |", "|---|---|---|"]
        for s_, v in t["by_set"].items():
            lines.append(f"| {s_} | {v['mase']:.3f} | {v['best_classical']:.3f} "
                         f"({v['best_name']}) |")
        lines.append("")
    return lines


# ---------------------------------------------------------------- timing (issue 39)
def timing(out, n=500, h=18, repeats=5):
    """Wall time of the defaults' (attnx, method="auto" on a series alone) fit +
    predict + 90% interval on `repeats` 500-point
    monthly series (trend + yearly season + a random-walk level + noise, seeds 0..),
    in this process after a first throw-away fit (statsforecast's import, ~2-4 s,
    is paid once per process and reported apart)."""
    t0 = time.perf_counter()
    import statsforecast.models  # noqa: F401
    imp = time.perf_counter() - t0
    est = attnx_forecaster(h, 0)
    rows = []
    for seed in range(-1, repeats):
        rng = np.random.default_rng(abs(seed))
        t = np.arange(n)
        y = (100 + 0.1 * t + 10 * np.sin(2 * np.pi * t / 12)
             + 0.5 * np.cumsum(rng.normal(0, 1, n)) + rng.normal(0, 2, n))
        t0 = time.perf_counter()
        est.fit(y)
        est.predict()
        est.predict_interval(coverage=LEVEL / 100)
        if seed >= 0:
            rows.append({"seed": seed, "seconds": time.perf_counter() - t0,
                         "method": est.method_})
    secs = [r["seconds"] for r in rows]
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
            "python": platform.python_version(), "versions": _versions(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "statsforecast_import_seconds": imp, "n": n, "horizon": h}
    with open(out + ".json", "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    lines = ["# attnx defaults: fit + predict + 90% interval of a 500-point monthly series",
             "",
             f"{meta['date']}, python {meta['python']}, statsforecast "
             f"{meta['versions'].get('statsforecast')}, OMP_NUM_THREADS="
             f"{meta['omp_num_threads']}; h = {h}; one process, after a throw-away fit "
             f"(statsforecast's import took {imp:.1f} s once)", "",
             "| seed | seconds | method_ |", "|---|---|---|"]
    lines += [f"| {r['seed']} | {r['seconds']:.2f} | {r['method']} |" for r in rows]
    lines += ["", f"median {np.median(secs):.2f} s, max {max(secs):.2f} s (target: 3 s)", ""]
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    return 0


# ---------------------------------------------------------------- report
def _fmt(v, spec):
    return "-" if v is None else format(v, spec)


def markdown(results, meta):
    peers = [p for p in PEERS + EXTRA_PEERS if any(p in r["peers"] for r in results)]
    title = ("synthetic panel (issue 39), panel seed " + str(meta.get("panel_seed"))
             if meta.get("synthetic") else "development panel (issue 24)")
    lines = [f"# Forecasting benchmark: {title}", "",
             f"{meta['date']}, {meta['machine']}, python {meta['python']}, "
             f"statsforecast {meta['versions'].get('statsforecast')}, scikit-learn "
             f"{meta['versions'].get('sklearn')}, attnx {meta['versions'].get('attnx')}"
             + (f", seed {meta['seed']}" if meta.get("seed") is not None else "")
             + (" (quick run)" if meta["quick"] else ""), "",
             *([f"The peers without attnx that this run did not run come from "
                f"{meta['reused']} (--reuse; deterministic, same sets).", ""]
               if meta.get("reused") else []),
             "Last h points of each series held out; one forecast per series from the rest. "
             "MASE: in-sample seasonal-naive scale with period m (M4); sMAPE: M4, percent; "
             f"cov90: share of held-out points inside the {LEVEL}% interval; multi-series sets: "
             "mean over their series. See benchmarks/forecasting.py for sources and rules.", ""]
    head = "| set (m, h, series) | " + " | ".join(peers) + " |"
    sep = "|---|" + "---|" * len(peers)
    for title, key, spec in (("MASE", "mase", ".3f"), ("sMAPE (%)", "smape", ".2f"),
                             ("scaled quantile loss (levels 0.1..0.9)", "sql", ".3f"),
                             (f"{LEVEL}% interval coverage", "coverage", ".2f"),
                             ("fit + predict time (s, whole set)", "fit_time", ".2f")):
        lines += [f"## {title}", "", head, sep]
        for r in results:
            cells = []
            for p in peers:
                e = r["peers"].get(p)
                if e is None or not e.get("rows"):
                    cells.append("skipped" if e is not None and e.get("note") else "-")
                    continue
                val = _fmt(e.get(key), spec)
                if e["errors"]:
                    val += f" ({len(e['errors'])} failed)"
                cells.append(val)
            # the best MASE / sMAPE of a row in bold
            if key in ("mase", "smape", "sql"):
                vals = [r["peers"].get(p, {}).get(key) if r["peers"].get(p, {}).get("rows")
                        else None for p in peers]
                ok = [v for v in vals if v is not None]
                if ok:
                    best = min(ok)
                    cells = [f"**{c}**" if v == best else c for c, v in zip(cells, vals)]
            lines.append(f"| {r['set']} ({r['season']}, {r['horizon']}, {r['n_series']}) | "
                         + " | ".join(cells) + " |")
        lines.append("")
    if any(r.get("backtest") for r in results):
        lines += ["## Rolling-origin backtest: mean MASE / 90% coverage", "",
                  "attnx.forecasting.backtest over the last k windows of h (origins h apart, "
                  "refit at each, k = --origins or fewer for short series); means over "
                  "origins and series.", "",
                  "| set (origins) | " + " | ".join(peers) + " |", sep]
        for r in results:
            b = r.get("backtest")
            if not b:
                continue
            cells = []
            for p in peers:
                e = b["peers"].get(p)
                if e is None or "mase" not in e:
                    cells.append("skipped" if e and e["note"] == "skipped" else
                                 ("failed" if e else "-"))
                else:
                    cells.append(f"{e['mase']:.3f} / {_fmt(e['coverage'], '.2f')}")
            lines.append(f"| {r['set']} ({b['origins']}) | " + " | ".join(cells) + " |")
        lines.append("")
    lines += targets_markdown(results)
    notes = sorted({f"{p}: {e['note']}" for r in results for p, e in r["peers"].items()
                    if e.get("note")})
    errs = [f"{r['set']} {p}: {x}" for r in results for p, e in r["peers"].items()
            for x in e.get("errors", [])]
    if notes or errs:
        lines += ["## Notes", ""] + [f"- {n}" for n in notes] + [f"- {x}" for x in errs[:20]]
        lines.append("")
    return "\n".join(lines)


def reuse_results(results, path):
    """Add to `results` the peers an earlier result file at `path` has and these do
    not (rows and backtests), set by set; the sets' series must be the same."""
    with open(path) as f:
        earlier = {r["set"]: r for r in json.load(f)["results"]}
    for r in results:
        old = earlier.get(r["set"])
        if old is None:
            continue
        if old["lengths"] != r["lengths"]:
            raise ValueError(f"--reuse {path}: set {r['set']} has other series")
        for peer, entry in old["peers"].items():
            if peer not in FACTORIES:
                r["peers"].setdefault(peer, entry)
        if "backtest" in r and "backtest" in old:
            for peer, entry in old["backtest"]["peers"].items():
                if peer not in FACTORIES:
                    r["backtest"]["peers"].setdefault(peer, entry)


def _versions():
    out = {}
    for mod in ("numpy", "statsforecast", "sklearn", "statsmodels", "aeon", "attnx"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            out[mod] = None
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default=",".join(SETS),
                    help=f"comma-separated sets (default all: {','.join(SETS)})")
    ap.add_argument("--peers", default=",".join(PEERS),
                    help=f"comma-separated peers (default all: {','.join(PEERS)})")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 12 series of m1_yearly and no AutoARIMA on the "
                         "half-hourly solar series (m=48 takes minutes)")
    ap.add_argument("--origins", type=int, default=None,
                    help="also backtest every peer over the last ORIGINS windows of h "
                         "(attnx.forecasting.backtest; default 3, 0: off; 0 with "
                         "--synthetic)")
    ap.add_argument("--seed", type=int, default=0, help="random_state of attnx / torch")
    ap.add_argument("--synthetic", action="store_true",
                    help="the synthetic panel instead (sets synth_*; default --origins 0, "
                         "--out benchmarks/results/forecasting_synth)")
    ap.add_argument("--panel-seed", type=int, default=0,
                    help="seed of the synthetic panel's series (default 0)")
    ap.add_argument("--timing", action="store_true",
                    help="only time the defaults' (method='auto') fit + predict + 90%% interval on five "
                         "500-point monthly series (--out PREFIX.md / .json)")
    ap.add_argument("--arima-long-seasons", action="store_true",
                    help="run AutoARIMA on synthetic sets with m >= 24 too (minutes a series)")
    ap.add_argument("--patchtst-steps", type=int, default=PATCHTST_STEPS,
                    help="max_steps of the patchtst peer (neuralforecast's default: 5000)")
    ap.add_argument("--out", default=None,
                    help="output prefix: writes PREFIX.md and PREFIX.json "
                         "(default benchmarks/results/forecasting_dev)")
    ap.add_argument("--reuse", default=None,
                    help="an earlier result .json on the same sets: the peers without "
                         "attnx not in --peers are taken from it (rows, backtests)")
    args = ap.parse_args(argv)
    set_patchtst_steps(args.patchtst_steps)
    global PANEL_SEED
    PANEL_SEED = args.panel_seed
    if args.timing:
        return timing(args.out or os.path.join(HERE, "results", "forecasting_dev_timing"))
    if args.origins is None:
        args.origins = 0 if args.synthetic else 3
    if args.out is None:
        args.out = os.path.join(HERE, "results", "forecasting_synth" if args.synthetic
                                else "forecasting_dev")
    if args.synthetic and args.sets == ",".join(SETS):
        args.sets = ",".join(SYNTH_SETS)
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    for s in sets:
        if s not in SETS + SYNTH_SETS + LONG_SETS:
            ap.error(f"--sets: unknown set {s!r}; choose from "
                     f"{', '.join(SETS + SYNTH_SETS + LONG_SETS)}")
    for p in peers:
        if p not in PEERS + EXTRA_PEERS:
            ap.error(f"--peers: unknown peer {p!r}; choose from "
                     f"{', '.join(PEERS + EXTRA_PEERS)}")

    def log(msg):
        print(msg, flush=True)

    if any(p in peers for p in STATSFORECAST):
        t0 = time.perf_counter()
        warm_up(peers)
        log(f"statsforecast warm-up (numba compilation) {time.perf_counter() - t0:.1f}s")
    results = []
    for s in sets:
        ds = load_set(s, quick=args.quick)
        ps = [p for p in peers if not (args.quick and s == "solar" and p == "auto_arima")
              and not (p == "auto_arima" and s in SYNTH_SETS + LONG_SETS and ds.season >= 24
                       and not args.arima_long_seasons)]
        results.append(run_set(ds, ps, args.seed, log))
        if args.origins > 0:
            results[-1]["backtest"] = run_backtests(ds, ps, args.origins, args.seed, log)
    if args.reuse:
        reuse_results(results, args.reuse)
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
            "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
            "python": platform.python_version(), "versions": _versions(),
            "quick": args.quick, "seed": args.seed, "origins": args.origins, "level": LEVEL,
            "synthetic": args.synthetic, "panel_seed": args.panel_seed if args.synthetic
            else None, "reused": os.path.basename(args.reuse) if args.reuse else None,
            "targets": {p: targets(results, p) for p in ("attnx_auto", "attnx",
                                                         "attnx_network",
                                                         "attnx_pretrained")},
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1,
                  default=lambda o: None if isinstance(o, float) and math.isnan(o) else o)
    text = markdown(results, meta)
    with open(args.out + ".md", "w") as f:
        f.write(text)
    log(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
