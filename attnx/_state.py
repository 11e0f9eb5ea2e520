"""An estimator's complete state as named arrays plus a JSON-able configuration.

One serialiser for both ways an estimator leaves the process: ``est.save`` (a
safetensors file, see attnx.io) and pickling (``__getstate__`` /
``__setstate__``). It knows nothing about files, and nothing about a particular
estimator class beyond what every attnx estimator offers:

* ``get_params()`` -- the hyper-parameters (the constructor's arguments);
* ``_model_class`` and ``_model_spec()`` -- the fitted model's class and the
  keyword arguments that rebuild it (``dtype`` as a name); this is the one
  per-class hook. The model class needs a static ``n_params`` whose arguments
  are keys of the spec, so that sizes read from a file can be checked against
  the weights really present before anything of that size is allocated;
* fitted attributes, named with a trailing underscore, of plain types:
  ``model_`` (weights by their ``params`` names), ``optimizer_`` (an AdamW:
  moments by the same names, step count and settings), numpy Generators (their
  bit-generator state), numbers / strings / None, lists of numbers and numeric
  or string arrays.

Array names: the model's ``params`` names as they are (``Wq``, ``layers.0.W1``,
...), ``optimizer.exp_avg.<name>`` and ``optimizer.exp_avg_sq.<name>`` for the
AdamW moments (torch.optim.AdamW's names), ``attribute.<name>`` for array-valued
fitted attributes (``loss_curve_`` ...). Private attributes (leading underscore)
are caches and are never stored.
"""
from __future__ import annotations

import inspect
import json
import math
from typing import Any

import numpy as np

from ._params import check_dtype
from .optim import AdamW

__all__ = ["get_state", "set_state", "new_from_state", "STATE_KEYS"]

OPT_M, OPT_V, ATTR = "optimizer.exp_avg.", "optimizer.exp_avg_sq.", "attribute."
STATE_KEYS = ("class", "params", "fitted", "model", "optimizer", "attributes")

Arrays = dict[str, np.ndarray]
Config = dict[str, Any]


class StateError(ValueError):
    """The stored state is inconsistent (a damaged or altered file or pickle)."""


# ---- estimator -> (arrays, config) -----------------------------------------------------
def get_state(est: Any, *, portable: bool) -> tuple[Arrays, Config]:
    """(arrays, config) holding everything needed to rebuild `est` exactly.

    portable=True makes config JSON-able (for files): the dtype parameter goes in
    as its name (with the form it was given in), tuples as lists, and a
    random_state that is a numpy Generator or RandomState as None (the shuffling
    state is stored anyway, so only a later fit() from scratch is affected).
    portable=False keeps the parameters as they are (for pickle).
    """
    params = est.get_params()
    config: Config = {"class": type(est).__name__, "portable": portable,
                      "params": _params_to_json(params) if portable else dict(params),
                      "fitted": False, "attributes": {}}
    arrays: Arrays = {}
    fitted = {k: v for k, v in vars(est).items()
              if k.endswith("_") and not k.startswith("_") and not k.endswith("__")}
    if "model_" in fitted:
        config["fitted"] = True
        model = fitted.pop("model_")
        config["model"] = _jsonable(est._model_spec(), "the model spec")
        for name, w in model.params.items():
            arrays[name] = np.ascontiguousarray(w)
        opt = fitted.pop("optimizer_", None)
        if opt is not None:
            config["optimizer"] = {"t": int(opt.t), "lr": opt.lr, "betas": list(opt.betas),
                                   "eps": opt.eps, "weight_decay": opt.weight_decay}
            for prefix, bufs in ((OPT_M, opt.m), (OPT_V, opt.v)):
                for name, w in _moment_views(model.params, bufs).items():
                    arrays[prefix + name] = np.ascontiguousarray(w)
    elif "optimizer_" in fitted:
        raise TypeError("an estimator with optimizer_ but no model_ cannot be stored")
    for k, v in fitted.items():
        config["attributes"][k] = _encode_attribute(k, v, arrays)
    return arrays, config


