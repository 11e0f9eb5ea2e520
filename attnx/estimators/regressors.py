"""Regressors over sequences: AttentionRegressor and TransformerRegressor.

X is (n_samples, seq_len, n_features), or a list of 2-D arrays (seq_len_i,
n_features) of different lengths (ragged input: padded on the right, padded keys
masked, only valid positions pooled; predict answers in the same ragged form).
y (n,) or (n, k) gives one prediction per sequence (the model pools its positions);
y (n, T, k) (or a list of (T_i, k) arrays) one per position. The loss is the
(sample-weighted) MSE, or the one `loss` names.

The network is attnx.SequenceModel (embedding to d_model, positions, transformer
blocks, pooling, a linear head). One exception keeps the original regressors
exactly: with d_model=None, y of X's own shape (n, T, n_features), dense X and none
of positional / norm / dropout / max_len (nor d_hidden for AttentionRegressor)
set, the regressors train the bare MultiHeadAttention / Transformer that maps X to
Y directly, as before, bit for bit.

The settings are spelled epochs and lr (attnx's and PyTorch's words, used by the
command line and the model files); the rarely changed ones are keys of `options`
(attnx.estimators._hyper). scikit-learn is not needed at run time (see _base.py), yet
clone, cross_val_score and GridSearchCV work on 3-D arrays.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import _sequences as seqs
from ._estimator import SequenceEstimator
from ._networks import BareNetwork
from ._metrics import r2_score
from ._batches import Batch
from ..layers.attention import MultiHeadAttention
from ._batch_losses import regression_batch_loss
from ..layers.transformer import Transformer
from ._docs import docstring
from ._hyper import option

if TYPE_CHECKING:
    from collections.abc import Mapping

    from numpy.typing import ArrayLike, DTypeLike, NDArray
    from typing_extensions import Self

    from .. import distributed
    from ._estimator import Prepared
    from ._hyper import Config, InstanceNorm, Norm, Pooling, Positional
    from ._networks import Network
    from ..layers._stem import Stem
    from ..runtime._typing import FloatArray, IntArray, RandomStateLike

    F64Array = NDArray[np.float64]

__all__ = ["AttentionRegressor", "TransformerRegressor"]


# ---- regressors ----------------------------------------------------------------
class _Regressor(SequenceEstimator):
    """The regressors' hooks: MSE, float targets (or the bare X -> Y network), R^2,
    epochs=None chosen on held-out samples."""

    _epoch_selection = True

    @staticmethod
    def _batch_loss(batch: Batch, m: int) -> tuple[float, float]:
        return regression_batch_loss(batch, m)

    def _loss_fn(self, cfg: Config) -> Any:
        if cfg.loss == "squared_error":
            return self._batch_loss
        kind = cfg.loss
        levels = None if cfg.quantiles is None else np.asarray(cfg.quantiles, np.float64)

        def loss(batch: Batch, m: int) -> tuple[float, float]:
            return regression_batch_loss(batch, m, kind, levels)
        return loss

    def _scales_targets(self) -> bool:
        return True

    def _choose_bare(self, cfg: Config, x: FloatArray, y: Any, ragged: bool) -> bool:
        """The bare X -> Y network when the settings ask for nothing it lacks and y
        has X's own shape (dense X)."""
        bare = self._bare_class
        return (bare is not None and BareNetwork(bare).fits(cfg) and not ragged and np.shape(y) == x.shape
                and not seqs.per_position_list(y, ragged))

    def _targets(self, net: Network, x: FloatArray, lengths: IntArray | None, ragged: bool,
                 y: Any, w: F64Array | None, dtype: DTypeLike, fitted: bool, classes: Any,
                 partial: bool, comm: distributed.Local) -> Prepared:
        prepared = net.regression_data(x, lengths, ragged, y, w, dtype)
        if fitted and net.head:
            self._check_target(prepared[1], prepared[2])
        return prepared

    def _n_outputs(self, k: int | None) -> int:
        return k or 1

    def _note_outputs(self, n_out: int) -> None:
        q = option(self, "quantiles")
        if q is not None and np.size(q) != n_out:
            raise ValueError(f"quantiles must give one level per output column of y "
                             f"({n_out}), got {np.size(q)}")
        self.n_outputs_ = n_out

    def _batch_layout(self, data: seqs.Data, t: int
                      ) -> tuple[tuple[int, ...], DTypeLike, tuple[int, ...], int | None]:
        tail = data.y.shape[1:] if not data.per_position else (t,) + data.y.shape[2:]
        return tail, self.model_.dtype, tail, None if data.w is None else data.w.ndim

    def partial_fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None,
                    comm: Any = None) -> Self:
        """One more epoch over X, y from the current weights and optimizer state. Returns self.

        The first call builds the model (as fit would, from random_state). Later
        calls keep the architecture and dtype of the model but take lr, betas,
        eps and weight_decay as currently set. No validation split and no early
        stopping here (as in scikit-learn's MLPRegressor.partial_fit). comm: as in fit.
        """
        return self._partial_fit(X, y, sample_weight, None, comm)

    def predict(self, X: ArrayLike) -> FloatArray | list[FloatArray]:
        """Predictions in the model's dtype, in the form of y at fit: (n,) or (n, k) per
        sequence, (n, T, k) per position (a list of (T_i, ...) arrays for ragged X).

        Runs forward(grad=False) on chunks of about _PREDICT_ROWS rows (ragged input
        sorted by length first); seq_len may differ from the training data's.
        """
        out, _ = self._forward_all(X)
        if self.plan_.k is not None:  # the bare network's k is its width
            return out
        if isinstance(out, list):
            return [o[..., 0] for o in out]
        return out[..., 0]

    def score(self, X: ArrayLike, y: ArrayLike,
              sample_weight: ArrayLike | None = None) -> float:
        """R^2 of predict(X) against y (scikit-learn's r2_score, uniform over outputs):
        rows are the sequences, or for per-position targets every valid position;
        sample_weight (n_samples,) weights the rows of each sample."""
        model = self._fitted_model()
        x, lengths, ragged, nan = seqs.sequences("X", X, model.dtype, self.n_features_in_,
                                                 layout=self._layout(),
                                                 missing=self._missing())
        self._check_missing(nan)
        n, t = x.shape[:2]
        w = seqs.sample_weights(sample_weight, n)
        if not self._network().head:  # y of X's shape for the bare X -> Y network
            yv = seqs._real("y", y)
            if yv.shape != x.shape:
                raise ValueError(f"y must have the shape of X {x.shape}, got {yv.shape}")
            pred = self.predict(x)
            rows_w = None if w is None else np.repeat(w, t)
            return r2_score(yv, pred, sample_weight=rows_w)
        yv, per_position, k = seqs.regression_targets(y, x, lengths, ragged, np.float64)
        self._check_target(per_position, k)
        raw, _ = self._forward_all(X)
        if not per_position:
            return r2_score(yv, raw, sample_weight=w)
        if isinstance(raw, list):
            assert lengths is not None  # a list comes from ragged X
            valid = seqs.valid_positions(lengths, t)
            pred = np.concatenate(raw, axis=0).reshape(-1, yv.shape[2])
            true = yv[valid]
            rows_w = None if w is None else np.repeat(w, lengths)
            return r2_score(true, pred, sample_weight=rows_w)
        rows_w = None if w is None else np.repeat(w, t)
        return r2_score(yv.reshape(-1, yv.shape[2]), raw.reshape(-1, raw.shape[2]),
                        sample_weight=rows_w)


