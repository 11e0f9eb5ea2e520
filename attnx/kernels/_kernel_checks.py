"""Argument checks of the time-series layer kernels (attnx.kernels._embed, attnx.kernels._revin), run in
Python before a kernel releases the GIL: TypeError or ValueError naming the call and
the argument."""
from __future__ import annotations

from typing import Any

import numpy as np

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def dtype_of(what: str, name: str, a: Any) -> np.dtype[Any]:
    """The float dtype of input a, which every other float buffer of the call shares."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{what}: {name} must be a numpy array, got {type(a).__name__}")
    if a.dtype not in FLOATS:
        raise ValueError(f"{what}: {name} must be float32 or float64, got {a.dtype}")
    return np.dtype(a.dtype)


def check(what: str, name: str, a: Any, dt: Any, shape: tuple[int, ...], out: bool = False,
          optional: bool = False) -> None:
    """TypeError/ValueError naming `name` unless a is a C-contiguous ndarray of dtype dt
    and this shape (-1 = any extent), writeable when it is an output. None passes when
    optional."""
    if a is None:
        if optional:
            return
        raise TypeError(f"{what}: {name} must be a numpy array, got None")
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{what}: {name} must be a numpy array, got {type(a).__name__}")
    if a.dtype != dt:
        raise ValueError(f"{what}: {name} must have dtype {np.dtype(dt)}, got {a.dtype}")
    if a.ndim != len(shape) or any(s >= 0 and a.shape[i] != s for i, s in enumerate(shape)):
        want = "(" + ", ".join("any" if s < 0 else str(s) for s in shape) + ")"
        raise ValueError(f"{what}: {name} must have shape {want}, got {a.shape}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{what}: {name} must be C-contiguous")
    if out and not a.flags.writeable:
        raise ValueError(f"{what}: {name} is an output and must be writeable")


def disjoint(what: str, outs: list[tuple[str, Any]], ins: list[tuple[str, Any]]) -> None:
    """ValueError when an output buffer may overlap an input or another output
    ((name, array) pairs; None entries are skipped)."""
    for i in range(len(outs)):
        if outs[i][1] is None:
            continue
        for j in range(len(ins)):
            if ins[j][1] is not None and np.may_share_memory(outs[i][1], ins[j][1]):
                raise ValueError(f"{what}: output {outs[i][0]} overlaps input {ins[j][0]}")
        for j in range(i + 1, len(outs)):
            if outs[j][1] is not None and np.may_share_memory(outs[i][1], outs[j][1]):
                raise ValueError(f"{what}: outputs {outs[i][0]} and {outs[j][0]} overlap")


def threads(what: str, nthreads: Any) -> None:
    """ValueError unless nthreads (the prange loops' threads) is >= 1."""
    if nthreads < 1:
        raise ValueError(f"{what}: nthreads must be >= 1, got {nthreads}")


def batch(what: str, name: str, a: Any, nthreads: Any,
          out: bool = False) -> tuple[np.dtype[Any], tuple[int, ...]]:
    """(dtype, (B, T, D)) of the call's leading 3-D float buffer a, after checking it
    and nthreads."""
    dt = dtype_of(what, name, a)
    check(what, name, a, dt, (-1, -1, -1), out=out)
    threads(what, nthreads)
    return dt, a.shape


def int_at_least(what: str, name: str, v: Any, lo: int) -> int:
    """v as an integer >= lo (bool and float refused), else TypeError/ValueError."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{what}: {name} must be an integer, got {type(v).__name__}")
    if v < lo:
        raise ValueError(f"{what}: {name} must be >= {lo}, got {v}")
    return int(v)
