"""The fit plan: every choice a fit makes from its training data, made once into one
frozen object (FitPlan) before the network is built.

`make(cfg, inputs, n_outputs, dist, ...)` decides, in this order: the length ragged
univariate series are resampled to, instance normalisation ("auto"), the convolutional
stem ("auto", or tokenizer="auto"'s short stem with its time shifts), PPV tokens or raw
patches and their length, the PPV transform (fitted here), and the network's
architecture. The estimator keeps the plan as plan_; building, training, saving and
predict read it (`tokens` turns series into the plan's tokens at fit and at predict
alike). Every rank of a distributed fit decides alike (dist): each rule that reads the
data reads every rank's.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np

from . import _augment, _resample, _scaling
from . import _sequences as seqs
from ..layers import _stem
from ._networks import network_of
from ._ppv_tokens import (AUTO_MIN_LENGTH, POSITION_SCALE, PPV_TOKENS, RAGGED_TOKENS,
                          PPVTokens, auto_pick, extent, ragged)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .. import distributed
    from ..runtime._typing import BoolArray, FloatArray, IntArray
    from ._hyper import Config
    from ._networks import Network

#: how patch() fills a partial last patch (attnx.estimators._sequences.patch)
FILL_RULES = ("last", "zero")


class Inputs(NamedTuple):
    """A fit's training data as the estimator read it, before any plan: the series as
    given (x, lengths, missing steps) with their targets, the network they are for, and
    the targets' kind (per position or not; k output columns, None for y (n,))."""

    data: seqs.Data
    network: Network
    per_position: bool
    k: int | None


