"""Learning-rate schedules for AdamW, and gradient clipping by global norm.

A schedule drives an optimizer's ``lr``: build it over the optimizer, then call
``step()`` once after each ``opt.step(...)``, as with PyTorch's schedulers::

    opt = attnx.AdamW(model.params, lr=1e-3)
    sched = attnx.layers.schedules.WarmupCosine(opt, total_steps=1000, warmup=0.1)
    for batch in batches:
        ...
        clip_grad_norm(model.grads, 1.0)
        opt.step(model.grads)
        sched.step()

Step-based schedules set the rate of step t (0-based) to ``base_lr * factor(t)``,
where base_lr is the optimizer's lr when the schedule was built:

- ``Constant``: factor 1.
- ``WarmupCosine(total_steps, warmup, min_lr_ratio)``: linear warm-up over the first
  w steps, factor (t + 1) / w, then a half cosine from 1 down to min_lr_ratio at
  step total_steps. The same rates as PyTorch's ``SequentialLR`` of ``LinearLR(
  start_factor=1/w, total_iters=w-1)`` and ``CosineAnnealingLR(T_max=total-w,
  eta_min=min_lr_ratio*lr)``.
- ``OneCycle(total_steps, pct_start, div_factor, final_div_factor)``: a cosine rise
  from base_lr / div_factor to base_lr over pct_start of the steps, then a cosine
  fall to base_lr / (div_factor * final_div_factor); PyTorch's ``OneCycleLR`` with
  ``max_lr=base_lr`` and ``cycle_momentum=False`` (AdamW's betas stay fixed).

``ReduceOnPlateau`` is driven by a metric instead (``step(metric)``, once an epoch):
the rate is multiplied by ``factor`` after ``patience`` epochs without a relative
improvement larger than ``threshold``, as PyTorch's ``ReduceLROnPlateau`` in its
default "min"/"rel" mode.

A schedule's state is two numbers (``state_dict``/``load_state_dict``), so a saved
estimator resumes its schedule exactly.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..runtime._params import ParamDict, check_int

if TYPE_CHECKING:
    from .optim import AdamW

__all__ = ["Constant", "WarmupCosine", "OneCycle", "ReduceOnPlateau", "clip_grad_norm",
           "global_norm"]


def _real(name: str, v: object, lo: float, hi: float, what: str,
          lo_open: bool = False, hi_open: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name} must be a real number {what}, got {v!r}")
    f = float(v)
    if (not math.isfinite(f) or f < lo or f > hi or (lo_open and f == lo)
            or (hi_open and f == hi)):
        raise ValueError(f"{name} must be {what}, got {v!r}")
    return f


class _Schedule:
    """The rate of step t is base_lr * factor(t); step() moves to the next step."""

    def __init__(self, optimizer: AdamW) -> None:
        if not hasattr(optimizer, "lr") or not hasattr(optimizer, "step"):
            raise TypeError(f"optimizer must be an attnx.AdamW, got "
                            f"{type(optimizer).__name__}")
        self.optimizer = optimizer
        self.base_lr = float(optimizer.lr)
        self.last_step = 0
        optimizer.lr = self.lr_at(0)

    def factor(self, t: int) -> float:
        raise NotImplementedError

    def lr_at(self, t: int) -> float:
        """The learning rate of step t (0-based)."""
        return self.base_lr * self.factor(t)

    def step(self) -> None:
        """Advance one optimizer step and set the optimizer's lr for the next one."""
        self.last_step += 1
        self.optimizer.lr = self.lr_at(self.last_step)

    def state_dict(self) -> dict[str, Any]:
        return {"base_lr": self.base_lr, "last_step": self.last_step}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.base_lr = float(state["base_lr"])
        self.last_step = int(state["last_step"])
        self.optimizer.lr = self.lr_at(self.last_step)


class Constant(_Schedule):
    """The optimizer's lr at every step."""

    def factor(self, t: int) -> float:
        return 1.0


