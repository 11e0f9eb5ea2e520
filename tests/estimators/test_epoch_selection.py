"""epochs=None for a regressor: a held-out run chooses how long the fit trains (the
whole budget on a strong signal, the best held-out epoch on a weak one), then the
network trains on every sample from the same initial weights."""
import numpy as np
import pytest

import attnx
from attnx.estimators import _snapshots, _training
from attnx.estimators._sequences import Data
from attnx.distributed import Local

SMALL = dict(n_heads=2, d_model=8, n_layers=1, d_hidden=16, batch_size=16, random_state=0,
             dtype=np.float64)


def _data(signal, n=64, t=10, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, t, 2))
    y = X[:, :, 0].mean(axis=1) * 3.0 if signal else rng.normal(size=n)
    return X, y


def test_weak_signal_trains_the_best_held_out_epochs_on_every_sample():
    X, y = _data(signal=False)
    est = attnx.TransformerRegressor(**SMALL).fit(X, y)
    sel = est.epoch_selection_
    budget = _training.auto_epochs(len(X), 16)
    assert sel["budget"] == budget and not sel["strong"]
    assert sel["held_out_r2"] < _snapshots.SELECT_R2
    # the run stopped SELECT_PATIENCE epochs after its best (or at the budget)
    assert sel["held_out_epochs"] == min(sel["best_epoch"] + _snapshots.SELECT_PATIENCE,
                                         budget)
    assert len(sel["held_out_loss"]) == sel["held_out_epochs"]
    assert int(np.argmin(sel["held_out_loss"])) + 1 == sel["best_epoch"]
    assert sel["epochs"] == max(sel["best_epoch"], _snapshots.SELECT_MIN_EPOCHS) < budget
    # the final network: trained on every sample for those epochs from the same start
    assert est.n_iter_ == sel["epochs"] and len(est.loss_curve_) == sel["epochs"]
    assert "validation_loss_curve_" not in vars(est)
    ref = attnx.TransformerRegressor(**SMALL, epochs=sel["epochs"]).fit(X, y)
    np.testing.assert_array_equal(est.model_.params.flat, ref.model_.params.flat)
    np.testing.assert_array_equal(est.predict(X), ref.predict(X))


def test_strong_signal_stops_the_held_out_run_early_and_trains_the_budget():
    X, y = _data(signal=True, n=96)
    est = attnx.TransformerRegressor(**SMALL, lr=3e-3).fit(X, y)
    sel = est.epoch_selection_
    budget = _training.auto_epochs(len(X), 16)
    assert sel["strong"] and sel["held_out_r2"] >= _snapshots.SELECT_R2
    assert sel["epochs"] == budget == est.n_iter_
    assert sel["held_out_epochs"] < budget   # stopped as soon as the signal showed
    ref = attnx.TransformerRegressor(**SMALL, lr=3e-3, epochs=budget).fit(X, y)
    np.testing.assert_array_equal(est.model_.params.flat, ref.model_.params.flat)


def test_held_out_rule_beats_the_whole_budget_on_noise():
    """The point of the rule: on targets unrelated to X, the network trained for the
    whole budget fits the noise and scores worse on new samples than the chosen one."""
    X, y = _data(signal=False, n=64, seed=1)
    Xt, yt = _data(signal=False, n=400, seed=2)
    chosen = attnx.TransformerRegressor(**SMALL).fit(X, y)
    whole = attnx.TransformerRegressor(**SMALL, epochs=chosen.epoch_selection_["budget"])
    whole.fit(X, y)
    mse = [float(np.mean((m.predict(Xt) - yt) ** 2)) for m in (chosen, whole)]
    assert mse[0] < mse[1], mse


@pytest.mark.parametrize("kw", [dict(epochs=7), dict(options={"validation_fraction": 0.2}),
                                dict(options={"early_stopping": True})])
def test_not_applied_when_the_user_chose(kw):
    X, y = _data(signal=False)
    est = attnx.TransformerRegressor(**SMALL, **kw).fit(X, y)
    assert "epoch_selection_" not in vars(est)


def test_not_applied_to_classifiers_warm_starts_tiny_sets_and_per_position_targets():
    X, y = _data(signal=True)
    clf = attnx.TransformerClassifier(**SMALL, epochs=None, tokenizer="patch")
    assert "epoch_selection_" not in vars(clf.fit(X, (y > 0).astype(int)))
    warm = attnx.TransformerRegressor(**SMALL, warm_start=True).fit(X, y)
    assert "epoch_selection_" in vars(warm)
    first = warm.n_iter_
    warm.fit(X, y)   # goes on for the whole budget, no held-out run
    assert "epoch_selection_" not in vars(warm) or warm.n_iter_ > first
    tiny = attnx.TransformerRegressor(**SMALL).fit(X[:_snapshots.SELECT_MIN_SAMPLES - 1],
                                                 y[:_snapshots.SELECT_MIN_SAMPLES - 1])
    assert "epoch_selection_" not in vars(tiny)
    seq = attnx.TransformerRegressor(**SMALL).fit(X, np.cumsum(X[:, :, :1], axis=1))
    assert "epoch_selection_" not in vars(seq)


def test_mean_baseline_loss_is_the_weighted_mse_of_the_training_mean():
    rng = np.random.default_rng(3)
    x = np.zeros((10, 2, 1))
    y_tr, y_va = rng.normal(size=(7, 2)), rng.normal(size=(3, 2))
    w_tr, w_va = rng.uniform(0.5, 2, 7), rng.uniform(0.5, 2, 3)
    train = Data(x[:7], None, y_tr, w_tr, False)
    val = Data(x[7:], None, y_va, w_va, False)
    mean = (w_tr[:, None] * y_tr).sum(0) / w_tr.sum()
    want = float((w_va * ((y_va - mean) ** 2).mean(1)).sum() / w_va.sum())
    assert _snapshots.mean_baseline_loss(train, val, Local()) == pytest.approx(want, rel=1e-12)
    # unweighted: the plain mean
    got = _snapshots.mean_baseline_loss(Data(x[:7], None, y_tr, None, False),
                                       Data(x[7:], None, y_va, None, False), Local())
    assert got == pytest.approx(float(((y_va - y_tr.mean(0)) ** 2).mean()), rel=1e-12)


def test_the_choice_is_saved_with_the_model(tmp_path):
    X, y = _data(signal=False)
    est = attnx.TransformerRegressor(**SMALL).fit(X, y)
    path = tmp_path / "m.attnx"
    est.save(path)
    back = attnx.load(path)
    assert back.epoch_selection_ == est.epoch_selection_
    np.testing.assert_array_equal(back.predict(X), est.predict(X))