@dataclasses.dataclass(frozen=True, eq=True)
class FitPlan:
    """What a fit decided from its data, kept as the fitted attribute plan_.

    network: the network's architecture (the model file's spec: kind="sequence" for a
    SequenceModel, else the bare X -> Y network's constructor arguments);
    per_position, k: the targets' kind; channels: X's features (n_features_in_);
    resample_length: ragged series resampled to this many steps (None: not);
    instance_norm, stem: as resolved; ppv: the fitted PPV transform (None: raw
    patches); patch_len: steps per token; patch_fill: how a partial last patch is
    filled; augment_shift: the training batches' largest time shift (None: none);
    epochs: the epochs the last fit trained for (None: not decided yet)."""

    network: Mapping[str, Any]
    per_position: bool
    k: int | None
    channels: int
    resample_length: int | None = None
    instance_norm: str | None = None
    stem: _stem.Stem | None = None
    ppv: PPVTokens | None = None
    patch_len: int = 1
    patch_fill: str = "last"
    augment_shift: int | None = None
    epochs: int | None = None

    def __post_init__(self) -> None:
        # a copy: the plan is not changed through a dict its maker still holds
        object.__setattr__(self, "network", dict(self.network))
        if self.patch_fill not in FILL_RULES:
            raise ValueError(f"patch_fill must be one of {FILL_RULES}, got {self.patch_fill!r}")
        for name in ("channels", "patch_len"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"the plan's {name} must be an int >= 1, got {v!r}")

    # ---- what the plan implies --------------------------------------------------
    @property
    def head(self) -> bool:
        """Whether the network ends in a head of its own (a SequenceModel)."""
        return self.network.get("kind") == "sequence"

    @property
    def tokenizer(self) -> str:
        """The plan's tokens: "ppv" or "patch"."""
        return "patch" if self.ppv is None else "ppv"

    @property
    def position_scale(self) -> float:
        """The factor of a sequence model's sinusoidal positions (PPV tokens: POSITION_SCALE)."""
        return 1.0 if self.ppv is None else POSITION_SCALE

    def same_tokens(self, other: FitPlan) -> bool:
        """Whether the two plans make the same kind of tokens (PPV or not, stem, patch
        length): tokenizer="select" fits such candidates once."""
        return ((self.ppv is None) == (other.ppv is None) and self.stem == other.stem
                and self.patch_len == other.patch_len)

    def with_epochs(self, epochs: int) -> FitPlan:
        """This plan with the epochs a fit trains for (given, automatic or chosen on
        held-out samples: attnx.estimators._estimator)."""
        return dataclasses.replace(self, epochs=int(epochs))

    # ---- tokens -----------------------------------------------------------------
    def tokens(self, x: FloatArray, lengths: IntArray | None, missing: BoolArray | None
               ) -> tuple[FloatArray, IntArray | None, BoolArray | None]:
        """(tokens, their lengths or None, their missing mask or None) of series x
        (n, T, C) as validated: resampled, then cut into the plan's tokens, as at fit."""
        if self.resample_length is not None:
            x, lengths = _resample.to_length(x, lengths, self.resample_length), None
        return self.tokenize(x, lengths, missing)

    def tokenize(self, x: FloatArray, lengths: IntArray | None, missing: BoolArray | None
                 ) -> tuple[FloatArray, IntArray | None, BoolArray | None]:
        """tokens() of series already resampled: PPV tokens, or patches of patch_len
        steps (p = 1: x itself)."""
        if self.ppv is not None:
            return self.ppv.transform(x, lengths, missing)
        p = self.patch_len
        px, plen = seqs.patch(x, lengths, p, missing, self.patch_fill)
        return px, plen, seqs.patch_missing(missing, lengths, p)

    # ---- printing and storing ---------------------------------------------------
    def __repr__(self) -> str:
        net = dict(self.network)
        kind = net.pop("kind", "bare")
        lines = [f"network={kind}({', '.join(f'{a}={b!r}' for a, b in net.items())})"]
        lines += [f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self)
                  if f.name != "network"]
        return "FitPlan(\n    " + ",\n    ".join(lines) + ")"

    def to_spec(self) -> dict[str, Any]:
        """JSON-able values (with tuples for the stem: attnx.estimators._state tags them)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["network"] = dict(self.network)
        out["ppv"] = None if self.ppv is None else self.ppv.to_spec()
        return out

    @classmethod
    def from_spec(cls, spec: Any) -> FitPlan:
        """The plan to_spec() wrote; ValueError when it does not fit together."""
        if not isinstance(spec, dict) or set(spec) != {f.name for f in dataclasses.fields(cls)}:
            raise ValueError("the fit plan's record does not hold the plan's fields")
        if not isinstance(spec["network"], dict):
            raise ValueError("the fit plan's network is not a mapping")
        values = dict(spec)
        values["ppv"] = PPVTokens.from_spec(spec["ppv"])
        values["stem"] = _stem.check_stem(spec["stem"])
        for name in ("per_position",):
            if not isinstance(values[name], bool):
                raise ValueError(f"the fit plan's {name} is not a bool")
        for name in ("k", "resample_length", "augment_shift", "epochs"):
            v = values[name]
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"the fit plan's {name} must be None or an int >= 1, "
                                 f"got {v!r}")
        if values["instance_norm"] not in (None, "input", "revin"):
            raise ValueError(f"the fit plan's instance_norm is invalid: "
                             f"{values['instance_norm']!r}")
        return cls(**values)


# ---- the plan of a new fit -------------------------------------------------------------
def make(cfg: Config, inputs: Inputs, n_outputs: int, dist: distributed.Local, *,
         ppv_auto: bool, revin_auto: bool) -> tuple[FitPlan, seqs.Data]:
    """(the plan, the training data as its tokens) of a new fit with the validated
    settings cfg on `inputs`; n_outputs: the network's outputs; ppv_auto: whether
    tokenizer="auto" may make its own tokens (the classifiers); revin_auto: whether
    instance_norm="auto" may pick "revin" (the regressors). ValueError for settings
    the data cannot serve."""
    data, net, per_position = inputs.data, inputs.network, inputs.per_position
    head = net.head
    instance_norm = cfg.instance_norm
    if instance_norm == "auto":
        instance_norm = auto_instance_norm(cfg, data, per_position, head, revin_auto, dist)
    own_way = ppv_auto and univariate_auto(cfg, instance_norm, data, per_position, head, dist)
    length = resample_length(data, dist) if own_way else None
    if length is not None:   # ragged univariate series at one length (_resample)
        data = seqs.Data(_resample.to_length(data.x, data.lengths, length), None, data.y,
                         data.w, data.per_position, data.missing)
    shift = None
    if cfg.stem == "auto":
        stem = auto_stem(data, per_position, head, dist)
    elif own_way:
        stem = short_stem(data, dist)
        shift = None if stem is None else _augment.max_shift(stem)
    else:
        stem = cast("_stem.Stem | None", cfg.stem)
    use_ppv = wants_ppv(cfg, stem, instance_norm, data, per_position, head, ppv_auto, dist)
    own = use_ppv and ragged(data, dist)   # PPV windows follow each length
    p = patch_length(cfg, stem, data, per_position, head, use_ppv, own, dist)
    if data.missing is not None and head:
        _stem.check_missing(stem, seqs.key_mask(data.lengths, data.missing, slice(None),
                                                data.x.shape[1]))
    tokens = None
    if use_ppv:
        tokens = PPVTokens.fit(data, p, 0, dist, own=own,
                               tokens=RAGGED_TOKENS if cfg.patch_len is None else None)
    channels = int(data.x.shape[2])
    plan = FitPlan({}, bool(per_position), inputs.k, channels, length, instance_norm, stem,
                   tokens, p, "last", shift)
    x, lengths, missing = plan.tokenize(data.x, data.lengths, data.missing)
    token_data = seqs.Data(x, lengths, data.y, data.w, data.per_position, missing)
    spec = net.spec(cfg, token_data, n_outputs, not per_position, dist, stem=stem,
                    instance_norm=instance_norm, patch=p,
                    position_scale=plan.position_scale)
    return dataclasses.replace(plan, network=spec), token_data


def network(plan: FitPlan, bare: Any, owner: str) -> Network:
    """The Network (attnx.estimators._networks) of a plan's architecture."""
    return network_of(plan.network, bare, owner)


