"""Run under `mpiexec -n P`: data-parallel fits with uneven shards against one process
(distributed="exact"; _transformer_0_2's previous-release recipe has it too).

Every rank builds the same global data set and keeps its own shard (uneven sizes,
some ranks holding no sample of some global batches). Rank 0 also fits the same
estimator on all the data without comm. Checks, for each configuration:
- the distributed weights, loss curves and validation curves equal the single
  process's within float64 rounding (relative 1e-10);
- the weights are identical bit for bit on every rank before every step and at
  the end (a hash of the flat weights, gathered from every rank).
Finally a checkpoint saved by rank 0 of this job resumes on a sub-communicator
of a different size. Prints one JSON line with the figures on rank 0; any failed
check raises (so mpiexec returns non-zero).
"""
import hashlib
import json
import os
import sys

import numpy as np
from mpi4py import MPI

import attnx

#: the bare X -> Y transformer's settings (dropout 0 is needed with comm anyway)
BARE = dict(d_model=None, positional="none", norm=None, dropout=0.0, epochs=100,
            batch_size=32, patch_len=1, stem=None, layout="ntc", missing="error",
            instance_norm=None, tokenizer="patch", pretrain=None,
            options=dict(n_iter_no_change=10, lr_schedule="constant", warmup=0.1,
                         max_grad_norm=None, decay="all", standardize=False,
                         distributed="exact", instance_affine=False, pretrain_epochs=None))


def _transformer_0_2(*args, **kw):
    """TransformerRegressor with the bare model's settings (options merged key by key)."""
    options = {**BARE["options"], **(kw.pop("options", None) or {})}
    return attnx.TransformerRegressor(*args, **{**BARE, **kw, "options": options})
from attnx.distributed import Communicator

COMM = MPI.COMM_WORLD
RANK, P = COMM.Get_rank(), COMM.Get_size()


def digest(a):
    return hashlib.blake2b(np.ascontiguousarray(a).view(np.uint8), digest_size=16).hexdigest()


class Watching(Communicator):
    """Records a hash of the weights at the start of every step (= after the previous one)."""

    est = None

    def batch_loss(self, loss, m, guard=None):
        self.hashes.append(digest(self.est.model_.params.flat))
        return super().batch_loss(loss, m, guard)


def shards(n, p):
    """Uneven shard sizes summing to n: rank r gets about (r + 1) / sum parts, rank 0 tiny."""
    if p == 1:
        return [n]
    w = np.arange(1, p + 1, dtype=float) ** 2
    sizes = np.maximum(1, np.floor(w / w.sum() * n)).astype(int)
    sizes[-1] += n - sizes.sum()
    return [int(s) for s in sizes]


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def data(n, t, d, seed):
    X, Y = attnx.datasets.max_position_task(n, t, d, random_state=seed)
    return X.astype(np.float64), Y.astype(np.float64)


def run(make, n, method="fit", epochs_pf=1, seed=0, compare=True):
    X, Y = data(n, 6, 4, seed)
    sizes = shards(n, P)
    lo = sum(sizes[:RANK])
    Xs, Ys = X[lo:lo + sizes[RANK]], Y[lo:lo + sizes[RANK]]
    Xs_before = Xs.copy()
    est = make()
    dist = Watching(COMM)
    dist.hashes, dist.est = [], est
    if method == "fit":
        est.fit(Xs, Ys, comm=dist)
    else:
        for _ in range(epochs_pf):
            est.partial_fit(Xs, Ys, comm=dist)
    assert np.array_equal(Xs, Xs_before), "fit modified the shard"
    every = COMM.allgather(dist.hashes + [digest(est.model_.params.flat)])
    assert all(h == every[0] for h in every), "weights differ between ranks after some step"
    out = dict(steps=len(dist.hashes), shards=sizes)
    if RANK == 0 and compare:
        ref = make()
        if method == "fit":
            ref.fit(X, Y)
        else:
            for _ in range(epochs_pf):
                ref.partial_fit(X, Y)
        assert est.n_iter_ == ref.n_iter_, (est.n_iter_, ref.n_iter_)
        assert est.optimizer_.t == ref.optimizer_.t
        out["params_rel"] = rel(est.model_.params.flat, ref.model_.params.flat)
        out["loss_rel"] = rel(est.loss_curve_, ref.loss_curve_)
        if hasattr(ref, "validation_loss_curve_"):
            out["val_rel"] = rel(est.validation_loss_curve_, ref.validation_loss_curve_)
        out["n_iter"] = est.n_iter_
        for k in ("params_rel", "loss_rel", "val_rel"):
            assert out.get(k, 0.0) <= 1e-10, (k, out)
    return est, out


