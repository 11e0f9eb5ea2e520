"""
Next year's sunspot number: sequence regression
===============================================

Yearly mean sunspot numbers 1700-2008 (309 values, from the copy inside the
``statsmodels`` wheel: ``pip install "attnx[examples]"``).
``attnx.datasets.sliding_windows`` turns the series into pairs (the past 32 years ->
the next year); windows whose target year is before 1950 train, the later ones test.

The script prints the test R² and RMSE (in sunspot units) and the fit time of

- ``attnx.TransformerRegressor(random_state=0)``: the defaults, on the raw windows;
- the same network with fixed settings that plain PyTorch training can reproduce
  (no dropout, constant learning rate, no clipping, 150 epochs, inputs standardised
  with the training years' mean and standard deviation);
- that network trained by PyTorch from the same initial weights (skipped with a note
  when torch is not installed);
- two baselines: a linear autoregression (ridge regression on the 32 past values)
  and persistence (next year = this year).

Every model is fitted on one thread. The last line says, from this run's numbers,
how the defaults compare with the linear autoregression, and the figure shows the
test years.
"""

# %%
# Set-up
# ------
# One thread for every model, so the fit times compare; the PyTorch twin runs
# only from the source checkout (with torch installed).
import importlib.util
import os
import sys
import time

import numpy as np
from threadpoolctl import threadpool_limits

import attnx
from attnx.datasets import load_sunspots, sliding_windows


def timed(fn, *args, **kw):
    """fn(*args, **kw) and its wall time in seconds."""
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t0


def checkout_twin():
    """(module, None) with the PyTorch twin's trainer from the attnx source checkout
    this script sits in (examples/_common.py, which trains attnx/testing/torch_twin.py's
    network), or (None, why it is skipped) for a downloaded copy or without torch."""
    try:
        import torch
    except ImportError:
        return None, ("PyTorch twin skipped: torch is not installed "
                      "(its CPU build is enough for the twin)")
    # the gallery runs this in its folder and without __file__
    here = os.path.dirname(os.path.abspath(globals().get("__file__", "example.py")))
    if not os.path.exists(os.path.join(here, "_common.py")):
        return None, ("PyTorch twin skipped: it is trained by examples/_common.py of the "
                      "attnx source checkout, which is not beside this script")
    torch.set_num_threads(1)
    sys.path.insert(0, here)
    import _common
    return _common, None


limits = threadpool_limits(1)   # attnx's OpenMP and BLAS on one thread: comparable times
twin_code, twin_note = checkout_twin()

# %%
# The data
# --------

WINDOW = 32


def r2(y, p):
    return 1 - np.sum((y - p) ** 2) / np.sum((y - y.mean()) ** 2)


def rmse(y, p):
    return float(np.sqrt(np.mean((y - p) ** 2)))


years, s = load_sunspots()
X, y = sliding_windows(s, WINDOW)          # X (n, 32, 1), y (n,)
target_year = years[WINDOW:]
train = target_year < 1950
print(f"sunspots: {train.sum()} training windows (targets {target_year[train][0]}-"
      f"{target_year[train][-1]}), {(~train).sum()} test windows "
      f"({target_year[~train][0]}-{target_year[~train][-1]})")

# %%
# The defaults
# ------------
# On raw windows whose target is in the units of the series, the default
# ``instance_norm="auto"`` scales each window by its own level and spread (RevIN) and
# maps the prediction back; ``epochs=None`` picks the training length on 20% of the
# training windows held out first.
defaults = attnx.TransformerRegressor(random_state=0)
_, t_def = timed(defaults.fit, X[train].astype(np.float32), y[train])
p_def = defaults.predict(X[~train].astype(np.float32))

# %%
# Fixed settings, the PyTorch twin and the baselines
# --------------------------------------------------
# ``pooling="last"`` reads the representation of the newest year.
mu, sd = s[:np.argmax(years >= 1950)].mean(), s[:np.argmax(years >= 1950)].std()
Xs = ((X - mu) / sd).astype(np.float32)
ys = (y - mu) / sd
Xtr, ytr, Xte, yte = Xs[train], ys[train], Xs[~train], y[~train]

hp = dict(n_heads=4, n_layers=2, d_model=32, norm="pre", positional="sinusoidal",
          pooling="last", epochs=150, batch_size=16, lr=1e-3, weight_decay=0.01,
          random_state=0, dropout=0.0, patch_len=1, instance_norm=None,
          options=dict(n_iter_no_change=150,   # all 150 epochs, as the twin
                       lr_schedule="constant", max_grad_norm=None, decay="all",
                       standardize=False))
fixed = attnx.TransformerRegressor(**hp)
_, t_fixed = timed(fixed.fit, Xtr, ytr)
p_fixed = fixed.predict(Xte) * sd + mu

rows = [("attnx TransformerRegressor(), defaults", p_def, t_def),
        ("attnx, fixed settings (2 x 32 wide)", p_fixed, t_fixed)]
if twin_code is not None:
    init = twin_code.initial_model(fixed, Xtr, ytr)
    predict, t_torch = timed(twin_code.torch_twin_fit, init, list(Xtr), ytr, task="regress",
                             epochs=hp["epochs"], batch_size=hp["batch_size"], lr=hp["lr"],
                             weight_decay=hp["weight_decay"], seed=0)
    rows.append(("PyTorch, same network and fixed settings",
                 predict(list(Xte))[:, 0] * sd + mu, t_torch))

from sklearn.linear_model import Ridge  # noqa: E402

ar = Ridge(alpha=1.0)
_, t_ar = timed(ar.fit, Xtr[:, :, 0], ytr)
p_ar = ar.predict(Xte[:, :, 0]) * sd + mu
p_persist = X[~train, -1, 0]
limits.restore_original_limits()
rows += [("baseline: linear autoregression (ridge)", p_ar, t_ar),
         ("baseline: persistence", p_persist, 0.0)]

# %%
# Results
# -------
print(f"{'model':<44} {'test R^2':>8} {'RMSE':>6} {'fit time':>9}")
for name, p, t in rows:
    print(f"{name:<44} {r2(yte, p):>8.3f} {rmse(yte, p):>6.1f} {t:>8.1f}s")
if twin_code is None:
    print(twin_note)
e_def, e_ar = rmse(yte, p_def), rmse(yte, p_ar)
verdict = "lower" if e_def < e_ar else "higher" if e_def > e_ar else "the same"
print(f"In this run the defaults' test RMSE is {verdict} than the linear "
      f"autoregression's: {e_def:.1f} against {e_ar:.1f}.")

# %%
# The test years
# --------------
if importlib.util.find_spec("matplotlib") is not None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.plot(target_year[~train], yte, color="black", lw=2, label="observed")
    ax.plot(target_year[~train], p_def, label="attnx defaults")
    ax.plot(target_year[~train], p_ar, ls="--", label="linear autoregression")
    ax.set_xlabel("year")
    ax.set_ylabel("yearly mean sunspot number")
    ax.set_title("one-year-ahead forecasts on the test years")
    ax.legend()
    fig.tight_layout()
    plt.show()
else:
    print('figure skipped: matplotlib is not installed (pip install "attnx[plot]")')
