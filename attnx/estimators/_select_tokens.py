"""tokenizer="select" of the classifiers: the tokens chosen by accuracy on held-out
training series, then the fit on every series with them.

The candidates are CANDIDATES in order: what tokenizer="auto" picks for the data, raw
patches ("patch") and PPV tokens ("ppv"). Each candidate's fit plan
(attnx.estimators._plan) is made, with the estimator's other hyper-parameters, on the
training series but a stratified HOLDOUT share of each class (at least one series of a
class stays in training); a plan that makes the same tokens as "auto"'s (patches
without a stem when "auto" chose them, PPV tokens with their default windows when
"auto" chose those) is not trained again, and one the other settings refuse (a
ValueError, e.g. PPV tokens with a stem) is left out. Each remaining plan's network is
trained on those series and scored on the rest; the first best accuracy wins (ties:
the earlier candidate, so "auto"). With fewer than MIN_SAMPLES series, or no class with
two, there is nothing to hold out: "auto". The chosen value is the fitted attribute
selected_tokenizer_ and the candidates' held-out accuracies tokenizer_scores_; a warm
start keeps the choice. The candidate fits take about (number of candidates) x (1 -
HOLDOUT) fits' time more. partial_fit makes no choice: "select" trains there as "auto"
would.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import _training
from .. import distributed

if TYPE_CHECKING:
    from ._hyper import Config
    from ._plan import FitPlan

#: a classifier (attnx.estimators._estimator.SequenceEstimator; not imported: no cycle)
SequenceEstimator = Any

#: the candidate values of tokenizer, in order of preference on ties
CANDIDATES = ("auto", "patch", "ppv")
#: the share of each class's training series held out to score the candidates
HOLDOUT = 0.25
#: fewer training series than this: no selection (tokenizer="auto")
MIN_SAMPLES = 20


def check(est: SequenceEstimator, comm: Any) -> None:
    """ValueError where tokenizer="select" cannot apply: not a classifier, or with comm."""
    if not est._ppv_auto:
        raise ValueError(f"tokenizer='select' chooses a classifier's tokens by held-out "
                         f"accuracy; {type(est).__name__} takes 'auto', 'patch' or 'ppv'")
    if comm is not None:
        raise ValueError("tokenizer='select' does not run distributed (comm): choose the "
                         "tokenizer on one process and pass it")


def selection(est: SequenceEstimator, cfg: Config, X: Any, y: Any, sample_weight: Any,
              warm: bool) -> tuple[str, dict[str, float]]:
    """(the tokenizer a fit with tokenizer="select" trains with, the candidates'
    held-out accuracies): chosen here, or for a warm start the fitted choice."""
    if warm:
        return est.selected_tokenizer_, dict(est.tokenizer_scores_)
    return choose(est, cfg, X, y, sample_weight)


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


def choose(est: SequenceEstimator, cfg: Config, X: Any, y: Any,
           sample_weight: Any) -> tuple[str, dict[str, float]]:
    """(the chosen tokenizer, held-out accuracy of each candidate trained): each
    candidate's plan is made and trained by a fresh estimator of est's class and
    hyper-parameters (est itself is not touched); cfg: est's validated settings."""
    parts = split(y, _training.seeds(cfg.random_state)[2])
    if parts is None:
        return "auto", {}
    tr, te = parts
    params = est.get_params()
    X_tr, y_tr = _take(X, tr), np.asarray(y)[tr]
    w_tr = None if sample_weight is None else np.asarray(sample_weight)[tr]
    scores: dict[str, float] = {}
    auto_plan: FitPlan | None = None
    for cand in CANDIDATES:
        model = type(est)(**{**params, "tokenizer": cand, "warm_start": False})
        dist = distributed.Local()
        try:
            cfg = model._config()
            planned = model._planned(X_tr, y_tr, w_tr, cfg, dist, False, None)
            if auto_plan is not None and planned.plan.same_tokens(auto_plan):
                continue   # the same tokens as "auto": the same fit
            model._train_planned(planned, cfg, dist, False, None)
        except ValueError:
            if cand == "auto":
                raise
            continue
        if cand == "auto":
            auto_plan = planned.plan
        scores[cand] = float(model.score(_take(X, te), np.asarray(y)[te]))
    best = max(scores.values())
    return next(c for c in CANDIDATES if scores.get(c) == best), scores


def _take(X: Any, idx: Any) -> Any:
    """The series idx of X (an array, or a list of arrays)."""
    if isinstance(X, np.ndarray):
        return X[idx]
    return [X[i] for i in idx]
