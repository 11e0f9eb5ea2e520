"""Parameter storage: every model keeps its weights in one flat buffer.

`params` and `grads` are read-only mappings of live views into a flat parameter
buffer and a flat gradient buffer, so a user can read and assign weights by name
while the optimizer updates the whole model with one kernel call over the flat
buffer. The mapping itself cannot be changed (no item assignment, update, pop or
del), so a name can never be detached from the storage.
"""
from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar, cast

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

    from ._typing import FloatArray


class _Model(Protocol):
    params: ParamDict
    input_grad: bool


_M = TypeVar("_M", bound=_Model)


class ParamDict(Mapping[str, "FloatArray"]):
    """name -> ndarray view into `flat` (a 1-D buffer holding every value once).

    A read-only mapping: write into the arrays (``params["Wq"][...] = w``), never
    replace them.
    """

    __slots__ = ("_views", "flat")

    def __init__(self, flat: FloatArray,
                 views: Mapping[str, FloatArray] | Iterable[tuple[str, FloatArray]]) -> None:
        self._views: dict[str, FloatArray] = dict(views)
        self.flat = flat
        for name, v in self._views.items():
            if not np.shares_memory(v, flat):
                raise ValueError(f"parameter {name!r} is not a view of the flat buffer")

    def __getitem__(self, key: str) -> FloatArray:
        return self._views[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._views)

    def __len__(self) -> int:
        return len(self._views)

    def __contains__(self, key: object) -> bool:
        return key in self._views

    def __setitem__(self, key: str, value: Any) -> NoReturn:
        raise TypeError(
            f"assign into the existing array instead: params[{key!r}][...] = value "
            "(the arrays are views into the model's storage)")

    def __delitem__(self, key: str) -> NoReturn:
        raise TypeError(f"the parameters of a model cannot be removed (tried {key!r})")

    def __repr__(self) -> str:
        body = ", ".join(f"{k!r}: {v.dtype}{list(v.shape)}" for k, v in self._views.items())
        return f"ParamDict({{{body}}})"


class FlatAllocator:
    """Hands out consecutive slices of a flat buffer, sized in a first pass."""

    def __init__(self) -> None:
        self.size = 0

    def reserve(self, n: int | np.integer[Any]) -> int:
        start = self.size
        self.size += int(n)
        return start


def check_dtype(dtype: npt.DTypeLike) -> np.dtype[np.floating[Any]]:
    """Normalise a model dtype argument: float32 or float64 only."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"dtype must be float32 or float64, got {dtype!r}") from exc
    if dt not in (np.float32, np.float64):
        raise TypeError(f"dtype must be float32 or float64, got {dt}")
    return cast("np.dtype[np.floating[Any]]", dt)


def check_positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return int(value)


def check_int(name: str, v: object, lo: int) -> int:
    """v as an int after checking it is an integer (not a bool) >= lo: TypeError or
    ValueError naming `name`."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{name} must be an int >= {lo}, got {v!r}")
    if int(v) < lo:
        raise ValueError(f"{name} must be >= {lo}, got {v!r}")
    return int(v)


def rebuild_model(cls: Callable[..., _M], config: Mapping[str, Any], flat: FloatArray,
                  input_grad: bool) -> _M:
    """The model `cls(**config)` holding the weights `flat` (what a model's
    __reduce__ pickles: its configuration and weights; workspaces, gradients and
    the last forward's state start afresh)."""
    model = cls(**config, random_state=0)
    model.params.flat[...] = flat
    model.input_grad = input_grad
    return model
