"""SequenceModel's instance normalisation (RevIN, attnx.kernels._revin), forward beside backward.

instance_norm="input": each input series (sequence b, channel c) is centred on its
mean over its valid steps and divided by std = sqrt(var + eps) (population variance,
eps = 1e-5 in X's units, as RevIN) before the stem / embedding; "revin": the same,
and the head's outputs are de-normalised, y = yn * std_c + mean_c, output j by
channel c(j) (`denorm_channels`). instance_affine=True adds RevIN's learnable
per-channel affine map: xn = xhat * gamma + beta, and the outputs come back with
y = (yn - beta) / (gamma + eps**2) * std + mean.

Series and steps: with instance_steps = p, each input row holds p consecutive steps
of the C = n_features / p channels, step-major (feature l * C + c is step l of
channel c: the estimators' patches), so the input (B, T, n_features) is read as
the series (B, T * p, C); a padded row pads its p steps.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..runtime._params import check_positive_int
from ..kernels._revin import RevIN

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..runtime._params import ParamDict
    from ..runtime._typing import AnyArray, FloatArray

    _U8Array = npt.NDArray[np.uint8]

    class NormBuffers(Protocol):
        """What the instance normalisation reads and writes of a SequenceModel's buffers
        (attnx.layers._sequence_buffers._Buffers)."""

        @property
        def x(self) -> FloatArray: ...
        @property
        def xn(self) -> FloatArray | None: ...
        @property
        def yn(self) -> FloatArray | None: ...
        @property
        def rst(self) -> FloatArray | None: ...
        @property
        def rmask(self) -> AnyArray | None: ...
        @property
        def dy(self) -> FloatArray: ...
        @property
        def dxn(self) -> FloatArray | None: ...
        @property
        def rdx(self) -> FloatArray | None: ...
        @property
        def rdy(self) -> FloatArray | None: ...
        @property
        def rdst(self) -> FloatArray | None: ...


MODES = (None, "input", "revin")
#: the RevIN kernel (eps 1e-5, eps2 = eps**2, as the reference RevIN)
KERNEL = RevIN()


def check(mode: object, affine: object, steps: object, n_features: int, n_outputs: int
          ) -> tuple[str | None, bool, int]:
    """(instance_norm, instance_affine, instance_steps) validated; TypeError or
    ValueError naming the argument, and for "revin" an output rule that does not fit."""
    for m in MODES:
        if mode is m or (isinstance(mode, str) and mode == m):
            break
    else:
        raise ValueError(f"instance_norm must be one of {MODES}, got {mode!r}")
    if not isinstance(affine, (bool, np.bool_)):
        raise TypeError(f"instance_affine must be True or False, got {affine!r}")
    if affine and m is None:
        raise ValueError("instance_affine=True needs instance_norm 'input' or 'revin' (the "
                         "affine map follows the normalisation), got instance_norm=None")
    p = check_positive_int("instance_steps", steps)
    if n_features % p:
        raise ValueError(f"instance_steps={p} must divide n_features={n_features} (each "
                         f"input row holds instance_steps steps of the channels)")
    if m == "revin":
        denorm_channels(n_features // p, n_outputs)
    return m, bool(affine), p


def denorm_channels(c: int, n_outputs: int) -> int:
    """The channels the de-normalisation reads: output j <- channel j when
    n_outputs == c, every output <- channel 0 when c == 1; ValueError otherwise."""
    if n_outputs != c and c != 1:
        raise ValueError(f"instance_norm='revin' de-normalises output j by input channel j "
                         f"(n_outputs == channels) or every output by the single channel "
                         f"(channels == 1); got n_outputs={n_outputs} and {c} channels; "
                         f"use instance_norm='input' (no de-normalisation)")
    return c


def param_layout(mode: str | None, affine: bool, c: int) -> list[tuple[str, tuple[int, ...]]]:
    """revin.g, revin.b (C,) each, next to each other (the kernel reads them as one
    (2, C) array), when instance_affine."""
    return [("revin.g", (c,)), ("revin.b", (c,))] if mode is not None and affine else []


def init(w: dict[str, FloatArray]) -> None:
    """gamma 1, beta 0 (no random draw: models without them start as before)."""
    if "revin.g" in w:
        w["revin.g"][...] = 1
        w["revin.b"][...] = 0


def pair(params: ParamDict) -> FloatArray | None:
    """The (2, C) view [gamma; beta] over revin.g and revin.b of a model's params (or
    grads), neighbours in the flat buffer; None without the affine map."""
    g = params.get("revin.g")
    if g is None:
        return None
    flat = params.flat
    start = (g.__array_interface__["data"][0] - flat.__array_interface__["data"][0]) \
        // flat.itemsize
    return flat[start:start + 2 * g.size].reshape(2, g.size)


def buffer_shapes(mode: str | None, affine: bool, steps: int, n_features: int,
                  n_outputs: int, nb: int, t: int, rows: int
                  ) -> tuple[dict[str, list[tuple[int, ...]]],
                             dict[str, list[tuple[int, ...]]]]:
    """Forward and backward buffers: xn (the normalised input), rst (2, B, C) the
    series' mean and std, yn (the head's output before the de-normalisation, revin);
    dxn (dL/dxn), rdx (dL/dX when the caller wants none: the affine map's gradient
    still needs the pass), rdy (dL/dyn) and rdst (dL/d mean, std) for revin.
    `rows` are the head's output rows."""
    c, f = n_features // steps, n_features
    on, revin = mode is not None, mode == "revin"
    forward: dict[str, list[tuple[int, ...]]] = {
        "xn": [(nb * t, f)] if on else [], "rst": [(2, nb, c)] if on else [],
        "yn": [(rows, n_outputs)] if revin else []}
    backward: dict[str, list[tuple[int, ...]]] = {
        "dxn": [(nb * t, f)] if on else [], "rdx": [(nb * t, f)] if on and affine else [],
        "rdy": [(rows, n_outputs)] if revin else [],
        "rdst": [(2, nb, c)] if revin else []}
    return forward, backward


