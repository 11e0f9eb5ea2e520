"""scikit-learn style estimators: regressors and classifiers over sequences.

X is (n_samples, seq_len, n_features), or a list of 2-D arrays (seq_len_i,
n_features) of different lengths (ragged input: padded on the right, padded keys
masked, only valid positions pooled; predict answers in the same ragged form).

- AttentionRegressor / TransformerRegressor: y (n,) or (n, k) gives one prediction
  per sequence (the model pools its positions); y (n, T, k) (or a list of
  (T_i, k) arrays) one per position. The loss is the (sample-weighted) MSE.
- AttentionClassifier / TransformerClassifier: y (n,) labels classify sequences,
  y (n, T) (or a list of (T_i,) arrays) label every position; softmax
  cross-entropy, optionally class- and sample-weighted.

The network is attnx.SequenceModel (embedding to d_model, positions, transformer
blocks, pooling, a linear head). One exception keeps the original regressors
exactly: with d_model=None, y of X's own shape (n, T, n_features), dense X and none
of positional / norm / dropout / max_len (nor d_hidden for AttentionRegressor)
set, the regressors train the bare MultiHeadAttention / Transformer that maps X to
Y directly, as before, bit for bit.

Canonical spellings: epochs and lr (attnx's and PyTorch's words, used by the
command line and the model files); scikit-learn's max_iter and learning_rate_init
are accepted as aliases (None = not given; giving both spellings different values
is an error). scikit-learn is not needed at run time (see _base.py), yet clone,
cross_val_score and GridSearchCV work on 3-D arrays.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import _sequences as seqs
from . import _model_file, _pretrain, _targets
from ._base import ClassifierParams, sklearn_class
from . import _estimator
from ._estimator import ExportSpec, SequenceEstimator, store
from ._hyper import constraints
from ._networks import BareNetwork
from ._metrics import r2_score
from ._training import Batch, TrainingDivergedError
from .attention import MultiHeadAttention
from .losses import classification_batch_loss, log_softmax, regression_batch_loss
from .transformer import Transformer

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Literal, Union

    from numpy.typing import ArrayLike, DTypeLike, NDArray
    from typing_extensions import Self

    from ._estimator import Prepared
    from ._hyper import Config, InstanceNorm, Norm, Pooling, Positional
    from ._stem import Stem
    from ._networks import Network
    from ._typing import AnyArray, FloatArray, IntArray, RandomStateLike

    F64Array = NDArray[np.float64]
    #: class_weight: None, "balanced" or a dict label -> weight.
    ClassWeight = Union[None, Literal["balanced"], Mapping[Any, float]]

__all__ = ["AttentionRegressor", "TransformerRegressor", "AttentionClassifier",
           "TransformerClassifier", "NotFittedError", "TrainingDivergedError", "ExportSpec",
           "ESTIMATORS"]


def __getattr__(name: str) -> Any:  # NotFittedError is scikit-learn's class, resolved on first use
    if name == "NotFittedError":
        return sklearn_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
                 partial: bool) -> Prepared:
        prepared = net.regression_data(x, lengths, ragged, y, w, dtype)
        if fitted and net.head:
            self._check_target(prepared[1], prepared[2])
        return prepared

    def _n_outputs(self, k: int | None) -> int:
        return k or 1

    def _note_outputs(self, n_out: int) -> None:
        q = self.get_params()["quantiles"]
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
        if self._target["k"] is not None:  # the bare network's k is its width
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

_COMMON_DOC = """
    d_model : None or int. The model's width. None: the number of features of X;
        with y of X's own shape (and no positional / norm / dropout / max_len) this
        trains the bare attention model mapping X to Y directly, as attnx always did.
    positional : "none", "sinusoidal", "learned" (a learned table of max_len rows)
        or "rope" (rotary, in every attention layer; rope=True is the same).
    norm : None (post-residual blocks) or "pre" (pre-LayerNorm blocks and a final
        LayerNorm).
    pooling : how one output per sequence is made (valid positions only):
        "mean", "last", "max" (per feature, the maximum over the positions) or
        "cls" (a learned class token put before the positions; the head reads its
        final row; not with causal=True); per-position targets are not pooled.
    stem : None, "auto", or a convolutional stem ((kernel, stride), ...) before
        the embedding. "auto" picks two layers from the data at fit, at most 16
        tokens: (min(8, T_min), s1) with s1 = 4 for T_max >= 32 (else 1), then
        windows of 2 s2 every s2 = ceil(T_max / s1 / 16) steps (attnx._stem.auto;
        none for per-position targets). Per layer a 1-D convolution over time to
        d_model channels ('same' zero padding, left (kernel-1)//2), a bias and
        SiLU; the blocks then
        see ceil(T / stride) tokens per layer, e.g. stem=((5, 1), (3, 2)) halves
        the length. Token j of a layer of stride s covers steps j*s - (kernel-1)//2
        to j*s + kernel//2 of its input. Every kernel must fit the shortest sequence
        at its layer. Replaces patches: patch_len must be None (off with a stem) or
        1. Per-position targets need strides of 1. With standardize=True the input
        is scaled but not centred (the convolution's zero padding stays zero).
    instance_norm : None, "input", "revin" (RevIN, Kim et al. 2022) or "auto"
        (TransformerRegressor's default): "revin" for a regressor whose targets
        (one per sequence) are in the units of X's series (one target and one
        channel, or one per channel; each target's 5-95% range inside its channel's
        1-99% range widened by a tenth, its std within a factor 2 of the
        channel's: the next values of a series cut into windows), else None. "input":
        each input series (sample, channel) is centred on its mean over its valid
        steps and divided by sqrt(var + 1e-5) (in X's units) before the network,
        so the network sees every series at one level and scale. "revin" (the
        regressors only): the outputs are also mapped back, y_j = out_j * std_c +
        mean_c of the sample's own series, output j by channel j when there are as
        many outputs as channels, or every output by the one channel of univariate
        X (ValueError otherwise): for targets in the units of X's channels, such as
        forecasts. Instance normalisation replaces the input standardisation of
        standardize=True (input_mean_ 0, input_scale_ 1); with "revin" y is not
        standardised either (the de-normalisation puts the outputs at each
        series' own level and scale), with "input" it is as usual. With patches
        the statistics run over every step of a patch (the steps that fill a
        sequence's partial last patch count as its last step, which they repeat).
    instance_affine : RevIN's learnable per-channel gain and bias after the
        normalisation (inverted before the de-normalisation); needs instance_norm
        (with "auto": when it picks "revin").
    tokenizer : what a token holds (one output per sequence only). "patch": the raw
        values of its window (patch_len steps). "ppv": a description of the
        window's local shapes: the 84 fixed length-9 kernels with weights -1 and 2
        convolved with each channel (centred and scaled by its training mean and
        std) at up to 8 dilations from 1 to (T_min - 1) / 8, and per kernel the
        fractions of the window's valid steps where the output exceeds each of two
        biases (its 0.2 and 0.8 quantiles on up to 8 training series): D * C * 168
        features per token (attnx._ppv_tokens; the windows are the patches the
        patch_len rule makes; with patch_len=None at most 4 windows, of
        ceil(T_max / 4) steps). Fitted once at fit, not trained; the transformer
        learns from the tokens. "auto" (TransformerClassifier's default): "ppv" for a
        classifier with no stem and no instance_norm whose series have 64+ steps (the
        longest, when lengths differ: then 16+ with one channel, and each series'
        windows and dilations follow its length), else "patch". Not with a stem or per-position
        targets; not exported to ONNX.
    layout : how X is laid out in fit, predict, score and attention_weights: "ntc"
        (n_samples, seq_len, n_features), or a list of (seq_len_i, n_features) arrays
        for unequal lengths; "nct" aeon's and sktime's (n_cases, n_channels,
        n_timepoints), or a list of (n_channels, n_timepoints_i) arrays. Explicit, never
        guessed from the shapes. Targets per position keep (n, seq_len[, k]); the ONNX
        graph takes (n, seq_len, n_features).
    missing : what NaN in X means, in fit, predict, score and attention_weights:
        "error" (a ValueError) or "mask": a time step with NaN in any channel is
        missing as a whole and treated exactly as padding: a masked key in every
        attention layer, left out of the pooling ("mean", "last", "max"; "cls"
        reads the class token, which never attends to it), of the input
        standardisation's statistics and of attention_weights, its values read as 0
        (X itself is never modified). With patches (patch_len) a patch is masked
        when all its steps are missing, else its missing steps read 0 (those after
        the last observed step repeat it, as the steps filling a partial last patch
        do: see patch_len); a stem's window reads them as 0 and is masked
        when every step it covers is, as with padding. Masking keeps the positions
        of the later steps: trailing NaN steps give the predictions of the shorter
        sequence. Needs targets per sequence. Infinity stays a ValueError, as does a
        sequence whose every step holds NaN, and NaN in y. The ONNX graph does the
        same masking inside (attnx.onnx.export).
    d_hidden : MLP width (None: 4 * d_model).
    dropout : on the attention probabilities and the residual branches in training.
    max_len : longest sequence for positional="learned" (None: the longest
        training sequence); longer sequences are refused at predict.
    n_heads, causal, bias, rope : attention options (see MultiHeadAttention).
    epochs (alias max_iter) : passes over the data in fit. None (the Transformer
        estimators' default): a budget of about 1500 AdamW steps, round(1500 /
        batches per epoch) clipped to [30, 300]; a regressor first holds out 20% of
        the samples (10 or more) and trains on the rest, scored on them every epoch:
        once the network explains half of their variance (a strong signal) the fit
        trains the whole budget, otherwise as many epochs as that run's best one
        (30 epochs of patience, at least 5): on a weak signal a longer fit learns the
        noise of a small set. The fit then trains on every sample from the same
        initial weights; epoch_selection_ records the choice (without
        validation_fraction, early_stopping or warm_start only).
    batch_size : samples per AdamW step (a short last batch is padded with
        zero-weighted rows, so every step sees one batch shape). Ragged input is
        batched by length: the shuffled samples are cut into windows of 16 batches,
        each window is sorted by length and cut into batches (padding stays small),
        and the batches are shuffled.
    lr (alias learning_rate_init), betas, eps, weight_decay : AdamW settings.
    shuffle : reshuffle the samples every epoch (a numpy Generator seeded from
        random_state; its state is saved with the model).
    validation_fraction : part of the samples fit holds out for
        validation_loss_curve_ (0 = none).
    early_stopping, n_iter_no_change, tol : with early_stopping=True fit stops when
        the validation loss (or the training loss without validation) has not
        improved by tol for n_iter_no_change epochs, keeping the best weights; with
        early_stopping=False a plateau of the training loss stops fit with a
        ConvergenceWarning.
    warm_start : fit continues from the fitted model instead of starting over.
    random_state : None, an int, a numpy Generator or RandomState: initial
        weights, shuffling and the validation split.
    verbose : 0 prints nothing; 1 shows a progress bar per epoch (tqdm, on
        stderr) with the running loss.
    dtype : float32 or float64 for the weights and the computation.
    distributed : with comm (MPI), "balanced": each rank shuffles its own shard and
        takes ceil(batch_size / P) rows of it per step (reproducible for a given
        seed and number of ranks P); "exact": the global batches of one process,
        split over the ranks (the fit equals the single-process one to rounding,
        but ranks pad to their largest share; no dropout). Without comm both are
        the plain fit.
""" + _pretrain.DOC

_LOSS_DOC = """    loss : the training loss (elementwise, averaged over the outputs and the
        samples): "squared_error" (MSE), "absolute_error" (MAE: a median
        forecast), "huber" (quadratic within 1 of the target, linear beyond; in the
        units the network is trained in, i.e. standardised targets unless
        instance_norm="revin") or "pinball" (quantile regression: output column j
        is trained as the quantiles[j] quantile of its target; to learn several
        levels of one target, give y that column once per level). The
        validation loss and epochs=None's held-out run score with the same loss
        (that run's reference is the loss of predicting the training targets'
        mean); score() stays R^2.
    quantiles : with loss="pinball" only: one level in (0, 1) per output column
        of y (the last axis).
"""


class AttentionRegressor(_Regressor):
    """One attention layer trained as a regressor.

    With d_model=None and y of X's shape: Y = MultiHeadAttention(X), as before. In
    every other case (sequence-level y, d_model set, a new option set): a
    SequenceModel with ONE transformer block (attention and its SiLU MLP, whose
    width is d_hidden), between the input embedding and the output head.

    Parameters
    ----------""" + _COMMON_DOC + _LOSS_DOC + """
    Fitted attributes: model_, optimizer_, shuffle_rng_, n_features_in_,
    n_outputs_ (sequence model), n_iter_ (completed epochs), loss_curve_ (mean
    training loss per epoch), best_loss_, with validation
    validation_loss_curve_ and best_validation_loss_, and after epochs=None's
    held-out run epoch_selection_ (dict: epochs trained, budget, held_out_epochs,
    best_epoch, held_out_r2, strong, held_out_loss per epoch).
    """

    _bare_class = MultiHeadAttention
    _parameter_constraints = constraints(layers=False, classes=False)

    def __init__(self, n_heads: int = 1, *, d_model: int | None = None,
                 positional: Positional = "none", norm: Norm = None, pooling: Pooling = "mean",
                 d_hidden: int | None = None, dropout: float = 0.0, max_len: int | None = None,
                 causal: bool = False, bias: bool = True, rope: bool = False, epochs: int = 100,
                 batch_size: int = 32, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01, shuffle: bool = True,
                 validation_fraction: float = 0.0, early_stopping: bool = False,
                 n_iter_no_change: int = 10, tol: float = 1e-4, warm_start: bool = False,
                 max_iter: int | None = None, learning_rate_init: float | None = None,
                 random_state: RandomStateLike = None, verbose: int = 0,
                 dtype: DTypeLike = np.float32, lr_schedule: str = "constant",
                 warmup: float = 0.1, max_grad_norm: float | None = None,
                 decay: str = "all", standardize: bool = False,
                 patch_len: int | None = 1, distributed: str = "balanced",
                 stem: Stem | str | None = None, layout: str = "ntc",
                 missing: str = "error", instance_norm: InstanceNorm = None,
                 instance_affine: bool = False, tokenizer: str = "patch",
                 loss: str = "squared_error", quantiles: Any = None,
                 pretrain: str | None = None, pretrain_epochs: int | None = None) -> None:
        store(self, locals())


class TransformerRegressor(_Regressor):
    """A transformer (n_layers blocks of attention + SiLU MLP with residuals) trained
    as a regressor: the bare Transformer for y of X's shape with d_model=None, else
    a SequenceModel of n_layers blocks.

    Parameters
    ----------
    n_layers : number of transformer blocks.""" + _COMMON_DOC + _LOSS_DOC + """
    Fitted attributes as for AttentionRegressor.
    """

    n_layers: int

    _bare_class = Transformer
    _parameter_constraints = constraints(layers=True, classes=False)

    def __init__(self, n_heads: int = 4, n_layers: int = 2, d_hidden: int | None = None, *,
                 d_model: int | None = 32, positional: Positional = "sinusoidal",
                 norm: Norm = "pre", pooling: Pooling = "mean", dropout: float = 0.1,
                 max_len: int | None = None, causal: bool = False, bias: bool = True,
                 rope: bool = False, epochs: int | None = None, batch_size: int = 16,
                 lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01, shuffle: bool = True,
                 validation_fraction: float = 0.0, early_stopping: bool = False,
                 n_iter_no_change: int | None = None, tol: float = 1e-4,
                 warm_start: bool = False, max_iter: int | None = None,
                 learning_rate_init: float | None = None,
                 random_state: RandomStateLike = None, verbose: int = 0,
                 dtype: DTypeLike = np.float32, lr_schedule: str = "warmup_cosine",
                 warmup: float = 0.1, max_grad_norm: float | None = 1.0,
                 decay: str = "matrices", standardize: bool = True,
                 patch_len: int | None = None, distributed: str = "balanced",
                 stem: Stem | str | None = None, layout: str = "ntc",
                 missing: str = "error", instance_norm: InstanceNorm = "auto",
                 instance_affine: bool = False, tokenizer: str = "patch",
                 loss: str = "squared_error", quantiles: Any = None,
                 pretrain: str | None = None, pretrain_epochs: int | None = None) -> None:
        store(self, locals())


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
                 partial: bool) -> Prepared:
        lab, per_position, valid, seen = _targets.labels(x, lengths, ragged, y)
        if fitted:
            if classes is not None and not np.array_equal(np.unique(classes), self.classes_):
                raise ValueError(f"classes={list(classes)!r} differ from classes_ "
                                 f"{list(self.classes_)!r} of the first partial_fit")
            if per_position != self._target["per_position"]:
                what = "per position" if self._target["per_position"] else "per sequence"
                raise ValueError(f"y must hold labels {what}, as at fit")
        elif partial:
            if classes is None:
                raise ValueError("classes must be given to the first partial_fit: every "
                                 "label that will ever be seen")
            self.classes_ = _targets.unique_labels("classes", np.asarray(classes))
        else:  # every rank's labels
            self.classes_ = _targets.unique_labels("y", self._comm().union(seen))
        comm = self._comm()
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
        return ExportSpec(self._fitted_model(), "probabilities", self.classes_,
                          patch_len=int(self.__dict__.get("patch_len_", 1)),
                          missing=self._missing(), patch_fill=self._fill_rule())

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
        if per_position != self._target["per_position"]:
            what = "per position" if self._target["per_position"] else "per sequence"
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
    """A SequenceModel with one transformer block (attention and its SiLU MLP) trained
    with softmax cross-entropy: labels per sequence (y (n,), pooled) or per position
    (y (n, T)). Labels may be any sortable type; classes_ holds them sorted.

    Parameters
    ----------""" + _COMMON_DOC + """
    class_weight : None, "balanced" (n_labels / (n_classes * count of the class),
        counted in fit's y, or in each partial_fit call's y) or a dict label -> weight
        (missing labels weigh 1); multiplies sample_weight in the loss.

    Fitted attributes: classes_, and those of AttentionRegressor.
    """

    _parameter_constraints = constraints(layers=False, classes=True)

    def __init__(self, n_heads: int = 1, *, d_model: int | None = None,
                 positional: Positional = "none", norm: Norm = None, pooling: Pooling = "mean",
                 d_hidden: int | None = None, dropout: float = 0.0, max_len: int | None = None,
                 causal: bool = False, bias: bool = True, rope: bool = False,
                 class_weight: ClassWeight = None, epochs: int = 100,
                 label_smoothing: float = 0.0, batch_size: int = 32,
                 lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01, shuffle: bool = True,
                 validation_fraction: float = 0.0, early_stopping: bool = False,
                 n_iter_no_change: int = 10, tol: float = 1e-4, warm_start: bool = False,
                 max_iter: int | None = None, learning_rate_init: float | None = None,
                 random_state: RandomStateLike = None, verbose: int = 0,
                 dtype: DTypeLike = np.float32, lr_schedule: str = "constant",
                 warmup: float = 0.1, max_grad_norm: float | None = None,
                 decay: str = "all", standardize: bool = False,
                 patch_len: int | None = 1, distributed: str = "balanced",
                 stem: Stem | str | None = None, layout: str = "ntc",
                 missing: str = "error", instance_norm: InstanceNorm = None,
                 instance_affine: bool = False, tokenizer: str = "patch",
                 pretrain: str | None = None, pretrain_epochs: int | None = None) -> None:
        store(self, locals())


class TransformerClassifier(_Classifier):
    """A SequenceModel of n_layers transformer blocks trained with softmax
    cross-entropy; otherwise as AttentionClassifier.

    Parameters
    ----------
    n_layers : number of transformer blocks.""" + _COMMON_DOC + """
    class_weight : as for AttentionClassifier.
    """

    n_layers: int

    _parameter_constraints = constraints(layers=True, classes=True)

    def __init__(self, n_heads: int = 4, n_layers: int = 2, d_hidden: int | None = None, *,
                 d_model: int | None = 32, positional: Positional = "sinusoidal",
                 norm: Norm = "pre", pooling: Pooling = "mean", dropout: float = 0.1,
                 max_len: int | None = None, causal: bool = False, bias: bool = True,
                 rope: bool = False,
                 class_weight: ClassWeight = None, epochs: int | None = None, batch_size: int = 16,
                 lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01, shuffle: bool = True,
                 validation_fraction: float = 0.0, early_stopping: bool = False,
                 n_iter_no_change: int | None = None, tol: float = 1e-4,
                 warm_start: bool = False, max_iter: int | None = None,
                 learning_rate_init: float | None = None,
                 random_state: RandomStateLike = None, verbose: int = 0,
                 dtype: DTypeLike = np.float32, lr_schedule: str = "warmup_cosine",
                 warmup: float = 0.1, max_grad_norm: float | None = 1.0,
                 decay: str = "matrices", standardize: bool = True,
                 patch_len: int | None = None,
                 label_smoothing: float = 0.0, distributed: str = "balanced",
                 stem: Stem | str | None = None, layout: str = "ntc",
                 missing: str = "error", instance_norm: InstanceNorm = None,
                 instance_affine: bool = False, tokenizer: str = "auto",
                 pretrain: str | None = None, pretrain_epochs: int | None = None) -> None:
        store(self, locals())


#: every estimator class a model file may name: attnx.io looks classes up here
ESTIMATORS: dict[str, type[SequenceEstimator]] = {
    cls.__name__: cls for cls in (AttentionRegressor, TransformerRegressor,
                                  AttentionClassifier, TransformerClassifier)}
_model_file.register(*ESTIMATORS.values())
