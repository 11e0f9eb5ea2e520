"""scikit-learn style regressors: AttentionRegressor and TransformerRegressor.

Both learn a map from X (n_samples, seq_len, d) to Y of the same shape by
minimising the MSE with AdamW over mini-batches; d_model = d comes from the
data. scikit-learn is not needed at run time (see _base.py), yet clone,
cross_val_score and GridSearchCV work with them on 3-D arrays.
"""
import math
import numbers
import warnings
from types import SimpleNamespace

import numpy as np

from . import distributed
from ._base import EstimatorParams, NotFittedError
from ._metrics import r2_score
from ._params import check_dtype, check_positive_int
from ._training import (BatchBuffers, EarlyStopping, InterruptGuard, Progress, Snapshot,
                        TrainingDivergedError)
from ._validate import as_real_3d, finite
from .attention import MultiHeadAttention
from .losses import mse_loss
from .optim import AdamW, _check_hyper
from .transformer import Transformer

__all__ = ["AttentionRegressor", "TransformerRegressor", "NotFittedError",
           "TrainingDivergedError"]

# predict and attention_weights run this many rows (samples x positions) per
# forward: bounded memory for any n, and no relation to the training batch_size
_PREDICT_ROWS = 8192

# scratch space, rebuilt on demand and never pickled or saved
_SCRATCH = ("_batch", "_snapshot")


