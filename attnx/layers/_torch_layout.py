"""PyTorch weight layouts, in plain NumPy (torch is never imported here).

attnx keeps weights so that Y = X @ W (W is (in, out)); torch.nn.Linear and
torch.nn.MultiheadAttention keep them as (out, in) and compute X @ W^T. The
mapping for one attention layer of width d, to and from
``torch.nn.MultiheadAttention(d, h, bias=..., batch_first=True)``::

    in_proj_weight  (3d, d)  = concat(Wq^T, Wk^T, Wv^T)     rows q, k, v
    in_proj_bias    (3d,)    = concat(bq, bk, bv)            (bias=True only)
    out_proj.weight (d, d)   = Wo^T
    out_proj.bias   (d,)     = bo                            (bias=True only)

torch's heads are the same contiguous slices of d_head features as attnx's, so
no reordering is needed within the projections.

State dicts here are plain mappings of name -> array-like: a torch state dict
(``module.state_dict()``, whose tensors are detached) converts through
``numpy.asarray``; going the other way, ``{k: torch.from_numpy(v) for k, v in
sd.items()}`` gives what ``module.load_state_dict`` takes.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["attention_to_torch", "attention_from_torch", "attention_torch_shapes", "as_arrays",
           "check_and_assign", "encoder_layer_state_dict", "load_encoder_layer_state_dict"]


def attention_to_torch(params: Mapping[str, np.ndarray], d: int, bias: bool, *,
                       src: str = "", dst: str = "") -> dict[str, np.ndarray]:
    """torch.nn.MultiheadAttention state (keys prefixed with dst) from attnx weights
    params[src + "Wq"], ... (copies, C-contiguous)."""
    out = {dst + "in_proj_weight": np.ascontiguousarray(np.concatenate(
        [params[src + k].T for k in ("Wq", "Wk", "Wv")], axis=0)),
        dst + "out_proj.weight": np.ascontiguousarray(params[src + "Wo"].T)}
    if bias:
        out[dst + "in_proj_bias"] = np.concatenate([params[src + k] for k in ("bq", "bk", "bv")])
        out[dst + "out_proj.bias"] = params[src + "bo"].copy()
    return out


def attention_from_torch(sd: Mapping[str, np.ndarray], d: int, bias: bool, *,
                         src: str = "", dst: str = "") -> dict[str, np.ndarray]:
    """attnx weights {dst + "Wq": ..., ...} from a torch.nn.MultiheadAttention state
    whose keys carry the prefix src (arrays already converted by _arrays)."""
    w = sd[src + "in_proj_weight"]
    out = {dst + "Wq": w[:d].T, dst + "Wk": w[d:2 * d].T, dst + "Wv": w[2 * d:].T,
           dst + "Wo": sd[src + "out_proj.weight"].T}
    if bias:
        b = sd[src + "in_proj_bias"]
        out.update({dst + "bq": b[:d], dst + "bk": b[d:2 * d], dst + "bv": b[2 * d:],
                    dst + "bo": sd[src + "out_proj.bias"]})
    return out


def attention_torch_shapes(d: int, bias: bool, prefix: str = "") -> dict[str, tuple[int, ...]]:
    """The keys and shapes of torch.nn.MultiheadAttention(d, h, bias=bias)'s state."""
    shapes: dict[str, tuple[int, ...]] = {prefix + "in_proj_weight": (3 * d, d),
                                          prefix + "out_proj.weight": (d, d)}
    if bias:
        shapes.update({prefix + "in_proj_bias": (3 * d,), prefix + "out_proj.bias": (d,)})
    return shapes


def as_arrays(state_dict: Any, shapes: Mapping[str, tuple[int, ...]],
              what: str) -> dict[str, np.ndarray]:
    """The entries of state_dict as float64 NumPy arrays after checking that the keys
    are exactly those of `shapes` and every array has its shape and is finite."""
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"state_dict must be a mapping of name -> array (a torch "
                        f"state_dict()), got {type(state_dict).__name__}")
    keys = set(state_dict)
    missing, extra = sorted(set(shapes) - keys), sorted(keys - set(shapes))
    if missing or extra:
        raise ValueError(f"state_dict does not match {what}: missing keys {missing}, "
                         f"unexpected keys {extra}")
    out = {}
    for k, shape in shapes.items():
        v = state_dict[k]
        try:
            a = np.asarray(v)
        except (TypeError, RuntimeError) as exc:  # e.g. a torch tensor requiring grad
            raise TypeError(f"state_dict[{k!r}] cannot be read as a NumPy array ({exc}); "
                            f"pass module.state_dict() or detached CPU tensors") from exc
        if a.dtype.kind not in "fiu" or a.shape != shape:
            raise ValueError(f"state_dict[{k!r}] must be a real array of shape {shape}, "
                             f"got {a.dtype} {a.shape}")
        a = a.astype(np.float64)
        if not np.isfinite(a).all():
            raise ValueError(f"state_dict[{k!r}] contains NaN or infinity")
        out[k] = a
    return out


