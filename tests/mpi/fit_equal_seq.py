"""Run under `mpiexec -n P`: the sequence estimators' data-parallel fits against one process.

As fit_equal.py, for what the global-batch rule must also cover: sample weights
(some zero), sequence-level targets through a wider model (d_model), classifiers
whose shards hold different classes (classes_ and class_weight="balanced" from
every rank's labels), and ragged input (lists of sequences of different lengths:
the length-sorted global batch plan, padding to the longest sequence of any rank,
learned positions sized by the longest sequence of any rank). Prints one JSON line
on rank 0; a failed check raises.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fit_equal import COMM, P, RANK, Watching, _transformer_0_2, digest, rel, shards  # noqa: E402

import attnx  # noqa: E402


def ragged(n, f, seed, lo=2, hi=15):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(int(t), f)) for t in rng.integers(lo, hi, size=n)]


def part(a, lo, hi):
    return None if a is None else a[lo:hi]


def run(make, X, y, w=None, method="fit", epochs_pf=1, classes=None):
    n = len(X)
    sizes = shards(n, P)
    lo = sum(sizes[:RANK])
    hi = lo + sizes[RANK]
    est = make()
    dist = Watching(COMM)
    dist.hashes, dist.est = [], est
    kw = {} if classes is None else {"classes": classes}
    if method == "fit":
        est.fit(part(X, lo, hi), part(y, lo, hi), sample_weight=part(w, lo, hi), comm=dist)
    else:
        for _ in range(epochs_pf):
            est.partial_fit(part(X, lo, hi), part(y, lo, hi), sample_weight=part(w, lo, hi),
                            comm=dist, **kw)
    every = COMM.allgather(dist.hashes + [digest(est.model_.params.flat)])
    assert all(h == every[0] for h in every), "weights differ between ranks after some step"
    out = dict(steps=len(dist.hashes), shards=sizes,
               augment_shift=getattr(est, "augment_shift_", None))
    if RANK == 0:
        ref = make()
        if method == "fit":
            ref.fit(X, y, sample_weight=w)
        else:
            for _ in range(epochs_pf):
                ref.partial_fit(X, y, sample_weight=w, **kw)
        assert est.n_iter_ == ref.n_iter_ and est.optimizer_.t == ref.optimizer_.t
        if hasattr(ref, "classes_"):
            assert list(est.classes_) == list(ref.classes_)
        if hasattr(ref, "epoch_selection_"):   # epochs=None of a regressor
            a, b = est.epoch_selection_, ref.epoch_selection_
            for k in ("epochs", "best_epoch", "held_out_epochs", "strong"):
                assert a[k] == b[k], (k, a, b)
            out["held_out_rel"] = rel(a["held_out_loss"], b["held_out_loss"])
            out["selected_epochs"] = a["epochs"]
        out["params_rel"] = rel(est.model_.params.flat, ref.model_.params.flat)
        out["loss_rel"] = rel(est.loss_curve_, ref.loss_curve_)
        if hasattr(ref, "validation_loss_curve_"):
            out["val_rel"] = rel(est.validation_loss_curve_, ref.validation_loss_curve_)
        for k in ("params_rel", "loss_rel", "val_rel", "held_out_rel"):
            assert out.get(k, 0.0) <= 1e-10, (k, out)
    return out


def main():
    f = {}
    common = dict(n_heads=2, d_model=8, epochs=3, batch_size=8, lr=5e-3, random_state=0,
                  dtype=np.float64, options={"distributed": "exact"})
    rng = np.random.default_rng(0)
    X = rng.normal(size=(43, 7, 3))
    y = X[:, :, 0].sum(axis=1)
    w = rng.uniform(0, 2, size=43)
    w[::5] = 0.0
    f["weighted_sequence_regression"] = run(lambda: _transformer_0_2(
        n_layers=1, d_hidden=16, pooling="mean", positional="sinusoidal", norm="pre",
        **{**common, "options": {"distributed": "exact", "validation_fraction": 0.2}}), X, y, w)
    # epochs=None: the held-out run that chooses the epochs (weak signal: y is noise)
    y_noise = rng.normal(size=43)
    f["epoch_selection"] = run(lambda: _transformer_0_2(
        n_layers=1, d_hidden=16, pooling="mean", positional="sinusoidal", norm="pre",
        **{**common, "epochs": None}), X, y_noise, w)
    # labels sorted: the first ranks see only some of the classes
    labels = np.array(["a", "b", "c"])[np.digitize(X[:, :, 1].mean(axis=1), [-0.2, 0.25])]
    order = np.argsort(labels, kind="stable")
    f["balanced_classifier"] = run(lambda: attnx.AttentionClassifier(
        class_weight="balanced", **common), X[order], labels[order], w[order])
    Xr = ragged(47, 3, seed=1)
    yr = [np.cumsum(x[:, :2], axis=0) for x in Xr]
    f["ragged_per_position"] = run(lambda: _transformer_0_2(
        n_layers=1, d_hidden=16, positional="learned",
        **{**common, "options": {"distributed": "exact", "causal": True}}), Xr, yr)
    lr_ = [(x[:, 0] > 0).astype(int) for x in Xr]
    f["ragged_classifier_partial_fit"] = run(lambda: attnx.AttentionClassifier(**common),
                                             Xr, lr_, method="partial_fit", epochs_pf=2,
                                             classes=[0, 1])
    # missing="mask": NaN steps masked as padding (dense X, then ragged X padded to the
    # longest sequence of any rank), standardisation statistics over observed steps
    Xm = X.copy()
    Xm[rng.random(Xm.shape[:2]) < 0.25, 1] = np.nan
    Xm[:, 0] = X[:, 0]   # every sequence keeps an observed step
    f["missing_dense"] = run(lambda: attnx.AttentionClassifier(
        missing="mask", pooling="max",
        **{**common, "options": {"distributed": "exact", "standardize": True}}), Xm, labels)
    Xrm = [np.where(np.random.default_rng(i).random((len(x), 1)) < 0.25, np.nan, x)
           for i, x in enumerate(Xr)]
    for x, x0 in zip(Xrm, Xr):
        x[0] = x0[0]
    f["missing_ragged"] = run(lambda: attnx.AttentionRegressor(
        missing="mask", d_model=8,
        **{k: v for k, v in common.items() if k not in ("d_model", "options")},
        options={"distributed": "exact", "standardize": True}),
        Xrm, np.array([x[:, 0].sum() for x in Xr]))
    # tokenizer="auto"'s short path: ragged univariate series resampled to the longest,
    # the short stem, and every training batch shifted in time by one draw per global
    # sample (attnx.estimators._augment): the ranks take their samples' shifts
    Xs = ragged(45, 1, seed=2, lo=12, hi=30)
    ys = np.array([int(x[: len(x) // 2, 0].mean() > 0) for x in Xs])
    f["short_shifted_classifier"] = run(lambda: attnx.TransformerClassifier(
        n_layers=1, dropout=0.0, **common), Xs, ys)
    if RANK == 0:
        print("RESULT " + json.dumps(dict(P=P, **f)), flush=True)


if __name__ == "__main__":
    main()
