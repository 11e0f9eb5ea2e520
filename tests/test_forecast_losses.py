"""MAE, Huber and pinball losses: values and gradients against PyTorch and finite differences."""
import numpy as np
import pytest

from attnx.losses import huber_loss, mae_loss, pinball_loss

TOL = {np.float32: 1e-5, np.float64: 1e-12}


def _torch_grad(torch, y, fn):
    yt = torch.tensor(y, requires_grad=True)
    loss = fn(yt)
    loss.backward()
    return loss.item(), yt.grad.numpy()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mae_and_huber_match_torch(torch, dtype, rng):
    y = rng.normal(size=(4, 6, 3)).astype(dtype)
    t = rng.normal(size=(4, 6, 3)).astype(dtype)
    loss, d = mae_loss(y, t)
    tl, td = _torch_grad(torch, y, lambda a: torch.nn.functional.l1_loss(a, torch.tensor(t)))
    assert loss == pytest.approx(tl, rel=TOL[dtype])
    np.testing.assert_allclose(d, td, rtol=TOL[dtype], atol=1e-12)
    for delta in (0.3, 1.0, 5.0):
        loss, d = huber_loss(y, t, delta)
        tl, td = _torch_grad(torch, y, lambda a: torch.nn.functional.huber_loss(
            a, torch.tensor(t), delta=delta))
        assert loss == pytest.approx(tl, rel=TOL[dtype])
        np.testing.assert_allclose(d, td, rtol=TOL[dtype], atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pinball_matches_torch(torch, dtype, rng):
    q = np.array([0.1, 0.5, 0.9])
    y = rng.normal(size=(5, 7, 3)).astype(dtype)
    t = rng.normal(size=(5, 7)).astype(dtype)
    loss, d = pinball_loss(y, t, q)

    def tfn(a):
        e = torch.tensor(t)[..., None] - a
        qq = torch.tensor(q, dtype=a.dtype)
        return torch.maximum(qq * e, (qq - 1) * e).mean()
    tl, td = _torch_grad(torch, y, tfn)
    assert loss == pytest.approx(tl, rel=TOL[dtype])
    np.testing.assert_allclose(d, td, rtol=TOL[dtype], atol=1e-12)


@pytest.mark.parametrize("fn", [
    lambda y, t: mae_loss(y, t), lambda y, t: huber_loss(y, t, 0.7),
    lambda y, t: pinball_loss(y, t[..., 0], [0.2, 0.8])])
def test_finite_differences(fn, rng):
    y = rng.normal(size=(3, 4, 2))
    t = rng.normal(size=(3, 4, 2))
    _, d = fn(y, t)
    h = 1e-6
    for idx in [(0, 0, 0), (1, 2, 1), (2, 3, 0)]:
        a = y.copy()
        a[idx] += h
        lp, _ = fn(a, t)
        a[idx] -= 2 * h
        lm, _ = fn(a, t)
        assert abs((lp - lm) / (2 * h) - d[idx]) < 1e-9


def test_errors_and_inputs_unchanged(rng):
    y = rng.normal(size=(3, 2))
    t = rng.normal(size=(3, 2))
    y0, t0 = y.copy(), t.copy()
    mae_loss(y, t), huber_loss(y, t), pinball_loss(y, t[:, 0], [0.1, 0.9])
    assert np.array_equal(y, y0) and np.array_equal(t, t0)
    with pytest.raises(ValueError, match="y_true must have shape"):
        mae_loss(y, t[:, :1])
    with pytest.raises(ValueError, match="delta"):
        huber_loss(y, t, 0.0)
    with pytest.raises(ValueError, match="quantiles"):
        pinball_loss(y, t[:, 0], [0.1, 1.0])
    with pytest.raises(ValueError, match="one column per quantile"):
        pinball_loss(y, t[:, 0], [0.1, 0.5, 0.9])
    with pytest.raises(ValueError, match="NaN"):
        mae_loss(y, np.full_like(t, np.nan))
    with pytest.raises(TypeError, match="y must be"):
        mae_loss([1.0], [1.0])