def checkpoint(path):
    """Fit on every rank of this job, save on rank 0, resume on a communicator of another size."""
    n = 41
    X, Y = data(n, 6, 4, 3)
    make = lambda: _transformer_0_2(2, n_layers=1, d_hidden=8, epochs=2, batch_size=6,
                                              lr=0.01, random_state=5, dtype=np.float64)
    sizes = shards(n, P)
    lo = sum(sizes[:RANK])
    est = make().fit(X[lo:lo + sizes[RANK]], Y[lo:lo + sizes[RANK]], comm=COMM)
    if RANK == 0:
        est.save(path)
    COMM.Barrier()
    q = max(1, P - 1)  # a different number of ranks (P = 1: the same single rank)
    sub = COMM.Split(0 if RANK < q else MPI.UNDEFINED, RANK)
    result = {}
    if sub != MPI.COMM_NULL:
        part = np.array_split(np.arange(n), q)[sub.Get_rank()]
        res = attnx.load(path)
        for _ in range(2):
            res.partial_fit(X[part], Y[part], comm=sub)
        if RANK == 0:
            ref = make().fit(X, Y)
            for _ in range(2):
                ref.partial_fit(X, Y)
            result = dict(resume_from=P, resume_on=q,
                          resume_rel=rel(res.model_.params.flat, ref.model_.params.flat))
            assert result["resume_rel"] <= 1e-10 and res.n_iter_ == ref.n_iter_ == 4, result
        sub.Free()
    return result


def main():
    tmp = sys.argv[1]
    figures = {}
    _, figures["attention_val_es"] = run(lambda: attnx.AttentionRegressor(
        2, epochs=8, batch_size=8, lr=0.01, random_state=1, dtype=np.float64, options={"validation_fraction": 0.2, "early_stopping": True, "n_iter_no_change": 2, "tol": 0.05, "distributed": "exact"}), 45)
    assert RANK != 0 or figures["attention_val_es"]["n_iter"] < 8  # early stopping acted
    _, figures["transformer_noshuffle"] = run(lambda: _transformer_0_2(
        2, n_layers=2, d_hidden=8, epochs=3, batch_size=6, lr=0.01, random_state=2,
        dtype=np.float64, options={"shuffle": False}), 38)
    _, figures["attention_partial_fit"] = run(lambda: attnx.AttentionRegressor(
        1, batch_size=5, lr=0.01, random_state=3, dtype=np.float64, options={"distributed": "exact"}), 29,
        method="partial_fit", epochs_pf=3)
    # random_state=None: every rank must still start from the same (rank 0's) weights
    _, figures["random_state_none"] = run(lambda: attnx.AttentionRegressor(
        1, epochs=2, batch_size=5, random_state=None, dtype=np.float64, options={"distributed": "exact"}),
        23, compare=False)
    # a Generator per rank, each in another state: rank 0's seeds still rule
    _, figures["random_state_generator"] = run(lambda: attnx.AttentionRegressor(
        1, epochs=2, batch_size=5, random_state=np.random.default_rng(RANK),
        dtype=np.float64, options={"distributed": "exact"}), 23, compare=False)
    figures["checkpoint"] = checkpoint(os.path.join(tmp, "ckpt.safetensors"))
    if RANK == 0:
        print("RESULT " + json.dumps(dict(P=P, **figures)), flush=True)


if __name__ == "__main__":
    main()
