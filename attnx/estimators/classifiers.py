"""Classifiers over sequences: AttentionClassifier and TransformerClassifier.

y (n,) labels classify sequences, y (n, T) (or a list of (T_i,) arrays) label every
position; the loss is softmax cross-entropy, optionally class- and sample-weighted.
X as for the regressors (attnx.estimators.regressors): dense or ragged.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import _sequences as seqs
from . import _targets
from ._base import ClassifierParams
from ._estimator import SequenceEstimator
from ._inference import ExportSpec
from ._batches import Batch
from ..layers.losses import log_softmax
from ._batch_losses import classification_batch_loss
from ._docs import docstring

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Literal, Union

    from numpy.typing import ArrayLike, DTypeLike, NDArray
    from typing_extensions import Self

    from .. import distributed
    from ._estimator import Prepared
    from ._hyper import Config, InstanceNorm, Norm, Pooling, Positional
    from ._networks import Network
    from ..layers._stem import Stem
    from ..runtime._typing import AnyArray, FloatArray, IntArray, RandomStateLike

    F64Array = NDArray[np.float64]
    #: class_weight: None, "balanced" or a dict label -> weight.
    ClassWeight = Union[None, Literal["balanced"], Mapping[Any, float]]

__all__ = ["AttentionClassifier", "TransformerClassifier"]


# ---- classifiers ---------------------------------------------------------------
class _Classifier(ClassifierParams, SequenceEstimator):
    _ppv_auto = True
    class_weight: ClassWeight
    classes_: AnyArray  # the sorted labels (any sortable dtype)

    @staticmethod
    def _batch_loss(batch: Batch, m: int) -> tuple[float, float]:
        return classification_batch_loss(batch, m)

    def _config(self) -> Config:
        cfg = super()._config()
        if cfg.instance_norm == "revin":
            raise ValueError("instance_norm='revin' de-normalises regression outputs into the "
                             "units of X's channels; a classifier's outputs are class scores: "
                             "use instance_norm='input' (or None)")
        return cfg

    def _loss_fn(self, cfg: Config) -> Any:
        if cfg.label_smoothing == 0:
            return self._batch_loss
        eps = cfg.label_smoothing

        def smoothed(batch: Batch, m: int) -> tuple[float, float]:
            return classification_batch_loss(batch, m, label_smoothing=eps)
        return smoothed

    def partial_fit(self, X: ArrayLike, y: ArrayLike, classes: ArrayLike | None = None,
                    sample_weight: ArrayLike | None = None, comm: Any = None) -> Self:
        """One more epoch over X, y (as the regressors' partial_fit). The first call
        needs `classes`, every label that will ever be seen (as scikit-learn)."""
        return self._partial_fit(X, y, sample_weight, classes, comm)

    def _targets(self, net: Network, x: FloatArray, lengths: IntArray | None, ragged: bool,
                 y: Any, w: F64Array | None, dtype: DTypeLike, fitted: bool, classes: Any,
                 partial: bool, comm: distributed.Local) -> Prepared:
        lab, per_position, valid, seen = _targets.labels(x, lengths, ragged, y)
        if fitted:
            if classes is not None and not np.array_equal(np.unique(classes), self.classes_):
                raise ValueError(f"classes={list(classes)!r} differ from classes_ "
                                 f"{list(self.classes_)!r} of the first partial_fit")
            if per_position != self.plan_.per_position:
                what = "per position" if self.plan_.per_position else "per sequence"
                raise ValueError(f"y must hold labels {what}, as at fit")
        elif partial:
            if classes is None:
                raise ValueError("classes must be given to the first partial_fit: every "
                                 "label that will ever be seen")
            self.classes_ = _targets.unique_labels("classes", np.asarray(classes))
        else:  # every rank's labels
            self.classes_ = _targets.unique_labels("y", comm.union(seen))
        data = _targets.label_data(
            x, lengths, lab, per_position, valid, self.classes_, w,
            lambda: _targets.class_weights(self.class_weight, self.classes_, seen,
                                           comm.allsum))
        return data, per_position, None

    def _n_outputs(self, k: int | None) -> int:
        return len(self.classes_)

    def _batch_layout(self, data: seqs.Data, t: int
                      ) -> tuple[tuple[int, ...], DTypeLike, tuple[int, ...], int | None]:
        target_tail = (t,) if data.per_position else ()
        return (target_tail, np.int64, target_tail + (len(self.classes_),),
                2 if data.per_position else 1)

    def export_spec(self) -> ExportSpec:
        """The fitted network, "probabilities" and classes_ (see ExportSpec)."""
        spec = super().export_spec()
        length = self.plan_.resample_length
        if length is not None:
            raise NotImplementedError(
                f"this classifier resamples each series to {length} steps "
                f"before its network (fitted on ragged series): not exported")
        return spec._replace(output="probabilities", classes=self.classes_)

    def predict_log_proba(self, X: ArrayLike) -> FloatArray | list[FloatArray]:
        """Log-probabilities of the classes (columns in classes_ order): (n, C), or
        (n, T, C) / a list of (T_i, C) arrays for per-position labels."""
        raw, _ = self._forward_all(X)
        if isinstance(raw, list):
            return [log_softmax(r) for r in raw]
        return log_softmax(raw)

    def predict_proba(self, X: ArrayLike) -> FloatArray | list[FloatArray]:
        """Class probabilities (rows sum to 1), shaped as predict_log_proba."""
        lp = self.predict_log_proba(X)
        if isinstance(lp, list):
            return [np.exp(a) for a in lp]
        return np.exp(lp)

    def predict(self, X: ArrayLike) -> AnyArray | list[AnyArray]:
        """The most probable label: (n,), or (n, T) / a list of (T_i,) arrays."""
        raw, _ = self._forward_all(X)
        if isinstance(raw, list):
            return [self.classes_[np.argmax(r, axis=-1)] for r in raw]
        labels: AnyArray = self.classes_[np.argmax(raw, axis=-1)]
        return labels

    def score(self, X: ArrayLike, y: ArrayLike,
              sample_weight: ArrayLike | None = None) -> float:
        """Accuracy of predict(X) against y (over every valid position for per-position
        labels), weighted by sample_weight (n_samples,) when given."""
        model = self._fitted_model()
        x, lengths, ragged, _ = seqs.sequences("X", X, model.dtype, self.n_features_in_,
                                               layout=self._layout(),
                                               missing=self._missing())
        n, t = x.shape[:2]
        w = seqs.sample_weights(sample_weight, n)
        lab, per_position = seqs.labels(y, x, lengths, ragged)
        if per_position != self.plan_.per_position:
            what = "per position" if self.plan_.per_position else "per sequence"
            raise ValueError(f"y must hold labels {what}, as at fit")
        pred = self.predict(X)
        if isinstance(pred, list):
            assert lengths is not None  # a list comes from ragged X
            valid = seqs.valid_positions(lengths, t)
            hits = np.concatenate(pred) == lab[valid]
            rw = None if w is None else np.repeat(w, lengths)
        else:
            hits = (pred == lab).reshape(-1)
            rw = None if w is None else np.repeat(w, hits.size // n)
        return float(np.average(hits, weights=rw))


class AttentionClassifier(_Classifier):
    __doc__ = docstring("AttentionClassifier", """
    A SequenceModel with one transformer block (attention and its SiLU MLP) trained with
    softmax cross-entropy: labels per sequence (y (n,), pooled) or per position (y (n,
    T)). Labels may be any sortable type; classes_ holds them sorted.""", """
    classes_, and those of AttentionRegressor.""")

    def __init__(self, n_heads: int = 1, *, d_hidden: int | None = None,
                 d_model: int | None = None, positional: Positional = "none",
                 norm: Norm = None, pooling: Pooling = "mean", dropout: float = 0.0,
                 epochs: int | None = 100, batch_size: int = 32, lr: float = 1e-3,
                 weight_decay: float = 0.01, warm_start: bool = False,
                 random_state: RandomStateLike = None, verbose: int = 0,
                 dtype: DTypeLike = np.float32, patch_len: int | None = 1,
                 stem: Stem | str | None = None, layout: str = "ntc",
                 missing: str = "error", instance_norm: InstanceNorm = None,
                 tokenizer: str = "patch", class_weight: ClassWeight = None,
                 pretrain: str | None = None,
                 options: Mapping[str, Any] | None = None) -> None:
        self.n_heads = n_heads
        self.d_hidden = d_hidden
        self.d_model = d_model
        self.positional = positional
        self.norm = norm
        self.pooling = pooling
        self.dropout = dropout
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.warm_start = warm_start
        self.random_state = random_state
        self.verbose = verbose
        self.dtype = dtype
        self.patch_len = patch_len
        self.stem = stem
        self.layout = layout
        self.missing = missing
        self.instance_norm = instance_norm
        self.tokenizer = tokenizer
        self.class_weight = class_weight
        self.pretrain = pretrain
        self.options = options


class TransformerClassifier(_Classifier):
    __doc__ = docstring("TransformerClassifier", """
    A SequenceModel of n_layers transformer blocks trained with softmax cross-entropy;
    otherwise as AttentionClassifier.""", """
    classes_, and those of AttentionRegressor.""")

    def __init__(self, n_heads: int = 4, n_layers: int = 2, d_hidden: int | None = None, *,
                 d_model: int | None = 32, positional: Positional = "sinusoidal",
                 norm: Norm = "pre", pooling: Pooling = "mean", dropout: float = 0.1,
                 epochs: int | None = None, batch_size: int = 16, lr: float = 1e-3,
                 weight_decay: float = 0.01, warm_start: bool = False,
                 random_state: RandomStateLike = None, verbose: int = 0,
                 dtype: DTypeLike = np.float32, patch_len: int | None = None,
                 stem: Stem | str | None = None, layout: str = "ntc",
                 missing: str = "error", instance_norm: InstanceNorm = None,
                 tokenizer: str = "auto", class_weight: ClassWeight = None,
                 pretrain: str | None = None,
                 options: Mapping[str, Any] | None = None) -> None:
        self.n_heads = n_heads
        self.n_layers = n_layers
        self.d_hidden = d_hidden
        self.d_model = d_model
        self.positional = positional
        self.norm = norm
        self.pooling = pooling
        self.dropout = dropout
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.warm_start = warm_start
        self.random_state = random_state
        self.verbose = verbose
        self.dtype = dtype
        self.patch_len = patch_len
        self.stem = stem
        self.layout = layout
        self.missing = missing
        self.instance_norm = instance_norm
        self.tokenizer = tokenizer
        self.class_weight = class_weight
        self.pretrain = pretrain
        self.options = options
