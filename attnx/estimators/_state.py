"""An estimator's complete state as named arrays plus a JSON-able configuration.

One serialiser for both ways an estimator leaves the process: ``est.save`` (a
safetensors file, see attnx.io) and pickling (``__getstate__`` /
``__setstate__``). It knows nothing about files, and nothing about a particular
estimator class beyond what every attnx estimator offers:

* ``get_params()`` / ``_param_names()``: the hyper-parameters;
* ``_model_spec()``: the fitted model's architecture as JSON-able values, and
  ``_restore_model(spec, flat_weights, optimizer_settings, optimizer_state)``,
  which rebuilds ``model_`` and ``optimizer_`` after checking the sizes in the
  spec against the weights given (before allocating a model of that size);
* fitted attributes (public names ending in ``_``) of plain types: numbers,
  strings, None, numpy Generators, lists of numbers, numeric or string arrays,
  JSON-able dicts, the fit plan (attnx.estimators._plan.FitPlan, as its JSON-able
  record); a class's ``_restored_attributes(attributes, model_spec)`` checks the
  attributes of a stored state before they are set.

Array names: the model's ``params`` names as they are (``Wq``, ``layers.0.W1``,
``embed.W``, ...), ``optimizer.exp_avg.<name>`` and ``optimizer.exp_avg_sq.<name>``
for the AdamW moments (torch.optim.AdamW's names) and ``attribute.<name>`` for
array-valued attributes (``loss_curve_`` ...). Other private attributes are
caches (batch buffers, workspaces) and are never stored.
"""
from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from ._plan import FitPlan

__all__ = ["get_state", "set_state", "new_from_state", "StateError"]

OPT_M, OPT_V, ATTR = "optimizer.exp_avg.", "optimizer.exp_avg_sq.", "attribute."
_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")

Arrays = dict[str, np.ndarray]
Config = dict[str, Any]


class StateError(ValueError):
    """The stored state is inconsistent (a damaged or altered file or pickle)."""


# ---- estimator -> (arrays, config) -----------------------------------------------------
def get_state(est: Any, *, portable: bool) -> tuple[Arrays, Config]:
    """(arrays, config) holding everything needed to rebuild `est` exactly.

    portable=True makes config JSON-able (for files): dtypes go in by name (with
    the form they were given in), tuples and dicts are tagged so that they come
    back as such, and a random_state that is a numpy Generator, RandomState or
    SeedSequence as None (the shuffling state is stored anyway, so only a later
    fit() from scratch is affected). portable=False (for pickle) keeps the
    parameters as they are and takes any attribute pickle can take.
    """
    params = est.get_params()
    config: Config = {"class": type(est).__name__, "portable": portable,
                      "params": ({k: _encode(v, f"parameter {k}", random_state=True)
                                  for k, v in params.items()} if portable else dict(params)),
                      "fitted": False, "attributes": {}}
    arrays: Arrays = {}
    names = [k for k in vars(est) if k.endswith("_") and not k.startswith("_")
             and not k.endswith("__")]
    attrs = {k: vars(est)[k] for k in names}
    if "model_" in attrs:
        config["fitted"] = True
        model = attrs.pop("model_")
        opt = attrs.pop("optimizer_")
        config["model"] = _encode(est._model_spec(), "the model spec")
        config["model_generators"] = {k: _encode(g.bit_generator.state, k)
                                      for k, g in vars(model).items()
                                      if isinstance(g, np.random.Generator)}
        config["optimizer"] = {"t": int(opt.t), "lr": opt.lr, "betas": list(opt.betas),
                               "eps": opt.eps, "weight_decay": opt.weight_decay}
        for name, w in model.params.items():
            arrays[name] = np.ascontiguousarray(w)
        for prefix, bufs in ((OPT_M, opt.m), (OPT_V, opt.v)):
            for name, w in _moment_views(model.params, bufs).items():
                arrays[prefix + name] = np.ascontiguousarray(w)
    for k, v in attrs.items():
        config["attributes"][k] = _encode_attribute(k, v, arrays, portable)
    return arrays, config


