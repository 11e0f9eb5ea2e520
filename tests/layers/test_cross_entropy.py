"""attnx.cross_entropy_loss against torch.nn.functional.cross_entropy."""
import numpy as np
import pytest

import attnx
from numeric_checks import rel_err

TOL = {np.float32: 1e-5, np.float64: 1e-12}


def _torch_ce(torch, logits, labels, sw=None, class_weight=None):
    z = torch.tensor(logits, requires_grad=True)
    c = logits.shape[-1]
    lab = torch.tensor(labels.reshape(-1))
    zz = z.reshape(-1, c)
    if sw is None:
        w = None if class_weight is None else torch.tensor(class_weight, dtype=z.dtype)
        loss = torch.nn.functional.cross_entropy(zz, lab, weight=w)
    else:
        lv = torch.nn.functional.cross_entropy(zz, lab, reduction="none")
        swt = torch.tensor(sw.reshape(-1), dtype=z.dtype)
        loss = (lv * swt).sum() / swt.sum()
    loss.backward()
    return loss.item(), z.grad.numpy()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(5, 3), (4, 6, 7), (1, 2), (2, 3, 4, 5)])
def test_matches_torch(torch, dtype, shape, rng):
    logits = (rng.normal(size=shape) * 3).astype(dtype)
    labels = rng.integers(0, shape[-1], size=shape[:-1])
    loss, d = attnx.cross_entropy_loss(logits, labels)
    tl, td = _torch_ce(torch, logits, labels)
    assert d.dtype == dtype and d.shape == logits.shape
    assert abs(loss - tl) <= TOL[dtype] * max(1, abs(tl))
    assert rel_err(d, td) < TOL[dtype] * 10


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sample_weight_and_class_weight(torch, dtype, rng):
    logits = rng.normal(size=(3, 5, 4)).astype(dtype)
    labels = rng.integers(0, 4, size=(3, 5))
    sw = rng.uniform(0, 2, size=(3, 5))
    sw[0, 3:] = 0   # padding
    loss, d = attnx.cross_entropy_loss(logits, labels, sample_weight=sw)
    tl, td = _torch_ce(torch, logits, labels, sw)
    assert abs(loss - tl) <= TOL[dtype] * max(1, abs(tl))
    assert rel_err(d, td) < TOL[dtype] * 10
    assert np.all(d[0, 3:] == 0)
    # torch's class weights are sample weights w = class_weight[label]
    cw = np.array([0.5, 1.0, 2.0, 3.0])
    loss, d = attnx.cross_entropy_loss(logits, labels, sample_weight=cw[labels])
    tl, td = _torch_ce(torch, logits, labels, class_weight=cw)
    assert abs(loss - tl) <= TOL[dtype] * max(1, abs(tl))
    assert rel_err(d, td) < TOL[dtype] * 10


def test_weight_two_equals_duplicate(rng):
    logits = rng.normal(size=(4, 3))
    labels = np.array([0, 2, 1, 1])
    l1, d1 = attnx.cross_entropy_loss(logits, labels, sample_weight=[2, 1, 1, 1])
    l2, d2 = attnx.cross_entropy_loss(np.vstack([logits, logits[:1]]), np.r_[labels, 0])
    assert abs(l1 - l2) < 1e-14
    np.testing.assert_allclose(d1[1:], d2[1:4], atol=1e-15)
    np.testing.assert_allclose(d1[0], 2 * d2[0], atol=1e-15)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_stable_for_huge_logits(torch, dtype):
    logits = np.array([[1e4, -1e4, 0.0], [3e4, 3e4, 3e4 - 1]], dtype=dtype)
    labels = np.array([1, 2])
    loss, d = attnx.cross_entropy_loss(logits, labels)
    tl, td = _torch_ce(torch, logits, labels)
    assert np.isfinite(loss) and np.isfinite(d).all()
    assert abs(loss - tl) <= 1e-6 * abs(tl)
    np.testing.assert_allclose(d, td, atol=1e-6)


