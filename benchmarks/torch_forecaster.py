"""The PyTorch twin of attnx's forecaster (the "torch_twin" row of benchmarks/forecasting.py).

TorchForecaster is attnx.TransformerForecaster with every network it trains (the
calibration run that picks the epochs and the blend weight, and the final network
regressor_) trained by PyTorch instead of attnx: the same network written in torch
(attnx.testing.torch_twin.SeqTwin), from attnx's initial weights, on the same tokens and
targets, with the same recipe. Everything else (windows, scaling, the baseline, the
blend weight, the conformal intervals, predict) is attnx's own code.

_TorchRegressor stands in for the attnx.TransformerRegressor the forecaster builds
(TransformerForecaster._regressor), with the part of its API the forecaster uses
(epochs, set_params, fit, predict) and its recipe, read from that regressor:
- initial weights: attnx's (examples/_common.initial_model, a fit with lr=0);
- torch.optim.AdamW with its lr, betas, eps, weight_decay and decay (two parameter
  groups for decay="matrices"), clip_grad_norm_ at max_grad_norm, its lr_schedule and
  warmup over each fit's steps (the forecaster asks for "constant");
- the batches of attnx's own plan (attnx.estimators._batches.batch_plan with the shuffling
  generator seeded as attnx seeds it: dense windows a permutation cut into batches;
  padded ones sorted by length within windows of 16 batches, the batches shuffled),
  the MSE averaged over every target value of the batch (a short last batch: over
  its own rows);
- warm_start=True goes on with the same twin, optimizer and shuffling generator for
  `epochs` more epochs (the calibration run's chunks; lr as now set, the other
  AdamW settings as at the first fit: the forecaster changes only epochs and
  warm_start); otherwise a fit starts again from the initial weights.
So with dropout=0 the twin trains the network attnx trains, up to rounding, which
grows with the steps: in float64 the forecasts agree to ~1e-16 after a few epochs
(tests/project/test_torch_forecaster.py) and to ~1e-8 after the default fit on the Nile
series (180 epochs); in float32 to ~1e-2 there, where the calibration run's choices
(best check, blend weight) may also differ. With dropout > 0 the twin drops
with torch's own masks (torch's global generator, seeded at the start of each fit):
attnx draws its masks from its own stream, so the two networks then differ as two
seeds do.

torch is needed by this module only; attnx does not import it.
"""
from __future__ import annotations

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for _path in (ROOT, os.path.join(ROOT, "examples")):
    if _path not in sys.path:
        sys.path.insert(0, _path)  # attnx in place; _common (examples)

import torch  # noqa: E402
from _common import initial_model, twin_optimizer, twin_predictor, twin_step  # noqa: E402

import attnx  # noqa: E402
from attnx.testing.torch_twin import SeqTwin  # noqa: E402
from attnx.estimators._batches import batch_plan  # noqa: E402
from attnx.estimators._training import seeds  # noqa: E402
from attnx.estimators._hyper import resolve_options  # noqa: E402
from attnx.layers.schedules import estimator_schedule  # noqa: E402

__all__ = ["TorchForecaster"]


def torch_loss(p):
    """The regressor's training loss (its `loss` and `quantiles`) in torch: None for
    the squared error (twin_step's MSE), else a function (out, target) -> loss, the
    mean over every output of the batch."""
    import torch.nn.functional as F

    kind = p.get("loss", "squared_error")
    if kind == "squared_error":
        return None
    if kind == "absolute_error":
        return F.l1_loss
    if kind == "huber":
        return lambda out, target: F.huber_loss(out, target, delta=1.0)
    levels = np.asarray(p["quantiles"], np.float64)

    def pinball(out, target):
        q = torch.from_numpy(levels.astype(out.detach().numpy().dtype))
        e = target - out
        return torch.maximum(q * e, (q - 1.0) * e).mean()
    return pinball


class _TorchRegressor:
    """attnx.TransformerRegressor's fit / predict as the forecaster uses them, trained
    by PyTorch (the module docstring) with the regressor's loss (torch_loss). `regressor` is the attnx regressor whose
    parameters are the recipe; it is only fitted (with lr=0) for its initial weights."""

    def __init__(self, regressor):
        self.regressor = regressor

    @property
    def epochs(self):
        return self.regressor.epochs

    def get_params(self, deep=True):
        return self.regressor.get_params(deep)

    def set_params(self, **params):
        self.regressor.set_params(**params)
        return self

    def fit(self, X, y):
        # every setting the fit uses: the parameters and each option (given or default)
        p = {**self.regressor.get_params(),
             **resolve_options(type(self.regressor).__name__, self.regressor.options)}
        if not (p["warm_start"] and hasattr(self, "twin_")):
            self._start(X, y, p)
        self._train(X, np.asarray(y, np.float64).reshape(len(X), -1), p)
        return self

    def _start(self, X, y, p):
        """The initial network (attnx's weights), its AdamW and shuffling generator."""
        self.model_ = initial_model(self.regressor, X, y)
        self.dtype_ = np.float32 if self.model_.dtype == np.float32 else np.float64
        self.twin_ = SeqTwin(self.model_)
        self.optimizer_ = twin_optimizer(self.twin_, lr=p["lr"], betas=tuple(p["betas"]),
                                         eps=p["eps"], weight_decay=p["weight_decay"],
                                         decay=p["decay"])
        init_seed, shuffle_seed, _ = seeds(p["random_state"])
        self.shuffle_rng_ = np.random.default_rng(shuffle_seed)
        if self.model_.dropout > 0:
            torch.manual_seed(init_seed)

    def _train(self, X, y, p):
        dtype = self.dtype_
        seqs = [np.asarray(s, dtype) for s in X]
        n = len(seqs)
        bs = min(int(p["batch_size"]), n)
        lengths = (np.array([len(s) for s in seqs]) if isinstance(X, (list, tuple))
                   else None)
        target = torch.from_numpy(y.astype(dtype))
        steps_per_epoch = -(-n // bs)
        factor = estimator_schedule(p["lr_schedule"], p["epochs"] * steps_per_epoch,
                                    p["warmup"])
        rng = self.shuffle_rng_ if p["shuffle"] else None
        twin, opt = self.twin_, self.optimizer_
        twin.train()
        step = 0
        for _ in range(int(p["epochs"])):
            order, plan = batch_plan(n, bs, rng, lengths)
            if order is None:
                order = np.arange(n)
            for start, m, _t in plan:
                for g in opt.param_groups:
                    g["lr"] = p["lr"] * (factor(step) if factor is not None else 1.0)
                idx = order[start:start + m]
                twin_step(twin, opt, [seqs[i] for i in idx], target[idx], task="regress",
                          dtype=dtype, max_grad_norm=p["max_grad_norm"],
                          loss_fn=torch_loss(p))
                step += 1
        twin.eval()

    def predict(self, X):
        """(n, n_outputs) outputs of the trained twin (no dropout)."""
        self.twin_.eval()
        return twin_predictor(self.twin_, self.dtype_)(X)


class TorchForecaster(attnx.TransformerForecaster):
    """attnx.TransformerForecaster (same parameters) whose networks PyTorch trains."""

    def _regressor(self, n_windows, n_tokens, seed, n_targets):
        return _TorchRegressor(super()._regressor(n_windows, n_tokens, seed, n_targets))
