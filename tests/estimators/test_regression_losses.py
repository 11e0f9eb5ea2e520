"""The regressors' `loss` and `quantiles`: the trained network follows the loss it
was given (quantile levels, medians), the hyper-parameters are checked, the held-out
run of epochs=None and model files use them."""
import numpy as np
import pytest

import attnx
from attnx.estimators import _snapshots, _training

SMALL = dict(d_model=16, n_heads=2, n_layers=1, epochs=40, random_state=0)


def _data(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 8, 2))
    y = X[:, -2:, 0].sum(axis=1) + rng.standard_t(2, size=n)   # heavy tails
    return X, y


def test_pinball_columns_learn_their_levels():
    X, y = _data()
    levels = (0.1, 0.5, 0.9)
    est = attnx.TransformerRegressor(**SMALL, loss="pinball", options={"quantiles": levels})
    pred = est.fit(X, np.repeat(y[:, None], 3, axis=1)).predict(X)
    below = (y[:, None] < pred).mean(axis=0)      # the share under each column
    np.testing.assert_allclose(below, levels, atol=0.08)
    # the same network trained for the mean: the median column is another model
    mse = attnx.TransformerRegressor(**SMALL).fit(X, y).predict(X)
    assert np.abs(mse - pred[:, 1]).max() > 1e-3


def test_absolute_and_huber_losses_train_and_are_recorded():
    X, y = _data()
    fits = {k: attnx.TransformerRegressor(**SMALL, loss=k).fit(X, y)
            for k in ("squared_error", "absolute_error", "huber")}
    for k, est in fits.items():
        assert est.loss_curve_[-1] < est.loss_curve_[0], k
    # the loss curves are in each loss's own units: the MAE-trained fit's last
    # epoch mean is about its training MAE (dropout on), not its MSE
    pred = fits["absolute_error"].predict(X)
    scale = fits["absolute_error"].target_scale_[0]
    mae = np.mean(np.abs(pred - y)) / scale
    assert fits["absolute_error"].loss_curve_[-1] == pytest.approx(mae, rel=0.5)


def test_held_out_reference_uses_the_loss():
    """epochs=None scores its held-out run with the fit's loss, against the loss of
    predicting the training targets' mean."""
    rng = np.random.default_rng(1)
    y_tr, y_va = rng.normal(size=(40, 2)), rng.normal(size=(10, 2)) + 1.0
    train = attnx.estimators._sequences.Data(np.zeros((40, 1, 1)), None, y_tr, None, False, None)
    val = attnx.estimators._sequences.Data(np.zeros((10, 1, 1)), None, y_va, None, False, None)
    dist = attnx.distributed.Local()
    mean = y_tr.mean(axis=0)
    assert _snapshots.mean_baseline_loss(train, val, dist) == pytest.approx(
        np.mean((y_va - mean) ** 2))
    assert _snapshots.mean_baseline_loss(train, val, dist, "absolute_error") == pytest.approx(
        np.mean(np.abs(y_va - mean)))
    q = np.array([0.2, 0.7])
    e = y_va - mean
    assert _snapshots.mean_baseline_loss(train, val, dist, "pinball", q) == pytest.approx(
        np.mean(np.maximum(q * e, (q - 1) * e)))
    X, yy = _data(120)
    est = attnx.TransformerRegressor(d_model=16, n_heads=2, n_layers=1, random_state=0,
                                     loss="absolute_error").fit(X, yy)
    assert est.epoch_selection_["held_out_loss"]


@pytest.mark.parametrize("kw,err,msg", [
    (dict(loss="l1"), ValueError, "loss must be one of"),
    (dict(loss="pinball"), ValueError, "quantiles"),
    (dict(options={"quantiles": (0.5,)}), ValueError, "quantiles"),
    (dict(loss="pinball", options={"quantiles": (0.0, 0.5)}), ValueError, r"levels in \(0, 1\)"),
    (dict(loss="pinball", options={"quantiles": "0.5"}), ValueError, "quantiles"),
    (dict(loss="pinball", options={"quantiles": (0.1, 0.9)}), ValueError, "one level per output column"),
])
def test_bad_loss_settings(kw, err, msg):
    X, y = _data(40)
    with pytest.raises(err, match=msg):
        attnx.TransformerRegressor(**{**SMALL, "epochs": 1}, **kw).fit(X, y)


def test_pinball_regressor_file_resumes_exactly(tmp_path):
    X, y = _data(80)
    yy = np.repeat(y[:, None], 2, axis=1)
    kw = dict(SMALL, epochs=2, loss="pinball", options={"quantiles": (0.25, 0.75)})
    a = attnx.AttentionRegressor(**{k: v for k, v in kw.items() if k != "n_layers"})
    a.fit(X, yy)
    a.save(tmp_path / "a.safetensors")
    b = attnx.load(tmp_path / "a.safetensors")
    assert b.get_params() == a.get_params()
    for est in (a, b):
        est.set_params(warm_start=True, epochs=1)
        est.fit(X, yy)
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
