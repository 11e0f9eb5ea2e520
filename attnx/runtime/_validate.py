"""Input checks run before any kernel: clear exceptions instead of crashes or garbage."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..kernels._ops import all_finite

if TYPE_CHECKING:
    import numpy.typing as npt

    from ._params import ParamDict
    from ._typing import AnyArray, BoolArray, FloatArray


def as_real(name: str, a: object, what: str = "of real numbers", kinds: str = "fiu",
            holds: str = "real numbers (float32 or float64)") -> AnyArray:
    """a as an ndarray (not copied when it already is one) whose dtype kind is one of
    `kinds`; TypeError naming `name` otherwise ("must be an array <what>" when a does
    not convert, "must hold <holds>" for another dtype)."""
    if not isinstance(a, np.ndarray):
        try:
            a = np.asarray(a)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be an array {what}, got {type(a).__name__} "
                            f"({exc})") from exc
    if a.dtype.kind not in kinds:
        raise TypeError(f"{name} must hold {holds}, got dtype {a.dtype}")
    return a


def as_real_3d(name: str, a: object, dims: str = "(n_samples, seq_len, n_features)") -> AnyArray:
    """a as an ndarray of real numbers with 3 dimensions (not copied when it already is)."""
    a = as_real(name, a, dims)
    if a.ndim != 3:
        raise ValueError(f"{name} must be a 3-D array {dims}, got shape {a.shape}")
    return a


def as_input(name: str, x: object, d_model: int, batch: int | None = None,
             length: int | None = None) -> AnyArray:
    """Check a (batch, seq_len, d_model) real array; return it as an ndarray (not copied)."""
    x = as_real_3d(name, x, f"(batch, seq_len, {d_model})")
    if x.shape[2] != d_model:
        raise ValueError(f"{name} must have {d_model} features in its last dimension, "
                         f"got shape {x.shape}")
    if batch is not None and x.shape[0] != batch:
        raise ValueError(f"{name} must have batch size {batch}, got shape {x.shape}")
    if length is not None and x.shape[1] != length:
        raise ValueError(f"{name} must have sequence length {length}, got shape {x.shape}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{name} is empty: got shape {x.shape}")
    check_finite(name, x)
    return x


def finite(x: AnyArray) -> bool:
    """True when the float array x has no NaN or inf (no temporary for contiguous x)."""
    if x.dtype in (np.float32, np.float64) and x.flags.c_contiguous:
        return all_finite(x)
    return x.dtype.kind != "f" or bool(np.isfinite(x).all())


def cast_into(name: str, dst: AnyArray, src: AnyArray) -> AnyArray:
    """Copy src into dst, converting to dst's dtype; ValueError naming `name` when the
    conversion overflows (1e39 is finite in float64 but inf in float32)."""
    with np.errstate(over="ignore", invalid="ignore"):
        np.copyto(dst, src, casting="unsafe")
    if src.dtype != dst.dtype and not finite(dst):
        raise ValueError(f"{name} holds values too large for {dst.dtype}: they overflow to "
                         f"infinity on conversion from {src.dtype}")
    return dst


def as_dtype(name: str, a: AnyArray, dtype: npt.DTypeLike) -> AnyArray:
    """a as a C-contiguous array of dtype (not copied when it already is), checked as cast_into."""
    if a.dtype == dtype and a.flags.c_contiguous:
        return a
    return cast_into(name, np.empty(a.shape, dtype=dtype), a)


def check_finite(name: str, x: AnyArray) -> None:
    """Raise ValueError when x holds NaN or inf."""
    if not finite(x):
        raise ValueError(f"{name} contains NaN or infinity")


def as_mask(mask: object, batch: int, t_keys: int,
            name: str = "key_padding_mask") -> BoolArray:
    """Check a (batch, t_keys) boolean mask, True = ignore that key."""
    mask = np.asarray(mask)
    if mask.dtype != np.bool_:
        raise TypeError(f"{name} must be a bool array (True = ignore the key), "
                        f"got dtype {mask.dtype}")
    if mask.shape != (batch, t_keys):
        raise ValueError(f"{name} must have shape {(batch, t_keys)}, got {mask.shape}")
    return mask


def check_params(params: ParamDict) -> None:
    """ValueError when a model's parameters (a ParamDict) hold NaN or inf."""
    if not finite(params.flat):
        bad = [k for k, v in params.items() if not np.isfinite(v).all()]
        raise ValueError(f"the model's parameters contain NaN or infinity: {bad}")


def out_array(name: str, out: object, shape: tuple[int, ...], dtype: np.dtype[Any]) -> FloatArray:
    """A new array of this shape and dtype when out is None; else out, checked to be
    a writeable C-contiguous array of exactly that shape and dtype (ValueError
    naming `name` otherwise)."""
    if out is None:
        return np.empty(shape, dtype=dtype)
    if (not isinstance(out, np.ndarray) or out.shape != shape or out.dtype != dtype
            or not out.flags.c_contiguous or not out.flags.writeable):
        got = (f"{type(out).__name__} {getattr(out, 'shape', '')} "
               f"{getattr(out, 'dtype', '')}").strip()
        raise ValueError(f"{name} must be a writeable C-contiguous {dtype} array "
                         f"of shape {shape}, got {got}")
    return out