# ---- the rules ------------------------------------------------------------------------
def auto_instance_norm(cfg: Config, data: seqs.Data, per_position: bool, head: bool,
                       revin_auto: bool, dist: distributed.Local) -> str | None:
    """instance_norm="auto": "revin" for a regressor with targets per sequence in the
    units of X's series (attnx.estimators._scaling.same_units; rank 0 decides with
    comm), else None."""
    if not (revin_auto and head and not per_position) \
            or cfg.tokenizer == "ppv":   # PPV tokens are not series
        return None
    valid = seqs.key_mask(data.lengths, data.missing, slice(None), data.x.shape[1])
    valid = np.ones(data.x.shape[:2], bool) if valid is None else ~valid
    y = data.y.reshape(data.y.shape[0], -1)
    return "revin" if dist.same(_scaling.same_units(data.x, valid, y)) else None


def univariate_auto(cfg: Config, instance_norm: str | None, data: seqs.Data,
                    per_position: bool, head: bool, dist: distributed.Local) -> bool:
    """Whether tokenizer="auto" makes a classifier's tokens its own way for univariate
    series (resampled to one length, the short stem under AUTO_MIN_LENGTH steps): one
    target per sequence, no stem, instance_norm, patch_len or pre-training asked for,
    one channel and no missing steps (every rank)."""
    return bool(cfg.tokenizer == "auto" and cfg.stem is None and instance_norm is None
                and cfg.patch_len is None and cfg.pretrain is None and head
                and not per_position and int(data.x.shape[2]) == 1
                and not dist.allmax(int(data.missing is not None)))


def resample_length(data: seqs.Data, dist: distributed.Local) -> int | None:
    """The length tokenizer="auto" resamples ragged univariate training series to
    (attnx.estimators._resample): the longest of every rank; None for equal lengths."""
    shortest, longest = extent(data, dist)
    return longest if shortest < longest else None


