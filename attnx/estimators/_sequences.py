"""Estimator inputs: dense or ragged sequences, regression targets, class labels, weights.

A dense X is an array (n, T, n_features). A ragged X is a list of 2-D arrays
(T_i, n_features) of different lengths; it is padded on the right to the longest
T_i and described by `lengths`, and the model masks the padded keys. With
missing="mask" a time step holding NaN in any channel is masked as padding is
(`missing`: (n, T) bool, True at such steps), its values read as 0.
"""
from __future__ import annotations

import numbers
import typing
from typing import TYPE_CHECKING, Any, NamedTuple, TypeGuard

import numpy as np

from ..runtime._validate import as_real, finite

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..runtime._typing import AnyArray, BoolArray, FloatArray, IntArray

    F64Array = npt.NDArray[np.float64]

# a real array, checked (attnx.runtime._validate.as_real); the estimators call it by this name
_real = as_real


class Data:
    """Validated training data in the model's dtype.

    x: (n, T, f) C-contiguous (ragged input right-padded with zeros); lengths: (n,)
    int64 for ragged input, else None; y: targets, (n, k) / (n, T, k) floats or (n,) /
    (n, T) int64 class indices; w: float64 loss weights of y's leading shape
    ((n,) or (n, T), zero on padding), or None when all are 1; per_position: whether
    y has a position axis; missing: (n, T) bool, True at the masked (NaN) positions
    of missing="mask" (padding is told by lengths), or None when there are none.
    """

    def __init__(self, x: FloatArray, lengths: IntArray | None, y: AnyArray,
                 w: F64Array | None, per_position: bool,
                 missing: BoolArray | None = None) -> None:
        self.x, self.lengths, self.y, self.w = x, lengths, y, w
        self.per_position = per_position
        self.missing = missing

    @property
    def n(self) -> int:
        return int(self.x.shape[0])

    def take(self, idx: IntArray) -> Data:
        """The samples idx (sorted), for the validation split."""
        lengths = None if self.lengths is None else self.lengths[idx]
        return Data(self.x[idx], lengths, self.y[idx],
                    None if self.w is None else self.w[idx], self.per_position,
                    None if self.missing is None else self.missing[idx])

    def padded(self, t: int) -> Data:
        """Ragged data padded with zeros (weight 0) to t positions (with comm: a
        rank's shard padded to the longest sequence of any rank)."""
        def pad(a: AnyArray) -> AnyArray:
            if a.ndim < 2 or a.shape[1] >= t:
                return a
            out = np.zeros((a.shape[0], t) + a.shape[2:], a.dtype)
            out[:, :a.shape[1]] = a
            return out

        per = self.per_position
        return Data(pad(self.x), self.lengths, pad(self.y) if per else self.y,
                    None if self.w is None else (pad(self.w) if per else self.w), per,
                    None if self.missing is None else pad(self.missing))


def is_ragged(X: object) -> TypeGuard[list[Any] | tuple[Any, ...]]:
    """True for a list/tuple of arrays (the ragged form), False for anything array-like."""
    if not isinstance(X, (list, tuple)) or len(X) == 0:
        return False
    if all(isinstance(e, np.ndarray) for e in X):
        return True
    try:
        shapes = {np.shape(e) for e in X}
    except ValueError:  # elements of inhomogeneous shapes themselves
        return True
    return len(shapes) > 1


def cast(name: str, a: AnyArray, dtype: npt.DTypeLike) -> FloatArray:
    """a as a C-contiguous array of dtype; ValueError naming `name` on NaN or infinity."""
    with np.errstate(over="ignore"):  # too large for float32: reported just below
        c = np.ascontiguousarray(a, dtype=dtype)
    if not finite(c):
        where = "" if a.dtype == dtype else f" (after conversion to {np.dtype(dtype)})"
        raise ValueError(f"{name} contains NaN or infinity{where}")
    return c


#: the estimators' `layout` values: attnx's own (n_samples, seq_len, n_features), and
#: aeon's / sktime's (n_cases, n_channels, n_timepoints) with its list of (C, T_i) arrays
LAYOUTS = ("ntc", "nct")

