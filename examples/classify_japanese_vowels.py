"""
Who is speaking? Classifying ragged multivariate sequences
==========================================================

Nine speakers uttered the Japanese vowels "ae"; each utterance is a series of 12
LPC cepstrum coefficients, 7 to 29 frames long, so the sequences are ragged. There
are 270 training and 370 test utterances (the UCI JapaneseVowels set, read from the
copy inside the ``sktime`` wheel without importing sktime:
``pip install "attnx[examples]"``).

The script prints the test accuracy and fit time of

- ``attnx.TransformerClassifier(random_state=0)``: the defaults, given the ragged
  list of raw sequences as it is;
- the same network with fixed settings that plain PyTorch training can reproduce
  (no dropout, constant learning rate, no clipping, 40 epochs);
- that network trained by PyTorch from the same initial weights (skipped with a note
  when torch is not installed; its CPU build is enough);
- a baseline: logistic regression on each utterance's per-coefficient mean and
  standard deviation.

Every model is fitted on one thread. The last lines say, from this run's numbers,
how the defaults compare with the baseline, and the figure shows the defaults'
training loss per epoch.
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
from attnx.datasets import load_japanese_vowels


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
# A list of ``(T_i, 12)`` arrays and a label per utterance. attnx pads each batch on
# the right and masks the padding, so no resampling to a common length is needed.
X_raw, y = load_japanese_vowels("TRAIN")
Xt_raw, yt = load_japanese_vowels("TEST")
lengths = [len(x) for x in X_raw + Xt_raw]
print(f"JapaneseVowels: {len(X_raw)} train / {len(Xt_raw)} test sequences, 12 features, "
      f"lengths {min(lengths)}-{max(lengths)}, {len(set(y))} classes")

# %%
# The defaults
# ------------
# Only ``random_state`` is set. The estimator standardises each channel itself and
# chooses its tokens, epochs and learning-rate schedule from the data.
default = attnx.TransformerClassifier(random_state=0)
_, t_default = timed(default.fit, X_raw, y)
acc_default = default.score(Xt_raw, yt)

# %%
# Fixed settings, and the same network in PyTorch
# -----------------------------------------------
# For a like-for-like comparison with PyTorch the recipe is switched to plain AdamW
# (``lr_schedule="constant"``, ``max_grad_norm=None``, ``decay="all"``, no dropout), one
# token per frame and a fixed number of epochs; the inputs are standardised here with
# the training frames' mean and standard deviation, so both libraries see the same
# numbers.
frames = np.concatenate(X_raw)
mu, sd = frames.mean(axis=0), frames.std(axis=0)
X = [((x - mu) / sd).astype(np.float32) for x in X_raw]
Xt = [((x - mu) / sd).astype(np.float32) for x in Xt_raw]

hp = dict(n_heads=4, n_layers=2, d_model=32, norm="pre", positional="sinusoidal",
          pooling="mean", epochs=40, batch_size=16, lr=2e-3, weight_decay=0.01,
          random_state=0, dropout=0.0, patch_len=1,
          options=dict(n_iter_no_change=40,   # all 40 epochs, as the twin
                       lr_schedule="constant", max_grad_norm=None, decay="all",
                       standardize=False))
fixed = attnx.TransformerClassifier(**hp)
_, t_fixed = timed(fixed.fit, X, y)
acc_fixed = fixed.score(Xt, yt)

twin = None
if twin_code is not None:
    codes = np.searchsorted(fixed.classes_, y)
    init = twin_code.initial_model(fixed, X, y)
    predict, t_torch = timed(twin_code.torch_twin_fit, init, X, codes, task="classify",
                             epochs=hp["epochs"], batch_size=hp["batch_size"], lr=hp["lr"],
                             weight_decay=hp["weight_decay"], seed=0)
    twin = (float(np.mean(fixed.classes_[np.argmax(predict(Xt), axis=1)] == yt)), t_torch)

# %%
# A baseline
# ----------
from sklearn.linear_model import LogisticRegression  # noqa: E402


def summary(seqs):
    return np.array([np.concatenate([s.mean(axis=0), s.std(axis=0)]) for s in seqs])


base = LogisticRegression(max_iter=2000)
_, t_base = timed(base.fit, summary(X), y)
acc_base = base.score(summary(Xt), yt)
limits.restore_original_limits()

# %%
# Results
# -------
rows = [("attnx TransformerClassifier(), defaults", acc_default, t_default),
        ("attnx, fixed settings (2 x 32 wide)", acc_fixed, t_fixed)]
if twin is not None:
    rows.append(("PyTorch, same network and fixed settings", *twin))
rows.append(("baseline: logistic regression on mean, std", acc_base, t_base))
print(f"{'model':<44} {'test accuracy':>13} {'fit time':>9}")
for name, acc, t in rows:
    print(f"{name:<44} {acc:>13.3f} {t:>8.1f}s")
if twin is None:
    print(twin_note)

wrong_default = int(round((1 - acc_default) * len(yt)))
wrong_base = int(round((1 - acc_base) * len(yt)))
verdict = ("more" if acc_default > acc_base else "fewer" if acc_default < acc_base
           else "as many")
print(f"In this run the defaults classify {verdict} test utterances correctly than the "
      f"baseline: {wrong_default} against {wrong_base} mistakes out of {len(yt)}.")

# %%
# The defaults' training loss
# ---------------------------
# ``history_`` holds the loss of every epoch; ``attnx.plot.loss_curve`` draws it
# (matplotlib is an optional extra: ``pip install "attnx[plot]"``).
if importlib.util.find_spec("matplotlib") is not None:
    import matplotlib.pyplot as plt

    ax = attnx.plot.loss_curve(default, title="TransformerClassifier() on JapaneseVowels")
    ax.set_ylabel("training loss (cross-entropy)")
    plt.show()
else:
    print('figure skipped: matplotlib is not installed (pip install "attnx[plot]")')