def _moment_views(params: Any, bufs: list[np.ndarray]) -> dict[str, np.ndarray]:
    """AdamW moment buffers viewed with the layout of the model's named weights (the
    moments of a model's .params are one buffer laid out like params.flat)."""
    flat = params.flat
    if len(bufs) != 1 or bufs[0].shape != flat.shape:
        raise TypeError("only an AdamW over a model's .params (one flat buffer) can be "
                        "stored")
    base = flat.__array_interface__["data"][0]
    out = {}
    for name, w in params.items():
        off = (w.__array_interface__["data"][0] - base) // flat.itemsize
        out[name] = np.lib.stride_tricks.as_strided(bufs[0][off:], shape=w.shape,
                                                    strides=w.strides, writeable=True)
    return out


def _encode_attribute(k: str, v: Any, arrays: Arrays, portable: bool) -> Config:
    if isinstance(v, FitPlan):
        return {"kind": "plan", "value": _encode(v.to_spec(), f"fitted attribute {k}")}
    if isinstance(v, np.random.Generator):
        return {"kind": "generator", "state": _encode(v.bit_generator.state, k)}
    if isinstance(v, list) and all(isinstance(x, (int, float, np.integer, np.floating))
                                   and not isinstance(x, bool) for x in v):
        is_int = len(v) > 0 and all(isinstance(x, (int, np.integer)) for x in v)
        arrays[ATTR + k] = np.asarray(v, dtype=np.int64 if is_int else np.float64)
        return {"kind": "list"}
    if isinstance(v, np.ndarray) and v.dtype.kind in "biuf":
        arrays[ATTR + k] = np.ascontiguousarray(v)
        return {"kind": "ndarray"}
    if isinstance(v, np.ndarray) and v.dtype.kind == "U":
        return {"kind": "str_array", "dtype": v.dtype.str, "shape": list(v.shape),
                "value": v.ravel().tolist()}
    if isinstance(v, np.ndarray) and portable:
        raise TypeError(f"{k.rstrip('_')} holds Python objects ({v.dtype}), which a model "
                        f"file cannot store (fitted attribute {k}): use int or str labels, "
                        f"or pickle the estimator")
    try:
        return {"kind": "value", "value": _encode(v, f"fitted attribute {k}")}
    except TypeError:
        if portable:
            raise
        return {"kind": "object", "value": v}   # pickle only


