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

import math
import numbers
import warnings
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, NoReturn, TypeVar, cast

import numpy as np

from . import _sequences as seqs
from . import distributed
from . import _state
from ._base import ClassifierParams, EstimatorParams, sklearn_class
from ._metrics import r2_score
from ._params import check_dtype, check_positive_int
from ._validate import finite
from ._training import (Batch, EarlyStopping, InterruptGuard, Progress, Snapshot,
                        TrainingDivergedError, batch_plan)
from .attention import MultiHeadAttention
from .losses import cross_entropy_loss, mse_loss
from .optim import AdamW, _check_hyper
from .sequence import SequenceModel
from .transformer import Transformer

if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Mapping
    from typing import Literal, Union

    from numpy.typing import ArrayLike, DTypeLike, NDArray
    from typing_extensions import Self

    from ._typing import AnyArray, BoolArray, FloatArray, IntArray, RandomStateLike

    #: The network an estimator trains: the bare X -> Y model or a SequenceModel.
    _Model = Union[MultiHeadAttention, Transformer, SequenceModel]
    #: fit's result for one batch: (loss before the step, its weight).
    _LossFn = Callable[[Batch, int], "tuple[float, float]"]
    #: float64 loss weights (sample_weight, class_weight and their products)
    _F64Array = NDArray[np.float64]
    #: class_weight: None, "balanced" or a dict label -> weight.
    ClassWeight = Union[None, Literal["balanced"], Mapping[Any, float]]
    #: the choices of positional, norm and pooling
    Positional = Literal["none", "sinusoidal", "learned", "rope"]
    Norm = Union[None, Literal["pre"]]
    Pooling = Literal["mean", "last"]
    #: _prepare's result: (data, legacy) for the bare model, (data, legacy,
    #: (per_position, k)) for the sequence model.
    _Prepared = Union[tuple[seqs.Data, bool], tuple[seqs.Data, bool, tuple[bool, int | None]]]

__all__ = ["AttentionRegressor", "TransformerRegressor", "AttentionClassifier",
           "TransformerClassifier", "NotFittedError", "TrainingDivergedError"]

# predict and attention_weights run this many rows (samples x positions) per
# forward: bounded memory for any n, and no relation to the training batch_size
_PREDICT_ROWS = 8192

# scratch space, rebuilt on demand and never pickled or saved
_SCRATCH = ("_batches", "_snapshot", "_dist")  # _dist: the comm of the running fit

_POSITIONAL = ("none", "sinusoidal", "learned", "rope")

_T = TypeVar("_T")


class _Config(SimpleNamespace):
    """The validated hyper-parameters of one fit (see _SequenceEstimator._config)."""

    n_heads: int
    causal: bool
    bias: bool
    rope: bool
    shuffle: bool
    early_stopping: bool
    warm_start: bool
    epochs: int
    batch_size: int
    lr: float
    betas: tuple[float, float]
    eps: float
    weight_decay: float
    validation_fraction: float
    n_iter_no_change: int
    tol: float
    verbose: int
    dtype: np.dtype[Any]
    d_model: int | None
    n_layers: int
    d_hidden: int | None
    positional: Positional
    norm: Norm
    pooling: Pooling
    dropout: float
    max_len: int | None


def __getattr__(name: str) -> Any:  # NotFittedError is scikit-learn's class, resolved on first use
    if name == "NotFittedError":
        return sklearn_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ExportSpec(NamedTuple):
    """What an exporter (attnx.onnx) needs to reproduce predict: the fitted network,
    how its raw output becomes predict's output ("y": as it is; "squeeze": drop the
    single output column; "probabilities": softmax over the classes) and the class
    labels (classifiers; None otherwise)."""

    model: Any
    output: str
    classes: Any = None


