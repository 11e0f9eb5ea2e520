"""The forecaster's default training length (epochs=None): the optimizer-step budget
`steps` sets the epochs, and the floor of 20 epochs does not let the training grow with
the number of windows of a large panel."""
import math

import numpy as np
import pytest

import attnx
from attnx.forecasting import _training_budget as tb
from attnx.forecasting import forecaster as fm


def _plain_clip(steps, per_epoch):
    return int(np.clip(round(steps / per_epoch), 20, 300))


@pytest.mark.parametrize("steps", [40, 1500, 5000])
def test_plain_clip_wherever_the_floor_is_cheap(steps):
    # up to 2 * steps / 20 batches per epoch, 20 epochs cost at most 2 * steps steps:
    # the rule is the plain clip to [20, 300] there
    for p in range(1, steps // 10 + 1):
        assert tb.default_epochs(steps, p) == _plain_clip(steps, p), p


@pytest.mark.parametrize("steps", [40, 1500, 5000])
def test_steps_bounded_for_large_panels(steps):
    prev = math.inf
    for p in list(range(1, 3 * steps)) + [10 * steps, 1000 * steps]:
        e = tb.default_epochs(steps, p)
        assert 1 <= e <= 300
        assert e <= prev                                  # fewer epochs for more batches
        prev = e
        # once the floor binds: at most 2 * steps optimizer steps (give or take half an
        # epoch of rounding), or the one pass over every window when that is more
        if round(steps / p) < 20:
            assert e * p <= max(2 * steps + p / 2, p), (p, e)
    assert tb.default_epochs(steps, 10 * steps) == 1      # a pass over every window
    assert tb.default_epochs(1500, 1795) == 2             # 57,000 windows of 32: not 20


def test_bad_input():
    with pytest.raises(ValueError, match="steps and per_epoch"):
        tb.default_epochs(0, 5)
    with pytest.raises(ValueError, match="steps and per_epoch"):
        tb.default_epochs(100, 0)


def _panel(n_series, seed=0):
    rng = np.random.default_rng(seed)
    return [10 + np.cumsum(rng.normal(0, 0.3, int(n))) for n in rng.integers(50, 70, n_series)]


@pytest.mark.parametrize("n_series, bounded", [(2, False), (40, True)])
def test_fit_uses_the_budget(monkeypatch, n_series, bounded):
    # a tiny network and steps=40: the floor binds past 4 batches of 32 per epoch
    seen = []
    orig = fm.TransformerForecaster._regressor

    def spy(self, n_windows, n_tokens, seed, n_targets):
        reg = orig(self, n_windows, n_tokens, seed, n_targets)
        seen.append((math.ceil(n_windows / reg.batch_size), reg.epochs))
        return reg
    monkeypatch.setattr(fm.TransformerForecaster, "_regressor", spy)
    f = attnx.TransformerForecaster(horizon=4, d_model=8, n_heads=2, n_layers=1, steps=40,
                                    method="network",
                                    random_state=0).fit(_panel(n_series))
    assert f.method_ == "network" and len(seen) == 2      # final and calibration models
    for per_epoch, epochs in seen:
        if bounded:
            assert per_epoch > 4 and epochs < 20
            assert epochs * per_epoch <= 2 * 40 + per_epoch / 2
        else:
            assert epochs == _plain_clip(40, per_epoch)
    assert f.regressor_.n_iter_ <= seen[0][1]
    assert np.all(np.isfinite(np.asarray(f.predict(), dtype=float)))