#: the estimators' `missing` values: NaN in X is an error, or its time steps are masked
MISSING = ("error", "mask")


class Sequences(NamedTuple):
    """X validated by `sequences`: x (n, T, f) padded, lengths (n,) for ragged X (else
    None), ragged, and missing: (n, T) bool, True at the time steps that held NaN
    (missing="mask"; their values in x are 0), or None when no step did."""

    x: FloatArray
    lengths: IntArray | None
    ragged: bool
    missing: BoolArray | None


def sequences(name: str, X: object, dtype: npt.DTypeLike, n_features: int | None = None,
              allow_empty: bool = False, layout: str = "ntc", missing: str = "error"
              ) -> Sequences:
    """X as a padded (n, T, f) array of dtype (a copy only when needed: the caller's
    arrays are never written), lengths (n,) for ragged X, and the NaN steps.
    layout "nct": X is (n, channels, T), or a list of (channels, T_i) arrays.
    missing "error": NaN or infinity is a ValueError; "mask": a time step with NaN in
    any channel is masked (see missing_steps), infinity stays a ValueError."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if missing not in MISSING:
        raise ValueError(f"missing must be one of {MISSING}, got {missing!r}")
    nct = layout == "nct"
    if is_ragged(X):
        seqs: list[AnyArray] = []
        for i, e in enumerate(X):
            s = as_real(f"{name}[{i}]", e)
            if s.ndim != 2:
                want = "(n_channels, n_timepoints)" if nct else "(seq_len, n_features)"
                raise ValueError(f"{name}[{i}] must be a 2-D array {want}, "
                                 f"got shape {s.shape}")
            if nct:
                s = s.T
            if s.shape[0] == 0:
                raise ValueError(f"{name}[{i}] is an empty sequence (shape {s.shape}): every "
                                 f"sequence needs at least one position")
            f = seqs[0].shape[1] if seqs else s.shape[1]
            if s.shape[1] != f:
                raise ValueError(f"{name}[{i}] has {s.shape[1]} features, {name}[0] has {f}: "
                                 f"every sequence needs the same n_features")
            seqs.append(s)
        lengths = np.array([s.shape[0] for s in seqs], dtype=np.int64)
        x = np.zeros((len(seqs), int(lengths.max()), seqs[0].shape[1]), dtype)
        for i, s in enumerate(seqs):
            with np.errstate(over="ignore"):
                x[i, :s.shape[0]] = s
        where = "" if all(s.dtype == dtype for s in seqs) else \
            f" (after conversion to {np.dtype(dtype)})"
        x, nan = missing_steps(name, x, lengths, missing, where)
        _check_features(name, x, n_features, nct)
        return Sequences(x, lengths, True, nan)
    x = as_real(name, X)
    if x.ndim != 3:
        if nct:
            raise ValueError(f"{name} must be a 3-D array (n_cases, n_channels, n_timepoints) "
                             f"or a list of 2-D arrays (n_channels, n_timepoints) "
                             f"(layout='nct'), got shape {x.shape}")
        raise ValueError(f"{name} must be a 3-D array (n_samples, seq_len, n_features) or a "
                         f"list of 2-D arrays (seq_len, n_features), got shape {x.shape}")
    if nct:
        x = x.transpose(0, 2, 1)
    _check_features(name, x, n_features, nct)
    if not allow_empty and min(x.shape) == 0:
        raise ValueError(f"{name} is empty: shape {x.shape}")
    with np.errstate(over="ignore"):  # too large for float32: reported as infinity
        c = np.ascontiguousarray(x, dtype=dtype)
    where = "" if x.dtype == dtype else f" (after conversion to {np.dtype(dtype)})"
    c, nan = missing_steps(name, c, None, missing, where)
    return Sequences(c, None, False, nan)


def missing_steps(name: str, x: FloatArray, lengths: IntArray | None, missing: str,
                  where: str) -> tuple[FloatArray, BoolArray | None]:
    """(x, missing) for x (n, T, f) of the model's dtype, padding (past `lengths`) 0.

    missing="error": ValueError naming `name` on NaN or infinity. missing="mask": a
    time step with NaN in any of its channels is missing as a whole (the simplest
    honest rule: a step is either observed or not); x is returned as a copy with
    those steps 0 (the caller's array is never written) and the (n, T) mask of them
    (None when no step holds NaN). Infinity stays a ValueError, and so does a
    sequence whose every step holds NaN (it names the sequence)."""
    if finite(x):
        return x, None
    if missing == "error":
        raise ValueError(f"{name} contains NaN or infinity{where} (missing='mask' masks the "
                         f"time steps that hold NaN)")
    if np.isinf(x).any():
        raise ValueError(f"{name} contains infinity{where}: missing='mask' masks the time "
                         f"steps that hold NaN, infinity stays an error")
    nan = typing.cast("BoolArray", np.isnan(x).any(axis=2))
    empty = np.all(nan if lengths is None else nan | ~valid_positions(lengths, x.shape[1]),
                   axis=1)
    if empty.any():
        i = int(np.flatnonzero(empty)[0])
        raise ValueError(f"{name}[{i}] holds NaN at every time step: missing='mask' needs at "
                         f"least one step without NaN in each sequence "
                         f"({int(empty.sum())} such sequence(s))")
    return np.where(nan[:, :, None], x.dtype.type(0), x), nan


def _check_features(name: str, x: AnyArray, n_features: int | None,
                    nct: bool = False) -> None:
    if n_features is not None and x.shape[2] != n_features and nct:
        raise ValueError(f"{name} must have {n_features} channels (n_cases, {n_features}, "
                         f"n_timepoints) as the data the model was fitted on, got "
                         f"{x.shape[2]} (shape {(x.shape[0], x.shape[2], x.shape[1])})")
    if n_features is not None and x.shape[2] != n_features:
        raise ValueError(f"{name} must have {n_features} features (n_samples, seq_len, "
                         f"{n_features}) as the data the model was fitted on, got "
                         f"{x.shape[2]} (shape {x.shape})")


def per_position_list(y: object, ragged: bool) -> TypeGuard[list[Any] | tuple[Any, ...]]:
    """True when y is the ragged form of per-position targets: a list of arrays."""
    return ragged and isinstance(y, (list, tuple)) and len(y) > 0 and np.ndim(y[0]) >= 1


def regression_targets(y: object, x: FloatArray, lengths: IntArray | None, ragged: bool,
                       dtype: npt.DTypeLike) -> tuple[FloatArray, bool, int | None]:
    """(y array, per_position, k or None): y (n,) or (n, k) per sequence, (n, T, k) per
    position, or for ragged X a list of (T_i,) / (T_i, k) arrays. k is None when y has
    no output axis (predict then returns that shape too)."""
    n, t = x.shape[:2]
    if per_position_list(y, ragged):
        assert lengths is not None  # ragged X always comes with its lengths
        if len(y) != n:
            raise ValueError(f"y must hold one target array per sequence of X ({n}), got "
                             f"{len(y)}")
        parts = [as_real(f"y[{i}]", a) for i, a in enumerate(y)]
        nd = parts[0].ndim
        k = None if nd == 1 else parts[0].shape[1]
        out = np.zeros((n, t, k or 1), dtype)
        for i, a in enumerate(parts):
            want = (int(lengths[i]),) if k is None else (int(lengths[i]), k)
            if a.shape != want:
                raise ValueError(f"y[{i}] must have shape {want} (the length of X[{i}]"
                                 f"{'' if k is None else ', n_outputs'}), got {a.shape}")
            out[i, :a.shape[0]] = cast(f"y[{i}]", a.reshape(want[0], -1), dtype)
        return out, True, k
    y = as_real("y", y)
    if y.ndim not in (1, 2, 3):
        raise ValueError(f"y must have shape (n_samples,), (n_samples, n_outputs) or "
                         f"(n_samples, seq_len, n_outputs), got {y.shape}")
    if y.shape[0] != n:
        raise ValueError(f"y must have {n} rows, one per sequence of X, got shape {y.shape}")
    if y.ndim == 3:
        if ragged:
            raise ValueError("per-position targets of ragged X must be a list of arrays "
                             "(seq_len_i, n_outputs), one per sequence")
        if y.shape[1] != t:
            raise ValueError(f"y must have the sequence length of X ({t}) for per-position "
                             f"targets, got shape {y.shape}")
        return cast("y", y, dtype), True, y.shape[2]
    if y.ndim == 2 and y.shape[1] == 0:
        raise ValueError(f"y has no outputs: shape {y.shape}")
    k = None if y.ndim == 1 else y.shape[1]
    return cast("y", y.reshape(n, -1), dtype), False, k


def labels(y: object, x: FloatArray, lengths: IntArray | None,
           ragged: bool) -> tuple[AnyArray, bool]:
    """(labels array, per_position): (n,) per sequence, (n, T) per position (padded
    positions hold the first valid label of their row, with weight 0 later)."""
    n, t = x.shape[:2]
    if per_position_list(y, ragged):
        assert lengths is not None  # ragged X always comes with its lengths
        if len(y) != n:
            raise ValueError(f"y must hold one label array per sequence of X ({n}), got "
                             f"{len(y)}")
        parts = [np.asarray(a) for a in y]
        for i, a in enumerate(parts):
            if a.shape != (int(lengths[i]),):
                raise ValueError(f"y[{i}] must have shape ({int(lengths[i])},) (one label per "
                                 f"position of X[{i}]), got {a.shape}")
        kinds = {a.dtype.kind for a in parts}
        dtype = np.result_type(*parts) if kinds <= set("biuf") else \
            np.concatenate(parts).dtype
        out = np.empty((n, t), dtype)
        for i, a in enumerate(parts):
            out[i, :a.size] = a
            out[i, a.size:] = a[0]
        return out, True
    y = np.asarray(y)
    if y.ndim not in (1, 2) or y.shape[0] != n:
        raise ValueError(f"y must have shape ({n},) (one label per sequence) or ({n}, {t}) "
                         f"(one label per position), got {y.shape}")
    if y.ndim == 2:
        if ragged:
            raise ValueError("per-position labels of ragged X must be a list of arrays, "
                             "one per sequence")
        if y.shape[1] != t:
            raise ValueError(f"y must have the sequence length of X ({t}) for per-position "
                             f"labels, got shape {y.shape}")
    return y, y.ndim == 2


def check_labels_finite(y: AnyArray) -> None:
    if y.dtype.kind == "f" and not np.isfinite(y).all():
        raise ValueError("y contains NaN or infinity")
    if y.dtype.kind == "O":
        for v in y.ravel():
            if isinstance(v, float) and not np.isfinite(v):
                raise ValueError("y contains NaN or infinity")


def sample_weights(sample_weight: object, n: int) -> F64Array | None:
    """(n,) float64 weights, or None. Negative, non-finite or all-zero weights raise."""
    if sample_weight is None:
        return None
    if isinstance(sample_weight, numbers.Real) and not isinstance(sample_weight, bool):
        w = np.full(n, float(sample_weight))
    else:
        w = as_real("sample_weight", sample_weight)
        if w.shape != (n,):
            raise ValueError(f"sample_weight must have shape ({n},), one weight per sample, "
                             f"got {w.shape}")
        w = w.astype(np.float64)
    if not np.isfinite(w).all():
        raise ValueError("sample_weight contains NaN or infinity")
    if (w < 0).any():
        raise ValueError(f"sample_weight must be >= 0, got a minimum of {w.min()}")
    if not (w > 0).any():
        raise ValueError("sample_weight is zero for every sample: nothing to learn from")
    return w


def valid_positions(lengths: IntArray, t: int) -> BoolArray:
    """(n, T) bool, True where a position holds data."""
    return np.arange(t)[None, :] < lengths[:, None]


def key_mask(lengths: IntArray | None, missing: BoolArray | None, rows: slice | IntArray,
             t: int) -> BoolArray | None:
    """The (len(rows), t) key padding mask of the samples `rows` (a slice or an index
    array): True past their lengths or at their missing steps; None when neither."""
    mask = None if lengths is None else ~valid_positions(lengths[rows], t)
    if missing is not None:
        m = missing[rows, :t]
        mask = m if mask is None else mask | m
    return mask


def unpad(y: AnyArray, lengths: IntArray) -> list[AnyArray]:
    """A list of y[i, :lengths[i]] copies (the ragged form of per-position output)."""
    return [y[i, :int(n)].copy() for i, n in enumerate(lengths)]


def patch(x: FloatArray, lengths: IntArray | None, p: int,
          missing: BoolArray | None = None, fill: str = "last"
          ) -> tuple[FloatArray, IntArray | None]:
    """Non-overlapping patches of p steps as tokens: (n, T, f) -> (n, ceil(T/p), p*f)
    (a token's steps in order, each step's features together), lengths -> ceil(l/p).
    The steps after a sequence's last observed step (past a ragged sequence's end, the
    steps filling the last patch when T is not a multiple of p, trailing missing
    steps), up to the end of that step's patch, repeat that step (as the series would
    go on, not a jump to 0): a sequence with trailing NaN steps makes the tokens of the
    shorter sequence. Interior missing steps read 0 (x holds 0 there); steps past that
    patch (padding tokens, masked) stay zero. The same rule in the ONNX graph.
    fill="zero": those steps read 0 too (how models fitted before this rule were
    trained; their files keep it)."""
    if p == 1:
        return x, lengths
    n, t, f = x.shape
    tp = -(-t // p)
    out = np.zeros((n, tp * p, f), x.dtype)
    out[:, :t] = x
    if fill == "zero":
        return out.reshape(n, tp, p * f), None if lengths is None else -(-lengths // p)
    observed = None if missing is None else ~missing
    if lengths is not None:
        pos = valid_positions(lengths, t)
        observed = pos if observed is None else observed & pos
    if observed is None:
        ends = np.full(n, t, np.int64)
    else:   # one past each sequence's last observed step (0: none observed)
        ends = np.where(observed.any(axis=1), t - np.argmax(observed[:, ::-1], axis=1), 0)
    stop = -(-ends // p) * p
    if n and np.any(stop > ends):
        last = out[np.arange(n), np.maximum(ends - 1, 0)]
        for k in range(p - 1):   # the fill steps, one offset at a time
            rows = np.nonzero(ends + k < stop)[0]
            out[rows, ends[rows] + k] = last[rows]
    out = out.reshape(n, tp, p * f)
    return out, None if lengths is None else -(-lengths // p)


def patch_missing(missing: BoolArray | None, lengths: IntArray | None, p: int
                  ) -> BoolArray | None:
    """The tokens' missing mask after patch(x, lengths, p): a patch is masked when
    every step of it is missing or padding (past a ragged sequence's end, or filling
    the last patch), as attnx.io.onnx's patches; a patch with one observed step stays a
    token, its missing steps reading 0 as the fill steps do."""
    if missing is None or p == 1:
        return missing
    n, t = missing.shape
    out = np.ones((n, -(-t // p) * p), bool)
    out[:, :t] = missing if lengths is None else missing | ~valid_positions(lengths, t)
    return typing.cast("BoolArray", out.reshape(n, -1, p).all(axis=2))


#: how patch() fills a partial last patch: "last" (the sequence's last observed step);
#: "zero" for models fitted before that rule (their files have no fill recorded)
PATCH_FILLS = ("last", "zero")

#: patch_len=None: raw-value patches leave at most this many tokens
AUTO_TOKENS = 16


def auto_patch(t_max: int, max_tokens: int = AUTO_TOKENS) -> int:
    """The patch length that leaves at most max_tokens tokens: ceil(t_max / max_tokens)."""
    return max(1, -(-int(t_max) // max_tokens))
