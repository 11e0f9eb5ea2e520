"""Run under `mpiexec -n P python -m mpi4py balanced.py`: distributed="balanced" fits.

Every rank keeps its own (uneven) shard of one global data set. Checked on every rank:
- each epoch a rank's batches hold exactly the rows of its own shard, each once
  (recorded from the batch buffers: the first value of every loaded sequence);
- every rank runs max over ranks of ceil(shard / ceil(batch_size / P)) steps per epoch, and
  the weights are identical bit for bit on every rank before every step and at the end;
- a second fit with the same seed gives the same weights bit for bit;
- with validation and early stopping, every rank has the same loss curves and n_iter_;
- ragged input (a classifier by partial_fit) follows the same rules;
- with dropout every rank draws other masks, while the model's dropout generator stays
  the same on every rank.
Rank 0 compares with a single-process fit on all the data: with P = 1 the balanced
fit must equal it bit for bit; for any P the model's mean squared error on all the
data is reported (the pytest side compares it). Prints one JSON line on rank 0 (with
the weights' digest, so that two jobs can be compared); a failed check raises.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fit_equal import COMM, P, RANK, Watching, digest, rel, shards  # noqa: E402

import attnx  # noqa: E402
from attnx.estimators._hyper import option  # noqa: E402
import attnx.estimators._training as training  # noqa: E402

#: the first value of every sequence loaded into a training batch, per epoch
SEEN = []
#: a digest of the dropout masks of each epoch's first step (models with dropout)
MASKS = []
_epoch, _load, _step = training.Trainer.epoch, training.Batch.load, training.Trainer.step
_first = [False]


def _recording_epoch(self, *args, **kwargs):
    SEEN.append([])
    _first[0] = True
    try:
        return _epoch(self, *args, **kwargs)
    finally:
        SEEN.append(None)  # loads outside an epoch (validation) are not recorded


def _recording_step(self, batch, m, guard=None):
    out = _step(self, batch, m, guard)
    if _first[0] and getattr(self.model, "dropout", 0):
        masks = self.model.dropout_masks()
        MASKS.append(digest(np.concatenate([masks[k].ravel() for k in sorted(masks)])))
    _first[0] = False
    return out


def _recording_load(self, data, order, start, m):
    _load(self, data, order, start, m)
    if SEEN and SEEN[-1] is not None:
        SEEN[-1].extend(self.x[:m, 0, 0].tolist())


training.Trainer.epoch = _recording_epoch
training.Batch.load = _recording_load
training.Trainer.step = _recording_step


def epochs_seen():
    out = [e for e in SEEN if e is not None]
    SEEN.clear()
    return out


def first_values(X):
    return sorted(float(x[0, 0]) for x in X)


def fit_shard(make, X, Y, method="fit", epochs_pf=1, **kw):
    """Fit make() on this rank's shard of X, Y; check the rows each epoch used and the
    weights on every rank. Returns (estimator, figures)."""
    sizes = shards(len(X), P)
    lo = sum(sizes[:RANK])
    Xs, Ys = X[lo:lo + sizes[RANK]], Y[lo:lo + sizes[RANK]]
    est = make()
    dist = Watching(COMM)
    dist.hashes, dist.est = [], est
    epochs_seen()
    if method == "fit":
        est.fit(Xs, Ys, comm=dist)
    else:
        for _ in range(epochs_pf):
            est.partial_fit(Xs, Ys, comm=dist, **kw)
    seen = epochs_seen()
    assert len(seen) == (est.n_iter_ if method == "fit" else epochs_pf), len(seen)
    mine = first_values(Xs)
    for e, values in enumerate(seen):
        # only this rank's rows, each once per epoch (with validation: the same training
        # part of its shard every epoch)
        ok = (sorted(values) == mine if not option(est, "validation_fraction") else
              len(set(values)) == len(values) and set(values) <= set(mine)
              and sorted(values) == sorted(seen[0]))
        assert ok, f"rank {RANK} epoch {e}: rows used != its shard"
    every = COMM.allgather(dist.hashes + [digest(est.model_.params.flat)])
    assert all(h == every[0] for h in every), "weights differ between ranks after some step"
    b = -(-min(est.batch_size, len(X)) // P)
    steps = max(-(-s // b) for s in sizes) * len(seen)
    if not option(est, "validation_fraction"):
        assert len(dist.hashes) == steps, (len(dist.hashes), steps)
    curves = COMM.allgather((est.loss_curve_, getattr(est, "validation_loss_curve_", None),
                             est.n_iter_, est.optimizer_.t))
    assert all(c == curves[0] for c in curves), "ranks report different losses"
    return est, dict(shards=sizes, steps=len(dist.hashes), n_iter=est.n_iter_,
                     digest=digest(est.model_.params.flat))


def mse(est, X, Y):
    return float(np.mean((np.asarray(est.predict(X), np.float64) - Y) ** 2))


def main():
    figures = {}
    X, Y = attnx.datasets.max_position_task(203, 6, 4, random_state=0)
    X, Y = X.astype(np.float64), Y.astype(np.float64)

    def make():
        return attnx.AttentionRegressor(2, epochs=8, batch_size=8, lr=0.01, random_state=4,
                                        dtype=np.float64, options={"n_iter_no_change": None})
    est, fig = fit_shard(make, X, Y)
    again, fig2 = fit_shard(make, X, Y)
    assert fig2["digest"] == fig["digest"], "a second fit with the same seed differs"
    figures["attention"] = fig
    if RANK == 0:
        ref = make().fit(X, Y)
        fig.update(mse=mse(est, X, Y), mse_one=mse(ref, X, Y),
                   loss_first=est.loss_curve_[0], loss_last=est.loss_curve_[-1],
                   loss_last_one=ref.loss_curve_[-1])
        if P == 1:  # one rank: the plain fit, bit for bit
            assert np.array_equal(est.model_.params.flat, ref.model_.params.flat)
            assert rel(est.loss_curve_, ref.loss_curve_) <= 1e-12
            assert est.optimizer_.t == ref.optimizer_.t
    # validation split (global) and early stopping: the same decisions on every rank
    _, figures["validation_early_stopping"] = fit_shard(lambda: attnx.AttentionRegressor(
        2, epochs=30, batch_size=8, lr=0.01, random_state=1, dtype=np.float64, options={"validation_fraction": 0.2, "early_stopping": True, "n_iter_no_change": 2, "tol": 0.05}), X[:61], Y[:61])
    # a TransformerRegressor through d_model with sample-level targets (standardize=False:
    # the recorded batch values are the data's own)
    y = X[:97, :, 0].sum(axis=1)
    _, figures["transformer"] = fit_shard(lambda: attnx.TransformerRegressor(
        2, 1, 16, d_model=8, dropout=0.0, epochs=3, batch_size=10,
        random_state=2, dtype=np.float64, options={"standardize": False}), X[:97], y)
    # dropout (the Transformer estimators' default): each rank its own masks, from one
    # shared generator that stays the same on every rank
    MASKS.clear()
    est, figures["transformer_dropout"] = fit_shard(lambda: attnx.TransformerRegressor(
        2, 1, 16, d_model=8, epochs=3, batch_size=8, random_state=5,
        dtype=np.float64, options={"standardize": False}), X[:97], y)
    assert est.dropout == 0.1 and len(MASKS) == 3
    masks = COMM.allgather(list(MASKS))
    for e in range(3):  # every epoch's first masks differ between ranks
        assert len({m[e] for m in masks}) == P, masks
    shared = COMM.allgather(str(est.model_.dropout_rng.bit_generator.state))
    assert len(set(shared)) == 1
    # ragged input, a classifier by partial_fit
    rng = np.random.default_rng(1)
    Xr = [rng.normal(size=(int(t), 3)) for t in rng.integers(2, 15, size=53)]
    yr = np.array([int(x[:, 0].sum() > 0) for x in Xr])
    _, figures["ragged_classifier_partial_fit"] = fit_shard(
        lambda: attnx.AttentionClassifier(2, d_model=8, batch_size=8, random_state=3,
                                          dtype=np.float64),
        Xr, yr, method="partial_fit", epochs_pf=2, classes=[0, 1])
    if RANK == 0:
        print("RESULT " + json.dumps(dict(P=P, **figures)), flush=True)


if __name__ == "__main__":
    main()
