"""The networks the estimators train, behind one interface.

An estimator trains either a SequenceModel (embedding, positions, blocks, pooling,
head) or, for the original regressors' X -> Y task, a bare MultiHeadAttention /
Transformer. Both are driven alike (forward, backward, params, grads,
get_config, validation_grad); what differs is how each is built from the
hyper-parameters, which targets it takes, how long its inputs may be and how its
architecture is written to a model file. Each kind of network is one class here,
so the estimators hold no branch on the kind: they ask `network_of(spec, bare)`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import _sequences as seqs
from ..layers import _stem
from . import _targets
from ..runtime._params import check_dtype
from ..layers.sequence import SequenceModel
from ..layers.transformer import Transformer

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Union

    from numpy.typing import DTypeLike, NDArray

    from ._hyper import Config
    from ..runtime._typing import AnyArray, FloatArray, IntArray
    from ..layers.attention import MultiHeadAttention
    from ..distributed import Local

    Model = Union[MultiHeadAttention, Transformer, SequenceModel]
    BareClass = Union[type[MultiHeadAttention], type[Transformer]]
    from ..layers._stem import Stem
    F64Array = NDArray[np.float64]


class Network:
    """One kind of network: build, targets, inputs and file spec."""

    #: whether the network ends in an output head of its own width (n_outputs_)
    head = True

    def spec(self, cfg: Config, data: seqs.Data, n_out: int, pooled: bool, dist: Local, *,
             stem: Stem | None = None, instance_norm: str | None = None, patch: int = 1,
             position_scale: float = 1.0) -> dict[str, Any]:
        """The architecture of a new network for the tokens `data` (patches of `patch`
        steps) and these settings, as the model file records it (the fit plan's
        network); position_scale multiplies a sequence model's sinusoidal positions."""
        raise NotImplementedError

    def build(self, spec: Mapping[str, Any], seed: int) -> Model:
        """A new network of that architecture, its weights drawn from seed."""
        raise NotImplementedError

    def restore(self, spec: Mapping[str, Any], params: AnyArray) -> Model:
        """The network a file's spec describes, after checking that the weights
        `params` fit it (ValueError otherwise); the weights are not copied in."""
        raise NotImplementedError

    def regression_data(self, x: FloatArray, lengths: IntArray | None, ragged: bool, y: Any,
                        w: F64Array | None, dtype: DTypeLike
                        ) -> tuple[seqs.Data, bool, int | None]:
        """(Data, per_position, k) of regression targets for this network."""
        raise NotImplementedError

    def check_length(self, spec: Mapping[str, Any], t: int) -> None:
        """ValueError when sequences of length t are longer than the network accepts."""

    def attention_weights(self, model: Model, inputs: Callable[[], FloatArray], rows: int
                          ) -> FloatArray | list[FloatArray]:
        """Attention probabilities on inputs() (the validated X), in chunks of about
        `rows` rows: the bare network's only."""
        raise ValueError("attention_weights is available for the bare X -> Y model "
                         "only (d_model=None with y of X's shape)")


def _check_size(params: AnyArray, expected: int) -> None:
    # sizes come from a file or a pickle: check them against the weights that are
    # really there before building (and allocating) a model of that size
    if params.ndim != 1 or expected != params.size:
        raise ValueError(f"the weights ({params.size} values) do not fit the model "
                         f"(which needs {expected})")


class SequenceNetwork(Network):
    """attnx.SequenceModel; its spec is {"kind": "sequence", constructor arguments}."""

    def spec(self, cfg: Config, data: seqs.Data, n_out: int, pooled: bool, dist: Local, *,
             stem: Stem | None = None, instance_norm: str | None = None, patch: int = 1,
             position_scale: float = 1.0) -> dict[str, Any]:
        f = data.x.shape[2]
        d = f if cfg.d_model is None else cfg.d_model
        if d % cfg.n_heads:
            hint = (" (d_model=None means the number of features; set d_model to choose "
                    "the model's width)" if cfg.d_model is None else "")
            raise ValueError(f"n_heads={cfg.n_heads} must divide d_model={d}{hint}")
        positional = "rope" if cfg.rope else cfg.positional
        max_len = cfg.max_len
        if positional == "learned" and max_len is None:   # the longest sequence's tokens
            max_len = _stem.lengths(stem, int(dist.allmax(data.x.shape[1])))[-1]
        spec = dict(kind="sequence", n_features=f, d_model=d, n_heads=cfg.n_heads,
                    n_layers=cfg.n_layers, n_outputs=n_out, d_hidden=cfg.d_hidden,
                    pooling=cfg.pooling if pooled else None, positional=positional,
                    norm=cfg.norm, causal=cfg.causal, bias=cfg.bias, dropout=cfg.dropout,
                    max_len=max_len, stem=stem, dtype=cfg.dtype.name)
        if instance_norm is not None:   # a patch's steps are the series' steps
            spec.update(instance_norm=instance_norm, instance_affine=cfg.instance_affine,
                        instance_steps=patch)
        if positional == "sinusoidal" and position_scale != 1.0:   # written when not 1
            spec.update(position_scale=float(position_scale))
        return spec

    def build(self, spec: Mapping[str, Any], seed: int) -> Model:
        return self._build(spec, seed)

    @staticmethod
    def _build(spec: Mapping[str, Any], seed: int) -> SequenceModel:
        spec = {k: v for k, v in spec.items() if k != "kind"}
        args = [spec.pop(k) for k in ("n_features", "d_model", "n_heads", "n_layers",
                                      "n_outputs")]
        spec["dtype"] = check_dtype(spec["dtype"])
        model = SequenceModel(*args, **spec, random_state=seed)
        model.input_grad = False  # dL/dX is never needed here
        return model

    def restore(self, spec: Mapping[str, Any], params: AnyArray) -> Model:
        _check_size(params, SequenceModel.config_n_params(spec))
        return self._build(spec, 0)

    def regression_data(self, x: FloatArray, lengths: IntArray | None, ragged: bool, y: Any,
                        w: F64Array | None, dtype: DTypeLike
                        ) -> tuple[seqs.Data, bool, int | None]:
        return _targets.regression_data(x, lengths, ragged, y, w, dtype)

    def check_length(self, spec: Mapping[str, Any], t: int) -> None:
        stem = _stem.check_stem(spec.get("stem"))
        n = _stem.lengths(stem, t)[-1]   # ValueError for a kernel longer than the input
        if spec["positional"] == "learned" and n > spec["max_len"]:
            what = f"{n} tokens after the stem" if stem else f"length {t}"
            raise ValueError(f"X has sequences of {what}, longer than "
                             f"max_len={spec['max_len']} of the learned positions")