class _SequenceEstimator(EstimatorParams):
    """fit, partial_fit's training (each kind has its own partial_fit signature),
    inference and save, shared by the four estimators."""

    # the bare X -> Y model of the original regressors
    _legacy_class: ClassVar[type[MultiHeadAttention] | type[Transformer] | None] = None

    # hyper-parameters, as given to the constructor (validated by _config at fit)
    n_heads: int
    d_model: int | None
    positional: Positional
    norm: Norm
    pooling: Pooling
    d_hidden: int | None
    dropout: float
    max_len: int | None
    causal: bool
    bias: bool
    rope: bool
    epochs: int
    batch_size: int
    lr: float
    betas: tuple[float, float]
    eps: float
    weight_decay: float
    shuffle: bool
    validation_fraction: float
    early_stopping: bool
    n_iter_no_change: int
    tol: float
    warm_start: bool
    max_iter: int | None
    learning_rate_init: float | None
    random_state: RandomStateLike
    verbose: int
    dtype: DTypeLike  # float32 or float64 in any spelling np.dtype accepts

    # fitted attributes
    model_: _Model
    optimizer_: AdamW
    shuffle_rng_: np.random.Generator
    n_features_in_: int
    n_outputs_: int
    n_iter_: int
    loss_curve_: list[float]
    best_loss_: float
    validation_loss_curve_: list[float]
    best_validation_loss_: float
    # private state: the kind of targets at fit ({"per_position": bool, "k": int |
    # None}), the SequenceModel's architecture, the running fit's comm
    _target: dict[str, Any]
    _spec: dict[str, Any]
    _dist: distributed.Local
    _snapshot: Snapshot

    # ---- hyper-parameters ----------------------------------------------
    def _config(self) -> _Config:
        """Validated copies of the hyper-parameters; the attributes stay as given."""
        c = _Config()
        c.n_heads = check_positive_int("n_heads", self.n_heads)
        for name in ("causal", "bias", "rope", "shuffle", "early_stopping", "warm_start"):
            setattr(c, name, _bool(name, getattr(self, name)))
        c.epochs = _alias("epochs", self.epochs, 100, "max_iter", self.max_iter,
                          check_positive_int)
        c.batch_size = check_positive_int("batch_size", self.batch_size)
        lr = _alias("lr", self.lr, 1e-3, "learning_rate_init", self.learning_rate_init,
                    lambda name, v: v)
        c.lr, c.betas, c.eps, c.weight_decay = _check_hyper(lr, self.betas, self.eps,
                                                            self.weight_decay)
        c.validation_fraction = _real("validation_fraction", self.validation_fraction, 0.0, 1.0,
                                      "in [0, 1)")
        c.n_iter_no_change = check_positive_int("n_iter_no_change", self.n_iter_no_change)
        c.tol = _real("tol", self.tol, 0.0, math.inf, ">= 0")
        c.verbose = _verbose(self.verbose)
        c.dtype = check_dtype(self.dtype)
        c.d_model = None if self.d_model is None else check_positive_int("d_model", self.d_model)
        c.n_layers = self._n_layers()
        c.d_hidden = (None if self.d_hidden is None
                      else check_positive_int("d_hidden", self.d_hidden))
        if self.positional not in _POSITIONAL:
            raise ValueError(f"positional must be one of {_POSITIONAL}, got {self.positional!r}")
        c.positional = self.positional
        if c.rope and c.positional not in ("none", "rope"):
            raise ValueError(f"rope=True is positional='rope'; it cannot be combined with "
                             f"positional={c.positional!r}")
        if self.norm not in (None, "pre"):
            raise ValueError(f"norm must be None or 'pre', got {self.norm!r}")
        c.norm = self.norm
        if self.pooling not in ("mean", "last"):
            raise ValueError(f"pooling must be 'mean' or 'last' (how one output per sequence "
                             f"is made; per-position targets use no pooling), got "
                             f"{self.pooling!r}")
        c.pooling = self.pooling
        c.dropout = _real("dropout", self.dropout, 0.0, 1.0, "in [0, 1)")
        c.max_len = None if self.max_len is None else check_positive_int("max_len", self.max_len)
        return c

    def _n_layers(self) -> int:
        return 1

    @staticmethod
    def _loss(batch: Batch, m: int) -> tuple[float, float]:
        """(loss, weight) of the first m rows of the batch, and dL/dY in batch.dy: the
        regressors' MSE or the classifiers' cross-entropy."""
        raise NotImplementedError

    def _legacy_wanted(self, cfg: _Config) -> bool:
        """True when the settings ask for nothing the bare X -> Y model lacks."""
        return (self._legacy_class is not None and cfg.d_model is None
                and cfg.positional == "none" and cfg.norm is None and cfg.dropout == 0
                and cfg.max_len is None
                and (self._legacy_class is Transformer or cfg.d_hidden is None))

    # ---- data ------------------------------------------------------------
    def _prepare(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None,
                 cfg: _Config, fitted: bool, classes: Any = None,
                 partial: bool = False) -> _Prepared:
        """Data for training, and whether it is for the bare X -> Y model (and for the
        sequence model, (per_position, k) of the targets)."""
        dtype = self.model_.dtype if fitted else cfg.dtype
        nf = self.n_features_in_ if fitted else None
        x, lengths, ragged = seqs.sequences("X", X, dtype, nf)
        n, t = x.shape[:2]
        w = seqs.sample_weights(sample_weight, n)
        if isinstance(self, _Classifier):
            return self._prepare_labels(x, lengths, ragged, y, w, cfg, fitted, classes,
                                        partial)
        if fitted:
            legacy = self._is_legacy()
        else:
            legacy = (self._legacy_wanted(cfg) and not ragged
                      and np.shape(y) == x.shape and not seqs.per_position_list(y, ragged))
        if legacy:
            yv = seqs._real("y", y)
            if yv.shape != x.shape:
                raise ValueError(f"y must have the shape of X {x.shape} (n_samples, seq_len, "
                                 f"n_features) for this model, got {yv.shape}")
            return seqs.Data(x, None, seqs.cast("y", yv, dtype), w, True), True
        yv, per_position, k = seqs.regression_targets(y, x, lengths, ragged, dtype)
        if fitted:
            self._check_target(per_position, k)
        if per_position and lengths is not None:  # ragged
            valid = seqs.valid_positions(lengths, t).astype(np.float64)
            w = valid if w is None else valid * w[:, None]
        return seqs.Data(x, lengths, yv, w, per_position), False, (per_position, k)

    def _check_target(self, per_position: bool, k: int | None) -> None:
        tgt = self._target
        if per_position != tgt["per_position"]:
            what = "per position" if tgt["per_position"] else "per sequence"
            raise ValueError(f"y must hold targets {what}, as at fit")
        if (k or 1) != self.n_outputs_:
            raise ValueError(f"y must have {self.n_outputs_} output(s) as at fit, got {k or 1} "
                             f"(n_outputs mismatch)")

    def _is_legacy(self) -> bool:
        return isinstance(self.model_, (MultiHeadAttention, Transformer))

    # ---- training ------------------------------------------------------
    def fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None,
            comm: Any = None) -> Self:
        """Train for `epochs` epochs on X, y; returns self.

        A new model each call, unless warm_start=True and the estimator is fitted: then
        training goes on from the current weights and optimizer state for `epochs`
        more epochs (same architecture, same kind of targets).

        sample_weight (n_samples,) scales each sample's loss (weight 2 counts as the
        sample twice); each batch's loss is the weighted mean over its samples.

        With validation_fraction > 0 a random part of the samples is held out and
        scored after every epoch (validation_loss_curve_). early_stopping=True stops
        when that loss (or, without validation, the training loss) has not improved
        by tol for n_iter_no_change epochs and keeps the best weights. With
        early_stopping=False the same rule on the training loss ends training with a
        ConvergenceWarning. Ctrl-C stops after the current step with a warning.

        comm: None, or an mpi4py communicator when this process is one rank of a
        data-parallel fit (``mpiexec -n P``): X, y, sample_weight are then this rank's
        shard, and the result is the fit on every rank's shard concatenated in rank
        order (see attnx.distributed).
        """
        dist = self._dist = distributed.wrap(comm)
        with dist.together(self.get_params()):  # an error on one rank: on every rank
            cfg = self._config()
            warm = cfg.warm_start and "model_" in self.__dict__
            prepared = self._prepare(X, y, sample_weight, cfg, fitted=warm)
            _check_comm_options(dist, cfg)
        data, legacy = prepared[0], prepared[1]
        padded = _setup(dist, data)  # the hyper-parameters were compared in together()
        n = dist.n
        if math.ceil(cfg.validation_fraction * n) >= n:
            raise ValueError(f"validation_fraction={cfg.validation_fraction} leaves no "
                             f"training sample out of {n}")
        if warm:
            split_seed = dist.same(_seeds(self.random_state))[2]
            self._set_optimizer_hyper(cfg)
        else:
            split_seed = self._initialize(data, cfg, legacy, prepared[2:])
        train, val = _split(data, cfg.validation_fraction, split_seed, dist)
        # the training part's global count and lengths (one more setup collective
        # only when a validation part was held out)
        train = padded if val is None else _setup(dist, train)
        if val is not None and not hasattr(self, "validation_loss_curve_"):
            self.validation_loss_curve_ = []
            self.best_validation_loss_ = math.inf
        self._train(train, val, cfg, cfg.epochs, fit=True)
        return self

    def _partial_fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None,
                     classes: Any, comm: Any = None) -> Self:
        dist = self._dist = distributed.wrap(comm)
        with dist.together(self.get_params()):  # an error on one rank: on every rank
            cfg = self._config()
            fitted = "model_" in self.__dict__
            prepared = self._prepare(X, y, sample_weight, cfg, fitted, classes, partial=True)
            _check_comm_options(dist, cfg)
        data = _setup(dist, prepared[0])  # once: _train uses its global count and lengths
        if fitted:
            self._set_optimizer_hyper(cfg)
        else:
            self._initialize(data, cfg, prepared[1], prepared[2:])
        self._train(data, None, cfg, 1, fit=False)
        return self

    def _set_optimizer_hyper(self, cfg: _Config) -> None:
        opt = self.optimizer_
        opt.lr, opt.betas, opt.eps, opt.weight_decay = cfg.lr, cfg.betas, cfg.eps, \
            cfg.weight_decay

    def _initialize(self, data: seqs.Data, cfg: _Config, legacy: bool,
                    target: tuple[tuple[bool, int | None], ...]) -> int:
        """Drop every fitted attribute, build model_, optimizer_ and shuffle_rng_.
        Returns the seed for the validation split."""
        keep: dict[str, Any] = {k: self.__dict__[k] for k in ("classes_", "_dist")
                                if k in self.__dict__}
        for name in [k for k in vars(self) if k.endswith("_") and not k.startswith("_")]:
            delattr(self, name)
        for name in _SCRATCH + ("_target", "_spec"):
            self.__dict__.pop(name, None)
        self.__dict__.update(keep)
        # with comm every rank starts from rank 0's seeds (random_state=None differs)
        seeds: tuple[int, int, int] = self._comm().same(_seeds(self.random_state))
        init_seed, shuffle_seed, split_seed = seeds
        f = data.x.shape[2]
        if legacy:
            legacy_class = self._legacy_class
            assert legacy_class is not None  # _prepare picks legacy only for such a class
            self.model_ = legacy_class(f, **self._legacy_kwargs(cfg), random_state=init_seed,
                                       input_grad=False)  # dL/dX is never needed
            self._target = {"per_position": True, "k": f}
        else:
            per_position, k = target[0] if target else (data.per_position, None)
            n_out = len(self.classes_) if isinstance(self, _Classifier) else (k or 1)
            d = f if cfg.d_model is None else cfg.d_model
            if d % cfg.n_heads:
                hint = (" (d_model=None means the number of features; set d_model to choose "
                        "the model's width)" if cfg.d_model is None else "")
                raise ValueError(f"n_heads={cfg.n_heads} must divide d_model={d}{hint}")
            positional = "rope" if cfg.rope else cfg.positional
            max_len = cfg.max_len
            if positional == "learned" and max_len is None:
                max_len = int(self._comm().allmax(data.x.shape[1]))  # the longest sequence
            self._spec = dict(n_features=f, d_model=d, n_heads=cfg.n_heads,
                              n_layers=cfg.n_layers, n_outputs=n_out, d_hidden=cfg.d_hidden,
                              pooling=None if per_position else cfg.pooling,
                              positional=positional, norm=cfg.norm, causal=cfg.causal,
                              bias=cfg.bias, dropout=cfg.dropout, max_len=max_len,
                              dtype=cfg.dtype.name)
            self.model_ = self._build(self._spec, init_seed)
            self._target = {"per_position": bool(per_position), "k": k}
            if not isinstance(self, _Classifier):
                self.n_outputs_ = n_out
        self.optimizer_ = AdamW(self.model_.params, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps,
                                weight_decay=cfg.weight_decay)
        self.shuffle_rng_ = np.random.default_rng(shuffle_seed)
        self.n_features_in_ = f
        self.n_iter_ = 0
        self.loss_curve_ = []
        self.best_loss_ = math.inf
        return split_seed

    def _legacy_kwargs(self, cfg: _Config) -> dict[str, Any]:
        return dict(n_heads=cfg.n_heads, causal=cfg.causal, bias=cfg.bias, rope=cfg.rope,
                    dtype=cfg.dtype)

    @staticmethod
    def _build(spec: Mapping[str, Any], seed: int) -> SequenceModel:
        spec = dict(spec)
        args = [spec.pop(k) for k in ("n_features", "d_model", "n_heads", "n_layers",
                                      "n_outputs")]
        spec["dtype"] = check_dtype(spec["dtype"])
        model = SequenceModel(*args, **spec, random_state=seed)
        model.input_grad = False  # dL/dX is never needed here
        return model

    def _batch(self, data: seqs.Data, bs: int, t: int) -> Batch:
        """The reusable Batch for this data layout and padded length t."""
        model = self.model_
        target_tail: tuple[int, ...]
        tdtype: DTypeLike
        if isinstance(self, _Classifier):
            target_tail, tdtype = ((t,) if data.per_position else ()), np.int64
            out_tail = target_tail + (len(self.classes_),)
        else:
            target_tail = data.y.shape[1:] if not data.per_position else (t,) + data.y.shape[2:]
            tdtype, out_tail = model.dtype, target_tail
        w_ndim = None if data.w is None else data.w.ndim
        if isinstance(self, _Classifier):
            w_ndim = 2 if data.per_position else 1
        masked = data.lengths is not None
        cache: dict[tuple[Any, ...], Batch] = self.__dict__.setdefault("_batches", {})
        key = (bs, t, data.x.shape[2], target_tail, np.dtype(tdtype), out_tail, model.dtype,
               masked, w_ndim)
        batch = cache.get(key)
        if batch is None:
            if len(cache) > 8:
                cache.clear()
            batch = cache[key] = Batch(bs, t, data.x.shape[2], target_tail, tdtype, out_tail,
                                       model.dtype, masked, w_ndim)
        return batch

    def _snapshot_for(self) -> Snapshot:
        model, opt = self.model_, self.optimizer_
        snap = self.__dict__.get("_snapshot")
        if snap is None or not snap.fits(model, opt):
            snap = self._snapshot = Snapshot(model, opt)
        return snap

    def _train(self, data: seqs.Data, val: seqs.Data | None, cfg: _Config, epochs: int,
               fit: bool) -> None:
        """Run `epochs` epochs over validated Data of the model's dtype, set up by
        _setup (the global sample count, lengths and padded length)."""
        model, opt, rng = self.model_, self.optimizer_, self.shuffle_rng_
        dist = self._comm()
        n = dist.n
        bs = min(cfg.batch_size, n)
        good = self._snapshot_for()
        good.save(model, opt, rng)  # the state to roll back to if training diverges
        stopper, plateau = None, False
        if fit:
            stopper = EarlyStopping(cfg.tol, cfg.n_iter_no_change, model, opt,
                                    keep_best=cfg.early_stopping and val is not None)
            plateau = not cfg.early_stopping
        last = self.n_iter_ + epochs
        bar = Progress(cfg.verbose if dist.is_root else 0, -(-n // bs), last if fit else None)
        with InterruptGuard() as guard:
            try:
                for _ in range(epochs):
                    epoch = self.n_iter_ + 1
                    bar.start(epoch)
                    loss = self._epoch(data, bs, cfg.shuffle, epoch, good, guard, bar)
                    if loss is None:  # interrupted
                        return
                    self.loss_curve_.append(loss)
                    self.best_loss_ = min(self.best_loss_, loss)
                    self.n_iter_ = epoch
                    vloss = None
                    if val is not None:
                        vloss = self._mean_loss(val, bs)
                        self.validation_loss_curve_.append(vloss)
                        self.best_validation_loss_ = min(self.best_validation_loss_, vloss)
                    dist.check_identical(model.params.flat)
                    good.save(model, opt, rng)
                    watched = loss if (vloss is None or plateau) else vloss
                    if stopper is not None and stopper.update(watched):
                        if plateau:
                            bar.end(loss, vloss, " (training loss plateau)")
                            warnings.warn(
                                f"the training loss did not improve by more than tol={cfg.tol} "
                                f"for {cfg.n_iter_no_change} consecutive epochs: stopped after "
                                f"epoch {epoch} of {last} (early_stopping=True watches the "
                                f"validation loss instead; n_iter_no_change >= epochs trains "
                                f"every epoch)",
                                cast("type[Warning]", sklearn_class("ConvergenceWarning")),
                                stacklevel=3)
                            return
                        bar.end(loss, vloss, " (early stop)")
                        stopper.restore_best()
                        return
                    bar.end(loss, vloss)
            finally:
                bar.close()

    def _epoch(self, data: seqs.Data, bs: int, shuffle: bool, epoch: int, good: Snapshot,
               guard: InterruptGuard, bar: Progress) -> float | None:
        """One pass over data; returns the (weighted) mean loss, or None when
        interrupted (after a warning). Rolls back and raises when training diverges."""
        model, opt = self.model_, self.optimizer_
        dist = self._comm()
        order, global_plan = batch_plan(dist.n, bs, self.shuffle_rng_ if shuffle else None,
                                        dist.lengths)
        # this rank's samples of each global batch (all of them with comm=None)
        order, plan = dist.batches(order, global_plan)
        rows = dist.rows(plan, bs)
        t_full = data.x.shape[1]
        total, seen, done = 0.0, 0.0, 0
        for k, (start, m, t, _) in enumerate(plan):
            batch = self._batch(data, rows, t or t_full)
            batch.load(data, order, start, m)
            try:
                loss, weight = _step(model, opt, batch, m, self._loss, dist, guard)
            except KeyboardInterrupt:  # raised outside the guard's reach
                guard.interrupted = True
                break
            except _NonFinite as exc:
                self._diverged(good, f"epoch {epoch}: {exc} at batch {k + 1} of {len(plan)}",
                               epoch)
            total += loss * weight
            seen += weight
            done += 1
            bar.step(total / seen if seen else 0.0)
            if dist.stopping(guard):  # with comm: every rank stops after the same step
                break
        if guard.interrupted:
            bar.close()
            warnings.warn(
                f"training interrupted in epoch {epoch} after {done} of {len(plan)} "
                f"batches; the model keeps the weights of the last completed step "
                f"({opt.t} optimizer steps in all) and n_iter_ = {self.n_iter_} counts "
                f"completed epochs only", UserWarning, stacklevel=4)
            return None
        return total / seen if seen else 0.0

    def _mean_loss(self, data: seqs.Data, bs: int) -> float:
        """The loss over data (validation), in batches of the training batch shape."""
        legacy = self._is_legacy()
        order, plan = batch_plan(data.n, bs, None, data.lengths) if data.n else (None, [])
        total, seen = 0.0, 0.0
        for start, m, t in plan:
            batch = self._batch(data, bs, t or data.x.shape[1])
            batch.load(data, order, start, m)
            kw = {} if batch.mask is None else {"key_padding_mask": batch.mask}
            # the bare model reuses its training workspace (grad=True); the sequence
            # model runs its inference path, which also switches dropout off
            self.model_.forward(batch.x, grad=legacy, out=batch.y, **kw)
            loss, weight = self._loss(batch, m)
            total += loss * weight
            seen += weight
        dist = self._comm()  # with comm: over every rank's validation samples
        total, seen = dist.allsum(total), dist.allsum(seen)
        return total / seen if seen else 0.0

    def _comm(self) -> distributed.Local:
        """The running fit's distributed hooks (identities without comm)."""
        return self.__dict__.get("_dist") or distributed.Local()

    def _diverged(self, good: Snapshot, where: str, epoch: int) -> NoReturn:
        good.restore(self.model_, self.optimizer_, self.shuffle_rng_)
        before = f"the end of epoch {epoch - 1}" if epoch > 1 else "their values before epoch 1"
        raise TrainingDivergedError(
            f"training diverged in {where} (lr={self.optimizer_.lr}); the weights, optimizer "
            f"state and shuffling state were restored to {before}. Try a smaller lr.")

    # ---- inference -----------------------------------------------------
    def _fitted_model(self) -> _Model:
        if "model_" not in self.__dict__:
            raise sklearn_class("NotFittedError")(
                f"this {type(self).__name__} is not fitted yet: call fit or partial_fit first")
        return self.model_

    def _forward_all(self, X: ArrayLike, allow_empty: bool = True
                     ) -> tuple[FloatArray | list[FloatArray], IntArray | None]:
        """(raw model outputs, lengths or None): an array (n, ...) for dense X, and for
        ragged X an array of pooled rows or a list of (T_i, ...) arrays."""
        model = self._fitted_model()
        x, lengths, _ = seqs.sequences("X", X, model.dtype, self.n_features_in_,
                                       allow_empty=allow_empty)
        legacy = self._is_legacy()
        if not legacy and self._spec["positional"] == "learned" \
                and x.shape[1] > self._spec["max_len"]:
            raise ValueError(f"X has sequences of length {x.shape[1]}, longer than "
                             f"max_len={self._spec['max_len']} of the learned positions")
        n, t = x.shape[:2]
        tail = (self.n_features_in_,) if legacy else (self._spec["n_outputs"],)
        per_position = legacy or self._target["per_position"]
        if lengths is None:  # dense X
            out = np.empty((n, t) + tail if per_position else (n,) + tail, dtype=model.dtype)
            step = max(1, _PREDICT_ROWS // max(t, 1))
            for s in range(0, n, step):
                model.forward(x[s:s + step], grad=False, out=out[s:s + step])
            return out, None
        order = np.argsort(lengths, kind="stable")
        pooled = np.empty((n,) + tail, dtype=model.dtype) if not per_position else None
        parts: list[FloatArray | None] = [None] * n
        step = max(1, _PREDICT_ROWS // t)
        for s in range(0, n, step):
            idx = order[s:s + step]
            tb = int(lengths[idx].max())
            mask = ~seqs.valid_positions(lengths[idx], tb)
            y = model.forward(x[idx, :tb], key_padding_mask=mask, grad=False)
            if per_position:
                for j, i in enumerate(idx):
                    parts[i] = y[j, :int(lengths[i])].copy()
            else:
                assert pooled is not None  # allocated above when not per_position
                pooled[idx] = y
        if per_position:
            return cast("list[FloatArray]", parts), lengths  # order covers every sample
        assert pooled is not None
        return pooled, lengths

    def export_spec(self) -> ExportSpec:
        """The fitted network and how predict turns its output into predictions (see
        ExportSpec); what attnx.onnx.export reads from an estimator."""
        model = self._fitted_model()
        squeeze = not self._is_legacy() and self._target["k"] is None
        return ExportSpec(model, "squeeze" if squeeze else "y")

    # ---- persistence ---------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write configuration, weights, optimizer and RNG state to exactly `path`, a
        safetensors file (see attnx.io); attnx.load(path) reads it back."""
        from .io import save

        save(self, path)

    def _model_spec(self) -> dict[str, Any]:
        """The fitted model's architecture as JSON-able values (for save and pickle)."""
        if self._is_legacy():
            return self.model_.get_config()  # the bare model's constructor arguments
        return {"kind": "sequence", **self._spec}

    def _restore_model(self, spec: Mapping[str, Any], params: AnyArray,
                       opt_hyper: Mapping[str, Any], opt_state: Any) -> None:
        """Rebuild model_ and optimizer_ from _model_spec(), params.flat and AdamW state."""
        spec = dict(spec)
        params = np.asarray(params)
        kind = spec.pop("kind", "legacy")
        # sizes come from a file or a pickle: check them against the weights that
        # are really there before building (and allocating) a model of that size
        legacy_class = self._legacy_class
        model_class = SequenceModel if kind == "sequence" else legacy_class
        if model_class is None:
            raise ValueError(f"a {type(self).__name__} has no model of kind {kind!r}")
        expected = model_class.config_n_params(spec)
        if params.ndim != 1 or expected != params.size:
            raise ValueError(f"the weights ({params.size} values) do not fit the model "
                             f"(which needs {expected})")
        model: _Model
        if kind == "sequence":
            self._spec = spec
            model = self._build(spec, 0)
        else:
            assert legacy_class is not None  # a legacy kind without a legacy class raised above
            d = spec.pop("d_model")
            spec["dtype"] = check_dtype(spec["dtype"])
            model = legacy_class(d, **spec, random_state=0, input_grad=False)
        if params.shape != model.params.flat.shape or params.dtype != model.dtype:
            raise ValueError(f"the weights ({params.dtype} {params.shape}) do not fit the model "
                             f"({model.dtype} {model.params.flat.shape})")
        np.copyto(model.params.flat, params)
        opt = AdamW(model.params, lr=opt_hyper["lr"], betas=tuple(opt_hyper["betas"]),
                    eps=opt_hyper["eps"], weight_decay=opt_hyper["weight_decay"])
        opt.load_state_dict(opt_state)
        self.model_, self.optimizer_ = model, opt

    # the state besides hyper-parameters and public fitted attributes (attnx._state)
    _state_attributes = ("_target",)

    def __getstate__(self) -> dict[str, Any]:
        # the same state as a model file (attnx._state): hyper-parameters, weights,
        # optimizer and RNG states, fitted attributes; workspaces and batch buffers
        # are caches, left out
        return {"attnx_state": _state.get_state(self, portable=False)}

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        _state.set_state(self, *state["attnx_state"])


# ---- regressors ----------------------------------------------------------------
class _Regressor(_SequenceEstimator):

    @staticmethod
    def _loss(batch: Batch, m: int) -> tuple[float, float]:
        return _regression_loss(batch, m)

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
        if self._is_legacy() or self._target["k"] is not None:
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
        x, lengths, ragged = seqs.sequences("X", X, model.dtype, self.n_features_in_)
        n, t = x.shape[:2]
        w = seqs.sample_weights(sample_weight, n)
        if self._is_legacy():
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

    def attention_weights(self, X: ArrayLike) -> FloatArray | list[FloatArray]:
        """Attention probabilities of the bare model on X: (n, n_heads, T, T); a
        TransformerRegressor gives a list with one such array per layer."""
        model = self._fitted_model()
        if not self._is_legacy():
            raise ValueError("attention_weights is available for the bare X -> Y model "
                             "only (d_model=None with y of X's shape)")
        x: FloatArray = seqs.sequences("X", X, model.dtype, self.n_features_in_)[0]
        n, t, _ = x.shape
        step = max(1, _PREDICT_ROWS // t)
        parts: list[list[FloatArray]] = []
        for s in range(0, n, step):
            model.forward(x[s:s + step], grad=True)  # grad=True keeps the probabilities
            w = model.attention_weights()
            parts.append(w if isinstance(w, list) else [w])
        layers: list[FloatArray] = [np.concatenate(p, axis=0) for p in zip(*parts)]
        return layers if isinstance(model, Transformer) else layers[0]


_COMMON_DOC = """
    d_model : None or int. The model's width. None: the number of features of X;
        with y of X's own shape (and no positional / norm / dropout / max_len) this
        trains the bare attention model mapping X to Y directly, as attnx always did.
    positional : "none", "sinusoidal", "learned" (a learned table of max_len rows)
        or "rope" (rotary, in every attention layer; rope=True is the same).
    norm : None (post-residual blocks) or "pre" (pre-LayerNorm blocks and a final
        LayerNorm).
    pooling : "mean" or "last": how one output per sequence is made (valid
        positions only); per-position targets are not pooled.
    d_hidden : MLP width (None: 4 * d_model).
    dropout : on the attention probabilities and the residual branches in training.
    max_len : longest sequence for positional="learned" (None: the longest
        training sequence); longer sequences are refused at predict.
    n_heads, causal, bias, rope : attention options (see MultiHeadAttention).
    epochs (alias max_iter) : passes over the data in fit.
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
"""


class AttentionRegressor(_Regressor):
    """One attention layer trained as a regressor.

    With d_model=None and y of X's shape: Y = MultiHeadAttention(X), as before. In
    every other case (sequence-level y, d_model set, a new option set): a
    SequenceModel with ONE transformer block (attention and its SiLU MLP, whose
    width is d_hidden), between the input embedding and the output head.

    Parameters
    ----------""" + _COMMON_DOC + """
    Fitted attributes: model_, optimizer_, shuffle_rng_, n_features_in_,
    n_outputs_ (sequence model), n_iter_ (completed epochs), loss_curve_ (mean
    training loss per epoch), best_loss_, and with validation
    validation_loss_curve_ and best_validation_loss_.
    """

    _legacy_class = MultiHeadAttention

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
                 dtype: DTypeLike = np.float32) -> None:
        _store(self, locals())


class TransformerRegressor(_Regressor):
    """A transformer (n_layers blocks of attention + SiLU MLP with residuals) trained
    as a regressor: the bare Transformer for y of X's shape with d_model=None, else
    a SequenceModel of n_layers blocks.

    Parameters
    ----------
    n_layers : number of transformer blocks.""" + _COMMON_DOC + """
    Fitted attributes as for AttentionRegressor.
    """

    n_layers: int

    _legacy_class = Transformer

    def __init__(self, n_heads: int = 1, n_layers: int = 2, d_hidden: int | None = None, *,
                 d_model: int | None = None, positional: Positional = "none",
                 norm: Norm = None, pooling: Pooling = "mean", dropout: float = 0.0,
                 max_len: int | None = None, causal: bool = False, bias: bool = True,
                 rope: bool = False, epochs: int = 100, batch_size: int = 32, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01, shuffle: bool = True,
                 validation_fraction: float = 0.0, early_stopping: bool = False,
                 n_iter_no_change: int = 10, tol: float = 1e-4, warm_start: bool = False,
                 max_iter: int | None = None, learning_rate_init: float | None = None,
                 random_state: RandomStateLike = None, verbose: int = 0,
                 dtype: DTypeLike = np.float32) -> None:
        _store(self, locals())

    def _n_layers(self) -> int:
        return check_positive_int("n_layers", self.n_layers)

    def _legacy_kwargs(self, cfg: _Config) -> dict[str, Any]:
        kw = super()._legacy_kwargs(cfg)
        kw["n_layers"] = cfg.n_layers
        kw["d_hidden"] = cfg.d_hidden
        return kw


# ---- classifiers ---------------------------------------------------------------
class _Classifier(ClassifierParams, _SequenceEstimator):
    class_weight: ClassWeight
    classes_: AnyArray  # the sorted labels (any sortable dtype)

    @staticmethod
    def _loss(batch: Batch, m: int) -> tuple[float, float]:
        return _cross_entropy(batch, m)

    def partial_fit(self, X: ArrayLike, y: ArrayLike, classes: ArrayLike | None = None,
                    sample_weight: ArrayLike | None = None, comm: Any = None) -> Self:
        """One more epoch over X, y (as the regressors' partial_fit). The first call
        needs `classes`, every label that will ever be seen (as scikit-learn)."""
        return self._partial_fit(X, y, sample_weight, classes, comm)

    def _prepare_labels(self, x: FloatArray, lengths: IntArray | None, ragged: bool, y: Any,
                        w: _F64Array | None, cfg: _Config, fitted: bool, classes: Any,
                        partial: bool) -> _Prepared:
        lab, per_position = seqs.labels(y, x, lengths, ragged)
        seqs.check_labels_finite(lab)
        n, t = x.shape[:2]
        valid = (seqs.valid_positions(lengths, t) if (lengths is not None and per_position)
                 else None)
        seen = lab[valid] if valid is not None else lab.ravel()
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
            self.classes_ = _unique("classes", np.asarray(classes))
        else:
            self.classes_ = _unique("y", self._comm().union(seen))  # every rank's labels
        codes = _encode(lab, self.classes_, valid)
        cw = self._class_weights(seen)
        if cw is None and w is None and valid is None:
            weights = None
        else:
            weights = np.ones(lab.shape) if w is None else (
                w[:, None] * np.ones((1, t)) if per_position else w.copy())
            if cw is not None:
                weights = weights * cw[codes]
            if valid is not None:
                weights = weights * valid
            if not (weights > 0).any():
                raise ValueError("sample_weight and class_weight give every label a weight "
                                 "of zero: nothing to learn from")
        return seqs.Data(x, lengths, codes, weights, per_position), False, (per_position, None)

    def _class_weights(self, seen: AnyArray) -> _F64Array | None:
        cw = self.class_weight
        if cw is None:
            return None
        c = len(self.classes_)
        if isinstance(cw, str) and cw == "balanced":
            # from the labels being fitted: fit's y, or each partial_fit call's own y
            counts = np.array([np.count_nonzero(seen == k) for k in self.classes_], float)
            counts = self._comm().allsum(counts)  # with comm: every rank's labels
            return np.where(counts > 0, counts.sum() / (c * np.maximum(counts, 1)), 0.0)
        if isinstance(cw, dict):
            out = np.ones(c)
            for label, weight in cw.items():
                hit = np.flatnonzero(self.classes_ == label)
                if hit.size == 0:
                    raise ValueError(f"class_weight names the label {label!r}, which is not "
                                     f"among the classes {list(self.classes_)!r}")
                if isinstance(weight, bool) or not isinstance(weight, numbers.Real) \
                        or not math.isfinite(weight) or weight < 0:
                    raise ValueError(f"class_weight[{label!r}] must be a finite number >= 0, "
                                     f"got {weight!r}")
                out[hit[0]] = float(weight)
            return out
        raise ValueError(f"class_weight must be None, 'balanced' or a dict label -> weight, "
                         f"got {cw!r}")

    def export_spec(self) -> ExportSpec:
        """The fitted network, "probabilities" and classes_ (see ExportSpec)."""
        return ExportSpec(self._fitted_model(), "probabilities", self.classes_)

    def predict_log_proba(self, X: ArrayLike) -> FloatArray | list[FloatArray]:
        """Log-probabilities of the classes (columns in classes_ order): (n, C), or
        (n, T, C) / a list of (T_i, C) arrays for per-position labels."""
        raw, _ = self._forward_all(X)
        if isinstance(raw, list):
            return [_log_softmax(r) for r in raw]
        return _log_softmax(raw)

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
        x, lengths, ragged = seqs.sequences("X", X, model.dtype, self.n_features_in_)
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

    def __init__(self, n_heads: int = 1, *, d_model: int | None = None,
                 positional: Positional = "none", norm: Norm = None, pooling: Pooling = "mean",
                 d_hidden: int | None = None, dropout: float = 0.0, max_len: int | None = None,
                 causal: bool = False, bias: bool = True, rope: bool = False,
                 class_weight: ClassWeight = None, epochs: int = 100, batch_size: int = 32,
                 lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01, shuffle: bool = True,
                 validation_fraction: float = 0.0, early_stopping: bool = False,
                 n_iter_no_change: int = 10, tol: float = 1e-4, warm_start: bool = False,
                 max_iter: int | None = None, learning_rate_init: float | None = None,
                 random_state: RandomStateLike = None, verbose: int = 0,
                 dtype: DTypeLike = np.float32) -> None:
        _store(self, locals())


class TransformerClassifier(_Classifier):
    """A SequenceModel of n_layers transformer blocks trained with softmax
    cross-entropy; otherwise as AttentionClassifier.

    Parameters
    ----------
    n_layers : number of transformer blocks.""" + _COMMON_DOC + """
    class_weight : as for AttentionClassifier.
    """

    n_layers: int

    def __init__(self, n_heads: int = 1, n_layers: int = 2, d_hidden: int | None = None, *,
                 d_model: int | None = None, positional: Positional = "none",
                 norm: Norm = None, pooling: Pooling = "mean", dropout: float = 0.0,
                 max_len: int | None = None, causal: bool = False, bias: bool = True,
                 rope: bool = False, class_weight: ClassWeight = None, epochs: int = 100,
                 batch_size: int = 32, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01, shuffle: bool = True,
                 validation_fraction: float = 0.0, early_stopping: bool = False,
                 n_iter_no_change: int = 10, tol: float = 1e-4, warm_start: bool = False,
                 max_iter: int | None = None, learning_rate_init: float | None = None,
                 random_state: RandomStateLike = None, verbose: int = 0,
                 dtype: DTypeLike = np.float32) -> None:
        _store(self, locals())

    def _n_layers(self) -> int:
        return check_positive_int("n_layers", self.n_layers)


# ---- helpers ---------------------------------------------------------------
def _store(est: _SequenceEstimator, args: Mapping[str, Any]) -> None:
    """Keep every constructor argument unchanged, as scikit-learn requires."""
    for name, value in args.items():
        if name not in ("self", "__class__"):
            setattr(est, name, value)


class _NonFinite(Exception):
    """A training step met NaN or infinity (the message says where)."""


def _step(model: _Model, opt: AdamW, batch: Batch, m: int, loss_fn: _LossFn,
          dist: distributed.Local, guard: InterruptGuard | None = None) -> tuple[float, float]:
    """One AdamW step on the first m samples of the batch; returns (batch loss before
    the step, its weight). Raises _NonFinite when the loss, the gradients or the
    updated weights are not finite.

    With comm (dist) the loss, its weight and the gradient are the global batch's:
    each rank's gradient is weighted by its share of the batch's weight and summed
    over the ranks (one Allreduce) before the AdamW step; m may be 0 on a rank."""
    loss, weight = 0.0, 0.0
    with dist.collect_error():  # with comm, a failure here is raised on every rank
        if m:
            if batch.mask is None:
                model.forward(batch.x, grad=True, out=batch.y)
            else:
                model.forward(batch.x, key_padding_mask=batch.mask, grad=True, out=batch.y)
            loss, weight = loss_fn(batch, m)
    loss, weight = dist.batch_loss(loss, weight, guard)
    if not math.isfinite(loss):
        raise _NonFinite(f"the loss became {loss}")
    if m:
        model.backward(batch.dy)
    else:
        model.grads.flat.fill(0)
    dist.reduce_gradient(model.grads.flat)  # the global batch's gradient, on every rank
    try:
        opt.step(model.grads)
    except FloatingPointError:  # AdamW refused the step and left everything unchanged
        raise _NonFinite("the gradients became NaN or infinite") from None
    # the next forward would refuse such weights; say so here, naming the epoch
    if not finite(model.params.flat):
        raise _NonFinite("the weights overflowed to infinity")
    return loss, weight


def _regression_loss(batch: Batch, m: int) -> tuple[float, float]:
    """(loss, weight) and dL/dY in batch.dy. Unweighted: the MSE over the first m rows
    (mse_loss); weighted: sum(w * squared error) / (outputs per weight * sum(w))."""
    if batch.w is None:
        if m == batch.shape[0]:
            loss, _ = mse_loss(batch.y, batch.y_true, out=batch.dy)
        else:
            loss, _ = mse_loss(batch.y[:m], batch.y_true[:m], out=batch.dy[:m])
            batch.dy[m:] = 0  # padding rows contribute nothing to the gradients
        return loss, m
    w = batch.w
    wb = w.reshape(w.shape + (1,) * (batch.y.ndim - w.ndim))
    per_weight = batch.y.size // w.size
    total = float(w.sum())
    if total == 0:  # a batch of zero-weight samples only: no gradient, no loss
        batch.dy[...] = 0
        return 0.0, 0.0
    diff = batch.y.astype(np.float64) - batch.y_true
    scale = per_weight * total
    loss = float((wb * diff * diff).sum()) / scale
    np.multiply(wb * diff, 2.0 / scale, out=batch.dy, casting="unsafe")
    return loss, total


def _cross_entropy(batch: Batch, m: int) -> tuple[float, float]:
    """(loss, weight) and dL/dlogits in batch.dy: softmax cross-entropy, the weighted
    mean over the labels (padding and short-batch rows weigh 0)."""
    assert batch.w is not None  # a classifier's batches always carry weights (see _batch)
    total = float(batch.w.sum())
    if total == 0:
        batch.dy[...] = 0
        return 0.0, 0.0
    loss, dlogits = cross_entropy_loss(batch.y, batch.y_true, sample_weight=batch.w)
    np.copyto(batch.dy, dlogits, casting="unsafe")
    return float(loss), total


def _log_softmax(z: FloatArray) -> FloatArray:
    z = np.asarray(z)
    shifted: FloatArray = z - z.max(axis=-1, keepdims=True)
    out: FloatArray = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return out


def _unique(name: str, labels: AnyArray) -> AnyArray:
    try:
        classes = np.unique(labels)
    except TypeError as exc:
        raise TypeError(f"{name} must hold labels of one sortable type, got {exc}") from exc
    if classes.size < 2 and name == "y":
        raise ValueError(f"y holds a single class {list(classes)!r}: a classifier needs at "
                         f"least 2")
    return classes


def _encode(lab: AnyArray, classes: AnyArray, valid: BoolArray | None) -> IntArray:
    """Class indices (int64) of the labels; ValueError naming y for unseen labels."""
    codes = np.searchsorted(classes, lab)
    codes = np.clip(codes, 0, len(classes) - 1)
    bad = classes[codes] != lab
    if valid is not None:
        bad &= valid
    if np.any(bad):
        unseen = np.unique(np.asarray(lab)[bad])[:5]
        raise ValueError(f"y holds labels not among classes_ {list(classes)!r}: "
                         f"{list(unseen)!r}")
    return codes.astype(np.int64)


def _split(data: seqs.Data, fraction: float, seed: int, dist: distributed.Local
           ) -> tuple[seqs.Data, seqs.Data | None]:
    """(train, validation or None): a random ceil(fraction * n) samples held out (n
    and the draw global with comm; each rank keeps its own part of both)."""
    if fraction == 0:
        return data, None
    n = dist.n
    n_val = math.ceil(fraction * n)  # fit checked that n_val < n
    perm = np.random.default_rng(seed).permutation(n)
    val, train = np.sort(perm[:n_val]), np.sort(perm[n_val:])  # keep the data's order
    return data.take(dist.local_part(train)), data.take(dist.local_part(val))


def _setup(dist: distributed.Local, data: seqs.Data) -> seqs.Data:
    """dist.setup for Data: global count and lengths; with comm, ragged data padded to
    the longest sequence of every rank (a global batch may hold it). Returns data.
    (The ranks' hyper-parameters are compared before, by dist.together(params).)"""
    ragged = data.lengths is not None
    dist.setup(data.n, data.x.shape[2:] if ragged else data.x.shape[1:],
               lengths=data.lengths)
    t_max = dist.t_max  # the longest sequence of every rank; None for dense data
    if ragged and dist.distributed and t_max is not None and data.x.shape[1] < t_max:
        data = data.padded(t_max)
    return data


def _check_comm_options(dist: distributed.Local, cfg: _Config) -> None:
    if dist.distributed and cfg.dropout > 0:
        raise ValueError(f"dropout={cfg.dropout} cannot be combined with comm: each rank "
                         f"would draw its own dropout masks, so the fit would differ from a "
                         f"single-process one; use dropout=0 with comm")


def _alias(name: str, value: Any, default: Any, alias: str, alias_value: Any,
           check: Callable[[str, Any], _T]) -> _T:
    """The canonical hyper-parameter, or its scikit-learn alias when that is given."""
    if alias_value is None:
        return check(name, value)
    if not _equal(value, default) and not _equal(value, alias_value):
        raise ValueError(f"{name}={value!r} and {alias}={alias_value!r} are two spellings of "
                         f"one setting: give only one ({name} is the canonical one)")
    return check(alias, alias_value)


def _equal(a: object, b: object) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


def _bool(name: str, v: object) -> bool:
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    raise TypeError(f"{name} must be True or False, got {v!r}")


def _real(name: str, v: object, lo: float, hi: float, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name} must be a real number {what}, got {v!r}")
    # numbers.Real declares no ordering for the type checker; every Real compares
    if not lo <= cast(float, v) < hi:
        raise ValueError(f"{name} must be {what}, got {v!r}")
    return float(v)


def _verbose(v: object) -> int:
    if isinstance(v, (bool, np.bool_)):
        return int(v)
    if not isinstance(v, numbers.Integral) or v < 0:
        raise ValueError(f"verbose must be an int >= 0, got {v!r}")
    return int(v)


def _rng(random_state: RandomStateLike | np.random.SeedSequence) -> np.random.Generator:
    if isinstance(random_state, np.random.RandomState):
        # scikit-learn's convention: the RandomState is drawn from (and so advances)
        return np.random.default_rng(int(random_state.randint(0, 2**63 - 1, dtype=np.int64)))
    ok = (random_state is None
          or (isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool))
          or isinstance(random_state, (np.random.Generator, np.random.SeedSequence)))
    if not ok:
        raise TypeError(f"random_state must be None, an int >= 0, a numpy Generator or a "
                        f"RandomState, got {random_state!r}")
    try:
        return np.random.default_rng(random_state)
    except ValueError as exc:
        raise ValueError(f"random_state must be None, an int >= 0, a numpy Generator or a "
                         f"RandomState, got {random_state!r}") from exc


def _seeds(random_state: RandomStateLike) -> tuple[int, int, int]:
    """(init, shuffle, split) seeds drawn from random_state."""
    init, shuffle, split = (int(s) for s in _rng(random_state).integers(0, 2**63 - 1, size=3))
    return init, shuffle, split


#: every estimator class a model file may name: attnx.io looks classes up here
ESTIMATORS: dict[str, type[_SequenceEstimator]] = {
    cls.__name__: cls for cls in (AttentionRegressor, TransformerRegressor,
                                  AttentionClassifier, TransformerClassifier)}
