"""Model files: one safetensors file per estimator, readable without pickle.

The file is a plain safetensors file (https://github.com/huggingface/safetensors),
written and read with the ``safetensors`` package's NumPy API:

* tensors: the model's weights under their ``params`` names (``Wq``, ...,
  ``layers.0.W1``; attnx's layout, Y = X @ W), the AdamW moments as
  ``optimizer.exp_avg.<name>`` / ``optimizer.exp_avg_sq.<name>``, and
  array-valued fitted attributes as ``attribute.<name>`` (``loss_curve_``, ...);
* header metadata (strings): ``format`` = "attnx-estimator", ``format_version``,
  ``attnx_version``, ``config`` (JSON: class, get_params(), model architecture,
  optimizer step and settings, shuffling RNG state, fitted scalars) and
  ``checksum``: SHA-256 over the config and every tensor's name, dtype, shape
  and bytes, so that any change to a stored value is detected.

The state itself comes from attnx.estimators._state (shared with pickling); a forecaster's
(attnx.forecasting.forecaster.FORECASTERS) from attnx.forecasting._forecaster_state, which stores the wrapped
regressor's state as above under ``regressor.`` and the forecaster's own fitted
arrays as ``attribute.<name>`` (``attribute.<name>.<i>`` for one array per series).
The file itself (writing it atomically, checking a header before trusting it, the
checksum) is attnx.estimators._model_file's; this module names the classes a file may hold, so it
sits above the estimators and the forecaster, which save through attnx.estimators._model_file
without importing it.
"""
from __future__ import annotations

import os
from typing import Any

from ..forecasting import _forecaster_state
from ..estimators import _state
from ..estimators._model_file import FORMAT, FORMAT_VERSION, _checksum, check_saveable, read, write
from ..estimators._registry import ESTIMATORS
from ..forecasting.forecaster import FORECASTERS

__all__ = ["save", "load", "FORMAT", "FORMAT_VERSION"]
_checksum = _checksum   # for tests that rewrite a file's contents


def save(est: Any, path: str | os.PathLike[str]) -> None:
    """Write `est` (an attnx estimator, fitted or not) to exactly `path`.

    The file is written next to path under a temporary name, then renamed over
    path, so a failed save leaves any previous file there intact.
    """
    check_saveable(est)
    state = _forecaster_state if type(est) in FORECASTERS.values() else _state
    write(path, *state.get_state(est, portable=True))


def load(path: str | os.PathLike[str]) -> Any:
    """Read an estimator written by save (or est.save).

    Raises ValueError naming the file when it is truncated, corrupted, of another
    format version or not an attnx model file (FileNotFoundError and the like as
    themselves).
    """
    path = os.fspath(path)
    arrays, config = read(path)
    try:
        if isinstance(config, dict) and config.get("class") in FORECASTERS:
            return _forecaster_state.new_from_state(arrays, config, dict(FORECASTERS))
        return _state.new_from_state(arrays, config, _classes())
    except _state.StateError as exc:
        raise ValueError(f"{path}: {exc}") from None
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        # a field missing or of the wrong type or shape: the file was altered (a
        # MemoryError or a bug in attnx is not a format error and goes through)
        raise ValueError(f"{path} is not a valid attnx model file ({type(exc).__name__}: "
                         f"{exc})") from None


def _classes() -> dict[str, type]:
    """The estimator classes a file may name (attnx.estimators.ESTIMATORS and
    attnx.forecasting.forecaster.FORECASTERS)."""
    return {**ESTIMATORS, **FORECASTERS}