class BareNetwork(Network):
    """The bare MultiHeadAttention / Transformer mapping X to Y of X's own shape; its
    spec is the model's get_config()."""

    head = False

    def __init__(self, cls: BareClass) -> None:
        self.cls = cls

    def fits(self, cfg: Config) -> bool:
        """Whether the settings ask for nothing the bare network lacks (no width,
        positions other than rotary ones, norm, dropout or max_len; an MLP width for a
        Transformer only)."""
        return (cfg.d_model is None and cfg.positional in ("none", "rope") and cfg.norm is None
                and cfg.dropout == 0 and cfg.max_len is None and cfg.stem is None
                and cfg.instance_norm in (None, "auto")
                and (issubclass(self.cls, Transformer) or cfg.d_hidden is None))

    def spec(self, cfg: Config, data: seqs.Data, n_out: int, pooled: bool, dist: Local, *,
             stem: Stem | None = None, instance_norm: str | None = None, patch: int = 1,
             position_scale: float = 1.0) -> dict[str, Any]:
        """The layer's get_config() of X's width and the settings."""
        spec: dict[str, Any] = dict(d_model=int(data.x.shape[2]), n_heads=cfg.n_heads,
                                    causal=cfg.causal, bias=cfg.bias, rope=cfg.rope,
                                    dtype=cfg.dtype.name, attention="auto")
        if issubclass(self.cls, Transformer):   # Transformer's default width: 4 d_model
            spec.update(n_layers=cfg.n_layers, d_hidden=(4 * spec["d_model"] if cfg.d_hidden
                                                         is None else cfg.d_hidden))
        return spec

    def build(self, spec: Mapping[str, Any], seed: int) -> Model:
        kw = dict(spec)
        kw["dtype"] = check_dtype(kw["dtype"])
        # dL/dX is never needed here
        return self.cls(**kw, random_state=seed, input_grad=False)

    def restore(self, spec: Mapping[str, Any], params: AnyArray) -> Model:
        _check_size(params, self.cls.config_n_params(spec))
        return self.build({k: v for k, v in spec.items() if k != "kind"}, 0)

    def regression_data(self, x: FloatArray, lengths: IntArray | None, ragged: bool, y: Any,
                        w: F64Array | None, dtype: DTypeLike
                        ) -> tuple[seqs.Data, bool, int | None]:
        return _targets.bare_data(x, y, w, dtype), True, x.shape[2]

    def attention_weights(self, model: Model, inputs: Callable[[], FloatArray], rows: int
                          ) -> FloatArray | list[FloatArray]:
        """Attention probabilities on inputs(): (n, n_heads, T, T), or one such array
        per layer of a Transformer."""
        x = inputs()
        n, t, _ = x.shape
        step = max(1, rows // t)
        parts: list[list[FloatArray]] = []
        for s in range(0, n, step):
            model.forward(x[s:s + step], grad=True)  # grad=True keeps the probabilities
            w = model.attention_weights()
            parts.append(w if isinstance(w, list) else [w])
        layers: list[FloatArray] = [np.concatenate(p, axis=0) for p in zip(*parts)]
        return layers if issubclass(self.cls, Transformer) else layers[0]


def network_of(spec: Mapping[str, Any], bare: BareClass | None, owner: str) -> Network:
    """The Network of a fitted estimator's spec (or of a file's): a SequenceModel's
    spec says kind="sequence"; any other is the estimator's bare class."""
    if spec.get("kind") == "sequence":
        return SequenceNetwork()
    if bare is None:
        raise ValueError(f"a {owner} has no model of kind {spec.get('kind', 'legacy')!r}")
    return BareNetwork(bare)