class _SequenceRegressor(EstimatorParams):
    """fit / partial_fit / predict / score / save shared by the two regressors."""

    _model_class = None

    # ---- hyper-parameters ----------------------------------------------
    def _config(self):
        """Validated copies of the hyper-parameters; the attributes stay as given."""
        c = SimpleNamespace()
        c.n_heads = check_positive_int("n_heads", self.n_heads)
        for name in ("causal", "bias", "rope", "shuffle", "early_stopping"):
            setattr(c, name, _bool(name, getattr(self, name)))
        c.epochs = check_positive_int("epochs", self.epochs)
        c.batch_size = check_positive_int("batch_size", self.batch_size)
        c.lr, c.betas, c.eps, c.weight_decay = _check_hyper(self.lr, self.betas, self.eps,
                                                            self.weight_decay)
        c.validation_fraction = _real("validation_fraction", self.validation_fraction, 0.0, 1.0,
                                      "in [0, 1)")
        c.n_iter_no_change = check_positive_int("n_iter_no_change", self.n_iter_no_change)
        c.tol = _real("tol", self.tol, 0.0, math.inf, ">= 0")
        c.verbose = _verbose(self.verbose)
        c.dtype = check_dtype(self.dtype)
        return c

    def _model_kwargs(self, cfg):
        return dict(n_heads=cfg.n_heads, causal=cfg.causal, bias=cfg.bias, rope=cfg.rope,
                    dtype=cfg.dtype)

    def _model_spec(self):
        """The fitted model's architecture as JSON-able values (for save and pickle)."""
        m = self.model_
        return dict(d_model=m.d_model, n_heads=m.n_heads, causal=m.causal, bias=m.bias,
                    rope=m.rope, dtype=m.dtype.name, attention=m.attention)

    # ---- training ------------------------------------------------------
    def fit(self, X, Y, comm=None):
        """Train a new model for `epochs` epochs on X, Y (n_samples, seq_len, d). Returns self.

        With validation_fraction > 0 a random part of the samples is held out
        and scored after every epoch (validation_loss_curve_); early_stopping
        then stops when that loss has not improved by tol for n_iter_no_change
        epochs and keeps the best weights (without validation it watches the
        training loss). Ctrl-C stops after the current step with a warning.

        comm: None, or an mpi4py communicator when this is one rank of a
        data-parallel fit (``mpiexec -n P``): X, Y are then this rank's shard of
        the samples and the result is the fit on all shards concatenated in rank
        order (see attnx.distributed).
        """
        dist = distributed.wrap(comm)
        with dist.together():  # an error on one rank is raised on every rank
            cfg = self._config()
            X, Y = _check_xy(X, Y, cfg.dtype)
        dist.setup(X.shape[0], X.shape[1:], self.get_params())
        if math.ceil(cfg.validation_fraction * dist.n) >= dist.n:
            raise ValueError(f"validation_fraction={cfg.validation_fraction} leaves no "
                             f"training sample out of {dist.n}")
        split_seed = self._initialize(X.shape[2], cfg, dist)
        Xtr, Ytr, Xva, Yva = _split(X, Y, cfg.validation_fraction, split_seed, dist)
        if Xva is not None:
            self.validation_loss_curve_ = []
            self.best_validation_loss_ = math.inf
        self._train(Xtr, Ytr, Xva, Yva, cfg, cfg.epochs, fit=True, dist=dist)
        return self

    def partial_fit(self, X, Y, comm=None):
        """One more epoch over X, Y from the current weights and optimizer state. Returns self.

        The first call builds the model (as fit would, from random_state). Later
        calls keep the architecture and dtype of the model but take lr, betas,
        eps and weight_decay as currently set. No validation split and no early
        stopping here (as in scikit-learn's MLPRegressor.partial_fit). comm: as in fit.
        """
        dist = distributed.wrap(comm)
        with dist.together():
            cfg = self._config()
            fitted = hasattr(self, "model_")
            if fitted:
                X, Y = _check_xy(X, Y, self.model_.dtype, d=self.n_features_in_)
            else:
                X, Y = _check_xy(X, Y, cfg.dtype)
        dist.setup(X.shape[0], X.shape[1:], self.get_params())
        if fitted:
            opt = self.optimizer_
            opt.lr, opt.betas, opt.eps, opt.weight_decay = cfg.lr, cfg.betas, cfg.eps, \
                cfg.weight_decay
        else:
            self._initialize(X.shape[2], cfg, dist)
        self._train(X, Y, None, None, cfg, 1, fit=False, dist=dist)
        return self

    def _initialize(self, d, cfg, dist=None):
        """Drop every fitted attribute, build model_, optimizer_ and shuffle_rng_.
        Returns the seed for the validation split."""
        for name in [k for k in vars(self) if k.endswith("_") and not k.startswith("_")]:
            delattr(self, name)
        for name in _SCRATCH:
            self.__dict__.pop(name, None)
        master = _rng(self.random_state)
        init_seed, shuffle_seed, split_seed = (int(s) for s in master.integers(0, 2**63 - 1,
                                                                              size=3))
        if dist is not None:  # every rank starts from rank 0's seeds
            init_seed, shuffle_seed, split_seed = dist.same((init_seed, shuffle_seed, split_seed))
        self.model_ = self._model_class(d, **self._model_kwargs(cfg), random_state=init_seed,
                                        input_grad=False)  # dL/dX is never needed here
        self.optimizer_ = AdamW(self.model_.params, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps,
                                weight_decay=cfg.weight_decay)
        self.shuffle_rng_ = np.random.default_rng(shuffle_seed)
        self.n_features_in_ = d
        self.n_iter_ = 0
        self.loss_curve_ = []
        self.best_loss_ = math.inf
        return split_seed

    def _scratch(self, bs, t, d):
        model, opt = self.model_, self.optimizer_
        batch = self.__dict__.get("_batch")
        if batch is None or not batch.matches(bs, t, d, model.dtype):
            batch = self._batch = BatchBuffers(bs, t, d, model.dtype)
        snap = self.__dict__.get("_snapshot")
        if snap is None or not snap.fits(model, opt):
            snap = self._snapshot = Snapshot(model, opt)
        return batch, snap

    def _train(self, X, Y, Xva, Yva, cfg, epochs, fit, dist):
        """Run `epochs` epochs; X, Y are validated arrays of the model's dtype."""
        model, opt, rng = self.model_, self.optimizer_, self.shuffle_rng_
        _, t, d = X.shape
        dist.setup(X.shape[0])  # the training samples' global count and this rank's offset
        n = dist.n
        bs = min(cfg.batch_size, n)
        batch, good = self._scratch(bs, t, d)
        good.save(model, opt, rng)  # the state to roll back to if training diverges
        stopper = None
        if fit and cfg.early_stopping:
            stopper = EarlyStopping(cfg.tol, cfg.n_iter_no_change, model.params.flat,
                                    keep_best=Xva is not None)
        bar = Progress(cfg.verbose if dist.is_root else 0, -(-n // bs),
                       self.n_iter_ + epochs if fit else None)
        with InterruptGuard() as guard:
            try:
                for _ in range(epochs):
                    epoch = self.n_iter_ + 1
                    bar.start(epoch)
                    loss = self._epoch(X, Y, batch, cfg.shuffle, epoch, good, guard, bar,
                                       dist, bs)
                    if loss is None:  # interrupted
                        return
                    self.loss_curve_.append(loss)
                    self.best_loss_ = min(self.best_loss_, loss)
                    self.n_iter_ = epoch
                    vloss = None
                    if Xva is not None:
                        vloss = _mean_loss(model, Xva, Yva, batch, dist)
                        self.validation_loss_curve_.append(vloss)
                        self.best_validation_loss_ = min(self.best_validation_loss_, vloss)
                    dist.check_identical(model.params.flat)
                    good.save(model, opt, rng)
                    if stopper is not None and stopper.update(loss if vloss is None else vloss):
                        bar.end(loss, vloss, " (early stop)")
                        stopper.restore_best()
                        return
                    bar.end(loss, vloss)
            finally:
                bar.close()

    def _epoch(self, X, Y, batch, shuffle, epoch, good, guard, bar, dist, bs):
        """One pass over X, Y; returns the mean loss over the samples, or None when
        interrupted (after a warning). Rolls back and raises when training diverges."""
        model, opt = self.model_, self.optimizer_
        n = dist.n
        n_batches = -(-n // bs)
        order = self.shuffle_rng_.permutation(n) if shuffle else None
        plan = [(start, min(bs, n - start), None) for start in range(0, n, bs)]
        # this process's samples of each global batch (all of them with comm=None)
        order, parts = dist.batches(order, plan)
        rows = dist.rows(parts, bs)
        if batch.shape[0] != rows:
            batch = self._scratch(rows, X.shape[1], X.shape[2])[0]
        total, seen = 0.0, 0
        for k, (start, m, _, m_all) in enumerate(parts):
            batch.load(X, Y, order, start, m)
            try:
                loss = _step(model, opt, batch, m, dist, guard)
            except KeyboardInterrupt:  # raised outside the guard's reach
                guard.interrupted = True
                break
            except _NonFinite as exc:
                self._diverged(good, f"epoch {epoch}: {exc} at batch {k + 1} of {n_batches}",
                               epoch)
            total += loss * m_all
            seen += m_all
            bar.step(total / seen)
            if dist.stopping(guard):  # with comm: every rank stops after the same step
                break
        if guard.interrupted:
            bar.close()
            warnings.warn(
                f"training interrupted in epoch {epoch} after {-(-seen // bs)} of {n_batches} "
                f"batches; the model keeps the weights of the last completed step "
                f"({opt.t} optimizer steps in all) and n_iter_ = {self.n_iter_} counts "
                f"completed epochs only", UserWarning, stacklevel=4)
            return None
        return total / n

    def _diverged(self, good, where, epoch):
        good.restore(self.model_, self.optimizer_, self.shuffle_rng_)
        before = f"the end of epoch {epoch - 1}" if epoch > 1 else "their values before epoch 1"
        raise TrainingDivergedError(
            f"training diverged in {where} (lr={self.optimizer_.lr}); the weights, optimizer "
            f"state and shuffling state were restored to {before}. Try a smaller lr.")

    # ---- inference -----------------------------------------------------
    def _fitted_model(self):
        if "model_" not in self.__dict__:
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet: "
                                 f"call fit or partial_fit first")
        return self.model_

    def predict(self, X):
        """Y (n_samples, seq_len, d) for X (n_samples, seq_len, d), in the model's dtype.

        Runs forward(grad=False) on chunks of samples (about _PREDICT_ROWS rows
        each); seq_len may differ from the training data's.
        """
        model = self._fitted_model()
        X = _check_x("X", X, self.n_features_in_, allow_empty=True)
        n, t, d = X.shape
        out = np.empty((n, t, d), dtype=model.dtype)
        step = max(1, _PREDICT_ROWS // max(t, 1))
        for s in range(0, n, step):
            model.forward(X[s:s + step], grad=False, out=out[s:s + step])
        return out

    def score(self, X, Y):
        """R^2 of predict(X) against Y: rows = samples x positions, outputs = features,
        averaged uniformly over the features (scikit-learn's r2_score)."""
        self._fitted_model()
        X = _check_x("X", X, self.n_features_in_)
        Y = as_real_3d("Y", Y)
        if Y.shape != X.shape:
            raise ValueError(f"Y must have the shape of X {X.shape}, got {Y.shape}")
        return r2_score(Y, self.predict(X))

    def attention_weights(self, X):
        """Attention probabilities of the fitted model on X: (n, n_heads, T, T); a
        TransformerRegressor gives a list with one such array per layer."""
        model = self._fitted_model()
        X = _check_x("X", X, self.n_features_in_)
        n, t, _ = X.shape
        step = max(1, _PREDICT_ROWS // t)
        parts = []
        for s in range(0, n, step):
            model.forward(X[s:s + step], grad=True)  # grad=True keeps the probabilities
            w = model.attention_weights()
            parts.append(w if isinstance(w, list) else [w])
        layers = [np.concatenate(p, axis=0) for p in zip(*parts)]
        return layers if isinstance(model, Transformer) else layers[0]

    # ---- persistence ---------------------------------------------------
    def save(self, path):
        """Write configuration, weights, optimizer and RNG state to one .npz file
        (see attnx.io.save); attnx.load(path) reads it back."""
        from .io import save

        save(self, path)

    def _restore_model(self, spec, params, opt_hyper, opt_state):
        """Rebuild model_ and optimizer_ from _model_spec(), params.flat and AdamW state."""
        spec = dict(spec)
        d = spec.pop("d_model")
        spec["dtype"] = check_dtype(spec["dtype"])
        params = np.asarray(params)
        # sizes come from a file or a pickle: check them against the weights that
        # are really there before building (and allocating) a model of that size
        if self._model_class is Transformer:
            expected = Transformer.n_params(int(d), int(spec["n_layers"]),
                                            int(spec["d_hidden"]), bool(spec["bias"]))
        else:
            expected = MultiHeadAttention.n_params(int(d), bool(spec["bias"]))
        if params.ndim != 1 or expected != params.size:
            raise ValueError(f"the weights ({params.size} values) do not fit the model "
                             f"(which needs {expected})")
        model = self._model_class(d, **spec, random_state=0, input_grad=False)
        if params.shape != model.params.flat.shape or params.dtype != model.dtype:
            raise ValueError(f"the weights ({params.dtype} {params.shape}) do not fit the model "
                             f"({model.dtype} {model.params.flat.shape})")
        np.copyto(model.params.flat, params)
        opt = AdamW(model.params, lr=opt_hyper["lr"], betas=tuple(opt_hyper["betas"]),
                    eps=opt_hyper["eps"], weight_decay=opt_hyper["weight_decay"])
        opt.load_state_dict(opt_state)
        self.model_, self.optimizer_ = model, opt

    def _optimizer_hyper(self):
        o = self.optimizer_
        return dict(lr=o.lr, betas=list(o.betas), eps=o.eps, weight_decay=o.weight_decay)

    def __getstate__(self):
        # the model's workspaces and the batch buffers are caches: keep only what
        # rebuilds the model (architecture, flat weights, optimizer state)
        state = {k: v for k, v in self.__dict__.items() if k not in _SCRATCH}
        if "model_" in state:
            state["model_"] = {"spec": self._model_spec(), "params": self.model_.params.flat}
            state["optimizer_"] = {"hyper": self._optimizer_hyper(),
                                   "state": self.optimizer_.state_dict()}
        return state

    def __setstate__(self, state):
        state = dict(state)
        model = state.pop("model_", None)
        opt = state.pop("optimizer_", None)
        self.__dict__.update(state)
        if model is not None:
            self._restore_model(model["spec"], model["params"], opt["hyper"], opt["state"])


class AttentionRegressor(_SequenceRegressor):
    """One MultiHeadAttention layer trained as a regressor: Y = attention(X).

    Parameters
    ----------
    n_heads : int, dividing the number of features d of the data.
    causal, bias, rope : attention options (see MultiHeadAttention); bias
        defaults to True here, as a regressor usually wants intercepts.
    epochs : passes over the data in fit.
    batch_size : samples per AdamW step (a short last batch is padded with
        zero-weighted rows, so every step sees one batch shape).
    lr, betas, eps, weight_decay : AdamW settings.
    shuffle : reshuffle the samples every epoch (a numpy Generator seeded from
        random_state; its state is saved with the model).
    validation_fraction : part of the samples fit holds out for
        validation_loss_curve_ (0 = none).
    early_stopping, n_iter_no_change, tol : stop fit when the validation loss
        (or the training loss without validation) has not improved by tol for
        n_iter_no_change epochs.
    random_state : None, an int, or a numpy Generator: initial weights,
        shuffling and the validation split.
    verbose : 0 prints nothing; 1 shows a progress bar per epoch (tqdm, on
        stderr) with the running loss.
    dtype : float32 or float64 for the weights and the computation.

    Fitted attributes: model_, optimizer_, shuffle_rng_, n_features_in_,
    n_iter_ (completed epochs), loss_curve_ (mean training MSE per epoch),
    best_loss_, and with validation validation_loss_curve_ and
    best_validation_loss_.
    """

    _model_class = MultiHeadAttention

    def __init__(self, n_heads=1, *, causal=False, bias=True, rope=False, epochs=100,
                 batch_size=32, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                 shuffle=True, validation_fraction=0.0, early_stopping=False,
                 n_iter_no_change=10, tol=1e-4, random_state=None, verbose=0, dtype=np.float32):
        _store(self, locals())


class TransformerRegressor(_SequenceRegressor):
    """A Transformer (n_layers of attention + SiLU MLP with residuals) trained as a regressor.

    n_layers : number of transformer layers; d_hidden : MLP width (None: 4 d).
    Every other parameter and fitted attribute as for AttentionRegressor.
    """

    _model_class = Transformer

    def __init__(self, n_heads=1, n_layers=2, d_hidden=None, *, causal=False, bias=True,
                 rope=False, epochs=100, batch_size=32, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=0.01, shuffle=True, validation_fraction=0.0,
                 early_stopping=False, n_iter_no_change=10, tol=1e-4, random_state=None,
                 verbose=0, dtype=np.float32):
        _store(self, locals())

    def _model_kwargs(self, cfg):
        kw = super()._model_kwargs(cfg)
        kw["n_layers"] = check_positive_int("n_layers", self.n_layers)
        kw["d_hidden"] = (None if self.d_hidden is None
                          else check_positive_int("d_hidden", self.d_hidden))
        return kw

    def _model_spec(self):
        spec = super()._model_spec()
        spec.update(n_layers=self.model_.n_layers, d_hidden=self.model_.d_hidden)
        return spec


# ---- helpers ---------------------------------------------------------------
def _store(est, args):
    """Keep every constructor argument unchanged, as scikit-learn requires."""
    for name, value in args.items():
        if name not in ("self", "__class__"):
            setattr(est, name, value)


class _NonFinite(Exception):
    """A training step met NaN or infinity (the message says where)."""


def _step(model, opt, batch, m, dist, guard=None):
    """One AdamW step on the first m samples of the batch; returns the batch loss
    (before the step). Raises _NonFinite when the loss, the gradients or the
    updated weights are not finite. With comm, the loss and the gradient are the
    global batch's (summed over the ranks; m may be 0 on a rank)."""
    loss = 0.0
    with dist.collect_error():  # with comm, a failure here is raised on every rank
        if m:
            model.forward(batch.x, grad=True, out=batch.y)
        if m == batch.shape[0]:
            loss, _ = mse_loss(batch.y, batch.y_true, out=batch.dy)
        elif m:
            loss, _ = mse_loss(batch.y[:m], batch.y_true[:m], out=batch.dy[:m])
            batch.dy[m:] = 0  # padding rows contribute nothing to the gradients
    loss, _ = dist.batch_loss(loss, m, guard)
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
    return loss


def _mean_loss(model, X, Y, batch, dist):
    """MSE of the model over X, Y in batches of the training batch shape
    (forward with grad=True reuses the training workspace: no new buffers);
    with comm, over every rank's X, Y."""
    bs, n, sse = batch.shape[0], X.shape[0], 0.0
    for start in range(0, n, bs):
        m = min(bs, n - start)
        batch.load(X, Y, None, start, m)
        model.forward(batch.x, grad=True, out=batch.y)
        loss, _ = mse_loss(batch.y[:m], batch.y_true[:m], out=batch.dy[:m])
        sse += loss * m
    return dist.allsum(sse) / dist.allsum(n)


def _split(X, Y, fraction, seed, dist):
    """(X_train, Y_train, X_val, Y_val): a random ceil(fraction * n) samples held out
    (n and the indices global with comm; each rank keeps its own part)."""
    if fraction == 0:
        return X, Y, None, None
    n = dist.n
    n_val = math.ceil(fraction * n)  # fit checked that n_val < n
    perm = np.random.default_rng(seed).permutation(n)
    val, train = np.sort(perm[:n_val]), np.sort(perm[n_val:])  # keep the data's order
    val, train = dist.local_part(val), dist.local_part(train)
    return X[train], Y[train], X[val], Y[val]


def _check_x(name, x, d, allow_empty=False):
    x = as_real_3d(name, x)
    if x.shape[2] != d:
        raise ValueError(f"{name} must have shape (n_samples, seq_len, {d}) as the data the "
                         f"model was fitted on, got {x.shape}")
    if not allow_empty and (x.shape[0] == 0 or x.shape[1] == 0):
        raise ValueError(f"{name} is empty: shape {x.shape}")
    if not finite(x):
        raise ValueError(f"{name} contains NaN or infinity")
    return x


def _check_xy(X, Y, dtype, d=None):
    """Validated C-contiguous copies (or the arrays themselves) of X, Y in dtype."""
    X, Y = as_real_3d("X", X), as_real_3d("Y", Y)
    if Y.shape != X.shape:
        raise ValueError(f"Y must have the shape of X {X.shape} (n_samples, seq_len, "
                         f"n_features), got {Y.shape}")
    if min(X.shape) == 0:
        raise ValueError(f"X is empty: shape {X.shape}")
    if d is not None and X.shape[2] != d:
        raise ValueError(f"X must have shape (n_samples, seq_len, {d}) as the data the model "
                         f"was fitted on, got {X.shape}")
    out = []
    for name, a in (("X", X), ("Y", Y)):
        with np.errstate(over="ignore"):  # too large for float32: reported just below
            c = np.ascontiguousarray(a, dtype=dtype)
        if not finite(c):
            where = "" if a.dtype == dtype else f" (after conversion to {dtype})"
            raise ValueError(f"{name} contains NaN or infinity{where}")
        out.append(c)
    return out


def _bool(name, v):
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    raise TypeError(f"{name} must be True or False, got {v!r}")


def _real(name, v, lo, hi, what):
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name} must be a real number {what}, got {v!r}")
    if not lo <= v < hi:
        raise ValueError(f"{name} must be {what}, got {v!r}")
    return float(v)


def _verbose(v):
    if isinstance(v, (bool, np.bool_)):
        return int(v)
    if not isinstance(v, numbers.Integral) or v < 0:
        raise ValueError(f"verbose must be an int >= 0, got {v!r}")
    return int(v)


def _rng(random_state):
    ok = (random_state is None
          or (isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool))
          or isinstance(random_state, (np.random.Generator, np.random.SeedSequence)))
    if not ok:
        raise TypeError(f"random_state must be None, an int >= 0 or a numpy Generator, "
                        f"got {random_state!r}")
    try:
        return np.random.default_rng(random_state)
    except ValueError as exc:
        raise ValueError(f"random_state must be None, an int >= 0 or a numpy Generator, "
                         f"got {random_state!r}") from exc