def check_and_assign(params: Any, values: Mapping[str, np.ndarray]) -> None:
    """Write values into the model's params (views), all or nothing: every value is
    cast and checked first (a float64 value too large for float32 is refused)."""
    cast = {}
    for k, v in values.items():
        dst = params[k]
        with np.errstate(over="ignore"):
            c = np.asarray(v, dtype=dst.dtype)
        if not np.isfinite(c).all():
            raise ValueError(f"{k} overflows {dst.dtype}")
        cast[k] = c
    for k, c in cast.items():
        params[k][...] = c


# ---- SequenceModel pre-norm blocks <-> torch.nn.TransformerEncoderLayer -------------------
_LN = (("norm1", "ln1"), ("norm2", "ln2"))
_LINEAR = (("linear1", "W1", "b1"), ("linear2", "W2", "b2"))


def _encoder_layer_shapes(d: int, d_hidden: int, bias: bool) -> dict[str, tuple[int, ...]]:
    shapes = attention_torch_shapes(d, bias, "self_attn.")
    shapes.update({"linear1.weight": (d_hidden, d), "linear2.weight": (d, d_hidden),
                   "norm1.weight": (d,), "norm2.weight": (d,)})
    if bias:
        shapes.update({"linear1.bias": (d_hidden,), "linear2.bias": (d,),
                       "norm1.bias": (d,), "norm2.bias": (d,)})
    return shapes


def encoder_layer_state_dict(params: Mapping[str, np.ndarray], prefix: str, d: int,
                             bias: bool) -> dict[str, np.ndarray]:
    """A pre-norm SequenceModel block's weights (params[prefix + "Wq"], ...; d_model d)
    as the state dict (NumPy arrays) of ``torch.nn.TransformerEncoderLayer(d_model,
    n_heads, d_hidden, dropout=0, activation=F.silu, batch_first=True, norm_first=True,
    bias=bias)``.

    Keys: self_attn.* (see attention_to_torch), linear1/linear2 weight (out, in) and
    bias, norm1/norm2 weight and bias (ln1/ln2 gains and biases). torch's layer has
    no rotary positions (give it positional != 'rope' models for equal outputs) and
    takes the causal mask as src_mask / is_causal. With bias=False torch's
    LayerNorms have no bias either, so attnx's ln biases must then be zero.
    """
    w, p = params, prefix
    out = attention_to_torch(w, d, bias, src=p, dst="self_attn.")
    for tname, wname, bname in _LINEAR:
        out[f"{tname}.weight"] = np.ascontiguousarray(w[p + wname].T)
        if bias:
            out[f"{tname}.bias"] = w[p + bname].copy()
    for tname, aname in _LN:
        out[f"{tname}.weight"] = w[f"{p}{aname}.g"].copy()
        if bias:
            out[f"{tname}.bias"] = w[f"{p}{aname}.b"].copy()
        elif np.any(w[f"{p}{aname}.b"] != 0):
            raise ValueError(f"{p}{aname}.b is not zero, but torch's TransformerEncoderLayer "
                             f"with bias=False has no LayerNorm bias")
    return out


def load_encoder_layer_state_dict(params: Mapping[str, np.ndarray], prefix: str, d: int,
                                  d_hidden: int, n_heads: int, bias: bool,
                                  state_dict: Any) -> None:
    """Set a pre-norm SequenceModel block's weights (params[prefix + ...], live views)
    from a torch.nn.TransformerEncoderLayer state dict (the inverse of
    encoder_layer_state_dict; keys and shapes must match exactly; all or nothing).
    With bias=False the ln biases are set to zero."""
    p = prefix
    sd = as_arrays(state_dict, _encoder_layer_shapes(d, d_hidden, bias),
                   f"torch.nn.TransformerEncoderLayer({d}, {n_heads}, {d_hidden}, "
                   f"bias={bias}, norm_first=True)")
    values = attention_from_torch(sd, d, bias, src="self_attn.", dst=p)
    for tname, wname, bname in _LINEAR:
        values[p + wname] = sd[f"{tname}.weight"].T
        if bias:
            values[p + bname] = sd[f"{tname}.bias"]
    for tname, aname in _LN:
        values[f"{p}{aname}.g"] = sd[f"{tname}.weight"]
        values[f"{p}{aname}.b"] = sd[f"{tname}.bias"] if bias else np.zeros(d)
    check_and_assign(params, values)
