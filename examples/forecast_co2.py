"""
Two years of CO2 ahead: TransformerForecaster with intervals
============================================================

Monthly mean CO2 concentration at Mauna Loa, March 1958 to December 2001 (526
months, averaged from the weekly values inside the ``statsmodels`` wheel:
``pip install "attnx[examples]"``). The last 24 months are held out; a
``TransformerForecaster`` with its defaults is fitted on the rest and forecasts
them with a 90% interval, and so does the transformer trained on this one series
(``method="network"``).

The defaults choose among candidate models (exponential smoothing, ARIMA, Theta,
seasonal naive, a seasonal autoregression, a pretrained network, ...) by their
errors at several earlier forecast origins. The script prints what was chosen,
then the mean absolute error and MASE of each forecast against a seasonal naive
forecast (the last observed year, repeated) on the 24 held-out months, and how many
of those months fall inside each interval. The figure shows the last ten years, the
default forecast, its interval and what happened.

Each model is fitted on one thread; the script prints its own times (measured once:
the defaults 2.4 s, which include importing statsforecast, the network 3.1 s, on one
thread of a shared 2-core Intel Xeon with other jobs running, load average 3).
"""

# %%
# The series
# ----------
# A pandas Series with a monthly DatetimeIndex: the forecaster reads the season (12)
# from the index's frequency and answers with pandas objects on the next time stamps.
import importlib.util
import time

import numpy as np
from threadpoolctl import threadpool_limits

import attnx
from attnx.datasets import load_co2
from attnx.forecasting import interval_coverage, mae, mase

PLOT_NOTE = 'figure skipped: matplotlib is not installed (pip install "attnx[plot]")'


def have_matplotlib():
    return importlib.util.find_spec("matplotlib") is not None


def one_thread():
    """attnx's OpenMP and BLAS on one thread, for comparable timings."""
    return threadpool_limits(1)


def timed(fn, *args, **kw):
    """fn(*args, **kw) and its wall time in seconds."""
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t0


co2 = load_co2()
horizon = 24
history, future = co2.iloc[:-horizon], co2.iloc[-horizon:]
print(f"CO2: {len(co2)} months, {co2.index[0]:%Y-%m} to {co2.index[-1]:%Y-%m}; "
      f"the last {horizon} ({future.index[0]:%Y-%m} to {future.index[-1]:%Y-%m}) held out")

# %%
# Fit and forecast
# ----------------
# ``predict_interval`` gives conformal intervals: their half-widths come from the
# model's errors at earlier forecast origins (the defaults) or on held-out windows at
# the end of the training series (the network).
limits = one_thread()
f = attnx.TransformerForecaster(horizon, random_state=0)
_, t_fit = timed(f.fit, history)
forecast = f.predict()
band = f.predict_interval(coverage=0.9)
print(f"defaults: fit + calibration {t_fit:.1f} s on one thread; season {f.season_}; "
      f"forecast by {f.method_!r}")
choice = f.choices_[0]
errors = choice["errors"]
best = sorted(errors, key=errors.get)[:4]
print("  mean absolute error at the earlier origins: "
      + ", ".join(f"{name} {errors[name]:.3f}" for name in best))
if choice["name"] == "combination":
    # no candidate was clearly ahead (error under 0.8 times the next best's): the
    # forecast averages the close ones, weighted by 1 / their error squared
    parts = choice["spec"]["parts"]
    total = sum(float(w) for _, _, w in parts)
    print("  'combination': no candidate was clearly the best at those origins, so the\n"
          "  forecast is the weighted mean of "
          + ", ".join(f"{name} {float(w) / total:.0%}" for name, _, w in parts))
else:
    print(f"  {choice['name']!r} was clearly the best at those origins and forecasts "
          f"alone")
net = attnx.TransformerForecaster(horizon, method="network", random_state=0)
_, t_net = timed(net.fit, history)
net_forecast, net_band = net.predict(), net.predict_interval(coverage=0.9)
limits.restore_original_limits()
print(f"network: fit + calibration {t_net:.1f} s on one thread; baseline "
      f"{net.baseline_!r}, network weight (blend_) {float(net.blend_):.2f}, context "
      f"window {net.window_} months")

# %%
# Against seasonal naive
# ----------------------
# MASE divides the mean absolute error by that of the in-sample seasonal naive
# forecast (M4's definition): below 1 is better than that in-sample benchmark.
y_hist = history.to_numpy()
y_true = future.to_numpy()
y_attnx = forecast.to_numpy()
y_snaive = y_hist[-12:][np.arange(horizon) % 12]
lower, upper = band["lower"].to_numpy(), band["upper"].to_numpy()
y_net = net_forecast.to_numpy()

print(f"{'forecast of the held-out 24 months':<40} {'MAE (ppm)':>9} {'MASE':>6}")
for name, p in (("attnx TransformerForecaster(24)", y_attnx),
                ("the same, method='network'", y_net),
                ("seasonal naive (last year repeated)", y_snaive)):
    print(f"{name:<40} {mae(y_true, p):>9.3f} {mase(y_true, p, y_hist, season=12):>6.3f}")
for name, b in (("defaults", band), ("network", net_band)):
    lo, hi = b["lower"].to_numpy(), b["upper"].to_numpy()
    inside = interval_coverage(y_true, lo, hi)
    print(f"90% interval ({name}): {round(inside * horizon)} of {horizon} months inside "
          f"(coverage {inside:.2f}), mean width {np.mean(hi - lo):.2f} ppm")
better = mae(y_true, y_attnx) < mae(y_true, y_snaive)
print("In this run the default forecast is "
      f"{'closer to' if better else 'not closer to'} the held-out months than seasonal "
      "naive's (mean absolute error).")

# %%
# The forecast
# ------------
# ``attnx.plot.forecast`` draws the history, the forecast, the band and the actual
# values (matplotlib is an optional extra: ``pip install "attnx[plot]"``).
if have_matplotlib():
    import matplotlib.pyplot as plt

    recent = history.iloc[-120:]
    ax = attnx.plot.forecast(recent.to_numpy(), y_attnx, lower=lower, upper=upper,
                             actual=y_true, coverage=0.9,
                             index=recent.index.append(future.index),
                             title="Mauna Loa CO2: 24 months held out")
    ax.set_ylabel("CO2 (ppm)")
    ax.figure.set_size_inches(8, 3.8)
    ax.figure.tight_layout()
    plt.show()
else:
    print(PLOT_NOTE)
