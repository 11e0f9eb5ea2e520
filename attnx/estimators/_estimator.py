"""The estimators' shared base: fit, partial_fit's training, inference and
persistence. The regressors and classifiers (attnx.estimators) fill in their
targets, losses and predictions through the hooks marked below; hyper-parameters
are declared in attnx.estimators._hyper, the loop is attnx.estimators._training.Trainer, the networks
are attnx.estimators._networks."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from . import _sequences as seqs
from . import _augment, _model_file, _pretrain, _resample, _scaling, _select_tokens
from . import _state, _training
from ..layers import _stem, schedules
from .. import distributed
from ._ppv_tokens import POSITION_SCALE, RAGGED_TOKENS, PPVTokens, ragged as _ragged
from ._base import EstimatorParams, sklearn_class
from ._auto_choices import AutoChoices
from ._inference import Inference
from ._hyper import ESTIMATOR_NAMES, Config, option, parameters_of, validate
from ._networks import Network, SequenceNetwork, network_of
from ..runtime._progress import phase_name
from . import _snapshots
from ._batches import Batch
from ._snapshots import EarlyStopping, Snapshot
from ._training import Trainer
from ..layers.optim import AdamW

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping
    from typing import Union

    from numpy.typing import ArrayLike, DTypeLike, NDArray
    from typing_extensions import Self

    from ._hyper import Constraint
    from ._networks import BareClass, Model
    from ..runtime._typing import AnyArray, FloatArray, IntArray, RandomStateLike

    F64Array = NDArray[np.float64]
    #: (data, per_position, k) of the targets
    Prepared = tuple[seqs.Data, bool, Union[int, None]]

# scratch space, rebuilt on demand and never pickled or saved
_SCRATCH = ("_batches", "_snapshot", "_dist")  # _dist: the comm of the running fit


class SequenceEstimator(AutoChoices, Inference, EstimatorParams):
    """fit, partial_fit's training (each kind has its own partial_fit signature),
    inference and save, shared by the four estimators.

    Hooks of the regressors and classifiers: _parameter_constraints, _batch_loss,
    _bare_class (the bare X -> Y network, regressors only), _choose_bare,
    _targets, _n_outputs, _batch_layout, export_spec."""

    #: the hyper-parameters' constraints (attnx.estimators._hyper), in the order they are checked
    _parameter_constraints: ClassVar[dict[str, Constraint]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """An estimator the parameter table names (attnx.estimators._hyper: PARAMETERS)
        gets its constraints from it (its constructor is written out in its module)."""
        super().__init_subclass__(**kwargs)
        if cls.__name__ in ESTIMATOR_NAMES and cls.__module__.startswith(__package__ + "."):
            cls._parameter_constraints = parameters_of(cls.__name__)

    #: the bare X -> Y network of the original regressors
    _bare_class: ClassVar[BareClass | None] = None
    #: whether tokenizer="auto" may pick PPV tokens (the classifiers)
    _ppv_auto: ClassVar[bool] = False
    #: whether epochs=None chooses the epochs on held-out samples (the regressors)
    _epoch_selection: ClassVar[bool] = False

    # the parameters this shared code reads as given (each constructor, written out in
    # classifiers.py / regressors.py, stores them all; validated at fit)
    tokenizer: str
    random_state: RandomStateLike
    options: Mapping[str, Any] | None

    # fitted attributes
    model_: Model
    optimizer_: AdamW
    shuffle_rng_: np.random.Generator
    n_features_in_: int
    n_outputs_: int
    n_iter_: int
    loss_curve_: list[float]
    best_loss_: float
    validation_loss_curve_: list[float]
    best_validation_loss_: float
    lr_curve_: list[float]
    patch_len_: int
    resample_length_: int   # ragged univariate series resampled to it (_resample)
    selected_tokenizer_: str   # tokenizer="select" (_select_tokens)
    tokenizer_scores_: dict[str, float]
    # standardize=True (attnx.estimators._scaling): per channel / output, and the standardised biases
    input_mean_: F64Array
    input_scale_: F64Array
    target_mean_: F64Array
    target_scale_: F64Array
    embed_bias_: FloatArray
    head_bias_: FloatArray
    _folded: bool   # the standardisation is folded into the weights
    # private state: the kind of targets at fit ({"per_position": bool, "k": int |
    # None}), the network's architecture (its file spec), the running fit's comm
    _target: dict[str, Any]
    _spec: dict[str, Any]
    _ppv: dict[str, Any]   # the PPV tokens' state (attnx.estimators._ppv_tokens), when fitted with them
    _dist: distributed.Local
    _snapshot: Snapshot

    # ---- hooks -----------------------------------------------------------
    @staticmethod
    def _batch_loss(batch: Batch, m: int) -> tuple[float, float]:
        """(loss, weight) of the first m rows of the batch, and dL/dY in batch.dy
        (attnx.layers.losses' batch losses)."""
        raise NotImplementedError

    def _config(self) -> Config:
        """Validated copies of the hyper-parameters; the attributes stay as given."""
        return _select_tokens.configured(self, validate(self.get_params(),
                                                        self._parameter_constraints))

    def _choose_bare(self, cfg: Config, x: FloatArray, y: Any, ragged: bool) -> bool:
        """Whether a new fit trains the bare X -> Y network."""
        return False

    def _targets(self, net: Network, x: FloatArray, lengths: IntArray | None, ragged: bool,
                 y: Any, w: F64Array | None, dtype: DTypeLike, fitted: bool, classes: Any,
                 partial: bool) -> Prepared:
        """(Data, per_position, k): y as training targets for the network `net`."""
        raise NotImplementedError

    def _n_outputs(self, k: int | None) -> int:
        """Outputs of a new sequence network for targets of k columns (None: y (n,))."""
        raise NotImplementedError

    def _note_outputs(self, n_out: int) -> None:
        """Record the outputs of a new network with a head (the regressors' n_outputs_)."""

    def _batch_layout(self, data: seqs.Data, t: int
                      ) -> tuple[tuple[int, ...], DTypeLike, tuple[int, ...], int | None]:
        """(target tail, target dtype, output tail, loss-weight ndim or None) of a
        Batch of padded length t."""
        raise NotImplementedError

    # ---- data ------------------------------------------------------------
    def _network(self) -> Network:
        """The fitted network's kind (see attnx.estimators._networks)."""
        return network_of(self._spec, self._bare_class, type(self).__name__)

    def _prepare(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None,
                 cfg: Config, fitted: bool, classes: Any = None, partial: bool = False
                 ) -> tuple[Prepared, Network]:
        """Data for training, and the network it is for."""
        dtype = self.model_.dtype if fitted else cfg.dtype
        nf = self.n_features_in_ if fitted else None
        x, lengths, ragged, nan = seqs.sequences("X", X, dtype, nf, layout=cfg.layout,
                                                 missing=cfg.missing)
        w = seqs.sample_weights(sample_weight, x.shape[0])
        if fitted:
            net = self._network()
        elif self._choose_bare(cfg, x, y, ragged):
            net = network_of({}, self._bare_class, type(self).__name__)
        else:
            net = SequenceNetwork()
        prepared = self._targets(net, x, lengths, ragged, y, w, dtype, fitted, classes, partial)
        data, per_position, k = prepared
        if cfg.missing == "mask" and per_position:
            raise ValueError("missing='mask' needs targets per sequence (y (n_samples,) or "
                             "(n_samples, n_outputs)): a masked step has no input to predict "
                             "its own target from, got targets per position")
        data.missing = nan
        length = (self.__dict__.get("resample_length_") if fitted
                  else self._auto_resample(cfg, data, per_position, net))
        if length is not None:   # ragged univariate series at one length (_resample)
            data.x, data.lengths = _resample.to_length(data.x, data.lengths, length), None
            if not fitted:
                self._resample_now = length
        if fitted:   # the instance norm the model was built with
            cfg.instance_norm = self._spec.get("instance_norm")
        elif cfg.instance_norm == "auto":
            cfg.instance_norm = self._auto_instance_norm(cfg, data, per_position, net)
        if fitted:   # the stem the model was built with ("auto" was resolved then)
            cfg.stem = getattr(self.model_, "stem", None)
        elif cfg.stem == "auto":
            cfg.stem = self._auto_stem(data, per_position, net)
        else:
            cfg.stem = self._auto_tokens_stem(cfg, data, per_position, net)
        use_ppv = not fitted and self._use_ppv(cfg, data, per_position, net)
        own = use_ppv and _ragged(data, self._comm())   # PPV windows follow each length
        if fitted:
            p = int(self.__dict__.get("patch_len_", 1))
        else:
            p = self._choose_patch(cfg, data, per_position, net, use_ppv, own)
        if nan is not None and net.head:
            stem = _stem.check_stem(self._spec.get("stem")) if fitted else cfg.stem
            _stem.check_missing(stem, seqs.key_mask(lengths, nan, slice(None), x.shape[1]))
        if fitted:
            tokens = PPVTokens.from_spec(self.__dict__.get("_ppv"))
        elif use_ppv:
            tokens = PPVTokens.fit(data, p, 0, self._comm(), own=own,
                                   tokens=RAGGED_TOKENS if cfg.patch_len is None else None)
        else:
            tokens = None
        if tokens is not None:
            px, plen, pmiss = tokens.transform(data.x, data.lengths, data.missing)
            prepared = (seqs.Data(px, plen, data.y, data.w, data.per_position, pmiss),
                        per_position, k)
        elif p > 1:
            px, plen = seqs.patch(data.x, data.lengths, p, data.missing,
                                  self._fill_rule() if fitted else "last")
            prepared = (seqs.Data(px, plen, data.y, data.w, data.per_position,
                                  seqs.patch_missing(data.missing, data.lengths, p)),
                        per_position, k)
        self._patch_now = p
        self._ppv_now = tokens
        self._channels_now = int(data.x.shape[2])
        return prepared, net

    def _check_target(self, per_position: bool, k: int | None) -> None:
        tgt = self._target
        if per_position != tgt["per_position"]:
            what = "per position" if tgt["per_position"] else "per sequence"
            raise ValueError(f"y must hold targets {what}, as at fit")
        if (k or 1) != self.n_outputs_:
            raise ValueError(f"y must have {self.n_outputs_} output(s) as at fit, got {k or 1} "
                             f"(n_outputs mismatch)")

    # ---- training ------------------------------------------------------
    def fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None,
            comm: Any = None, *, X_unlabelled: ArrayLike | None = None) -> Self:
        """Train for `epochs` epochs on X, y; returns self.

        A new model each call, unless warm_start=True and the estimator is fitted: then
        training goes on from the current weights and optimizer state for `epochs`
        more epochs (same architecture, same kind of targets).

        sample_weight (n_samples,) scales each sample's loss (weight 2 counts as the
        sample twice); each batch's loss is the weighted mean over its samples.

        With validation_fraction > 0 a random part of the samples is held out and
        scored after every epoch (validation_loss_curve_). early_stopping=True stops
        when that loss (or, without validation, the training loss) has not improved
        by tol for n_iter_no_change epochs and keeps the best weights (and optimizer
        state). With early_stopping=False the same rule on the training loss ends
        training with a ConvergenceWarning. Ctrl-C stops after the current step with
        a warning.

        comm: None, or an mpi4py communicator when this process is one rank of a
        data-parallel fit (``mpiexec -n P``): X, y, sample_weight are then this rank's
        shard, and the result is the fit on every rank's shard concatenated in rank
        order (see attnx.distributed).
        X_unlabelled: with pretrain="masked", more series without labels (in X's
        layout and channels) that the pre-training reads besides X.
        """
        if self.tokenizer == "select" and "_select_now" not in self.__dict__:
            _select_tokens.fit(self, X, y, sample_weight, comm, X_unlabelled)
            return self
        dist = self._dist = distributed.wrap(comm)
        with dist.together(self.get_params()):  # an error on one rank: on every rank
            cfg = self._config()
            warm = cfg.warm_start and "model_" in self.__dict__
            prepared, net = self._prepare(X, y, sample_weight, cfg, fitted=warm)
            _check_comm_options(dist, cfg)
            _pretrain.check(self, cfg, net.head, dist.distributed, X_unlabelled, warm)
        if warm:
            _scaling.unfold(self)
        data = _scaling.standardized(self, prepared[0], cfg, net, dist, refit=not warm)
        prepared = (data,) + prepared[1:]
        padded = _training.setup(dist, data)  # the hyper-parameters: in together()
        n = dist.n
        if math.ceil(cfg.validation_fraction * n) >= n:
            raise ValueError(f"validation_fraction={cfg.validation_fraction} leaves no "
                             f"training sample out of {n}")
        if warm:
            split_seed = dist.same(_training.seeds(self.random_state))[2]
            self._set_optimizer_hyper(cfg)
        else:
            split_seed = self._initialize(prepared, net, cfg)
            _pretrain.start(self, data, X_unlabelled, cfg, split_seed)   # pretrain="masked"
        train, val = _training.split(data, cfg.validation_fraction, split_seed, dist)
        # the training part's global count and lengths (one more setup collective
        # only when a validation part was held out)
        train = padded if val is None else _training.setup(dist, train)
        if val is not None and not hasattr(self, "validation_loss_curve_"):
            self.validation_loss_curve_ = []
            self.best_validation_loss_ = math.inf
        try:
            epochs = cfg.epochs if cfg.epochs is not None else \
                _training.auto_epochs(dist.n, cfg.batch_size)   # the training part's count
            if self._selects_epochs(cfg, warm, train, val):
                chosen = self._select_epochs(prepared, net, cfg, split_seed, epochs)
                if chosen is None:   # Ctrl-C in the held-out run: its network is kept
                    return self
                epochs, train = chosen, _training.setup(dist, data)   # every sample again
            self._train(train, val, cfg, epochs, fit=True)
        finally:
            self.__dict__.pop("_pretrained", None)
            _scaling.fold(self)
        return self

    def _selects_epochs(self, cfg: Config, warm: bool, data: seqs.Data,
                        val: seqs.Data | None) -> bool:
        """Whether this fit chooses its epochs on held-out samples (_select_epochs):
        a regressor with epochs=None, no validation or early stopping asked for, no
        warm start, targets per sequence and SELECT_MIN_SAMPLES samples or more."""
        return (self._epoch_selection and cfg.epochs is None and val is None
                and not warm and not cfg.early_stopping and not data.per_position
                and self._comm().n >= _snapshots.SELECT_MIN_SAMPLES)

    def _select_epochs(self, prepared: Prepared, net: Network, cfg: Config,
                       split_seed: int, budget: int) -> int | None:
        """epochs=None for a regressor: a held-out run chooses how long the fit trains.

        SELECT_FRACTION of the samples is held out and the freshly initialised network
        trains on the rest (the recipe of a `budget`-epoch fit), scored on them after
        every epoch. When its held-out loss falls to (1 - SELECT_R2) of the loss of
        predicting the training targets' mean (it explains half of the held-out
        variance: a strong signal) the run stops and the fit trains the whole budget;
        otherwise the run stops SELECT_PATIENCE epochs after its best held-out epoch
        and the fit trains that many epochs (at least SELECT_MIN_EPOCHS): on a weak
        signal a network trained longer learns the noise of a small training set.
        Then the network is initialised again (the same weights as without the run)
        and the fit trains on every sample. Records epoch_selection_. Returns the
        epochs, or None after Ctrl-C in the held-out run (its network is kept)."""
        dist = self._comm()
        train, val = _training.split(prepared[0], _snapshots.SELECT_FRACTION, split_seed, dist)
        assert val is not None
        train = _training.setup(dist, train)
        reference = _snapshots.mean_baseline_loss(train, val, dist, cfg.loss, cfg.quantiles)
        probe = _snapshots.EpochProbe(cfg.tol, reference, self.model_, self.optimizer_)
        self.validation_loss_curve_, self.best_validation_loss_ = [], math.inf
        self._trainer(cfg, budget, True).run(self, train, val, budget, self._snapshot_for(),
                                             probe)
        epochs = min(budget if probe.strong else max(probe.best_epoch,
                                                     _snapshots.SELECT_MIN_EPOCHS), budget)
        selection = {"epochs": int(epochs), "budget": int(budget),
                     "held_out_epochs": int(probe.epoch), "best_epoch": int(probe.best_epoch),
                     "held_out_r2": float(probe.r2), "strong": bool(probe.strong),
                     "held_out_loss": [float(v) for v in self.validation_loss_curve_]}
        if not (probe.strong or probe.stall >= probe.patience or probe.epoch >= budget):
            self.epoch_selection_ = selection   # interrupted (Trainer.run warned)
            return None
        # _initialize consumes the fit's patch length, channels and tokens: again
        again: dict[str, Any] = {"_patch_now": self.patch_len_,
                                 "_channels_now": self.n_features_in_}
        if self.__dict__.get("_ppv") is not None:
            again["_ppv_now"] = PPVTokens.from_spec(self._ppv)
        self.__dict__.update(again)
        self._initialize(prepared, net, cfg)
        self.epoch_selection_ = selection
        return int(epochs)

    def _partial_fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None,
                     classes: Any, comm: Any = None) -> Self:
        dist = self._dist = distributed.wrap(comm)
        with dist.together(self.get_params()):  # an error on one rank: on every rank
            cfg = self._config()
            fitted = "model_" in self.__dict__
            prepared, net = self._prepare(X, y, sample_weight, cfg, fitted, classes,
                                          partial=True)
            _check_comm_options(dist, cfg)
        if fitted:
            _scaling.unfold(self)
        std = _scaling.standardized(self, prepared[0], cfg, net, dist,
                                 refit="input_mean_" not in self.__dict__)
        # once: the loop uses its global count and lengths
        data = _training.setup(dist, std)
        if fitted:
            self._set_optimizer_hyper(cfg)
        else:
            self._initialize((data,) + prepared[1:], net, cfg)
        try:
            self._train(data, None, cfg, 1, fit=False)
        finally:
            _scaling.fold(self)
        return self

    def _scales_targets(self) -> bool:
        """Hook: whether standardize=True also standardises y (the regressors)."""
        return False

    def _set_optimizer_hyper(self, cfg: Config) -> None:
        opt = self.optimizer_
        opt.lr, opt.betas, opt.eps, opt.weight_decay = cfg.lr, cfg.betas, cfg.eps, \
            cfg.weight_decay

    def _initialize(self, prepared: Prepared, net: Network, cfg: Config) -> int:
        """Drop every fitted attribute, build model_, optimizer_ and shuffle_rng_.
        Returns the seed for the validation split."""
        data, per_position, k = prepared
        keep: dict[str, Any] = {k: self.__dict__[k]
                                for k in ("classes_", "_dist") + _scaling.ATTRIBUTES
                                if k in self.__dict__}
        for name in [k for k in vars(self) if k.endswith("_") and not k.startswith("_")]:
            delattr(self, name)
        for name in _SCRATCH + ("_target", "_spec", "_folded", "_ppv"):
            self.__dict__.pop(name, None)
        self.__dict__.update(keep)
        # with comm every rank starts from rank 0's seeds (random_state=None differs)
        seeds: tuple[int, int, int] = self._comm().same(_training.seeds(self.random_state))
        init_seed, shuffle_seed, split_seed = seeds
        n_out = self._n_outputs(k)
        patch = int(self.__dict__.get("_patch_now", 1))
        ppv = self.__dict__.get("_ppv_now") is not None   # PPV tokens: POSITION_SCALE
        self.model_, self._spec = net.build(data, cfg, n_out, not per_position, init_seed,
                                            self._comm(), patch, POSITION_SCALE if ppv else 1.0)
        self._target = {"per_position": bool(per_position), "k": k}
        if net.head:
            self._note_outputs(n_out)
        self.optimizer_ = AdamW(self.model_.params, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps,
                                weight_decay=cfg.weight_decay, decay=cfg.decay)
        self.shuffle_rng_ = np.random.default_rng(shuffle_seed)
        self.patch_len_ = int(self.__dict__.pop("_patch_now", 1))
        self._patch_fill = "last"
        tokens = self.__dict__.pop("_ppv_now", None)
        if self.__dict__.get("_resample_now") is not None:
            self.resample_length_ = int(self.__dict__.pop("_resample_now"))
        if cfg.augment_shift:   # tokenizer="auto"'s short path (_augment)
            self.augment_shift_ = int(cfg.augment_shift)
        self.n_features_in_ = int(self.__dict__.pop("_channels_now", data.x.shape[2]))
        if tokens is not None:
            self._ppv = tokens.to_spec()
        self.n_iter_ = 0
        self.loss_curve_ = []
        self.lr_curve_: list[float] = []
        self.best_loss_ = math.inf
        self._folded = False
        _pretrain.load(self)   # a re-initialised network of a pre-trained fit
        return split_seed

    def _batch(self, data: seqs.Data, bs: int, t: int) -> Batch:
        """The reusable Batch for this data layout and padded length t."""
        target_tail, tdtype, out_tail, w_ndim = self._batch_layout(data, t)
        dtype = self.model_.dtype
        masked = data.lengths is not None or data.missing is not None
        cache: dict[tuple[Any, ...], Batch] = self.__dict__.setdefault("_batches", {})
        key = (bs, t, data.x.shape[2], target_tail, np.dtype(tdtype), out_tail, dtype,
               masked, w_ndim)
        batch = cache.get(key)
        if batch is None:
            if len(cache) > 8:
                cache.clear()
            batch = cache[key] = Batch(bs, t, data.x.shape[2], target_tail, tdtype, out_tail,
                                       dtype, masked, w_ndim)
        return batch

    def _snapshot_for(self) -> Snapshot:
        model, opt = self.model_, self.optimizer_
        snap = self.__dict__.get("_snapshot")
        if snap is None or not snap.fits(model, opt):
            snap = self._snapshot = Snapshot(model, opt)
        return snap

    def _trainer(self, cfg: Config, epochs: int, fit: bool) -> Trainer:
        """The Trainer of this estimator's network, optimizer and loss, with the
        learning-rate schedule of this fit (over its epochs; partial_fit: constant) and
        gradient clipping."""
        schedule = None
        if fit:
            per_epoch = self._comm().steps_per_epoch(cfg.batch_size)
            factor = schedules.estimator_schedule(cfg.lr_schedule, epochs * per_epoch,
                                                  cfg.warmup)
            if factor is not None:
                t0, base = self.optimizer_.t, cfg.lr

                def schedule(t: int) -> float:
                    return base * factor(t - t0)
        clip = None
        if cfg.max_grad_norm is not None:
            mx = cfg.max_grad_norm
            # the norm's float64 copy of the gradient, made once: no allocation per step
            scratch = (np.empty(self.model_.grads.flat.shape, np.float64)
                       if self.model_.grads.flat.dtype != np.float64 else None)

            def clip(flat: FloatArray) -> None:
                schedules.clip_flat(flat, mx, scratch)
        return Trainer(self.model_, self.optimizer_, self.shuffle_rng_, self._loss_fn(cfg),
                       self._batch, self._comm(), batch_size=cfg.batch_size,
                       shuffle=cfg.shuffle, verbose=cfg.verbose, lr_schedule=schedule,
                       grad_transform=clip, augment=_augment.hook(self.__dict__.get(
                           "augment_shift_")),   # the fitted time shifts, or None
                       # the progress bar's name: a forecaster names its phases
                       phase=phase_name("fit" if fit else "partial_fit"))

    def _loss_fn(self, cfg: Config) -> Any:
        """The batch loss of this fit (hook: the classifiers add label smoothing)."""
        return self._batch_loss

    @property
    def history_(self) -> dict[str, list[float]]:
        """Per epoch: the training loss ("loss"), the validation loss ("val_loss", with
        validation_fraction > 0) and the learning rate at the epoch's end ("lr")."""
        if "loss_curve_" not in self.__dict__:
            raise sklearn_class("NotFittedError")("history_ exists after fit")
        out = {"loss": list(self.loss_curve_), "lr": list(self.__dict__.get("lr_curve_", []))}
        if "validation_loss_curve_" in self.__dict__:
            out["val_loss"] = list(self.validation_loss_curve_)
        return out

    def _train(self, data: seqs.Data, val: seqs.Data | None, cfg: Config, epochs: int,
               fit: bool) -> None:
        """Run `epochs` epochs over Data set up by _training.setup."""
        stopper = None
        # n_iter_no_change=None: no plateau stop; early stopping waits 10 epochs
        patience = cfg.n_iter_no_change
        if fit and (patience is not None or cfg.early_stopping):
            patience = _training.DEFAULT_PATIENCE if patience is None else patience
            stopper = EarlyStopping(cfg.tol, patience, self.model_, self.optimizer_,
                                    keep_best=cfg.early_stopping and val is not None)
        self._trainer(cfg, epochs, fit).run(self, data, val, epochs, self._snapshot_for(),
                                            stopper, plateau=fit and not cfg.early_stopping,
                                            tol=cfg.tol, n_iter_no_change=patience or 0)

    def _comm(self) -> distributed.Local:
        """The running fit's distributed hooks (identities without comm)."""
        return self.__dict__.get("_dist") or distributed.Local()

    # ---- persistence ---------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write configuration, weights, optimizer and RNG state to exactly `path`, a
        safetensors file (see attnx.io); attnx.load(path) reads it back."""
        _model_file.check_saveable(self)
        _model_file.write(path, *_state.get_state(self, portable=True))

    def _model_spec(self) -> dict[str, Any]:
        """The fitted model's architecture as JSON-able values (for save and pickle)."""
        return dict(self._spec)

    def _restore_model(self, spec: Mapping[str, Any], params: AnyArray,
                       opt_hyper: Mapping[str, Any], opt_state: Any) -> None:
        """Rebuild model_ and optimizer_ from _model_spec(), params.flat and AdamW state."""
        spec = dict(spec)
        params = np.asarray(params)
        model = network_of(spec, self._bare_class, type(self).__name__).restore(spec, params)
        if params.shape != model.params.flat.shape or params.dtype != model.dtype:
            raise ValueError(f"the weights ({params.dtype} {params.shape}) do not fit the model "
                             f"({model.dtype} {model.params.flat.shape})")
        np.copyto(model.params.flat, params)
        opt = AdamW(model.params, lr=opt_hyper["lr"], betas=tuple(opt_hyper["betas"]),
                    eps=opt_hyper["eps"], weight_decay=opt_hyper["weight_decay"],
                    decay=option(self, "decay"))
        opt.load_state_dict(opt_state)
        self.model_, self.optimizer_, self._spec = model, opt, spec

    # the state besides hyper-parameters and public fitted attributes (attnx.estimators._state)
    _state_attributes = ("_target", "_ppv", "_patch_fill")

    def __getstate__(self) -> dict[str, Any]:
        # the same state as a model file (attnx.estimators._state): hyper-parameters, weights,
        # optimizer and RNG states, fitted attributes; workspaces and batch buffers
        # are caches, left out
        return {"attnx_state": _state.get_state(self, portable=False)}

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        _state.set_state(self, *state["attnx_state"])


def _check_comm_options(dist: distributed.Local, cfg: Config) -> None:
    dist.configure(cfg.distributed)  # "balanced" or "exact" batches
    if dist.distributed and dist.exact and cfg.dropout > 0:
        raise ValueError(f"dropout={cfg.dropout} cannot be combined with comm and "
                         f"distributed='exact': the ranks cannot draw the masks of a single "
                         f"process; use dropout=0 or distributed='balanced'")

