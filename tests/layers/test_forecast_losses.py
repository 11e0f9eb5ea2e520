"""MAE, Huber and pinball losses: values and gradients against PyTorch and finite differences."""
import numpy as np
import pytest

from attnx.layers.losses import huber_loss, mae_loss, pinball_loss

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


# ---- the regressors' `loss`: the batch loss the trainer calls ------------------------
def _batch(y, t, w):
    from types import SimpleNamespace
    return SimpleNamespace(y=y, y_true=t, w=w, dy=np.empty_like(y), shape=y.shape)


@pytest.mark.parametrize("kind", ["squared_error", "absolute_error", "huber", "pinball"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_regression_batch_loss_matches_torch(torch, kind, weighted, dtype, rng):
    """(loss, weight) and dL/dY of a batch of 6 rows whose last 2 are padding (m=4,
    or weight 0): the (weighted) mean over samples of the mean over the 3 outputs;
    pinball with one level per output column."""
    from attnx.estimators._batch_losses import regression_batch_loss
    y = rng.normal(size=(6, 3)).astype(dtype) * 2
    t = rng.normal(size=(6, 3)).astype(dtype) * 2
    w = np.r_[rng.uniform(0.5, 2.0, 4), 0.0, 0.0] if weighted else None
    q = np.array([0.1, 0.5, 0.8]) if kind == "pinball" else None
    b = _batch(y, t, w)
    loss, weight = regression_batch_loss(b, 4, kind, q)

    def tfn(a):
        tt = torch.tensor(t)
        e = a - tt
        elem = {"squared_error": lambda: e * e, "absolute_error": lambda: e.abs(),
                "huber": lambda: torch.nn.functional.huber_loss(a, tt, reduction="none"),
                "pinball": lambda: torch.maximum(-torch.tensor(q, dtype=a.dtype) * e,
                                                 (1 - torch.tensor(q, dtype=a.dtype)) * e)}
        per_row = elem[kind]().mean(dim=1)
        ww = torch.tensor(w if weighted else np.r_[np.ones(4), 0.0, 0.0], dtype=a.dtype)
        return (ww * per_row).sum() / ww.sum()
    tl, td = _torch_grad(torch, y, tfn)
    assert weight == pytest.approx(w.sum() if weighted else 4)
    assert loss == pytest.approx(tl, rel=TOL[dtype])
    np.testing.assert_allclose(b.dy, td, rtol=10 * TOL[dtype], atol=1e-7)
    assert np.all(b.dy[4:] == 0)


def test_regression_batch_loss_finite_differences(rng):
    """Float64 finite differences of every loss at points away from its kinks."""
    from attnx.estimators._batch_losses import regression_batch_loss
    y = rng.normal(size=(5, 2))
    t = y + rng.choice([-1, 1], size=y.shape) * rng.uniform(0.2, 3.0, size=y.shape)
    w = rng.uniform(0.5, 2.0, 5)
    for kind, q in [("absolute_error", None), ("huber", None), ("pinball", [0.3, 0.9]),
                    ("squared_error", None)]:
        b = _batch(y, t, w)
        regression_batch_loss(b, 5, kind, np.asarray(q) if q else None)
        h = 1e-6
        for idx in [(0, 0), (2, 1), (4, 0)]:
            a, c = y.copy(), y.copy()
            a[idx] += h
            c[idx] -= h
            lp, _ = regression_batch_loss(_batch(a, t, w), 5, kind,
                                          np.asarray(q) if q else None)
            lm, _ = regression_batch_loss(_batch(c, t, w), 5, kind,
                                          np.asarray(q) if q else None)
            assert b.dy[idx] == pytest.approx((lp - lm) / (2 * h), rel=1e-6, abs=1e-9), kind
