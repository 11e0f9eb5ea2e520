"""AdamW optimizer over flat parameter buffers."""
from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable, cast

import numpy as np

from ..kernels._optim import adamw_step, adamw_step_runs
from ..runtime._threads import threads_for
from ..runtime._params import ParamDict
from ..runtime._validate import finite

if TYPE_CHECKING:
    from ..runtime._typing import FloatArray


class AdamW:
    """AdamW with bias-corrected moments and decoupled weight decay.

    For each parameter p with gradient g, at step t = 1, 2, ...:
        p <- p * (1 - lr * weight_decay)
        m <- beta1 m + (1 - beta1) g
        v <- beta2 v + (1 - beta2) g^2
        p <- p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

    This is torch.optim.AdamW's rule. Some write-ups of Adam put eps inside the
    square root (sqrt(v_hat + eps)); attnx follows torch (eps added to
    sqrt(v_hat)) so that results match it step for step.

    params: a model's `params` (one kernel call over its flat buffer), or any
    dict of C-contiguous writeable float arrays of one dtype.
    decay: which parameters weight_decay applies to: "all" (the default, as
    torch.optim.AdamW over one parameter group), "matrices" (the weight matrices of
    linear maps: arrays of 2 or more dimensions, except position tables, whose names
    start with "pos."; biases, norm gains and tokens are not decayed, the usual
    transformer recipe), or a callable (name, array) -> bool. Over a model's flat
    buffer, each run of neighbouring parameters with the same decay is one kernel call.
    """

    def __init__(self, params: Mapping[str, FloatArray], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01, *,
                 decay: str | Callable[[str, FloatArray], bool] = "all") -> None:
        self.lr, self.betas, self.eps, self.weight_decay = _check_hyper(lr, betas, eps,
                                                                        weight_decay)
        self.decay = decay
        decides = _decay_rule(decay)
        if not isinstance(params, Mapping) or not params:
            raise TypeError("params must be a non-empty dict of name -> ndarray "
                            "(a model's .params)")
        self._keys = tuple(params)
        self._shapes = {k: np.shape(v) for k, v in params.items()}
        if isinstance(params, ParamDict):
            self._bufs: list[FloatArray] = [params.flat]
        else:
            bufs: list[FloatArray] = []
            for k, v in params.items():
                if (not isinstance(v, np.ndarray) or v.dtype not in (np.float32, np.float64)
                        or not v.flags.c_contiguous or not v.flags.writeable):
                    raise TypeError(f"params[{k!r}] must be a writeable C-contiguous float32 "
                                    f"or float64 ndarray")
                bufs.append(v.reshape(-1))
            if len({b.dtype for b in bufs}) > 1:
                raise TypeError("all params must share one dtype")
            self._bufs = bufs
        self._flat = isinstance(params, ParamDict)
        # per buffer: runs (start, stop, decayed) of neighbouring values
        if isinstance(params, ParamDict):
            self._runs = [_runs(params, decides)]
        else:
            self._runs = [[(0, b.shape[0], bool(decides(k, params[k])))]
                          for k, b in zip(self._keys, self._bufs)]
        self._run_tables = [np.array(r, dtype=np.int64).reshape(-1, 3) for r in self._runs]
        # per buffer: whether every run fits one thread (one kernel call over the runs)
        self._small = [all(z - a < 1 << 17 for a, z, _ in r) for r in self._runs]
        self.m = [np.zeros_like(b) for b in self._bufs]
        # the thread policy's measure of a step (memory-bound: ~32 multiply-adds of a
        # product per value), fixed with the buffers
        self._step_macs = 32.0 * sum(b.size for b in self._bufs)
        self.v = [np.zeros_like(b) for b in self._bufs]
        self.t = 0
        self._checked: ParamDict | None = None   # the model's grads, once checked

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_checked"] = None   # a cache, not state: the grads are checked again
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._checked = None
        if "_small" not in state:   # pickled before the per-buffer flag existed
            self._small = [all(z - a < 1 << 17 for a, z, _ in r) for r in self._runs]
        if "_step_macs" not in state:   # pickled before the thread policy measured steps
            self._step_macs = 32.0 * sum(b.size for b in self._bufs)

    def _grad_buffers(self, grads: Mapping[str, Any]) -> list[FloatArray]:
        if grads is self._checked:   # a ParamDict's keys and flat buffer are fixed
            return [grads.flat]
        if not isinstance(grads, Mapping) or set(grads) != set(self._keys):
            raise ValueError(f"grads must have the keys of params {list(self._keys)}, got "
                             f"{list(grads) if isinstance(grads, Mapping) else type(grads).__name__}")
        if self._flat and isinstance(grads, ParamDict) and grads.flat.shape == self._bufs[0].shape:
            self._checked = grads
            return [grads.flat]
        if self._flat:
            raise ValueError("grads must be the model's .grads when params is the model's .params")
        out: list[FloatArray] = []
        for k, b in zip(self._keys, self._bufs):
            g = np.ascontiguousarray(grads[k], dtype=b.dtype)
            if g.shape != self._shapes[k]:
                raise ValueError(f"grads[{k!r}] must have shape {self._shapes[k]}, got {g.shape}")
            out.append(g.reshape(-1))
        return out

    def step(self, grads: Mapping[str, Any]) -> None:
        """Update every parameter in place from `grads` (same keys as params)."""
        gbufs = self._grad_buffers(grads)
        for g in gbufs:
            if not finite(g):
                raise FloatingPointError("gradient contains NaN or infinity; step skipped "
                                         "(the parameters are unchanged)")
        self.t += 1
        b1, b2 = self.betas
        nthreads = threads_for(self._step_macs)
        for p, g, m, v, runs, table, small in zip(self._bufs, gbufs, self.m, self.v,
                                                  self._runs, self._run_tables, self._small):
            if nthreads == 1 or small:
                # every run on one thread: one call over the runs
                adamw_step_runs(p, g, m, v, self.lr, b1, b2, self.eps, self.weight_decay,
                                self.t, table)
                continue
            for a, z, decayed in runs:
                wd = self.weight_decay if decayed else 0.0
                # threads only for buffers worth splitting (slabs of 2**16 elements)
                nth = nthreads if z - a >= 1 << 17 else 1
                if a == 0 and z == p.shape[0]:
                    adamw_step(p, g, m, v, self.lr, b1, b2, self.eps, wd, self.t, nth)
                else:
                    adamw_step(p[a:z], g[a:z], m[a:z], v[a:z], self.lr, b1, b2, self.eps,
                               wd, self.t, nth)

    def state_dict(self) -> dict[str, Any]:
        """Step count and moment buffers (copies), for saving."""
        return {"t": self.t, "m": [m.copy() for m in self.m], "v": [v.copy() for v in self.v]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if len(state["m"]) != len(self.m) or any(
                a.shape != b.shape for a, b in zip(state["m"] + state["v"], self.m + self.v)):
            raise ValueError("optimizer state does not match these parameters")
        self.t = int(state["t"])
        for dst, src in zip(self.m + self.v, list(state["m"]) + list(state["v"])):
            dst[...] = src


def _decay_rule(decay: object) -> Callable[[str, FloatArray], bool]:
    if decay == "all":
        return lambda name, a: True
    if decay == "matrices":
        return lambda name, a: a.ndim >= 2 and not name.startswith("pos.")
    if callable(decay):
        return cast("Callable[[str, FloatArray], bool]", decay)
    raise ValueError(f"decay must be 'all', 'matrices' or a callable (name, array) -> bool, "
                     f"got {decay!r}")


def _runs(params: ParamDict, decides: Callable[[str, FloatArray], bool]
          ) -> list[tuple[int, int, bool]]:
    """(start, stop, decayed) runs covering the flat buffer, neighbours of one kind merged
    (values that belong to no named parameter are decayed like their left neighbour)."""
    flat = params.flat
    base = flat.__array_interface__["data"][0]
    spans = []
    for k, a in params.items():
        start = (a.__array_interface__["data"][0] - base) // flat.itemsize
        spans.append((start, start + a.size, bool(decides(k, a))))
    spans.sort()
    runs: list[tuple[int, int, bool]] = []
    for a, z, d in spans:
        if runs and runs[-1][2] == d:
            runs[-1] = (runs[-1][0], z, d)
        elif runs:
            runs[-1] = (runs[-1][0], a, runs[-1][2])
            runs.append((a, z, d))
        else:
            runs.append((0, z, d))
    if runs:
        runs[-1] = (runs[-1][0], flat.shape[0], runs[-1][2])
    return runs


def _check_hyper(lr: object, betas: Any, eps: object,
                 weight_decay: object) -> tuple[float, tuple[float, float], float, float]:
    def real(name: str, v: object) -> float:
        f = float("nan")
        if not isinstance(v, bool) and isinstance(v, numbers.Real):
            try:  # float() first: np.isfinite rejects reals numpy has no dtype for (Fraction)
                f = float(v)
            except OverflowError:  # an int beyond the float range
                pass
        if not np.isfinite(f):
            raise TypeError(f"{name} must be a finite real number, got {v!r}")
        return f

    lr = real("lr", lr)
    if lr < 0:
        raise ValueError(f"lr must be >= 0, got {lr}")
    try:
        b1, b2 = betas
    except (TypeError, ValueError) as exc:
        raise TypeError(f"betas must be a pair (beta1, beta2), got {betas!r}") from exc
    b1, b2 = real("betas[0]", b1), real("betas[1]", b2)
    if not (0 <= b1 < 1 and 0 <= b2 < 1):
        raise ValueError(f"betas must lie in [0, 1), got {(b1, b2)}")
    eps = real("eps", eps)
    if eps <= 0:
        raise ValueError(f"eps must be > 0, got {eps}")
    wd = real("weight_decay", weight_decay)
    if wd < 0:
        raise ValueError(f"weight_decay must be >= 0, got {wd}")
    return lr, (b1, b2), eps, wd
