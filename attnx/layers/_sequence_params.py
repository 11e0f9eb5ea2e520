"""SequenceModel's weights: the one table of parameter sizes, their allocation in one
flat buffer (with the gradients beside), their initialisation and the order of the
`params` mapping."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from . import _instance_norm, _stem
from ._model_plan import model_plan
from ..runtime._params import FlatAllocator, ParamDict
from .attention import MultiHeadAttention

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..runtime._typing import FloatArray, RandomStateLike


class _Built(NamedTuple):
    """What build() makes for a model."""

    attn: list[MultiHeadAttention]
    dropout_rng: np.random.Generator
    w: dict[str, FloatArray]
    g: dict[str, FloatArray]
    params: ParamDict
    grads: ParamDict


def param_layout(config: Mapping[str, Any]) -> list[tuple[str, tuple[int, ...]]]:
    """SequenceModel.param_layout: (name, shape) of every weight, in the flat buffer's
    order: the model description's stages in order (attnx.layers._model_plan), each
    with its weights."""
    f, d, k = int(config["n_features"]), int(config["d_model"]), int(config["n_outputs"])
    dh = 4 * d if config["d_hidden"] is None else int(config["d_hidden"])
    bias = bool(config["bias"])
    _stem.check_stem(config.get("stem"))   # a configuration read from a file
    out: list[tuple[str, tuple[int, ...]]] = []
    for st in model_plan(config):
        p = st.prefix
        if st.kind == "instance_norm":
            # configurations written before instance normalisation existed have none
            out += _instance_norm.param_layout(st.how,
                                               bool(config.get("instance_affine", False)),
                                               f // int(config.get("instance_steps", 1)))
        elif st.kind == "stem":
            out += [(p + "W", (st.kernel * st.width_in, d)), (p + "b", (d,))]
        elif st.kind in ("embed", "head"):
            out += [(p + "W", (st.width_in, st.width_out)), (p + "b", (st.width_out,))]
        elif st.kind == "positions" and st.how == "learned":
            out.append((p + "P", (int(config["max_len"]), d)))
        elif st.kind == "cls":
            out.append((p, (d,)))
        elif st.kind == "block":
            out += [(p + "attn", (MultiHeadAttention.n_params(d, bias),)),
                    (p + "W1", (d, dh)), (p + "W2", (dh, d))]
            if bias:
                out += [(p + "b1", (dh,)), (p + "b2", (d,))]
            if st.how == "pre":
                out += [(p + n, (d,)) for n in ("ln1.g", "ln1.b", "ln2.g", "ln2.b")]
        elif st.kind == "final_norm":
            out += [(p + "g", (d,)), (p + "b", (d,))]
    return out


def build(config: Mapping[str, Any], random_state: RandomStateLike) -> _Built:
    """The weights of the model get_config() describes (its checked configuration),
    initialised as SequenceModel's docstring says, and its attention layers on views
    of them."""
    d, L, k = int(config["d_model"]), int(config["n_layers"]), int(config["n_outputs"])
    dh = 4 * d if config["d_hidden"] is None else int(config["d_hidden"])
    pre, bias = config["norm"] == "pre", bool(config["bias"])
    dtype, positional = np.dtype(config["dtype"]), config["positional"]
    a = FlatAllocator()
    spans: dict[str, tuple[int, tuple[int, ...]]] = {}
    att_start = []
    for name, shape in param_layout(config):
        start = a.reserve(int(np.prod(shape)))
        if name.endswith(".attn"):
            att_start.append(start)
        else:
            spans[name] = (start, shape)
    max_len = config["max_len"]   # an int with positional="learned" (checked by the model)
    theta = np.zeros(a.size, dtype)
    grad = np.zeros(a.size, dtype)

    def view(flat: FloatArray, name: str) -> FloatArray:
        st, shape = spans[name]
        return flat[st:st + int(np.prod(shape))].reshape(shape)

    w = {n: view(theta, n) for n in spans}
    g = {n: view(grad, n) for n in spans}
    rng = np.random.default_rng(random_state)
    fe = w["embed.W"].shape[0]
    w["embed.W"][...] = rng.uniform(-1 / np.sqrt(fe), 1 / np.sqrt(fe), size=(fe, d))
    attn: list[MultiHeadAttention] = []
    for i in range(L):
        att = MultiHeadAttention(d, int(config["n_heads"]), causal=bool(config["causal"]),
                                 bias=bias, rope=positional == "rope", dtype=dtype,
                                 random_state=rng, attention="auto",
                                 _storage=(theta, grad, att_start[i]))
        attn.append(att)
        for n, v in att.params.items():
            w[f"layers.{i}.{n}"] = v
            g[f"layers.{i}.{n}"] = att.grads[n]
        w[f"layers.{i}.W1"][...] = rng.uniform(-1 / np.sqrt(d), 1 / np.sqrt(d), size=(d, dh))
        w[f"layers.{i}.W2"][...] = rng.uniform(-1 / np.sqrt(dh), 1 / np.sqrt(dh), size=(dh, d))
        if pre:
            w[f"layers.{i}.ln1.g"][...] = 1
            w[f"layers.{i}.ln2.g"][...] = 1
    if pre:
        w["norm.g"][...] = 1
    if positional == "learned" and max_len is not None:
        w["pos.P"][...] = rng.normal(0.0, 0.02, size=(max_len, d))
    w["head.W"][...] = rng.uniform(-1 / np.sqrt(d), 1 / np.sqrt(d), size=(d, k))
    _stem.init(config.get("stem"), w, rng)
    _instance_norm.init(w)
    if config["pooling"] == "cls":
        w["cls"][...] = rng.normal(0.0, 0.02, size=d)
    # dropout masks come from their own stream, seeded from the same random_state
    dropout_rng = np.random.default_rng(rng.integers(0, 2**63 - 1))
    names = order(config)
    return _Built(attn, dropout_rng, w, g, ParamDict(theta, {n: w[n] for n in names}),
                  ParamDict(grad, {n: g[n] for n in names}))


def order(config: Mapping[str, Any]) -> list[str]:
    """The names of `params`, in order, of the model get_config() describes."""
    names = [n for n, _ in _instance_norm.param_layout(
        config.get("instance_norm"), bool(config.get("instance_affine", False)), 1)]
    names += [n for n, _ in _stem.param_layout(config.get("stem"), 1, 1)]
    names += ["embed.W", "embed.b"]
    names += (["pos.P"] if config["positional"] == "learned" else [])
    names += ["cls"] if config["pooling"] == "cls" else []
    per = ["Wq", "Wk", "Wv", "Wo", "W1", "W2"]
    if config["bias"]:
        per += ["bq", "bk", "bv", "bo", "b1", "b2"]
    if config["norm"] == "pre":
        per += ["ln1.g", "ln1.b", "ln2.g", "ln2.b"]
    for i in range(int(config["n_layers"])):
        names += [f"layers.{i}.{n}" for n in per]
    if config["norm"] == "pre":
        names += ["norm.g", "norm.b"]
    return names + ["head.W", "head.b"]
