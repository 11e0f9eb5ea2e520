"""The estimators' shared base: fit, partial_fit's training, inference and
persistence. The regressors and classifiers (attnx.estimators) fill in their
targets, losses and predictions through the hooks marked below; hyper-parameters
are declared in attnx.estimators._hyper, the fit's data-dependent choices are its
plan (attnx.estimators._plan.FitPlan, the fitted attribute plan_), the loop is
attnx.estimators._training.Trainer, the networks are attnx.estimators._networks.

A fit reads the data (_read), makes its plan (_planned: a new one, tokenizer="select"'s
choice among candidate plans, or the fitted one for a warm start) and trains the network
the plan describes (_train_planned). Nothing but the hyper-parameters and the fitted
attributes ending in "_" is left on the estimator."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np

from . import _sequences as seqs
from . import _augment, _model_file, _plan, _pretrain, _scaling, _select_tokens
from . import _state, _training
from ..layers import _stem, schedules
from .. import distributed
from ._base import EstimatorParams, sklearn_class
from ._inference import Inference
from ._hyper import ESTIMATOR_NAMES, Config, option, parameters_of, validate
from ._networks import Network, SequenceNetwork, network_of
from ._plan import FitPlan, Inputs
from ..runtime._progress import phase_name
from . import _snapshots
from ._batches import Batch
from ._snapshots import EarlyStopping, Snapshot
from ._training import Trainer
from ..layers.optim import AdamW

if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Mapping
    from typing import Union

    from numpy.typing import ArrayLike, DTypeLike, NDArray
    from typing_extensions import Self

    from ._hyper import Constraint
    from ._networks import BareClass, Model
    from ._pretrain import Pretrained
    from ..runtime._typing import AnyArray, FloatArray, IntArray, RandomStateLike

    F64Array = NDArray[np.float64]
    #: (data, per_position, k) of the targets
    Prepared = tuple[seqs.Data, bool, Union[int, None]]


class Planned(NamedTuple):
    """A fit about to train: its plan, the training data as the plan's tokens, and
    whether it pre-trains (pretrain="masked" on a new fit)."""

    plan: FitPlan
    data: seqs.Data
    pretrain: bool


class SequenceEstimator(Inference, EstimatorParams):
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

    # fitted attributes (n_features_in_, patch_len_, resample_length_ and
    # augment_shift_ read plan_: attnx.estimators._inference)
    plan_: FitPlan
    model_: Model
    optimizer_: AdamW
    shuffle_rng_: np.random.Generator
    n_outputs_: int
    n_iter_: int
    loss_curve_: list[float]
    best_loss_: float
    validation_loss_curve_: list[float]
    best_validation_loss_: float
    lr_curve_: list[float]
    pretrain_loss_curve_: list[float]
    epoch_selection_: dict[str, Any]
    selected_tokenizer_: str   # tokenizer="select" (_select_tokens)
    tokenizer_scores_: dict[str, float]
    # standardize=True (attnx.estimators._scaling): per channel / output, and the standardised biases
    input_mean_: F64Array
    input_scale_: F64Array
    target_mean_: F64Array
    target_scale_: F64Array
    embed_bias_: FloatArray
    head_bias_: FloatArray

    # ---- hooks -----------------------------------------------------------
    @staticmethod
    def _batch_loss(batch: Batch, m: int) -> tuple[float, float]:
        """(loss, weight) of the first m rows of the batch, and dL/dY in batch.dy
        (attnx.layers.losses' batch losses)."""
        raise NotImplementedError

    def _config(self) -> Config:
        """Validated copies of the hyper-parameters; the attributes stay as given."""
        return validate(self.get_params(), self._parameter_constraints)

    def _choose_bare(self, cfg: Config, x: FloatArray, y: Any, ragged: bool) -> bool:
        """Whether a new fit trains the bare X -> Y network."""
        return False

    def _targets(self, net: Network, x: FloatArray, lengths: IntArray | None, ragged: bool,
                 y: Any, w: F64Array | None, dtype: DTypeLike, fitted: bool, classes: Any,
                 partial: bool, comm: distributed.Local) -> Prepared:
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

    def _scales_targets(self) -> bool:
        """Hook: whether standardize=True also standardises y (the regressors)."""
        return False

    # ---- data and plan ---------------------------------------------------
    def _read(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None, cfg: Config,
              dist: distributed.Local, fitted: bool, classes: Any = None,
              partial: bool = False) -> Inputs:
        """X, y and sample_weight checked and read as training data for the network of
        the fitted plan (fitted) or of a new fit."""
        dtype = self.model_.dtype if fitted else cfg.dtype
        nf = self.plan_.channels if fitted else None
        x, lengths, ragged, nan = seqs.sequences("X", X, dtype, nf, layout=cfg.layout,
                                                 missing=cfg.missing)
        w = seqs.sample_weights(sample_weight, x.shape[0])
        if fitted:
            net = self._network()
        elif self._choose_bare(cfg, x, y, ragged):
            net = network_of({}, self._bare_class, type(self).__name__)
        else:
            net = SequenceNetwork()
        data, per_position, k = self._targets(net, x, lengths, ragged, y, w, dtype, fitted,
                                              classes, partial, dist)
        if cfg.missing == "mask" and per_position:
            raise ValueError("missing='mask' needs targets per sequence (y (n_samples,) or "
                             "(n_samples, n_outputs)): a masked step has no input to predict "
                             "its own target from, got targets per position")
        data.missing = nan
        return Inputs(data, net, per_position, k)

    def _new_plan(self, cfg: Config, inputs: Inputs, dist: distributed.Local
                  ) -> tuple[FitPlan, seqs.Data]:
        """(the plan of a new fit on inputs, the training data as its tokens)."""
        return _plan.make(cfg, inputs, self._n_outputs(inputs.k), dist,
                          ppv_auto=self._ppv_auto, revin_auto=self._scales_targets())

    def _fitted_tokens(self, inputs: Inputs) -> seqs.Data:
        """The training data as the fitted plan's tokens (warm start, partial_fit)."""
        plan, d = self.plan_, inputs.data
        if d.missing is not None and plan.head:
            _stem.check_missing(plan.stem, seqs.key_mask(d.lengths, d.missing, slice(None),
                                                         d.x.shape[1]))
        x, lengths, missing = plan.tokens(d.x, d.lengths, d.missing)
        return seqs.Data(x, lengths, d.y, d.w, d.per_position, missing)

    def _planned(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None,
                 cfg: Config, dist: distributed.Local, warm: bool,
                 X_unlabelled: ArrayLike | None) -> Planned:
        """The data, plan and settings' checks of a fit (a new plan, or the fitted one
        for a warm start); ValueError before anything is trained."""
        inputs = self._read(X, y, sample_weight, cfg, dist, fitted=warm)
        if warm:
            plan, data = self.plan_, self._fitted_tokens(inputs)
        else:
            plan, data = self._new_plan(cfg, inputs, dist)
        _check_comm_options(dist, cfg)
        pretrain = _pretrain.check(cfg, plan, dist.distributed, X_unlabelled, warm)
        return Planned(plan, data, pretrain)

    def _check_target(self, per_position: bool, k: int | None) -> None:
        plan = self.plan_
        if per_position != plan.per_position:
            what = "per position" if plan.per_position else "per sequence"
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
        if self.tokenizer == "select":   # before comm is wrapped: a ValueError of its own
            _select_tokens.check(self, comm)
        dist = distributed.wrap(comm)
        selection = None
        with dist.together(self.get_params()):  # an error on one rank: on every rank
            cfg = self._config()
            warm = cfg.warm_start and "model_" in self.__dict__
            if cfg.tokenizer == "select":   # candidate plans on held-out series
                selection = _select_tokens.selection(self, cfg, X, y, sample_weight, warm)
                cfg.tokenizer = selection[0]
            planned = self._planned(X, y, sample_weight, cfg, dist, warm, X_unlabelled)
        self._train_planned(planned, cfg, dist, warm, X_unlabelled)
        if selection is not None:
            self.selected_tokenizer_, self.tokenizer_scores_ = selection[0], dict(selection[1])
        return self

    def _train_planned(self, planned: Planned, cfg: Config, dist: distributed.Local,
                       warm: bool, X_unlabelled: ArrayLike | None) -> None:
        """Train the network of the plan (new, or the fitted one for a warm start) on
        the plan's tokens: standardise, initialise (and pre-train), choose the epochs,
        train."""
        plan = planned.plan
        data = _scaling.standardized(self, planned.data, cfg, plan, dist, refit=not warm)
        padded = _training.setup(dist, data)  # the hyper-parameters: in together()
        n = dist.n
        n_val = math.ceil(cfg.validation_fraction * n)
        if n_val >= n:
            raise ValueError(f"validation_fraction={cfg.validation_fraction} leaves no "
                             f"training sample out of {n}")
        # the training part's count (_training.split holds out n_val samples)
        epochs = cfg.epochs if cfg.epochs is not None else \
            _training.auto_epochs(n - n_val, cfg.batch_size)
        plan = plan.with_epochs(epochs)
        pretrained = None
        if warm:
            split_seed = dist.same(_training.seeds(cfg.random_state))[2]
            self._set_optimizer_hyper(cfg)
            self.plan_ = plan
            _scaling.unfold(self)
        else:
            split_seed = self._initialize(plan, cfg, dist)
        try:
            if planned.pretrain:   # pretrain="masked"
                pretrained = _pretrain.start(self, plan, data, X_unlabelled, cfg, split_seed)
            train, val = _training.split(data, cfg.validation_fraction, split_seed, dist)
            # the training part's global count and lengths (one more setup collective
            # only when a validation part was held out)
            train = padded if val is None else _training.setup(dist, train)
            if val is not None and not hasattr(self, "validation_loss_curve_"):
                self.validation_loss_curve_ = []
                self.best_validation_loss_ = math.inf
            if self._selects_epochs(cfg, warm, train, val, dist):
                chosen = self._select_epochs(plan, data, cfg, dist, split_seed, pretrained)
                if chosen is None:   # Ctrl-C in the held-out run: its network is kept
                    return
                plan, train = self.plan_, _training.setup(dist, data)   # every sample again
            self._train(train, val, cfg, dist, int(plan.epochs or 0), fit=True)
        finally:
            _scaling.fold(self)

    def _selects_epochs(self, cfg: Config, warm: bool, data: seqs.Data,
                        val: seqs.Data | None, dist: distributed.Local) -> bool:
        """Whether this fit chooses its epochs on held-out samples (_select_epochs):
        a regressor with epochs=None, no validation or early stopping asked for, no
        warm start, targets per sequence and SELECT_MIN_SAMPLES samples or more."""
        return (self._epoch_selection and cfg.epochs is None and val is None
                and not warm and not cfg.early_stopping and not data.per_position
                and dist.n >= _snapshots.SELECT_MIN_SAMPLES)

    def _select_epochs(self, plan: FitPlan, data: seqs.Data, cfg: Config,
                       dist: distributed.Local, split_seed: int,
                       pretrained: Pretrained | None) -> int | None:
        """epochs=None for a regressor: a held-out run chooses how long the fit trains.

        SELECT_FRACTION of the samples is held out and the freshly initialised network
        trains on the rest (the recipe of a fit of plan.epochs epochs, the budget),
        scored on them after every epoch. When its held-out loss falls to (1 -
        SELECT_R2) of the loss of predicting the training targets' mean (it explains
        half of the held-out variance: a strong signal) the run stops and the fit
        trains the whole budget; otherwise the run stops SELECT_PATIENCE epochs after
        its best held-out epoch and the fit trains that many epochs (at least
        SELECT_MIN_EPOCHS): on a weak signal a network trained longer learns the noise
        of a small training set. Then the network is initialised again (the same
        weights as without the run, the pre-trained encoder again) with the chosen
        epochs in its plan, and the fit trains on every sample. Records
        epoch_selection_. Returns the epochs, or None after Ctrl-C in the held-out run
        (its network is kept)."""
        budget = int(plan.epochs or 0)
        train, val = _training.split(data, _snapshots.SELECT_FRACTION, split_seed, dist)
        assert val is not None
        train = _training.setup(dist, train)
        reference = _snapshots.mean_baseline_loss(train, val, dist, cfg.loss, cfg.quantiles)
        probe = _snapshots.EpochProbe(cfg.tol, reference, self.model_, self.optimizer_)
        self.validation_loss_curve_, self.best_validation_loss_ = [], math.inf
        self._trainer(cfg, dist, budget, True).run(
            self, train, val, budget, self._snapshot(), probe)
        epochs = min(budget if probe.strong else max(probe.best_epoch,
                                                     _snapshots.SELECT_MIN_EPOCHS), budget)
        selection = {"epochs": int(epochs), "budget": int(budget),
                     "held_out_epochs": int(probe.epoch), "best_epoch": int(probe.best_epoch),
                     "held_out_r2": float(probe.r2), "strong": bool(probe.strong),
                     "held_out_loss": [float(v) for v in self.validation_loss_curve_]}
        if not (probe.strong or probe.stall >= probe.patience or probe.epoch >= budget):
            self.epoch_selection_ = selection   # interrupted (Trainer.run warned)
            return None
        self._initialize(plan.with_epochs(epochs), cfg, dist, pretrained)
        self.epoch_selection_ = selection
        return int(epochs)

    def _partial_fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None,
                     classes: Any, comm: Any = None) -> Self:
        dist = distributed.wrap(comm)
        with dist.together(self.get_params()):  # an error on one rank: on every rank
            cfg = self._config()
            if cfg.tokenizer == "select":   # partial_fit makes no choice (_select_tokens)
                cfg.tokenizer = "auto"
            fitted = "model_" in self.__dict__
            inputs = self._read(X, y, sample_weight, cfg, dist, fitted, classes, partial=True)
            if fitted:
                plan, tokens = self.plan_, self._fitted_tokens(inputs)
            else:
                plan, tokens = self._new_plan(cfg, inputs, dist)
            _check_comm_options(dist, cfg)
        std = _scaling.standardized(self, tokens, cfg, plan, dist,
                                    refit="input_mean_" not in self.__dict__)
        # once: the loop uses its global count and lengths
        data = _training.setup(dist, std)
        if fitted:
            self._set_optimizer_hyper(cfg)
            _scaling.unfold(self)
        else:
            self._initialize(plan, cfg, dist)
        try:
            self._train(data, None, cfg, dist, 1, fit=False)
        finally:
            _scaling.fold(self)
        return self

    def _set_optimizer_hyper(self, cfg: Config) -> None:
        opt = self.optimizer_
        opt.lr, opt.betas, opt.eps, opt.weight_decay = cfg.lr, cfg.betas, cfg.eps, \
            cfg.weight_decay

    def _initialize(self, plan: FitPlan, cfg: Config, dist: distributed.Local,
                    pretrained: Pretrained | None = None) -> int:
        """Drop every fitted attribute, build the plan's network (model_), optimizer_
        and shuffle_rng_, keep the plan (plan_); with `pretrained` the pre-trained
        encoder goes into the new network. Returns the seed for the validation split."""
        keep: dict[str, Any] = {k: self.__dict__[k]
                                for k in ("classes_",) + _scaling.ATTRIBUTES
                                if k in self.__dict__}
        for name in [k for k in vars(self) if k.endswith("_") and not k.startswith("_")]:
            delattr(self, name)
        self.__dict__.update(keep)
        # with comm every rank starts from rank 0's seeds (random_state=None differs)
        seeds: tuple[int, int, int] = dist.same(_training.seeds(cfg.random_state))
        init_seed, shuffle_seed, split_seed = seeds
        self.model_ = _plan.network(plan, self._bare_class,
                                    type(self).__name__).build(plan.network, init_seed)
        self.plan_ = plan
        if plan.head:
            self._note_outputs(self._n_outputs(plan.k))
        self.optimizer_ = AdamW(self.model_.params, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps,
                                weight_decay=cfg.weight_decay, decay=cfg.decay)
        self.shuffle_rng_ = np.random.default_rng(shuffle_seed)
        self.n_iter_ = 0
        self.loss_curve_ = []
        self.lr_curve_ = []
        self.best_loss_ = math.inf
        if pretrained is not None:   # a re-initialised network of a pre-trained fit
            self.pretrain_loss_curve_ = _pretrain.load(self.model_, pretrained)
        return split_seed

    def _batches(self) -> Callable[[seqs.Data, int, int], Batch]:
        """The Trainer's batch_for: the reusable Batch of a data layout and padded
        length t (kept beside the network: attnx.estimators._training.scratch)."""
        dtype, buffers = self.model_.dtype, _training.scratch(self.model_)

        def batch(data: seqs.Data, bs: int, t: int) -> Batch:
            target_tail, tdtype, out_tail, w_ndim = self._batch_layout(data, t)
            masked = data.lengths is not None or data.missing is not None
            key = (bs, t, data.x.shape[2], target_tail, np.dtype(tdtype), out_tail, dtype,
                   masked, w_ndim)
            return buffers.batch(key, lambda: Batch(bs, t, data.x.shape[2], target_tail,
                                                    tdtype, out_tail, dtype, masked, w_ndim))
        return batch

    def _snapshot(self) -> Snapshot:
        """The rollback snapshot of the network and optimizer (kept beside the network)."""
        return _training.scratch(self.model_).snapshot(self.model_, self.optimizer_)

    def _trainer(self, cfg: Config, dist: distributed.Local, epochs: int, fit: bool
                 ) -> Trainer:
        """The Trainer of this estimator's network, optimizer and loss, with the
        learning-rate schedule of this fit (over its epochs; partial_fit: constant),
        gradient clipping and the plan's time shifts."""
        schedule = None
        if fit:
            per_epoch = dist.steps_per_epoch(cfg.batch_size)
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
                       self._batches(), dist, batch_size=cfg.batch_size,
                       shuffle=cfg.shuffle, verbose=cfg.verbose, lr_schedule=schedule,
                       grad_transform=clip, augment=_augment.hook(self.plan_.augment_shift),
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

    def _train(self, data: seqs.Data, val: seqs.Data | None, cfg: Config,
               dist: distributed.Local, epochs: int, fit: bool) -> None:
        """Run `epochs` epochs over Data set up by _training.setup."""
        stopper = None
        # n_iter_no_change=None: no plateau stop; early stopping waits 10 epochs
        patience = cfg.n_iter_no_change
        if fit and (patience is not None or cfg.early_stopping):
            patience = _training.DEFAULT_PATIENCE if patience is None else patience
            stopper = EarlyStopping(cfg.tol, patience, self.model_, self.optimizer_,
                                    keep_best=cfg.early_stopping and val is not None)
        self._trainer(cfg, dist, epochs, fit).run(
            self, data, val, epochs, self._snapshot(), stopper,
            plateau=fit and not cfg.early_stopping, tol=cfg.tol, n_iter_no_change=patience or 0)

    # ---- persistence ---------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write configuration, weights, optimizer and RNG state to exactly `path`, a
        safetensors file (see attnx.io); attnx.load(path) reads it back."""
        _model_file.check_saveable(self)
        _model_file.write(path, *_state.get_state(self, portable=True))

    def _model_spec(self) -> dict[str, Any]:
        """The fitted model's architecture as JSON-able values (for save and pickle)."""
        return dict(self.plan_.network)

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
        self.model_, self.optimizer_ = model, opt

    def _restored_attributes(self, attributes: dict[str, Any], spec: Mapping[str, Any]
                             ) -> dict[str, Any]:
        """The fitted attributes of a stored state (attnx.estimators._state), checked
        against the stored model's spec."""
        plan = attributes.get("plan_")
        if not isinstance(plan, FitPlan) or dict(plan.network) != dict(spec):
            raise ValueError("the stored state has no fit plan that describes the stored "
                             "model")
        return attributes

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
