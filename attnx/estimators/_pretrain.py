"""Self-supervised pre-training of the estimators' encoder (pretrain="masked").

Masked-value reconstruction over the training series (and any unlabelled series
given to fit), after Zerveas et al.'s time-series transformer: about MASK_RATIO of
each sequence's input values are replaced by 0 (the training mean once
standardize=True has scaled them), the encoder (embedding, positions, blocks and
final norm: the estimator's own network) reads the masked tokens, and a linear
reconstruction head per token (the SequenceModel's head with pooling=None, one
output per input feature of a token) predicts the token's input values; the loss
is the mean squared error over the masked values only (masked_mse). The encoder's
weights then start the supervised fit; the reconstruction head is dropped.

What is masked depends on what a token holds:

- patch tokens (tokenizer="patch"; patch_len p >= 1): a token is p consecutive time
  steps, so the mask is drawn over the time steps of each channel as spans of
  mean length MEAN_SPAN steps (each step starts a span with probability
  MASK_RATIO / MEAN_SPAN, the span's length geometric), and a token reconstructs
  its own steps: the masked time-series modelling of the original recipe (p = 1),
  or of patches.
- PPV tokens (tokenizer="ppv"): a token is the proportions of positive values of
  fixed convolutions over its window, not a time step; masking the raw series
  would change a window's proportions only slightly and leave nothing definite
  to reconstruct. Each token feature is masked independently with probability
  MASK_RATIO instead, and a token reconstructs its own features (what the token
  sees of its window) from its unmasked features and the other windows.

Every sequence gets at least one masked value; padding and missing (masked) steps
are never inputs to reconstruct. No stem (a stem's tokens mix steps across
windows of their own) and no instance normalisation (the encoder would see each
masked series renormalised by its masked values).

The mask, the masked input and the loss are NumPy; the network's forward and
backward are SequenceModel's own.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from . import _sequences as seqs
from ..layers import schedules
from ._networks import SequenceNetwork
from ..runtime._threads import hold
from ._batches import PAD_MULTIPLE
from ._training import AUTO_STEPS, MAX_EPOCHS, MIN_EPOCHS, TrainingDivergedError
from ..layers.optim import AdamW

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from ._hyper import Config
    from ._plan import FitPlan
    from ..runtime._typing import BoolArray, FloatArray, IntArray
    from ..layers.sequence import SequenceModel

#: the share of the input values masked, and the mean span of masked time steps
MASK_RATIO, MEAN_SPAN = 0.15, 3.0
#: how PPV tokens are masked: "feature" (each feature alone) or "token" (whole tokens)
PPV_MASK = "feature"
#: how patch tokens are masked: "span" (spans of steps per channel) or "token"
PATCH_MASK = "span"
#: pretrain_epochs=None: about this many optimizer steps (AUTO_STEPS / 5), within
#: [MIN_EPOCHS, MAX_EPOCHS] epochs over the pre-training series. 300, 750 and 1500
#: steps gave the same accuracy with 10% of the labels (benchmarks/results/
#: accuracy_pretrain.md): the shortest costs the least
PRETRAIN_STEPS = AUTO_STEPS // 5
#: the estimators' docstring of pretrain and pretrain_epochs
#: the weights that belong to the task, not to the encoder: never carried over
_TASK_WEIGHTS = ("head.W", "head.b", "cls")


# ---- the loss ------------------------------------------------------------------------
def masked_mse(y: FloatArray, target: FloatArray, mask: BoolArray
               ) -> tuple[float, FloatArray]:
    """(loss, dL/dy): the mean of (y - target)^2 over the entries where mask is True
    (y, target, mask of one shape), accumulated in float64; dL/dy = 2 (y - target) /
    count on those entries, 0 elsewhere, in y's dtype. No masked entry: loss 0 and a
    zero gradient."""
    if y.shape != target.shape or y.shape != mask.shape:
        raise ValueError(f"y, target and mask must have one shape, got {y.shape}, "
                         f"{target.shape} and {mask.shape}")
    count = int(np.count_nonzero(mask))
    diff = np.where(mask, y.astype(np.float64) - target.astype(np.float64), 0.0)
    if count == 0:
        return 0.0, np.zeros_like(y)
    loss = float(np.dot(diff.ravel(), diff.ravel())) / count
    return loss, (diff * (2.0 / count)).astype(y.dtype)


# ---- the mask ------------------------------------------------------------------------
def span_mask(rng: np.random.Generator, shape: tuple[int, int, int],
              ratio: float | None = None, mean_span: float | None = None) -> BoolArray:
    """(B, T, C) bool: spans of masked steps along axis 1, drawn for each (b, c)
    alone: each step starts a span with probability ratio / mean_span, of a length
    geometric with mean mean_span; step t is masked when a span that started at
    s <= t reaches past t. About 1 - exp(-ratio) of the steps are masked."""
    ratio = MASK_RATIO if ratio is None else ratio
    mean_span = MEAN_SPAN if mean_span is None else mean_span
    b, t, c = shape
    starts = rng.random(shape) < ratio / mean_span
    span = rng.geometric(1.0 / mean_span, size=shape)
    steps = np.arange(t).reshape(1, t, 1)
    end = np.where(starts, steps + span, 0)
    return np.maximum.accumulate(end, axis=1) > steps


def token_mask(rng: np.random.Generator, valid: BoolArray, f: int, p: int, ppv: bool,
               ratio: float | None = None) -> BoolArray:
    """(B, N, f) bool: the token features to mask and reconstruct, for tokens of f
    features (valid (B, N): the tokens that hold data). Patch tokens of p steps
    (f = p * C, feature l * C + c being step l of channel c): span_mask over the
    N * p steps of each channel; PPV tokens: each feature alone with probability
    ratio. Only valid tokens; a sequence with a valid token but no masked feature
    gets one, drawn at random among its valid features."""
    ratio = MASK_RATIO if ratio is None else ratio
    b, n = valid.shape
    if (PPV_MASK if ppv else PATCH_MASK) == "token":   # whole tokens
        mask = np.repeat(rng.random((b, n, 1)) < ratio, f, axis=2)
    elif ppv:
        mask = rng.random((b, n, f)) < ratio
    else:
        c = f // p
        mask = span_mask(rng, (b, n * p, c), ratio).reshape(b, n, f)
    mask &= valid[:, :, None]
    empty = ~mask.reshape(b, -1).any(axis=1) & valid.any(axis=1)
    for i in np.flatnonzero(empty):   # one of its valid features
        tokens = np.flatnonzero(valid[i])
        mask[i, tokens[rng.integers(tokens.size)], rng.integers(f)] = True
    return mask


# ---- the network ----------------------------------------------------------------------
def reconstruction_model(spec: dict[str, Any], seed: int) -> SequenceModel:
    """The estimator's network (its file spec `spec`) with a linear head per token
    (pooling=None) of as many outputs as a token has input features."""
    spec = dict(spec, pooling=None, n_outputs=int(spec["n_features"]))
    return SequenceNetwork._build(spec, seed)


def copy_encoder(src: SequenceModel, dst: SequenceModel) -> list[str]:
    """Copy every weight the two networks share by name and shape, except the head
    and the class token (the task's weights); returns the names copied."""
    done = []
    for name, w in src.params.items():
        if name in _TASK_WEIGHTS or name not in dst.params:
            continue
        target = dst.params[name]
        if target.shape != w.shape:
            raise ValueError(f"{name}: the pre-trained weight {w.shape} does not fit the "
                             f"network's {target.shape}")
        target[...] = w
        done.append(name)
    return done


def auto_epochs(n: int, batch_size: int) -> int:
    """pretrain_epochs=None: about PRETRAIN_STEPS steps over n series, within
    [MIN_EPOCHS, MAX_EPOCHS] epochs."""
    per_epoch = -(-max(n, 1) // max(min(batch_size, max(n, 1)), 1))
    return int(min(max(round(PRETRAIN_STEPS / per_epoch), MIN_EPOCHS), MAX_EPOCHS))


# ---- the data -------------------------------------------------------------------------
def check(cfg: Config, plan: FitPlan, comm: bool, unlabelled: Any, warm: bool) -> bool:
    """Whether this fit pre-trains (pretrain="masked" on a new fit; a warm start goes
    on from the fitted weights and pre-trains nothing); ValueError for settings
    pre-training cannot serve (the plan's stem and instance normalisation) and for a
    bad X_unlabelled, before anything is fitted."""
    if warm:
        if unlabelled is not None:
            raise ValueError("X_unlabelled is read by the pre-training of a new fit; "
                             "warm_start=True goes on from the fitted weights")
        return False
    if cfg.pretrain is None:
        if unlabelled is not None:
            raise ValueError("X_unlabelled is read by the pre-training only: set "
                             "pretrain='masked' to use it, got pretrain=None")
        return False
    if not plan.head:
        raise ValueError("pretrain='masked' needs a SequenceModel (d_model set, or targets "
                         "other than y of X's shape): the bare X -> Y model has no encoder "
                         "to pre-train")
    if comm:
        raise ValueError("pretrain='masked' cannot be combined with comm (a data-parallel "
                         "fit): pre-train in one process")
    if plan.stem is not None:
        raise ValueError(f"pretrain='masked' cannot be combined with a stem (its tokens "
                         f"are not the masked steps), got stem={plan.stem!r}")
    if plan.instance_norm is not None:
        raise ValueError(f"pretrain='masked' needs instance_norm=None (each series would "
                         f"be normalised by its masked values), got "
                         f"instance_norm={plan.instance_norm!r}")
    if unlabelled is not None:   # X's checks (the tokens are made after the fit starts)
        seqs.sequences("X_unlabelled", unlabelled, cfg.dtype, plan.channels,
                       layout=cfg.layout, missing=cfg.missing)
    return True


def _standardized(est: Any, x: FloatArray, lengths: IntArray | None,
                  missing: BoolArray | None) -> FloatArray:
    """Tokens x scaled as the fit scales its training tokens (standardize=True)."""
    if "input_mean_" not in est.__dict__:
        return x
    xs = ((x - est.input_mean_) / est.input_scale_).astype(x.dtype)
    masked = seqs.key_mask(lengths, missing, slice(None), x.shape[1])
    if masked is not None:
        xs[masked] = 0
    return np.ascontiguousarray(xs)


def series(est: Any, data: seqs.Data, unlabelled: Any
           ) -> tuple[FloatArray, IntArray | None, BoolArray | None]:
    """(x, lengths or None, missing or None): the fit's training tokens `data`
    (already scaled), and X_unlabelled's tokens made and scaled as the fit makes
    them, one after the other (the shorter padded with zeros)."""
    parts = [(data.x, data.lengths, data.missing)]
    if unlabelled is not None:
        x, lengths, nan = est._inputs(unlabelled)
        parts.append((_standardized(est, x, lengths, nan), lengths, nan))
    if len(parts) == 1:
        return parts[0]
    t = max(p[0].shape[1] for p in parts)
    xs, ls, ms = [], [], []
    for x, lengths, nan in parts:
        n, tp = x.shape[:2]
        xs.append(np.pad(x, ((0, 0), (0, t - tp), (0, 0))))
        ls.append(np.full(n, tp, np.int64) if lengths is None else lengths)
        ms.append(np.zeros((n, t), bool) if nan is None else np.pad(nan, ((0, 0), (0, t - tp))))
    lengths = np.concatenate(ls)
    missing = np.concatenate(ms)
    ragged = bool((lengths != t).any())
    return (np.ascontiguousarray(np.concatenate(xs)), lengths if ragged else None,
            missing if missing.any() else None)


# ---- the loop -------------------------------------------------------------------------
class Pretrained(NamedTuple):
    """What a pre-training leaves for the fit: the encoder's weights (name -> copy),
    which a re-initialised network loads again (load), and the loss curve."""

    weights: dict[str, NDArray[Any]]
    loss_curve: list[float]


def run(est: Any, plan: FitPlan, data: seqs.Data, unlabelled: Any, cfg: Config, seed: int
        ) -> Pretrained:
    """Pre-train the estimator's freshly initialised model_ (the network of `plan`) on
    masked-value reconstruction and copy the encoder's weights into it; returns them
    and the mean masked MSE of every epoch."""
    model: SequenceModel = est.model_
    x, lengths, missing = series(est, data, unlabelled)
    n, t, f = x.shape
    rng = np.random.default_rng(np.random.SeedSequence([seed, 40]))
    pre = reconstruction_model(dict(plan.network), int(rng.integers(2**63 - 1)))
    copy_encoder(model, pre)
    opt = AdamW(pre.params, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps,
                weight_decay=cfg.weight_decay, decay=cfg.decay)
    bs = min(cfg.batch_size, n)
    epochs = cfg.pretrain_epochs or auto_epochs(n, bs)
    per_epoch = -(-n // bs)
    factor = schedules.estimator_schedule(cfg.lr_schedule, epochs * per_epoch, cfg.warmup)
    scratch = np.empty(pre.grads.flat.shape, np.float64)
    p = plan.patch_len
    ppv = plan.ppv is not None
    curve: list[float] = []
    xb = np.zeros((bs, t, f), x.dtype)
    with hold():
        for _ in range(epochs):
            order = rng.permutation(n)
            total = 0.0
            for start in range(0, n, bs):
                idx = order[start:start + bs]
                m = idx.size
                tb = t if lengths is None else min(
                    t, -(-int(lengths[idx].max()) // PAD_MULTIPLE) * PAD_MULTIPLE)
                xv = xb[:, :tb]
                xv[:m] = x[idx, :tb]
                xv[m:] = 0
                km = np.zeros((bs, tb), bool)
                part = seqs.key_mask(lengths, missing, idx, tb)
                if part is not None:
                    km[:m] = part
                valid = ~km
                valid[m:] = False   # the rows filling a short batch: nothing to rebuild
                mask = token_mask(rng, valid, f, p, ppv)
                xin = np.where(mask, 0, xv).astype(x.dtype)
                kpm = km if km.any() else None
                y = pre.forward(xin, key_padding_mask=kpm, grad=True)
                loss, dy = masked_mse(y, xv, mask)
                if not math.isfinite(loss):
                    raise TrainingDivergedError(f"pre-training diverged (the masked loss "
                                                f"became {loss}, lr={opt.lr}); try a "
                                                f"smaller lr")
                pre.backward(dy)
                if cfg.max_grad_norm is not None:
                    schedules.clip_flat(pre.grads.flat, cfg.max_grad_norm, scratch)
                if factor is not None:
                    opt.lr = cfg.lr * factor(opt.t)
                opt.step(pre.grads)
                total += loss * m
            curve.append(total / n)
    copy_encoder(pre, model)
    weights = {name: np.array(w) for name, w in model.params.items()
               if name not in _TASK_WEIGHTS}
    return Pretrained(weights, curve)


def start(est: Any, plan: FitPlan, data: seqs.Data, unlabelled: Any, cfg: Config,
          seed: int) -> Pretrained:
    """run() on the new fit's model_, recording pretrain_loss_curve_; the result goes
    to load() when the fit initialises its network again (epoch selection)."""
    done = run(est, plan, data, unlabelled, cfg, seed)
    est.pretrain_loss_curve_ = list(done.loss_curve)
    return done


def load(model: Any, pretrained: Pretrained) -> list[float]:
    """Put the pre-trained encoder weights into a re-initialised model; returns the
    pre-training's loss curve (a copy)."""
    for name, w in pretrained.weights.items():
        model.params[name][...] = w
    return list(pretrained.loss_curve)
