"""The PyTorch twin's training, for the examples' comparisons run from the source
checkout (and for benchmarks/accuracy.py and benchmarks/torch_forecaster.py); the
examples run without it (a downloaded copy skips the comparison with a note).

The PyTorch twin is attnx.testing.torch_twin (the SequenceModel network written with
torch ops). It starts from attnx's initial weights and trains with torch.optim.AdamW
and the same batch size, epochs and AdamW settings; its batches are shuffled and
padded per batch (with a key padding mask), as attnx pads ragged input.
"""
import numpy as np

from attnx.datasets import load_japanese_vowels, load_sunspots  # noqa: F401 (benchmarks)

def initial_model(est, X, y):
    """The estimator's initial SequenceModel: a fit with lr=0 changes no weight
    (AdamW with lr=0 neither steps nor decays)."""
    probe = type(est)(**{**est.get_params(), "lr": 0.0, "epochs": 1, "verbose": 0})
    return probe.fit(X, y).model_


def _pad(seqs, dtype):
    t = max(len(s) for s in seqs)
    x = np.zeros((len(seqs), t, seqs[0].shape[1]), dtype)
    pad = np.ones((len(seqs), t), bool)
    for i, s in enumerate(seqs):
        x[i, :len(s)] = s
        pad[i, :len(s)] = False
    return x, pad


def twin_optimizer(twin, *, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                   decay="all"):
    """torch.optim.AdamW over the twin's parameters with attnx's AdamW settings;
    decay="matrices" as two parameter groups (weight decay on the parameters with two
    or more dimensions: the twins' networks have no learned position table)."""
    import torch

    params = list(twin.parameters())
    if decay == "matrices":
        groups = [{"params": [p for p in params if p.ndim >= 2]},
                  {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    else:
        groups = [{"params": params}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)


def twin_predictor(twin, dtype):
    """X (array or list of (T_i, f) arrays) -> the twin's outputs as numpy, padded
    sequences masked, no gradients (the caller sets eval or train mode)."""
    import torch

    def predict(Xp):
        x, pad = _pad([np.asarray(s, dtype) for s in Xp], dtype)
        with torch.no_grad():
            return twin(torch.from_numpy(x), pad).numpy()
    return predict


def twin_step(twin, opt, seqs, target, *, task, dtype, max_grad_norm=None, loss_fn=None):
    """One optimizer step of the twin on the batch `seqs` (padded here, the padding
    masked) against `target` (a tensor: class indices, or values (b, k) averaged by
    the MSE over all b * k of them, or by loss_fn(out, target) when given),
    gradients clipped to max_grad_norm by torch.nn.utils.clip_grad_norm_ when given."""
    import torch
    import torch.nn.functional as F

    x, pad = _pad(seqs, dtype)
    opt.zero_grad()
    out = twin(torch.from_numpy(x), pad)
    if loss_fn is not None:
        loss = loss_fn(out, target)
    else:
        loss = F.cross_entropy(out, target) if task == "classify" else F.mse_loss(out, target)
    loss.backward()
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(list(twin.parameters()), max_grad_norm)
    opt.step()


def torch_twin_fit(model, X, y, *, task, epochs, batch_size, lr, betas=(0.9, 0.999), eps=1e-8,
                   weight_decay=0.01, seed=0, lr_schedule="constant", warmup=0.1,
                   max_grad_norm=None, decay="all", after_epoch=None):
    """Train the torch twin of `model` (an attnx SequenceModel, its initial weights) on
    X (array or list of (T_i, f) arrays) and y (class indices for task="classify",
    else values (n,) or (n, k)). Returns a predict function (X -> numpy output).

    The estimators' recipe in PyTorch's own pieces: lr_schedule / warmup as attnx's
    (LambdaLR over attnx.layers.schedules.estimator_schedule's factors, stepped per batch),
    max_grad_norm by torch.nn.utils.clip_grad_norm_, decay="matrices" as two AdamW
    parameter groups (twin_optimizer). after_epoch(predict) is called after every
    epoch (dropout off meanwhile); True stops training."""
    import torch
    from attnx.testing.torch_twin import SeqTwin

    from attnx.layers.schedules import estimator_schedule

    twin = SeqTwin(model)
    dtype = np.float32 if model.dtype == np.float32 else np.float64
    seqs = [np.asarray(s, dtype) for s in X]
    y = np.asarray(y)
    target = torch.tensor(y if task == "classify" else y.reshape(len(y), -1).astype(dtype))
    opt = twin_optimizer(twin, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         decay=decay)
    steps = epochs * -(-len(seqs) // batch_size)
    factor = estimator_schedule(lr_schedule, steps, warmup)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor) if factor else None
    rng = np.random.default_rng(seed)
    predict = twin_predictor(twin, dtype)

    twin.train()
    for _ in range(epochs):
        order = rng.permutation(len(seqs))
        for s in range(0, len(seqs), batch_size):
            idx = order[s:s + batch_size]
            twin_step(twin, opt, [seqs[i] for i in idx], target[idx], task=task, dtype=dtype,
                      max_grad_norm=max_grad_norm)
            if sched is not None:
                sched.step()
        if after_epoch is not None:
            twin.eval()
            stop = after_epoch(predict)
            twin.train()
            if stop:
                break
    twin.eval()
    return predict


def torch_twin_select_epochs(model, X, y, *, budget, split_seed, **fit_kw):
    """TransformerRegressor(epochs=None)'s held-out run in PyTorch: 20% of the samples
    held out (the estimator's draw for split_seed), the twin of `model` trained on the
    rest over the recipe of a `budget`-epoch fit and scored on them (MSE) after every
    epoch; the whole budget once that loss falls to half the loss of predicting the
    training mean, else the best epoch (30 epochs of patience, at least 5)."""
    from attnx.estimators import _training as tr
    y = np.asarray(y, np.float64).reshape(len(X), -1)
    n = len(X)
    perm = np.random.default_rng(split_seed).permutation(n)
    n_val = int(np.ceil(tr.SELECT_FRACTION * n))
    val, train = np.sort(perm[:n_val]), np.sort(perm[n_val:])
    reference = float(np.mean((y[val] - y[train].mean(axis=0)) ** 2))
    st = {"best": np.inf, "best_epoch": 0, "epoch": 0, "stall": 0, "strong": False}
    tol = 1e-4   # the estimators' default tol

    def after_epoch(predict):
        loss = float(np.mean((predict([X[i] for i in val]).reshape(n_val, -1) - y[val]) ** 2))
        st["epoch"] += 1
        st["stall"] = st["stall"] + 1 if loss > st["best"] - tol else 0
        if loss < st["best"]:
            st["best"], st["best_epoch"] = loss, st["epoch"]
        if loss <= (1 - tr.SELECT_R2) * reference:
            st["strong"] = True
            return True
        return st["stall"] >= tr.SELECT_PATIENCE

    torch_twin_fit(model, [X[i] for i in train], y[train], task="regress", epochs=budget,
                   after_epoch=after_epoch, **fit_kw)
    return budget if st["strong"] else min(max(st["best_epoch"], tr.SELECT_MIN_EPOCHS), budget)