def short_stem(data: seqs.Data, dist: distributed.Local) -> _stem.Stem | None:
    """tokenizer="auto"'s stem for univariate series: attnx.layers._stem.short under
    AUTO_MIN_LENGTH steps (the longest of every rank), else none. With it the training
    batches are shifted in time (attnx.estimators._augment)."""
    shortest, longest = extent(data, dist)
    if longest >= AUTO_MIN_LENGTH:
        return None
    return _stem.short(longest, shortest)


def auto_stem(data: seqs.Data, per_position: bool, head: bool,
              dist: distributed.Local) -> _stem.Stem | None:
    """stem="auto": attnx.layers._stem.auto over every rank's longest and shortest
    sequence; no stem for per-position targets and the bare network."""
    if per_position or not head:
        return None
    return _stem.auto(int(dist.allmax(int(data.x.shape[1]))),
                      -int(dist.allmax(-shortest(data))))


def wants_ppv(cfg: Config, stem: _stem.Stem | None, instance_norm: str | None,
              data: seqs.Data, per_position: bool, head: bool, ppv_auto: bool,
              dist: distributed.Local) -> bool:
    """Whether the fit's tokens are PPV tokens: tokenizer="ppv" as asked (ValueError
    where it cannot apply), "auto" for a classifier with no stem or instance_norm
    whose series (every rank's) pass attnx.estimators._ppv_tokens.auto_pick."""
    if cfg.tokenizer == "patch":
        return False
    usable = head and not per_position
    if cfg.tokenizer == "ppv":
        if not usable:
            raise ValueError("tokenizer='ppv' needs one target per sequence (per-position "
                             "targets and the bare X -> Y model keep one token per step)")
        if stem is not None:
            raise ValueError(f"tokenizer='ppv' cannot be combined with a stem (both make "
                             f"the tokens), got stem={stem!r}")
        if instance_norm is not None:
            raise ValueError(f"tokenizer='ppv' cannot be combined with instance "
                             f"normalisation (the tokens are proportions, not the "
                             f"series), got instance_norm={instance_norm!r}")
        return True
    if not (ppv_auto and usable and stem is None and instance_norm is None):
        return False
    return auto_pick(data, dist)


def patch_length(cfg: Config, stem: _stem.Stem | None, data: seqs.Data, per_position: bool,
                 head: bool, ppv: bool, own: bool, dist: distributed.Local) -> int:
    """The fit's patch length (with PPV tokens: the window of a token): 1 for the bare
    network and per-position targets (a token must stay one position) and with a stem
    (its strides make the tokens), patch_len as given, or with patch_len=None the
    automatic rule (at most 16 tokens of raw values, at most PPV_TOKENS of PPV
    features, RAGGED_TOKENS when they follow each series' length, `own`). A PPV window
    may pass the shortest series, which makes one token."""
    t_min = shortest(data)
    if stem is not None and head:
        _stem.check_settings(stem, cfg.patch_len, per_position, t_min)
        return 1
    if not head or per_position:
        if cfg.patch_len not in (None, 1):
            raise ValueError(f"patch_len={cfg.patch_len} needs one target per sequence "
                             f"(per-position targets and the bare X -> Y model keep one "
                             f"token per time step)")
        return 1
    if cfg.patch_len is None:   # every rank: the longest sequence of any rank
        return seqs.auto_patch(int(dist.allmax(int(data.x.shape[1]))),
                               (RAGGED_TOKENS if own else PPV_TOKENS) if ppv
                               else seqs.AUTO_TOKENS)
    if cfg.patch_len > t_min and not ppv:
        raise ValueError(f"patch_len={cfg.patch_len} is longer than the shortest "
                         f"sequence ({t_min} steps)")
    return int(cfg.patch_len)


def shortest(data: seqs.Data) -> int:
    """The shortest sequence of this process's data (its padded length when dense)."""
    return int(data.x.shape[1] if data.lengths is None or not data.lengths.size
               else data.lengths.min())
