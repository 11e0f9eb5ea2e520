"""A forecaster's complete state as named arrays plus a JSON-able configuration.

A TransformerForecaster wraps a fitted TransformerRegressor (stored by attnx.estimators._state,
its arrays under ``regressor.``) and holds its own fitted state: the window and
patches, the covariate scaling statistics, the conformal calibration scores, and the
end of every training series that predict() forecasts from. Arrays go in as
``attribute.<name>``; a list of arrays (one per series) as ``attribute.<name>.<i>``
with its length in the configuration. Used by attnx.io (files) and by pickling.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..estimators import _state
from ..estimators._registry import ESTIMATORS

__all__ = ["get_state", "set_state", "new_from_state"]

REG = "regressor."
Arrays = dict[str, np.ndarray]
Config = dict[str, Any]


def get_state(est: Any, *, portable: bool) -> tuple[Arrays, Config]:
    """(arrays, config) holding everything needed to rebuild the forecaster `est`."""
    plain = {k: v for k, v in vars(est).items() if k != "regressor_"}
    lists = {k: v for k, v in plain.items() if k.endswith("_") and _is_array_list(v)}
    shell = _Shell(type(est), {k: v for k, v in plain.items() if k not in lists})
    arrays, config = _state.get_state(shell, portable=portable)
    config["class"] = type(est).__name__
    config["array_lists"] = {}
    for k, items in lists.items():
        config["array_lists"][k] = len(items)
        for i, a in enumerate(items):
            arrays[f"{_state.ATTR}{k}.{i}"] = np.ascontiguousarray(a)
    reg = vars(est).get("regressor_")
    if reg is not None:
        r_arrays, config["regressor"] = _state.get_state(reg, portable=portable)
        arrays.update({REG + k: v for k, v in r_arrays.items()})
    return arrays, config


def set_state(est: Any, arrays: Arrays, config: Config) -> None:
    """Fill a new (empty) forecaster `est` from get_state's output (StateError when
    the pieces do not fit together)."""
    if config.get("class") != type(est).__name__:
        raise _state.StateError(f"the state is that of a {config.get('class')!r}, not of a "
                                f"{type(est).__name__}")
    lists = config.get("array_lists", {})
    if not isinstance(lists, dict):
        raise _state.StateError("the array lists are not a mapping")
    taken: Arrays = {}
    restored: dict[str, list[np.ndarray]] = {}
    for k, n in lists.items():
        name_ok = (isinstance(k, str) and k.endswith("_") and k.isidentifier()
                   and not k.startswith("_"))
        # each item is an array of the file: no more items than arrays
        if not name_ok or isinstance(n, bool) or not isinstance(n, int) \
                or not 0 < n <= len(arrays):
            raise _state.StateError(f"invalid array list {k!r}")
        names = [f"{_state.ATTR}{k}.{i}" for i in range(n)]
        missing = [m for m in names if m not in arrays]
        if missing:
            raise _state.StateError(f"array {missing[0]!r} is missing")
        restored[k] = [arrays[m] for m in names]
        taken.update({m: arrays[m] for m in names})
    own = {k: v for k, v in arrays.items() if not k.startswith(REG) and k not in taken}
    shell = _Shell(type(est), {})
    _state.set_state(shell, own, {**config, "class": _Shell.__name__, "fitted": False})
    vars(est).update({k: v for k, v in vars(shell).items() if k not in ("_cls", "_state_name")})
    vars(est).update(restored)
    if "regressor" in config:
        r_arrays = {k[len(REG):]: v for k, v in arrays.items() if k.startswith(REG)}
        est.regressor_ = _state.new_from_state(r_arrays, config["regressor"], ESTIMATORS)
    elif any(k.startswith(REG) for k in arrays):
        raise _state.StateError("regressor arrays without a regressor")


def new_from_state(arrays: Arrays, config: Config, classes: dict[str, type]) -> Any:
    """A new forecaster of config["class"] (looked up in `classes`) with that state."""
    name = config.get("class") if isinstance(config, dict) else None
    cls = classes.get(name) if isinstance(name, str) else None
    if cls is None:
        raise _state.StateError(f"unknown forecaster class {name!r}")
    est: Any = object.__new__(cls)
    set_state(est, arrays, config)
    return est


def _is_array_list(v: Any) -> bool:
    return (isinstance(v, list) and len(v) > 0
            and all(isinstance(a, np.ndarray) and a.dtype.kind in "biuf" for a in v))


class _Shell:
    """Stands in for the forecaster in attnx.estimators._state: its hyper-parameters and plain
    fitted attributes, without the wrapped regressor and the lists of arrays (which
    are stored on their own)."""

    def __init__(self, cls: Any, attrs: dict[str, Any]) -> None:
        self._cls = cls
        self._state_name = cls.__name__   # errors name the forecaster, not the shell
        vars(self).update(attrs)

    def _param_names(self) -> list[str]:
        names: list[str] = self._cls._param_names()
        return names

    def get_params(self) -> dict[str, Any]:
        return {k: vars(self)[k] for k in self._param_names()}
