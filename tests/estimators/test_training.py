"""The training loop's parts (attnx.estimators._training): early stopping, snapshots."""
import warnings

import numpy as np

import attnx
from bare_settings import merged


def _data(rng):
    X = rng.standard_normal((40, 5, 4))
    return X, np.tanh(X[..., ::-1]).copy()


def test_early_stopping_restores_the_optimizer_state_of_the_best_epoch(rng):
    X, Y = _data(rng)
    kw = dict(n_heads=2, batch_size=8, random_state=3, dtype=np.float64, lr=0.05, options={"validation_fraction": 0.25})
    es = attnx.AttentionRegressor(epochs=30, **merged(kw, options={
        "early_stopping": True, "n_iter_no_change": 2, "tol": 1e-3})).fit(X, Y)
    best = int(np.argmin(es.validation_loss_curve_))
    assert es.n_iter_ > best + 1  # it stopped after the best epoch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = attnx.AttentionRegressor(epochs=best + 1,
                                       **merged(kw, options={"n_iter_no_change": 100})).fit(X, Y)
    np.testing.assert_array_equal(es.model_.params.flat, ref.model_.params.flat)
    got, want = es.optimizer_.state_dict(), ref.optimizer_.state_dict()
    assert got["t"] == want["t"]
    for a, b in zip(got["m"] + got["v"], want["m"] + want["v"]):
        np.testing.assert_array_equal(a, b)


def test_the_setup_collective_runs_once_per_training_set(rng, monkeypatch):
    """partial_fit (and fit without a validation part) exchanges the shard layout once;
    fit with validation once for all the data and once for its training part."""
    from attnx import distributed

    calls = []
    real = distributed.Local.setup

    def counting(self, *a, **k):
        calls.append(a[0])
        return real(self, *a, **k)

    monkeypatch.setattr(distributed.Local, "setup", counting)
    X, Y = _data(rng)
    est = attnx.AttentionRegressor(epochs=1, random_state=0)
    est.partial_fit(X, Y)
    assert calls == [40]
    calls.clear()
    est.fit(X, Y)
    assert calls == [40]
    calls.clear()
    est.set_params(options={"validation_fraction": 0.25}).fit(X, Y)
    assert calls == [40, 30]


def test_every_hyper_parameter_has_one_declared_constraint():
    for cls in attnx.estimators.ESTIMATORS.values():
        assert list(cls._parameter_constraints) != []
        assert set(cls._parameter_constraints) == set(cls._param_names()), cls


def test_trainer_hooks_schedule_the_lr_and_transform_the_gradient(rng, monkeypatch):
    """lr_schedule(step) sets the lr of each step (a constant one changes nothing);
    grad_transform sees the global gradient before the step (zeroing it leaves
    only AdamW's weight decay)."""
    from attnx.estimators import _estimator

    X, Y = _data(rng)
    kw = dict(n_heads=2, epochs=2, batch_size=8, random_state=0, dtype=np.float64)
    plain = attnx.AttentionRegressor(**kw).fit(X, Y)
    steps, seen = [], []
    real = _estimator.SequenceEstimator._trainer

    def hooked(self, cfg, *args):
        tr = real(self, cfg, *args)
        tr.lr_schedule = lambda t: (steps.append(t), cfg.lr)[1]
        return tr

    monkeypatch.setattr(_estimator.SequenceEstimator, "_trainer", hooked)
    est = attnx.AttentionRegressor(**kw).fit(X, Y)
    np.testing.assert_array_equal(est.model_.params.flat, plain.model_.params.flat)
    assert steps == list(range(10))  # 40 samples in batches of 8, two epochs

    def frozen(self, cfg, *args):
        tr = real(self, cfg, *args)
        tr.grad_transform = lambda g: (seen.append(float(np.abs(g).max())), g.fill(0))
        return tr

    monkeypatch.setattr(_estimator.SequenceEstimator, "_trainer", frozen)
    est = attnx.AttentionRegressor(**kw, lr=0.1, weight_decay=0.0).fit(X, Y)
    assert len(seen) == 10 and max(seen) > 0
    monkeypatch.setattr(_estimator.SequenceEstimator, "_trainer", real)
    init = attnx.AttentionRegressor(**kw, lr=0.0).fit(X, Y)  # the initial weights
    np.testing.assert_array_equal(est.model_.params.flat, init.model_.params.flat)
    assert not np.array_equal(init.model_.params.flat, plain.model_.params.flat)
