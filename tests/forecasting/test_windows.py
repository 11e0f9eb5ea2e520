"""Forecasting windows: cutting, left padding, scaling and patches on small known series."""
import numpy as np
import pytest

from attnx.forecasting import _windows as win


def test_series_list_forms_and_errors():
    s, was = win.series_list("y", np.arange(5.0))
    assert not was and s[0].shape == (5, 1)
    s, was = win.series_list("y", [np.ones((4, 2)), np.zeros((7, 2))])
    assert was and [a.shape for a in s] == [(4, 2), (7, 2)]
    with pytest.raises(ValueError, match=r"y\[1\] contains NaN .*time step 2"):
        win.series_list("y", [np.ones(3), np.array([1, 2, np.nan, 4])])
    with pytest.raises(ValueError, match="same number of channels"):
        win.series_list("y", [np.ones((4, 2)), np.ones((4, 3))])
    with pytest.raises(ValueError, match="at least 9"):
        win.series_list("y", np.ones(5), min_len=9)
    with pytest.raises(TypeError, match="real numbers"):
        win.series_list("y", ["a", "b"])


def test_cut_windows_pad_and_targets():
    y = np.arange(10.0)[:, None]
    w = win.cut([y], window=4, horizon=2, min_context=2)
    # origins 2..8: contexts end right before the origin, targets are the next 2 steps
    assert list(w.origin) == list(range(2, 9))
    np.testing.assert_array_equal(w.target[:, :, 0], np.stack([[t, t + 1] for t in range(2, 9)]))
    np.testing.assert_array_equal(w.context[0, :, 0], [0, 0, 0, 1])   # left pad: first value
    np.testing.assert_array_equal(w.mask[0], [True, True, False, False])
    np.testing.assert_array_equal(w.context[-1, :, 0], [4, 5, 6, 7])
    assert not w.mask[-1].any()
    last = win.cut([y], 4, 2, min_context=2, last=3)
    assert list(last.origin) == [6, 7, 8]
    with pytest.raises(ValueError, match="no training window"):
        win.cut([np.ones((2, 1))], 4, 2)


def test_scale_and_patches():
    ctx = np.array([[[0.0], [0.0], [2.0], [4.0]]])
    mask = np.array([[True, False, False, False]])
    mu, sd = win.scale_stats(ctx, mask, 1)
    assert mu[0, 0, 0] == pytest.approx(2.0)
    assert sd[0, 0, 0] == pytest.approx(np.std([0.0, 2.0, 4.0]))
    mu, sd = win.scale_stats(np.full((1, 4, 1), 5.0), np.zeros((1, 4), bool), 1)
    assert sd[0, 0, 0] > 0        # a flat context: floored, not zero
    x = np.arange(8.0).reshape(1, 8, 1)
    m = np.array([[True, True, True, False, False, False, False, False]])
    p, pm = win.patchify(x, m, 2, 2)
    np.testing.assert_array_equal(p[0], [[0, 1], [2, 3], [4, 5], [6, 7]])
    np.testing.assert_array_equal(pm[0], [True, False, False, False])
    assert win.n_patches(8, 3, 2) == 3
    with pytest.raises(ValueError, match="patch_len"):
        win.n_patches(4, 5, 1)


def test_default_rules():
    assert win.default_window([100, 120], 12, 12) == 64
    assert win.default_window([300, 400], 24, 1) == 72     # 3 * horizon
    assert win.default_window([30, 40], 6, 1) == 29        # median length - horizon
    assert win.default_window([14], 6, 1) == 12            # floored at 2 * horizon
    assert win.default_patch(48) == (6, 3)
    assert win.default_patch(512) == (16, 8)
    assert win.check_quantiles([0.9, 0.1, 0.5]) == (0.1, 0.5, 0.9)
    with pytest.raises(ValueError, match="quantiles"):
        win.check_quantiles([0.1, 1.0])
    assert win.interval_levels(0.9) == pytest.approx((0.05, 0.95))
    with pytest.raises(ValueError, match="coverage"):
        win.interval_levels(1.5)
