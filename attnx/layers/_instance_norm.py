"""SequenceModel's instance normalisation (RevIN, attnx.kernels._revin): its options checked
and its kernel; the stage that runs it, forward beside backward, is
attnx.layers.stages.InstanceNorm.

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

import numpy as np

from ..runtime._params import check_positive_int
from ..kernels._revin import RevIN

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
