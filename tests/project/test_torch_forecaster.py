"""benchmarks/torch_forecaster.py, the "torch_twin" row of the forecasting benchmark:
attnx's forecaster with its networks trained by PyTorch. With dropout=0 in float64 the
twin trains the network attnx trains (same initial weights, batches and recipe), so
everything the forecaster computes from it agrees up to rounding."""
import sys
from pathlib import Path

import numpy as np
import pytest

import attnx
from numeric_checks import rel_err

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def tf(torch):
    """The module (it imports torch: skipped without it, as the torch fixture says)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    import torch_forecaster
    return torch_forecaster


def seasonal(n, phase=0.0, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return 10 + 3 * np.sin(2 * np.pi * t / 12 + phase) + 0.05 * t + rng.normal(0, 0.3, n)


SMALL = dict(d_model=16, n_heads=2, n_layers=2, dropout=0.0, dtype=np.float64)


@pytest.mark.parametrize("ragged", [False, True])
def test_regressor_twin_trains_the_network_attnx_trains(tf, ragged):
    """The adapter against attnx.TransformerRegressor itself: a warm-cosine fit then
    two warm-started ones, a short last batch, dense or padded input (float64)."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(37, 6, 3))
    if ragged:
        X = [x[:rng.integers(2, 7)] for x in X]
    y = np.stack([np.array([s[:, 0].sum(), s[:, 1].mean()]) for s in X])
    kw = dict(n_heads=2, n_layers=2, d_model=8, dropout=0.0, epochs=2,
              batch_size=8, lr=3e-3, random_state=5, dtype=np.float64, patch_len=1,
              instance_norm=None,
              options={"max_len": 6, "standardize": False, "lr_schedule": "warmup_cosine"})
    ref = attnx.TransformerRegressor(**kw)
    twin = tf._TorchRegressor(attnx.TransformerRegressor(**kw))
    for est in (ref, twin):
        est.fit(X, y)
        est.set_params(epochs=3, warm_start=True,
                       options={**kw["options"], "lr_schedule": "constant"})
        est.fit(X, y)
        est.set_params(epochs=1)
        est.fit(X, y)
    assert ref.n_iter_ == 6
    trained = ref.model_.params
    init = twin.model_.params   # the initial weights the twin started from
    moved = max(rel_err(trained[k], init[k], 1e-12) for k in trained)
    assert moved > 1e-2   # training changed the weights: the comparison below means something
    for name in trained:
        np.testing.assert_allclose(twin.twin_.w(name).detach().numpy(), trained[name],
                                   rtol=1e-9, atol=1e-11, err_msg=name)
    np.testing.assert_allclose(twin.predict(X), ref.predict(X), rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("series,intervals", [("one", "conformal"), ("list", "conformal"),
                                               ("one", "quantile"), ("list", "quantile")])
def test_twin_forecaster_equals_attnx_forecaster_in_float64(tf, series, intervals):
    """Same init, batches and recipe: the calibration run's checks (its errors, the
    blend weight), the final network and so the forecasts and intervals agree; with
    intervals="quantile" both train with the pinball loss over the levels (attnx's
    hand-written gradient against torch's autograd of the same loss)."""
    y = seasonal(72) if series == "one" else [seasonal(60), seasonal(45, 1.0, 1),
                                              seasonal(80, 2.0, 2)]
    kw = dict(SMALL, horizon=4, epochs=6, batch_size=16, random_state=1, intervals=intervals,
              method="network")
    ref = attnx.TransformerForecaster(**kw).fit(y)
    twin = tf.TorchForecaster(**kw).fit(y)
    assert isinstance(twin.regressor_, tf._TorchRegressor)
    assert twin.baseline_ == ref.baseline_ and 0 < ref.blend_   # the network is used
    assert twin.blend_ == pytest.approx(ref.blend_, rel=1e-9)
    assert rel_err(twin.calibration_scores_, ref.calibration_scores_) < 1e-9
    assert rel_err(np.asarray(twin.predict()), np.asarray(ref.predict())) < 1e-9
    # (lower, upper), or one such pair per series: (2, h) or (n_series, 2, h)
    assert rel_err(np.asarray(twin.predict_interval(coverage=0.8)),
                   np.asarray(ref.predict_interval(coverage=0.8))) < 1e-9
    if intervals == "quantile":
        assert ref.regressor_.loss == "pinball" and ref.calibration_scores_.ndim == 3
        assert rel_err(np.asarray(twin.predict_quantiles(quantiles=(0.1, 0.3, 0.5, 0.9))),
                       np.asarray(ref.predict_quantiles(quantiles=(0.1, 0.3, 0.5, 0.9)))) < 1e-9


def test_twin_forecaster_global_fit_intervals_and_clone(tf):
    """The benchmark's path with its defaults' dtype and dropout (float32, torch's own
    dropout masks): a global fit over series of different lengths, forecasts and
    intervals of the right shapes, and a clone (backtest refits clones) of the same
    class and parameters that fits again."""
    from sklearn.base import clone

    ys = [seasonal(60), seasonal(45, 1.0, 1), seasonal(80, 2.0, 2)]
    est = tf.TorchForecaster(horizon=5, d_model=16, n_heads=2, n_layers=1, epochs=2,
                             random_state=0, method="network")
    est.fit(ys)
    point = est.predict()
    assert len(point) == 3 and all(p.shape == (5,) and np.all(np.isfinite(p)) for p in point)
    pairs = est.predict_interval(coverage=0.9)
    assert len(pairs) == 3
    for p, (lo, hi) in zip(point, pairs):
        assert lo.shape == hi.shape == (5,)
        assert np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))
        assert np.all(lo <= p) and np.all(p <= hi) and np.all(lo < hi)
    one = est.predict(ys[1][:30])
    assert one.shape == (5,) and np.all(np.isfinite(one))
    copy = clone(est)
    assert type(copy) is tf.TorchForecaster and copy.get_params() == est.get_params()
    lo, hi = copy.fit(ys[0]).predict_interval()
    assert lo.shape == (5,) and np.all(lo < hi)