class WarmupCosine(_Schedule):
    """Linear warm-up, then cosine decay to ``min_lr_ratio * lr`` at ``total_steps``.

    warmup: steps of warm-up, as a count (int >= 0) or a fraction of total_steps
    (a float in [0, 1)); 0 starts the cosine at once. Past total_steps the rate
    stays at its final value.
    """

    def __init__(self, optimizer: AdamW, total_steps: int, warmup: float | int = 0.1,
                 min_lr_ratio: float = 0.0) -> None:
        self.total_steps = check_int("total_steps", total_steps, 1)
        if isinstance(warmup, numbers.Integral) and not isinstance(warmup, bool):
            w = check_int("warmup", warmup, 0)
        else:
            w = int(_real("warmup", warmup, 0.0, 1.0, "in [0, 1) as a fraction (or an int "
                          "step count)", hi_open=True) * self.total_steps)
        if w >= self.total_steps:
            raise ValueError(f"warmup must be shorter than total_steps ({self.total_steps}), "
                             f"got {w} steps")
        self.warmup = w
        self.min_lr_ratio = _real("min_lr_ratio", min_lr_ratio, 0.0, 1.0, "in [0, 1]")
        super().__init__(optimizer)

    def factor(self, t: int) -> float:
        return warmup_cosine_factor(t, self.total_steps, self.warmup, self.min_lr_ratio)


class OneCycle(_Schedule):
    """One cycle: cosine rise from lr/div_factor to lr, then cosine fall to
    lr/(div_factor*final_div_factor) at step total_steps - 1."""

    def __init__(self, optimizer: AdamW, total_steps: int, pct_start: float = 0.3,
                 div_factor: float = 25.0, final_div_factor: float = 1e4) -> None:
        self.total_steps = check_int("total_steps", total_steps, 2)
        self.pct_start = _real("pct_start", pct_start, 0.0, 1.0, "in (0, 1)",
                               lo_open=True, hi_open=True)
        self.div_factor = _real("div_factor", div_factor, 1.0, math.inf, ">= 1")
        self.final_div_factor = _real("final_div_factor", final_div_factor, 1.0, math.inf,
                                      ">= 1")
        self.peak = float(self.pct_start * self.total_steps) - 1
        if self.peak <= 0 or self.peak >= self.total_steps - 1:
            raise ValueError(f"pct_start={pct_start} leaves no rise or no fall over "
                             f"{total_steps} steps")
        super().__init__(optimizer)

    def factor(self, t: int) -> float:
        return one_cycle_factor(t, self.total_steps, self.pct_start, self.div_factor,
                                self.final_div_factor)


class ReduceOnPlateau:
    """Multiply the optimizer's lr by ``factor`` after ``patience`` epochs in which
    the metric (lower is better) did not fall below best * (1 - threshold)."""

    def __init__(self, optimizer: AdamW, factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, min_lr: float = 0.0) -> None:
        if not hasattr(optimizer, "lr"):
            raise TypeError(f"optimizer must be an attnx.AdamW, got "
                            f"{type(optimizer).__name__}")
        self.optimizer = optimizer
        self.factor = _real("factor", factor, 0.0, 1.0, "in (0, 1)", lo_open=True,
                            hi_open=True)
        self.patience = check_int("patience", patience, 0)
        self.threshold = _real("threshold", threshold, 0.0, 1.0, "in [0, 1)", hi_open=True)
        self.min_lr = _real("min_lr", min_lr, 0.0, math.inf, ">= 0")
        self.best = math.inf
        self.bad_epochs = 0

    def step(self, metric: float) -> None:
        """Record one epoch's metric; lower the lr when it has stalled."""
        m = float(metric)
        if m < self.best * (1.0 - self.threshold):
            self.best, self.bad_epochs = m, 0
        else:
            self.bad_epochs += 1
        if self.bad_epochs > self.patience:
            new = max(self.optimizer.lr * self.factor, self.min_lr)
            # PyTorch skips changes smaller than 1e-8
            if self.optimizer.lr - new > 1e-8:
                self.optimizer.lr = new
            self.bad_epochs = 0

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "bad_epochs": self.bad_epochs, "lr": self.optimizer.lr}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.best = float(state["best"])
        self.bad_epochs = int(state["bad_epochs"])
        self.optimizer.lr = float(state["lr"])


def warmup_cosine_factor(t: int, total_steps: int, warmup: int,
                         min_lr_ratio: float = 0.0) -> float:
    """WarmupCosine's factor of step t (warmup in steps, < total_steps)."""
    if t < warmup:
        return (t + 1) / warmup
    k = min(t - warmup, total_steps - warmup)
    c = 0.5 * (1.0 + math.cos(math.pi * k / (total_steps - warmup)))
    return min_lr_ratio + (1.0 - min_lr_ratio) * c


