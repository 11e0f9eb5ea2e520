"""tokenizer="select" of the classifiers: the tokens chosen by accuracy on held-out
training series, then the fit on every series with them.

The candidates are CANDIDATES in order: what tokenizer="auto" picks for the data, raw
patches ("patch") and PPV tokens ("ppv"); one that would make the same tokens as
"auto" (patches without a stem when "auto" chose them, PPV tokens with their default
windows when "auto" chose those) is not fitted twice, and one the other settings refuse
(a ValueError, e.g. PPV tokens with a stem) is left out. Each is fitted, with the
estimator's other hyper-parameters, on the training series but a stratified HOLDOUT
share of each class (at least one series of a class stays in training), and scored on
the rest; the first best accuracy wins (ties: the earlier candidate, so "auto"). With
fewer than MIN_SAMPLES series, or no class with two, there is nothing to hold out:
"auto". The chosen value is the fitted attribute selected_tokenizer_ and the
candidates' held-out accuracies tokenizer_scores_; a warm start keeps the choice.
The candidate fits take about (number of candidates) x (1 - HOLDOUT) fits' time more.
partial_fit makes no choice: "select" trains there as "auto" would.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import _training

if TYPE_CHECKING:
    from ._hyper import Config

#: a classifier (attnx.estimators._estimator.SequenceEstimator; not imported: no cycle)
SequenceEstimator = Any

#: the candidate values of tokenizer, in order of preference on ties
CANDIDATES = ("auto", "patch", "ppv")
#: the share of each class's training series held out to score the candidates
HOLDOUT = 0.25
#: fewer training series than this: no selection (tokenizer="auto")
MIN_SAMPLES = 20


def fit(est: SequenceEstimator, X: Any, y: Any, sample_weight: Any, comm: Any,
        X_unlabelled: Any) -> SequenceEstimator:
    """est.fit(X, y, ...) with tokenizer="select": choose (unless a warm start keeps the
    fitted choice), then fit with the chosen tokenizer."""
    if not est._ppv_auto:
        raise ValueError(f"tokenizer='select' chooses a classifier's tokens by held-out "
                         f"accuracy; {type(est).__name__} takes 'auto', 'patch' or 'ppv'")
    if comm is not None:
        raise ValueError("tokenizer='select' does not run distributed (comm): choose the "
                         "tokenizer on one process and pass it")
    warm = bool(est.warm_start) and "model_" in vars(est)
    if warm:
        chosen, scores = est.selected_tokenizer_, est.tokenizer_scores_
    else:
        chosen, scores = choose(est, X, y, sample_weight)
    est._select_now = chosen
    try:
        est.fit(X, y, sample_weight, X_unlabelled=X_unlabelled)
    finally:
        est.__dict__.pop("_select_now", None)
    est.selected_tokenizer_, est.tokenizer_scores_ = chosen, dict(scores)
    return est


def configured(est: SequenceEstimator, cfg: Config) -> Config:
    """cfg with tokenizer="select" replaced by the choice of the fit under way (or of
    the last fit; "auto" before any)."""
    if cfg.tokenizer == "select":
        cfg.tokenizer = est.__dict__.get("_select_now",
                                         est.__dict__.get("selected_tokenizer_", "auto"))
    return cfg


def split(y: Any, seed: int) -> tuple[Any, Any] | None:
    """(training indices, held-out indices): HOLDOUT of each class's series (rounded,
    at least one left in training), drawn with seed; None when nothing is held out or
    there are fewer than MIN_SAMPLES series."""
    y = np.asarray(y)
    if len(y) < MIN_SAMPLES:
        return None
    rng = np.random.default_rng(seed)
    held = []
    for label in np.unique(y):
        idx = np.flatnonzero(y == label)
        k = min(int(round(HOLDOUT * len(idx))), len(idx) - 1)
        held.extend(rng.choice(idx, size=k, replace=False).tolist())
    if not held:
        return None
    out = np.zeros(len(y), bool)
    out[held] = True
    return np.flatnonzero(~out), np.flatnonzero(out)


def choose(est: SequenceEstimator, X: Any, y: Any,
           sample_weight: Any) -> tuple[str, dict[str, float]]:
    """(the chosen tokenizer, held-out accuracy of each candidate fitted)."""
    parts = split(y, _training.seeds(est.random_state)[2])
    if parts is None:
        return "auto", {}
    tr, te = parts
    params = est.get_params()
    scores: dict[str, float] = {}
    auto_tokens = None
    for cand in CANDIDATES:
        model = type(est)(**{**params, "tokenizer": cand, "warm_start": False})
        try:
            model.fit(_take(X, tr), np.asarray(y)[tr],
                      None if sample_weight is None else np.asarray(sample_weight)[tr])
        except ValueError:
            if cand == "auto":
                raise
            continue
        tokens = _tokens(model)
        if cand == "auto":
            auto_tokens = tokens
        elif tokens == auto_tokens:
            continue   # the same tokens as "auto": the same fit
        scores[cand] = float(model.score(_take(X, te), np.asarray(y)[te]))
    best = max(scores.values())
    return next(c for c in CANDIDATES if scores.get(c) == best), scores


def _tokens(model: SequenceEstimator) -> tuple[Any, ...]:
    """What makes a fitted model's tokens: PPV or not, its stem, its patch length."""
    return ("_ppv" in vars(model), getattr(model.model_, "stem", None),
            int(getattr(model, "patch_len_", 1)))


def _take(X: Any, idx: Any) -> Any:
    """The series idx of X (an array, or a list of arrays)."""
    if isinstance(X, np.ndarray):
        return X[idx]
    return [X[i] for i in idx]