def test_finite_differences(rng):
    logits = rng.normal(size=(3, 4, 5))
    labels = rng.integers(0, 5, size=(3, 4))
    sw = rng.uniform(0, 1, size=(3, 4))
    _, d = attnx.cross_entropy_loss(logits, labels, sample_weight=sw)
    h = 1e-6
    for idx in [(0, 0, 0), (1, 2, 3), (2, 3, 4), (0, 1, 2)]:
        z = logits.copy()
        z[idx] += h
        lp, _ = attnx.cross_entropy_loss(z, labels, sample_weight=sw)
        z[idx] -= 2 * h
        lm, _ = attnx.cross_entropy_loss(z, labels, sample_weight=sw)
        assert abs((lp - lm) / (2 * h) - d[idx]) < 1e-8


def test_out_and_inputs_unchanged(rng):
    logits = rng.normal(size=(4, 3)).astype(np.float32)
    z0 = logits.copy()
    labels = np.array([0, 1, 2, 0])
    out = np.empty_like(logits)
    _, d = attnx.cross_entropy_loss(logits, labels, out=out)
    assert d is out
    np.testing.assert_array_equal(logits, z0)


def test_errors(rng):
    z = rng.normal(size=(4, 3))
    with pytest.raises(ValueError, match="labels must have the leading shape"):
        attnx.cross_entropy_loss(z, np.zeros(3, int))
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        attnx.cross_entropy_loss(z, np.array([0, 1, 3, 0]))
    with pytest.raises(ValueError, match="labels must lie"):
        attnx.cross_entropy_loss(z, np.array([0, -1, 2, 0]))
    with pytest.raises(TypeError, match="labels must be integer"):
        attnx.cross_entropy_loss(z, np.array([0.0, 1.0, 2.0, 0.0]))
    with pytest.raises(TypeError, match="logits"):
        attnx.cross_entropy_loss(z.astype(int), np.zeros(4, int))
    with pytest.raises(ValueError, match="sample_weight sums to 0"):
        attnx.cross_entropy_loss(z, np.zeros(4, int), sample_weight=np.zeros(4))
    with pytest.raises(ValueError, match="sample_weight must be finite and >= 0"):
        attnx.cross_entropy_loss(z, np.zeros(4, int), sample_weight=[1, -1, 1, 1])
    with pytest.raises(ValueError, match="sample_weight must have the shape"):
        attnx.cross_entropy_loss(z, np.zeros(4, int), sample_weight=np.ones(3))
    z[1, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        attnx.cross_entropy_loss(z, np.zeros(4, int))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("eps", [0.1, 0.3])
def test_label_smoothing_matches_torch(torch, dtype, eps, rng):
    logits = (rng.normal(size=(6, 5, 4)) * 2).astype(dtype)
    labels = rng.integers(0, 4, size=(6, 5))
    sw = rng.uniform(0, 2, size=(6, 5))
    loss, d = attnx.cross_entropy_loss(logits, labels, sample_weight=sw, label_smoothing=eps)
    z = torch.tensor(logits, requires_grad=True)
    lv = torch.nn.functional.cross_entropy(z.reshape(-1, 4), torch.tensor(labels.reshape(-1)),
                                           reduction="none", label_smoothing=eps)
    swt = torch.tensor(sw.reshape(-1), dtype=z.dtype)
    tl = (lv * swt).sum() / swt.sum()
    tl.backward()
    assert abs(loss - tl.item()) <= TOL[dtype] * max(1, abs(tl.item()))
    assert rel_err(d, z.grad.numpy()) < TOL[dtype] * 10


def test_label_smoothing_finite_differences_and_errors(rng):
    logits = rng.normal(size=(4, 5))
    labels = rng.integers(0, 5, size=4)
    _, d = attnx.cross_entropy_loss(logits, labels, label_smoothing=0.2)
    h = 1e-6
    for idx in [(0, 0), (1, 3), (3, 4)]:
        z = logits.copy()
        z[idx] += h
        lp, _ = attnx.cross_entropy_loss(z, labels, label_smoothing=0.2)
        z[idx] -= 2 * h
        lm, _ = attnx.cross_entropy_loss(z, labels, label_smoothing=0.2)
        assert abs((lp - lm) / (2 * h) - d[idx]) < 1e-8
    # 0 keeps the plain loss bit for bit
    a = attnx.cross_entropy_loss(logits, labels)
    b = attnx.cross_entropy_loss(logits, labels, label_smoothing=0.0)
    assert a[0] == b[0] and np.array_equal(a[1], b[1])
    for bad in (-0.1, 1.0, "x", True):
        with pytest.raises(ValueError, match="label_smoothing"):
            attnx.cross_entropy_loss(logits, labels, label_smoothing=bad)
