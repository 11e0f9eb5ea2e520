"""Targets of the estimators: regression targets and class labels as training Data,
label encoding and class weights."""
from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _sequences as seqs

if TYPE_CHECKING:
    from collections.abc import Callable

    from numpy.typing import DTypeLike, NDArray

    from ..runtime._typing import AnyArray, BoolArray, FloatArray, IntArray

    F64Array = NDArray[np.float64]


def bare_data(x: FloatArray, y: Any, w: F64Array | None, dtype: DTypeLike) -> seqs.Data:
    """Data for the bare X -> Y model: y of X's own shape (n, seq_len, n_features)."""
    yv = seqs._real("y", y)
    if yv.shape != x.shape:
        raise ValueError(f"y must have the shape of X {x.shape} (n_samples, seq_len, "
                         f"n_features) for this model, got {yv.shape}")
    return seqs.Data(x, None, seqs.cast("y", yv, dtype), w, True)


def regression_data(x: FloatArray, lengths: IntArray | None, ragged: bool, y: Any,
                    w: F64Array | None, dtype: DTypeLike
                    ) -> tuple[seqs.Data, bool, int | None]:
    """(Data, per_position, k) for the sequence model's regression targets; padded
    positions of ragged per-position targets weigh 0."""
    yv, per_position, k = seqs.regression_targets(y, x, lengths, ragged, dtype)
    if per_position and lengths is not None:  # ragged
        valid = seqs.valid_positions(lengths, x.shape[1]).astype(np.float64)
        w = valid if w is None else valid * w[:, None]
    return seqs.Data(x, lengths, yv, w, per_position), per_position, k


def labels(x: FloatArray, lengths: IntArray | None, ragged: bool, y: Any
           ) -> tuple[AnyArray, bool, BoolArray | None, AnyArray]:
    """(labels, per_position, valid positions or None, the labels really seen)."""
    lab, per_position = seqs.labels(y, x, lengths, ragged)
    seqs.check_labels_finite(lab)
    valid = (seqs.valid_positions(lengths, x.shape[1])
             if (lengths is not None and per_position) else None)
    seen = lab[valid] if valid is not None else lab.ravel()
    return lab, per_position, valid, seen


def label_data(x: FloatArray, lengths: IntArray | None, lab: AnyArray, per_position: bool,
               valid: BoolArray | None, classes: AnyArray, w: F64Array | None,
               class_weight: Callable[[], F64Array | None]) -> seqs.Data:
    """Data of class indices, weighted by sample_weight x class_weight() (zero on
    padded positions); None weights when every label weighs 1."""
    codes = encode(lab, classes, valid)
    cw = class_weight()
    t = x.shape[1]
    if cw is None and w is None and valid is None:
        weights = None
    else:
        weights = np.ones(lab.shape) if w is None else (
            w[:, None] * np.ones((1, t)) if per_position else w.copy())
        if cw is not None:
            weights = weights * cw[codes]
        if valid is not None:
            weights = weights * valid
        if not (weights > 0).any():
            raise ValueError("sample_weight and class_weight give every label a weight "
                             "of zero: nothing to learn from")
    return seqs.Data(x, lengths, codes, weights, per_position)


def unique_labels(name: str, labels: AnyArray) -> AnyArray:
    """The sorted distinct labels (classes_); y must hold at least 2."""
    try:
        classes = np.unique(labels)
    except TypeError as exc:
        raise TypeError(f"{name} must hold labels of one sortable type, got {exc}") from exc
    if classes.size < 2 and name == "y":
        raise ValueError(f"y holds a single class {list(classes)!r}: a classifier needs at "
                         f"least 2")
    return classes


def encode(lab: AnyArray, classes: AnyArray, valid: BoolArray | None) -> IntArray:
    """Class indices (int64) of the labels; ValueError naming y for unseen labels."""
    codes = np.searchsorted(classes, lab)
    codes = np.clip(codes, 0, len(classes) - 1)
    bad = classes[codes] != lab
    if valid is not None:
        bad &= valid
    if np.any(bad):
        unseen = np.unique(np.asarray(lab)[bad])[:5]
        raise ValueError(f"y holds labels not among classes_ {list(classes)!r}: "
                         f"{list(unseen)!r}")
    return codes.astype(np.int64)


def class_weights(cw: Any, classes: AnyArray, seen: AnyArray,
                  allsum: Callable[[F64Array], F64Array]) -> F64Array | None:
    """Weight per class (classes order) for class_weight: None, "balanced" (from the
    labels seen, summed over the ranks by `allsum`) or a dict label -> weight."""
    if cw is None:
        return None
    c = len(classes)
    if isinstance(cw, str) and cw == "balanced":
        # from the labels being fitted: fit's y, or each partial_fit call's own y
        counts = np.array([np.count_nonzero(seen == k) for k in classes], float)
        counts = allsum(counts)  # with comm: every rank's labels
        out: F64Array = np.where(counts > 0, counts.sum() / (c * np.maximum(counts, 1)), 0.0)
        return out
    if isinstance(cw, dict):
        out = np.ones(c)
        for label, weight in cw.items():
            hit = np.flatnonzero(classes == label)
            if hit.size == 0:
                raise ValueError(f"class_weight names the label {label!r}, which is not "
                                 f"among the classes {list(classes)!r}")
            if isinstance(weight, bool) or not isinstance(weight, numbers.Real) \
                    or not math.isfinite(weight) or weight < 0:
                raise ValueError(f"class_weight[{label!r}] must be a finite number >= 0, "
                                 f"got {weight!r}")
            out[hit[0]] = float(weight)
        return out
    raise ValueError(f"class_weight must be None, 'balanced' or a dict label -> weight, "
                     f"got {cw!r}")
