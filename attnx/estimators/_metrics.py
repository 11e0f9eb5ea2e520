"""Regression metrics over sequence outputs, computed in float64.

Arrays (n, T, d) are seen as n*T rows (one per sample and position) and d
outputs, as scikit-learn's multi-output metrics would see Y.reshape(-1, d).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, cast

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

    F64Array = npt.NDArray[np.float64]


def _rows(y_true: npt.ArrayLike, y_pred: npt.ArrayLike) -> tuple[F64Array, F64Array]:
    t = np.asarray(y_true, dtype=np.float64)
    p = np.asarray(y_pred, dtype=np.float64)
    if t.shape != p.shape:
        raise ValueError(f"y_pred must have the shape of y_true {t.shape}, got {p.shape}")
    if t.ndim == 0 or t.size == 0:
        raise ValueError(f"metrics need a non-empty array, got shape {t.shape}")
    if t.ndim == 1:  # one output per row
        return t.reshape(-1, 1), p.reshape(-1, 1)
    return t.reshape(-1, t.shape[-1]), p.reshape(-1, p.shape[-1])


def r2_per_output(y_true: npt.ArrayLike, y_pred: npt.ArrayLike,
                  sample_weight: npt.ArrayLike | None = None) -> F64Array:
    """R^2 of each output feature: (d,) float64.

    A constant target feature scores 1 when predicted exactly, else 0
    (scikit-learn's force_finite convention). sample_weight: one weight per row.
    """
    t, p = _rows(y_true, y_pred)
    if sample_weight is None:
        ss_res = ((t - p) ** 2).sum(axis=0)
        ss_tot = ((t - t.mean(axis=0)) ** 2).sum(axis=0)
    else:
        w = np.asarray(sample_weight, dtype=np.float64).reshape(-1, 1)
        if w.shape[0] != t.shape[0]:
            raise ValueError(f"sample_weight must have one weight per row ({t.shape[0]}), "
                             f"got {w.shape[0]}")
        ss_res = (w * (t - p) ** 2).sum(axis=0)
        mean = (w * t).sum(axis=0) / w.sum()
        ss_tot = (w * (t - mean) ** 2).sum(axis=0)
    r2 = np.where(ss_res == 0, 1.0, 0.0)
    ok = ss_tot > 0
    r2[ok] = 1.0 - ss_res[ok] / ss_tot[ok]
    return r2


def r2_score(y_true: npt.ArrayLike, y_pred: npt.ArrayLike,
             sample_weight: npt.ArrayLike | None = None) -> float:
    """Uniform average of r2_per_output (scikit-learn's r2_score, multioutput default)."""
    return float(r2_per_output(y_true, y_pred, sample_weight).mean())


def mae_per_output(y_true: npt.ArrayLike, y_pred: npt.ArrayLike) -> F64Array:
    """Mean absolute error of each output feature: (d,) float64."""
    t, p = _rows(y_true, y_pred)
    return cast("F64Array", np.abs(t - p).mean(axis=0))  # numpy types mean(axis=...) as Any