def one_cycle_factor(t: int, total_steps: int, pct_start: float = 0.3,
                     div_factor: float = 25.0, final_div_factor: float = 1e4) -> float:
    """OneCycle's factor of step t."""
    peak = float(pct_start * total_steps) - 1
    start = 1.0 / div_factor
    end = start / final_div_factor
    t = min(t, total_steps - 1)
    if t <= peak:
        a, b, pct = start, 1.0, (t / peak if peak > 0 else 1.0)
    else:
        a, b = 1.0, end
        pct = (t - peak) / max(total_steps - 1 - peak, 1e-12)
    return b + (a - b) / 2.0 * (math.cos(math.pi * pct) + 1.0)


def estimator_schedule(kind: str, total_steps: int, warmup: float
                       ) -> Callable[[int], float] | None:
    """The factor of step t of an estimator's fit (lr_schedule, warmup as a fraction of
    its steps), or None for "constant". Short fits degrade gracefully: warm-up is at
    least one step and shorter than the fit; one_cycle needs 3 steps."""
    if kind == "constant":
        return None
    total = max(int(total_steps), 1)
    if kind == "warmup_cosine":
        w = min(max(int(warmup * total), 1), total - 1) if total > 1 else 0
        if w == 0:
            return lambda t: 1.0
        return lambda t: warmup_cosine_factor(t, total, w)
    if kind == "one_cycle":
        if total < 3:
            return lambda t: 1.0
        pct = min(max(warmup if warmup > 0 else 0.3, 1.5 / total), 1.0 - 1.0 / total)
        return lambda t: one_cycle_factor(t, total, pct)
    raise ValueError(f"lr_schedule must be 'constant', 'warmup_cosine' or 'one_cycle', "
                     f"got {kind!r}")


def _sum_squares(v: np.ndarray[Any, Any]) -> float:
    """v . v of a 1-D float64 array through numpy's own loop, not BLAS: BLAS's dot
    wakes its thread pool (numpy's OpenBLAS threads it from 10^4 values on), whose
    threads then spin beside attnx's OpenMP threads for every training step, and its
    value would depend on that pool's size."""
    return float(np.einsum("i,i->", v, v))


def clip_flat(flat: np.ndarray[Any, Any], max_norm: float,
              scratch: np.ndarray[Any, Any] | None = None) -> float:
    """clip_grad_norm over one flat gradient buffer (the estimators' hook). The norm
    is accumulated in float64: of a float32 buffer, through `scratch` (a float64 array
    of flat's size) when given, else through a copy made here."""
    if flat.dtype == np.float64:
        v = flat
    elif scratch is not None and scratch.shape == flat.shape and scratch.dtype == np.float64:
        np.copyto(scratch, flat)
        v = scratch
    else:
        v = flat.astype(np.float64)
    norm = math.sqrt(_sum_squares(v))
    scale = max_norm / (norm + 1e-6)
    if math.isfinite(norm) and scale < 1.0:
        flat *= flat.dtype.type(scale)
    return norm


def _flat_grads(grads: Mapping[str, Any]) -> list[np.ndarray[Any, Any]]:
    if isinstance(grads, ParamDict):
        return [grads.flat]
    if not isinstance(grads, Mapping) or not grads:
        raise TypeError("grads must be a model's .grads or a non-empty dict of name -> ndarray")
    out = []
    for k, g in grads.items():
        if (not isinstance(g, np.ndarray) or g.dtype not in (np.float32, np.float64)
                or not g.flags.writeable):
            raise TypeError(f"grads[{k!r}] must be a writeable float32 or float64 ndarray")
        out.append(g)
    return out


def global_norm(grads: Mapping[str, Any]) -> float:
    """The L2 norm of all gradients together, accumulated in float64."""
    total = 0.0
    for g in _flat_grads(grads):
        v = g.reshape(-1)
        total += _sum_squares(v.astype(np.float64, copy=False))
    return math.sqrt(total)


def clip_grad_norm(grads: Mapping[str, Any], max_norm: float) -> float:
    """Scale every gradient in place so that their global L2 norm is at most max_norm.

    Returns the norm before clipping. As PyTorch's ``clip_grad_norm_``, the scale is
    max_norm / (norm + 1e-6) when that is below 1, and nothing changes otherwise. A non-finite norm leaves
    the gradients unchanged (the optimizer's step then refuses them)."""
    mx = _real("max_norm", max_norm, 0.0, math.inf, "> 0", lo_open=True)
    norm = global_norm(grads)
    scale = mx / (norm + 1e-6)
    if math.isfinite(norm) and scale < 1.0:
        for g in _flat_grads(grads):
            g *= g.dtype.type(scale)
    return norm