class AttentionRegressor(_Regressor):
    __doc__ = docstring("AttentionRegressor", """
    One attention layer trained as a regressor.

    With d_model=None and y of X's shape: Y = MultiHeadAttention(X), as before. In
    every other case (sequence-level y, d_model set, a new option set): a
    SequenceModel with ONE transformer block (attention and its SiLU MLP, whose
    width is d_hidden), between the input embedding and the output head.""", """
    model_, optimizer_, shuffle_rng_, n_features_in_, n_outputs_
    (sequence model), n_iter_ (completed epochs), loss_curve_ (mean training loss per
    epoch), best_loss_, with validation validation_loss_curve_ and
    best_validation_loss_, and after epochs=None's held-out run epoch_selection_ (dict:
    epochs trained, budget, held_out_epochs, best_epoch, held_out_r2, strong,
    held_out_loss per epoch).""")

    _bare_class = MultiHeadAttention

    def __init__(self, n_heads: int = 1, *, d_hidden: int | None = None,
                 d_model: int | None = None, positional: Positional = "none",
                 norm: Norm = None, pooling: Pooling = "mean", dropout: float = 0.0,
                 epochs: int | None = 100, batch_size: int = 32, lr: float = 1e-3,
                 weight_decay: float = 0.01, warm_start: bool = False,
                 random_state: RandomStateLike = None, verbose: int = 0,
                 dtype: DTypeLike = np.float32, patch_len: int | None = 1,
                 stem: Stem | str | None = None, layout: str = "ntc",
                 missing: str = "error", instance_norm: InstanceNorm = None,
                 tokenizer: str = "patch", loss: str = "squared_error",
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
        self.loss = loss
        self.pretrain = pretrain
        self.options = options


class TransformerRegressor(_Regressor):
    __doc__ = docstring("TransformerRegressor", """
    A transformer (n_layers blocks of attention + SiLU MLP with residuals) trained as a
    regressor: the bare Transformer for y of X's shape with d_model=None, else a
    SequenceModel of n_layers blocks.""", """
    as for AttentionRegressor.""")

    _bare_class = Transformer

    def __init__(self, n_heads: int = 4, n_layers: int = 2, d_hidden: int | None = None, *,
                 d_model: int | None = 32, positional: Positional = "sinusoidal",
                 norm: Norm = "pre", pooling: Pooling = "mean", dropout: float = 0.1,
                 epochs: int | None = None, batch_size: int = 16, lr: float = 1e-3,
                 weight_decay: float = 0.01, warm_start: bool = False,
                 random_state: RandomStateLike = None, verbose: int = 0,
                 dtype: DTypeLike = np.float32, patch_len: int | None = None,
                 stem: Stem | str | None = None, layout: str = "ntc",
                 missing: str = "error", instance_norm: InstanceNorm = "auto",
                 tokenizer: str = "patch", loss: str = "squared_error",
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
        self.loss = loss
        self.pretrain = pretrain
        self.options = options