def _moment_views(params: Any, bufs: list[np.ndarray]) -> dict[str, np.ndarray]:
    """AdamW moment buffers viewed with the layout of the model's named weights."""
    flat = params.flat
    if len(bufs) != 1 or bufs[0].shape != flat.shape:
        raise TypeError("the optimizer does not hold one moment buffer per flat weight "
                        "buffer; only AdamW over a model's .params can be stored")
    out = {}
    for name, w in params.items():
        off = (w.__array_interface__["data"][0] - flat.__array_interface__["data"][0])
        out[name] = np.lib.stride_tricks.as_strided(bufs[0][off // flat.itemsize:],
                                                    shape=w.shape, strides=w.strides,
                                                    writeable=True)
    return out


def _encode_attribute(k: str, v: Any, arrays: Arrays) -> Config:
    if isinstance(v, np.random.Generator):
        return {"kind": "generator", "state": _jsonable(v.bit_generator.state, k)}
    if v is None or isinstance(v, (bool, str)):
        return {"kind": "value", "value": v}
    if isinstance(v, (int, np.integer)):
        return {"kind": "value", "value": int(v)}
    if isinstance(v, (float, np.floating)):
        return {"kind": "float", "value": _float_json(float(v))}
    if isinstance(v, (list, tuple)) and all(isinstance(x, (int, float, np.number))
                                            and not isinstance(x, bool) for x in v):
        is_int = all(isinstance(x, (int, np.integer)) for x in v) and len(v) > 0
        arrays[ATTR + k] = np.asarray(v, dtype=np.int64 if is_int else np.float64)
        return {"kind": type(v).__name__}
    if isinstance(v, np.ndarray):
        if v.dtype.kind in "biuf":
            arrays[ATTR + k] = np.ascontiguousarray(v)
            return {"kind": "ndarray"}
        if v.dtype.kind == "U":
            return {"kind": "str_array", "dtype": v.dtype.str, "shape": list(v.shape),
                    "value": v.ravel().tolist()}
    raise TypeError(f"fitted attribute {k} = {type(v).__name__} cannot be stored "
                    f"(attnx stores numbers, strings, lists of numbers, numeric or string "
                    f"arrays and numpy Generators)")


def _float_json(x: float) -> float | str:
    return x if math.isfinite(x) else repr(x)  # 'inf', '-inf', 'nan': strict JSON


def _jsonable(obj: Any, what: str) -> Any:
    try:
        json.dumps(obj, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} cannot be stored as JSON: {exc}") from exc
    return obj


def _params_to_json(params: dict[str, Any]) -> Config:
    out: Config = {}
    for k, v in params.items():
        if k == "dtype":
            v = {"name": np.dtype(v).name,
                 "given_as": ("str" if isinstance(v, str) else
                              "dtype" if isinstance(v, np.dtype) else "type")}
        elif k == "random_state" and isinstance(v, (np.random.Generator,
                                                    np.random.RandomState,
                                                    np.random.SeedSequence)):
            v = None
        elif isinstance(v, tuple):
            v = {"tuple": [x.item() if isinstance(x, np.generic) else x for x in v]}
        elif isinstance(v, np.generic):
            v = v.item()
        elif isinstance(v, float) and not math.isfinite(v):
            v = {"float": repr(v)}
        out[k] = _jsonable(v, f"parameter {k}={v!r}")
    return out


def _params_from_json(params: Config) -> Config:
    out: Config = {}
    for k, v in params.items():
        if k == "dtype" and isinstance(v, dict):
            dt = check_dtype(v["name"])
            form = v.get("given_as")
            v = v["name"] if form == "str" else dt if form == "dtype" else dt.type
        elif isinstance(v, dict) and set(v) == {"tuple"}:
            v = tuple(v["tuple"])
        elif isinstance(v, dict) and set(v) == {"float"}:
            v = float(v["float"])
        out[k] = v
    return out


# ---- (arrays, config) -> estimator -----------------------------------------------------
def new_from_state(arrays: Arrays, config: Config, classes: dict[str, type]) -> Any:
    """A new estimator of config["class"] (looked up in `classes`) with that state."""
    if not isinstance(config, dict) or not isinstance(config.get("class"), str):
        raise StateError("no estimator class recorded")
    cls = classes.get(config["class"])
    if cls is None:
        raise StateError(f"unknown estimator class {config['class']!r}")
    est = cls.__new__(cls)
    set_state(est, arrays, config)
    return est


def set_state(est: Any, arrays: Arrays, config: Config) -> None:
    """Fill a new (empty) instance `est` from get_state's output. StateError (a
    ValueError) when the pieces do not fit together."""
    if config.get("class") != type(est).__name__:
        raise StateError(f"the state is that of a {config.get('class')!r}, not of a "
                         f"{type(est).__name__}")
    params = config["params"]
    if not isinstance(params, dict):
        raise StateError("the parameters are not a mapping")
    if config.get("portable"):
        params = _params_from_json(params)
    valid = set(est._param_names())
    if set(params) != valid:
        raise StateError(f"the stored parameters {sorted(params)} are not those of "
                         f"{type(est).__name__} {sorted(valid)}")
    est.__dict__.update(params)
    used = set()
    if config.get("fitted"):
        used = _restore_model(est, arrays, config)
    attributes = config.get("attributes", {})
    if not isinstance(attributes, dict):
        raise StateError("the fitted attributes are not a mapping")
    for k, spec in attributes.items():
        if not (isinstance(k, str) and k.endswith("_") and not k.startswith("_")
                and k.isidentifier() and not k.endswith("__")) or k in ("model_", "optimizer_"):
            raise StateError(f"invalid fitted attribute name {k!r}")
        setattr(est, k, _decode_attribute(k, spec, arrays))
        if ATTR + k in arrays:
            used.add(ATTR + k)
    extra = set(arrays) - used
    if extra:
        raise StateError(f"unexpected arrays {sorted(extra)[:5]}")


def _restore_model(est: Any, arrays: Arrays, config: Config) -> set[str]:
    spec = dict(config["model"])
    model_class = est._model_class
    spec["dtype"] = check_dtype(spec["dtype"])
    _check_model_size(model_class, spec, arrays)
    kwargs: Config = dict(spec, random_state=0)
    if "input_grad" in inspect.signature(model_class).parameters:
        kwargs["input_grad"] = False  # estimators never need dL/dX
    model = model_class(**kwargs)
    used = set()
    for name, w in model.params.items():
        _copy_checked(name, w, arrays)
        used.add(name)
    est.model_ = model
    hyper = config.get("optimizer")
    if hyper is not None:
        opt = AdamW(model.params, lr=hyper["lr"], betas=tuple(hyper["betas"]),
                    eps=hyper["eps"], weight_decay=hyper["weight_decay"])
        t = hyper["t"]
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            raise StateError(f"invalid optimizer step count {t!r}")
        opt.t = t
        for prefix, bufs in ((OPT_M, opt.m), (OPT_V, opt.v)):
            for name, view in _moment_views(model.params, bufs).items():
                _copy_checked(prefix + name, view, arrays)
                used.add(prefix + name)
        est.optimizer_ = opt
    return used


def _check_model_size(model_class: type, spec: Config, arrays: Arrays) -> None:
    """Sizes come from a file or a pickle: before building (and allocating) the model,
    its parameter count from the spec must equal the weights really present."""
    n_params = getattr(model_class, "n_params", None)
    if n_params is None:
        raise TypeError(f"{model_class.__name__} needs a static n_params(...) so that its "
                        f"size can be checked before it is rebuilt")
    sig = inspect.signature(n_params)
    missing = [p for p in sig.parameters if p not in spec]
    if missing:
        raise StateError(f"the model spec lacks {missing}")
    for p in sig.parameters:
        v = spec[p]
        if not isinstance(v, (int, bool, type(None))):
            raise StateError(f"model size {p}={v!r} is not an integer")
        if isinstance(v, int) and not isinstance(v, bool) and v < 0:
            raise StateError(f"model size {p}={v!r} is negative")
    expected = n_params(**{p: spec[p] for p in sig.parameters})
    # weights are the arrays outside the optimizer and attribute namespaces
    present = sum(a.size for k, a in arrays.items()
                  if not k.startswith((OPT_M, OPT_V, ATTR)))
    if expected != present:
        raise StateError(f"the weights ({present} values) do not fit the model "
                         f"(which needs {expected})")


def _copy_checked(name: str, dst: np.ndarray, arrays: Arrays) -> None:
    src = arrays.get(name)
    if src is None:
        raise StateError(f"array {name!r} is missing")
    if src.shape != dst.shape or src.dtype != dst.dtype:
        raise StateError(f"array {name!r} is {src.dtype} {src.shape}, the model needs "
                         f"{dst.dtype} {dst.shape}")
    np.copyto(dst, src)


def _decode_attribute(k: str, spec: Any, arrays: Arrays) -> Any:
    if not isinstance(spec, dict):
        raise StateError(f"invalid record for attribute {k}")
    kind = spec.get("kind")
    if kind == "generator":
        state = spec["state"]
        name = state.get("bit_generator") if isinstance(state, dict) else None
        bitgen = getattr(np.random, str(name), None)
        if name not in ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64"):
            raise StateError(f"unsupported random generator {name!r} for {k}")
        assert bitgen is not None
        gen = np.random.Generator(bitgen())
        gen.bit_generator.state = state
        return gen
    if kind == "value":
        return spec["value"]
    if kind == "float":
        return float(spec["value"])
    if kind in ("list", "tuple", "ndarray"):
        a = arrays.get(ATTR + k)
        if a is None:
            raise StateError(f"array {ATTR + k!r} is missing")
        if kind == "ndarray":
            return a
        if a.ndim != 1:
            raise StateError(f"{ATTR + k!r} must be 1-D, got shape {a.shape}")
        items = a.tolist()
        return items if kind == "list" else tuple(items)
    if kind == "str_array":
        a = np.array(spec["value"], dtype=np.dtype(spec["dtype"]))
        if a.dtype.kind != "U":
            raise StateError(f"{k} is not a string array")
        return a.reshape(spec["shape"])
    raise StateError(f"unknown kind {kind!r} for attribute {k}")
