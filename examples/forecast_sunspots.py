"""Forecasting on real data: next year's sunspot number from the past 32 years.

Yearly mean sunspot numbers 1700-2008 (309 values), as shipped inside the
`statsmodels` wheel (pip install "attnx[examples]", and torch's CPU build for the
PyTorch twin). attnx.datasets.sliding_windows turns the series into (window of 32 years -> next year) pairs; windows whose target
year is before 1950 train, the later ones test.

Prints the test R^2 (and RMSE in sunspot units) and fit time of
  - attnx.TransformerRegressor (one value per sequence: pooling="last"),
  - baselines: persistence (next year = this year) and a linear autoregression
    (ridge regression on the 32 past values),
  - the same network trained in PyTorch (same initial weights, hyper-parameters, epochs;
    skipped with a note when torch is not installed).
Everything runs on one thread.
"""
import numpy as np

from _common import (TORCH_NOTE, have_torch, initial_model, load_sunspots, one_thread, timed,
                     torch_twin_fit)

import attnx
from attnx.datasets import sliding_windows

WINDOW = 32


def r2(y, p):
    return 1 - np.sum((y - p) ** 2) / np.sum((y - y.mean()) ** 2)


def rmse(y, p):
    return float(np.sqrt(np.mean((y - p) ** 2)))


def main():
    limits = one_thread()
    years, s = load_sunspots()
    X, y = sliding_windows(s, WINDOW)          # X (n, 32, 1), y (n,)
    target_year = years[WINDOW:]
    train = target_year < 1950
    mu, sd = s[:np.argmax(years >= 1950)].mean(), s[:np.argmax(years >= 1950)].std()
    Xs = ((X - mu) / sd).astype(np.float32)
    ys = (y - mu) / sd
    Xtr, ytr, Xte, yte = Xs[train], ys[train], Xs[~train], y[~train]
    print(f"sunspots: {train.sum()} training windows (targets {target_year[train][0]}-"
          f"{target_year[train][-1]}), {(~train).sum()} test windows "
          f"({target_year[~train][0]}-{target_year[~train][-1]})")

    hp = dict(n_heads=4, n_layers=2, d_model=32, norm="pre", positional="sinusoidal",
              pooling="last", epochs=150, batch_size=16, lr=1e-3, weight_decay=0.01,
              n_iter_no_change=150, random_state=0,  # all epochs, as the twin
              # the twin trains with plain AdamW on these inputs: the same here
              dropout=0.0, lr_schedule="constant", max_grad_norm=None, decay="all",
              standardize=False, patch_len=1, instance_norm=None)
    est = attnx.TransformerRegressor(**hp)
    _, t_attnx = timed(est.fit, Xtr, ytr)
    p_attnx = est.predict(Xte) * sd + mu

    from sklearn.linear_model import Ridge

    ar = Ridge(alpha=1.0)
    _, t_ar = timed(ar.fit, Xtr[:, :, 0], ytr)
    p_ar = ar.predict(Xte[:, :, 0]) * sd + mu
    p_persist = X[~train, -1, 0]

    rows = [("attnx TransformerRegressor (2 x 32 wide)", p_attnx, t_attnx)]
    # the defaults on the raw windows: instance_norm="auto" finds the targets in the
    # series' units and normalises each window by its own level and scale (RevIN)
    defaults = attnx.TransformerRegressor(random_state=0)
    _, t_def = timed(defaults.fit, X[train].astype(np.float32), y[train])
    rows.append(("attnx TransformerRegressor(), defaults", defaults.predict(
        X[~train].astype(np.float32)), t_def))
    if have_torch():
        init = initial_model(est, Xtr, ytr)
        predict, t_torch = timed(torch_twin_fit, init, list(Xtr), ytr, task="regress",
                                 epochs=hp["epochs"], batch_size=hp["batch_size"], lr=hp["lr"],
                                 weight_decay=hp["weight_decay"], seed=0)
        p_torch = predict(list(Xte))[:, 0] * sd + mu
        rows.append(("PyTorch, same network and training", p_torch, t_torch))
    limits.restore_original_limits()

    print(f"{'model':<44} {'test R^2':>8} {'RMSE':>6} {'fit time':>9}")
    rows += [("baseline: linear autoregression (ridge)", p_ar, t_ar),
             ("baseline: persistence", p_persist, 0.0)]
    for name, p, t in rows:
        print(f"{name:<44} {r2(yte, p):>8.3f} {rmse(yte, p):>6.1f} {t:>8.1f}s")
    if not have_torch():
        print(TORCH_NOTE)


if __name__ == "__main__":
    main()
