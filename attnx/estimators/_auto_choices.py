"""The settings a fit decides from its data when they are "auto" (or None): instance
normalisation, the tokenizer (patches or PPV tokens), the convolutional stem and the patch
length. Every rank of a distributed fit decides alike (comm). A mixin of
attnx.estimators._estimator.SequenceEstimator."""
from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, cast

import numpy as np

from . import _augment, _scaling
from . import _sequences as seqs
from ..layers import _stem
from ._ppv_tokens import AUTO_MIN_LENGTH, PPV_TOKENS, RAGGED_TOKENS, auto_pick, extent

if TYPE_CHECKING:
    from .. import distributed
    from ._hyper import Config
    from ._networks import Network


class AutoChoices:
    """instance_norm="auto", tokenizer="auto", stem="auto" and patch_len=None."""

    _ppv_auto: ClassVar[bool]   # SequenceEstimator's: whether "auto" may pick PPV tokens

    if TYPE_CHECKING:
        def _scales_targets(self) -> bool: ...
        def _comm(self) -> distributed.Local: ...

    def _auto_instance_norm(self, cfg: Config, data: seqs.Data, per_position: bool,
                            net: Network) -> str | None:
        """instance_norm="auto": "revin" for a regressor with targets per sequence in
        the units of X's series (attnx.estimators._scaling.same_units; rank 0 decides with
        comm), else None."""
        if not (self._scales_targets() and net.head and not per_position) \
                or cfg.tokenizer == "ppv":   # PPV tokens are not series
            return None
        valid = seqs.key_mask(data.lengths, data.missing, slice(None), data.x.shape[1])
        valid = np.ones(data.x.shape[:2], bool) if valid is None else ~valid
        y = data.y.reshape(data.y.shape[0], -1)
        return "revin" if self._comm().same(_scaling.same_units(data.x, valid, y)) else None

    def _use_ppv(self, cfg: Config, data: seqs.Data, per_position: bool,
                 net: Network) -> bool:
        """Whether this fit's tokens are PPV tokens (tokenizer, see the estimators'
        docstring): "ppv" as asked (ValueError where it cannot apply), "auto" for a
        classifier with no stem or instance_norm whose series (every rank's) pass
        attnx.estimators._ppv_tokens.auto_pick (by their lengths and channels)."""
        if cfg.tokenizer == "patch":
            return False
        usable = net.head and not per_position
        if cfg.tokenizer == "ppv":
            if not usable:
                raise ValueError("tokenizer='ppv' needs one target per sequence (per-position "
                                 "targets and the bare X -> Y model keep one token per step)")
            if cfg.stem is not None:
                raise ValueError(f"tokenizer='ppv' cannot be combined with a stem (both make "
                                 f"the tokens), got stem={cfg.stem!r}")
            if cfg.instance_norm is not None:
                raise ValueError(f"tokenizer='ppv' cannot be combined with instance "
                                 f"normalisation (the tokens are proportions, not the "
                                 f"series), got instance_norm={cfg.instance_norm!r}")
            return True
        if not (self._ppv_auto and usable and cfg.stem is None and cfg.instance_norm is None):
            return False
        return auto_pick(data, self._comm())

    def _auto_tokens_stem(self, cfg: Config, data: seqs.Data, per_position: bool,
                          net: Network) -> _stem.Stem | None:
        """The stem of this fit as tokenizer="auto" decides it: attnx.layers._stem.short
        for a classifier (no stem, instance_norm or patch_len given, one target per
        sequence, no missing steps) of univariate series under AUTO_MIN_LENGTH steps
        (the longest of every rank), else cfg.stem. With the short stem the training
        batches are shifted in time (cfg.augment_shift, attnx.estimators._augment)."""
        if not self._auto_univariate(cfg, data, per_position, net):
            return cast("_stem.Stem | None", cfg.stem)
        shortest, longest = extent(data, self._comm())
        if longest >= AUTO_MIN_LENGTH:
            return None
        stem = _stem.short(longest, shortest)
        cfg.augment_shift = _augment.max_shift(stem)
        return stem

    def _auto_resample(self, cfg: Config, data: seqs.Data, per_position: bool,
                       net: Network) -> int | None:
        """The length tokenizer="auto" resamples a classifier's ragged univariate
        training series to (attnx.estimators._resample): the longest of every rank;
        None (no resampling) for equal lengths or where _auto_univariate says no."""
        if not self._auto_univariate(cfg, data, per_position, net):
            return None
        shortest, longest = extent(data, self._comm())
        return longest if shortest < longest else None

    def _auto_univariate(self, cfg: Config, data: seqs.Data, per_position: bool,
                         net: Network) -> bool:
        """Whether tokenizer="auto" may make this fit's tokens its own way for univariate
        series: a classifier with one target per sequence, no stem, instance_norm,
        patch_len or pre-training asked for, one channel and no missing steps (every
        rank)."""
        return bool(self._ppv_auto and cfg.tokenizer == "auto" and cfg.stem is None
                    and cfg.instance_norm is None and cfg.patch_len is None
                    and cfg.pretrain is None and net.head and not per_position
                    and int(data.x.shape[2]) == 1
                    and not self._comm().allmax(int(data.missing is not None)))

    def _auto_stem(self, data: seqs.Data, per_position: bool,
                   net: Network) -> _stem.Stem | None:
        """stem="auto": attnx.layers._stem.auto over every rank's longest and shortest
        sequence; no stem for per-position targets and the bare network."""
        if per_position or not net.head:
            return None
        comm = self._comm()
        return _stem.auto(int(comm.allmax(int(data.x.shape[1]))),
                          -int(comm.allmax(-_shortest(data))))

    def _choose_patch(self, cfg: Config, data: seqs.Data, per_position: bool,
                      net: Network, ppv: bool = False, own: bool = False) -> int:
        """The fit's patch length (with PPV tokens: the window of a token): 1 for the
        bare network and per-position targets (a token must stay one position) and
        with a stem (its strides make the tokens), patch_len as given, or with
        patch_len=None the automatic rule (at most 16 tokens of raw values, at most
        PPV_TOKENS of PPV features, RAGGED_TOKENS when they follow each series' length,
        `own`). A PPV window may pass the shortest series, which makes one token."""
        t_min = _shortest(data)
        if cfg.stem is not None and net.head:
            _stem.check_settings(cfg.stem, cfg.patch_len, per_position, t_min)
            return 1
        if not net.head or per_position:
            if cfg.patch_len not in (None, 1):
                raise ValueError(f"patch_len={cfg.patch_len} needs one target per sequence "
                                 f"(per-position targets and the bare X -> Y model keep one "
                                 f"token per time step)")
            return 1
        if cfg.patch_len is None:   # every rank: the longest sequence of any rank
            return seqs.auto_patch(int(self._comm().allmax(int(data.x.shape[1]))),
                                   (RAGGED_TOKENS if own else PPV_TOKENS) if ppv
                                   else seqs.AUTO_TOKENS)
        if cfg.patch_len > t_min and not ppv:
            raise ValueError(f"patch_len={cfg.patch_len} is longer than the shortest "
                             f"sequence ({t_min} steps)")
        return int(cfg.patch_len)


def _shortest(data: seqs.Data) -> int:
    """The shortest sequence of this process's data (its padded length when dense)."""
    return int(data.x.shape[1] if data.lengths is None or not data.lengths.size
               else data.lengths.min())