class InstanceNorm:
    """A model's instance normalisation ("input" or "revin") run on its buffers
    (NormBuffers), forward beside backward: the input rows hold `steps` steps of
    `channels` channels each; the affine map's weights and gradients are (2, C) views
    (`pair`) of the model's params and grads, None without the map."""

    def __init__(self, mode: str, steps: int, channels: int, params: ParamDict,
                 grads: ParamDict) -> None:
        self.revin = mode == "revin"
        self.steps, self.channels = steps, channels
        self.coef, self.dcoef = pair(params), pair(grads)

    def needs_dxn(self, input_grad: bool) -> bool:
        """Whether backward runs down to the normalised input: for dL/dX, or for the
        affine map's gradient."""
        return input_grad or self.coef is not None

    def step_mask(self, b: NormBuffers, km: _U8Array | None, nb: int) -> _U8Array | None:
        """The series' (B, T * p) padding mask from the rows' (B, T) one."""
        if km is None or self.steps == 1:
            return km
        assert b.rmask is not None
        b.rmask.reshape(nb, -1, self.steps)[...] = km[:, :, None]
        return b.rmask

    def forward(self, b: NormBuffers, km: _U8Array | None, nb: int, nth: int) -> FloatArray:
        """b.xn and b.rst from b.x; returns the normalised input (B * T, n_features)."""
        assert b.xn is not None and b.rst is not None
        c = self.channels
        KERNEL.forward(b.x.reshape(nb, -1, c), self.step_mask(b, km, nb), self.coef,
                       b.xn.reshape(nb, -1, c), b.rst, nth, check=False)
        return b.xn

    def denorm(self, b: NormBuffers, nb: int, y2: FloatArray, nth: int) -> None:
        """y2 (the head's rows) = the de-normalised b.yn."""
        assert b.yn is not None and b.rst is not None
        c = self.channels
        KERNEL.denorm(b.yn.reshape(nb, -1, c), self.coef, b.rst, y2.reshape(nb, -1, c), nth,
                      check=False)

    def denorm_backward(self, b: NormBuffers, nb: int, nth: int) -> FloatArray:
        """dL/dyn (b.rdy) and dL/d(mean, std) (b.rdst) from b.dy; the affine map's
        gradient written (not added). Returns b.rdy."""
        assert b.yn is not None and b.rst is not None and b.rdy is not None
        assert b.rdst is not None
        c = self.channels
        KERNEL.denorm_backward(b.dy.reshape(nb, -1, c), b.yn.reshape(nb, -1, c), self.coef,
                               b.rst, b.rdy.reshape(nb, -1, c), self.dcoef, b.rdst,
                               accumulate=False, nthreads=nth, check=False)
        return b.rdy

    def backward(self, b: NormBuffers, km: _U8Array | None, nb: int, nth: int,
                 dx2: FloatArray | None) -> None:
        """dL/dX into dx2 (or scratch when None) from b.dxn (km: the forward's; its
        series mask b.rmask is still the forward's), through the statistics
        (and, with revin, the gradients b.rdst reaching them from the outputs); the
        affine map's gradient added to the de-normalisation's (revin) or written."""
        assert b.dxn is not None and b.rst is not None
        c = self.channels
        dx = dx2 if dx2 is not None else b.rdx
        assert dx is not None
        KERNEL.backward(b.dxn.reshape(nb, -1, c), b.x.reshape(nb, -1, c),
                        km if km is None or self.steps == 1 else b.rmask, self.coef, b.rst,
                        b.rdst if self.revin else None, dx.reshape(nb, -1, c), self.dcoef,
                        accumulate=self.revin, nthreads=nth, check=False)