# JSON has no tuples, no non-string keys, no inf/nan, no dtypes: tag those
def _encode(v: Any, what: str, random_state: bool = False) -> Any:
    if v is None or isinstance(v, (bool, str, int)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else {"float": repr(v)}
    if isinstance(v, np.generic) and not isinstance(v, np.void):
        return _encode(v.item(), what)
    if isinstance(v, np.dtype) or (isinstance(v, type) and issubclass(v, np.generic)):
        return {"dtype": np.dtype(v).name, "given_as": "dtype" if isinstance(v, np.dtype)
                else "type"}
    if isinstance(v, (list, tuple)):
        items = [_encode(x, what) for x in v]
        return items if isinstance(v, list) else {"tuple": items}
    if isinstance(v, dict):
        if all(isinstance(a, str) for a in v) and frozenset(v) not in _TAGS:
            return {a: _encode(b, what) for a, b in v.items()}   # plain JSON object
        return {"dict": [[_encode(a, what), _encode(b, what)] for a, b in v.items()]}
    if random_state and isinstance(v, (np.random.Generator, np.random.RandomState,
                                       np.random.SeedSequence)):
        return None
    raise TypeError(f"{what} = {v!r} cannot be stored in a model file (attnx stores "
                    f"numbers, strings, lists, tuples, dicts, dtypes and numeric or string "
                    f"arrays; pickle the estimator instead)")


_TAGS = {frozenset({"float"}), frozenset({"tuple"}), frozenset({"dict"}),
         frozenset({"dtype", "given_as"})}


def _decode(v: Any) -> Any:
    if isinstance(v, list):
        return [_decode(x) for x in v]
    if not isinstance(v, dict):
        return v
    if frozenset(v) not in _TAGS:
        return {a: _decode(b) for a, b in v.items()}
    if set(v) == {"float"}:
        return float(v["float"])
    if set(v) == {"tuple"}:
        return tuple(_decode(x) for x in v["tuple"])
    if set(v) == {"dict"}:
        return {_hashable(_decode(a)): _decode(b) for a, b in v["dict"]}
    if set(v) == {"dtype", "given_as"}:
        dt = np.dtype(v["dtype"])
        if dt.kind not in "biufcUSM" or dt.hasobject:
            raise StateError(f"unsupported dtype {dt}")
        return dt if v["given_as"] == "dtype" else dt.type


def _hashable(k: Any) -> Any:
    if isinstance(k, list):
        return tuple(_hashable(x) for x in k)
    return k


# ---- (arrays, config) -> estimator -----------------------------------------------------
def new_from_state(arrays: Arrays, config: Config, classes: dict[str, type]) -> Any:
    """A new estimator of config["class"] (looked up in `classes`) with that state."""
    if not isinstance(config, dict) or not isinstance(config.get("class"), str):
        raise StateError("no estimator class recorded")
    cls = classes.get(config["class"])
    if cls is None:
        raise StateError(f"unknown estimator class {config['class']!r}")
    est: Any = object.__new__(cls)
    set_state(est, arrays, config)
    return est


def set_state(est: Any, arrays: Arrays, config: Config) -> None:
    """Fill a new (empty) instance `est` from get_state's output; StateError (a
    ValueError) when the pieces do not fit together."""
    if config.get("class") != type(est).__name__:
        raise StateError(f"the state is that of a {config.get('class')!r}, not of a "
                         f"{type(est).__name__}")
    params = config["params"]
    if not isinstance(params, dict):
        raise StateError("the parameters are not a mapping")
    portable = bool(config.get("portable"))
    if portable:
        params = {k: _decode(v) for k, v in params.items()}
    valid = set(est._param_names())
    if set(params) != valid:
        name = getattr(est, "_state_name", type(est).__name__)
        raise StateError(f"the stored parameters are not those of {name}: missing "
                         f"{sorted(valid - set(params))}, unknown {sorted(set(params) - valid)}")
    est.__dict__.update(params)
    used: set[str] = set()
    if config.get("fitted"):
        used = _restore_model(est, arrays, config)
    attributes = config.get("attributes", {})
    if not isinstance(attributes, dict):
        raise StateError("the fitted attributes are not a mapping")
    decoded: dict[str, Any] = {}
    for k, spec in attributes.items():
        public = (isinstance(k, str) and k.endswith("_") and not k.startswith("_")
                  and k.isidentifier() and not k.endswith("__"))
        if not public or k in ("model_", "optimizer_"):
            raise StateError(f"invalid fitted attribute name {k!r}")
        decoded[k] = _decode_attribute(k, spec, arrays, portable)
        if ATTR + k in arrays:
            used.add(ATTR + k)
    complete = getattr(est, "_restored_attributes", None)
    if config.get("fitted") and complete is not None:
        try:
            decoded = complete(decoded, _decode(config["model"]))
        except ValueError as exc:
            raise StateError(str(exc)) from None
    for k, v in decoded.items():
        setattr(est, k, v)
    extra = set(arrays) - used
    if extra:
        raise StateError(f"unexpected arrays {sorted(extra)[:5]}")


def _restore_model(est: Any, arrays: Arrays, config: Config) -> set[str]:
    """Rebuild model_ and optimizer_ through the estimator's _restore_model, with flat
    buffers (sized by the weights really present, so never larger than the data)
    that are then filled by name."""
    weights = {k: a for k, a in arrays.items() if not k.startswith((OPT_M, OPT_V, ATTR))}
    dtypes = {a.dtype for a in weights.values()}
    if len(dtypes) != 1:
        raise StateError(f"the weights must share one dtype, got {sorted(map(str, dtypes))}")
    n = sum(a.size for a in weights.values())
    dtype = dtypes.pop()
    hyper = config["optimizer"]
    t = hyper["t"]
    if isinstance(t, bool) or not isinstance(t, int) or t < 0:
        raise StateError(f"invalid optimizer step count {t!r}")
    zeros = np.zeros(n, dtype)
    est._restore_model(_decode(config["model"]), zeros, hyper,
                       {"t": t, "m": [zeros], "v": [zeros]})
    model, opt = est.model_, est.optimizer_
    if set(model.params) != set(weights):
        raise StateError(f"the weights {sorted(weights)[:4]}... are not those of the model "
                         f"{sorted(model.params)[:4]}...")
    used = set(weights)
    for name, w in model.params.items():
        _copy_checked(name, w, arrays)
    for prefix, bufs in ((OPT_M, opt.m), (OPT_V, opt.v)):
        for name, view in _moment_views(model.params, bufs).items():
            _copy_checked(prefix + name, view, arrays)
            used.add(prefix + name)
    gens = config.get("model_generators") or {}
    for k, state in gens.items():
        g = vars(model).get(k)
        if not isinstance(g, np.random.Generator):
            raise StateError(f"the model has no random generator {k!r}")
        _set_generator_state(g, _decode(state), k)
    return used


def _copy_checked(name: str, dst: np.ndarray, arrays: Arrays) -> None:
    src = arrays.get(name)
    if src is None:
        raise StateError(f"array {name!r} is missing")
    if src.shape != dst.shape or src.dtype != dst.dtype:
        raise StateError(f"array {name!r} is {src.dtype} {src.shape}, the model needs "
                         f"{dst.dtype} {dst.shape}")
    np.copyto(dst, src)


def _set_generator_state(g: np.random.Generator, state: Any, what: str) -> None:
    name = state.get("bit_generator") if isinstance(state, dict) else None
    if name != type(g.bit_generator).__name__:
        raise StateError(f"unsupported random generator {name!r} for {what}")
    g.bit_generator.state = state


def _decode_attribute(k: str, spec: Any, arrays: Arrays, portable: bool) -> Any:
    if not isinstance(spec, dict):
        raise StateError(f"invalid record for attribute {k}")
    kind = spec.get("kind")
    if kind == "generator":
        state = _decode(spec["state"])
        name = state.get("bit_generator") if isinstance(state, dict) else None
        if name not in _GENERATORS:
            raise StateError(f"unsupported random generator {name!r} for {k}")
        gen = np.random.Generator(getattr(np.random, name)())
        _set_generator_state(gen, state, k)
        return gen
    if kind == "value":
        return _decode(spec["value"])
    if kind == "plan":
        try:
            return FitPlan.from_spec(_decode(spec["value"]))
        except (ValueError, TypeError) as exc:
            raise StateError(f"invalid fit plan {k}: {exc}") from None
    if kind == "object" and not portable:
        return spec["value"]
    if kind in ("list", "ndarray"):
        a = arrays.get(ATTR + k)
        if a is None:
            raise StateError(f"array {ATTR + k!r} is missing")
        if kind == "ndarray":
            return a
        if a.ndim != 1:
            raise StateError(f"{ATTR + k!r} must be 1-D, got shape {a.shape}")
        return a.tolist()
    if kind == "str_array":
        a = np.array(spec["value"], dtype=np.dtype(spec["dtype"]))
        if a.dtype.kind != "U":
            raise StateError(f"{k} is not a string array")
        return a.reshape(spec["shape"])
    raise StateError(f"unknown kind {kind!r} for attribute {k}")
