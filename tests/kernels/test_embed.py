"""attnx.kernels._embed and attnx.kernels._revin (time-series layer kernels): every forward and gradient against float64
central finite differences and against PyTorch on identical inputs and weights
(float64 1e-10, float32 1e-4); masked and unmasked, ragged masks with interior holes,
padded steps holding NaN; bad input; thread-count determinism."""
import numpy as np
import pytest

from attnx.kernels import _embed as E
from attnx.kernels import _revin as R
from attnx.kernels import _seq
from numeric_checks import rel_err
from gradcheck import check_grads

TOL = {np.float32: 1e-4, np.float64: 1e-10}
DTYPES = [np.float32, np.float64]
# (patch_len, stride, pad_left, pad_right, pad_mode): PatchTST patches (end replicated
# `stride` times), plain patches, a zero-padded strided window, and overlapping windows
PATCHES = [(4, 2, 0, 2, "replicate"), (3, 3, 0, 0, "zeros"), (5, 2, 2, 1, "zeros"),
           (4, 1, 1, 3, "replicate")]


def _pid(p):
    return f"L{p[0]}-S{p[1]}-pad{p[2]}.{p[3]}-{p[4]}"


def make_km(nb, t, rng, kind):
    """(B, T) uint8 key mask, 1 = padded: None, right-padded ragged lengths (one full
    sequence), or ragged with interior holes (never the last valid step)."""
    if kind == "none":
        return None
    lengths = rng.integers(t // 2 + 1, t, size=nb)
    lengths[0] = t
    km = (np.arange(t)[None, :] >= lengths[:, None]).astype(np.uint8)
    if kind == "holes":
        for b in range(nb):
            km[b, rng.choice(lengths[b] - 1, size=2, replace=False)] = 1
    return km


def valid_len(km, b, t):
    if km is None:
        return t
    ok = np.flatnonzero(km[b] == 0)
    return int(ok[-1]) + 1 if ok.size else 0


def poisoned(x, km):
    """x with NaN on every padded step: a kernel that reads one is caught."""
    x = x.copy()
    if km is not None:
        x[km.astype(bool)] = np.nan
    return x


def n_own(win, tb):
    """The windows of a sequence of tb steps on its own."""
    m = tb + win.pad_left + win.pad_right - win.patch_len
    return m // win.stride + 1 if m >= 0 and tb > 0 else 0


# ---- attnx pipelines built from the kernels (numpy buffers passed in) ---------------
def embed_forward(win, x, km, w, b):
    """A patch / convolution embedding: unfold, then one GEMM over all B*N rows."""
    nb, t, c = x.shape
    n = win.count(t)
    u = np.empty((nb, n, win.patch_len * c), x.dtype)
    win.forward(x, km, u)
    y = np.empty((nb * n, w.shape[1]), x.dtype)
    _seq.linear_forward(u.reshape(nb * n, -1), w, b, y)
    return u, y.reshape(nb, n, -1)


def embed_backward(win, u, km, w, dy, x_shape):
    nb, n, _ = u.shape
    dw, db, du = np.empty_like(w), np.empty(w.shape[1], w.dtype), np.empty_like(u)
    _seq.linear_backward(np.ascontiguousarray(dy).reshape(nb * n, -1), u.reshape(nb * n, -1),
                         w, dw, db, du.reshape(nb * n, -1))
    dx = np.empty(x_shape, w.dtype)
    win.backward(du, km, dx)
    return dx, dw, db


def revin_pipeline(rv, x, km, affine, mix, g_y, g_xn, denorm=True):
    """xn = RevIN(x); yn = mix @ xn over time (a linear forecaster, horizon H);
    y = denorm(yn); loss = sum(y g_y) + sum(xn g_xn). Returns the loss and its
    gradients (dx, daffine) from the kernels' backward."""
    nb, t, c = x.shape
    dt = x.dtype
    xn, st = np.empty_like(x), np.empty((2, nb, c), dt)
    rv.forward(x, km, affine, xn, st)
    loss = float(np.sum(xn * g_xn))
    daff = None if affine is None else np.empty((2, c), dt)
    dxn = g_xn.astype(dt)
    dst = None
    if denorm:
        yn = np.ascontiguousarray(np.einsum("ht,btc->bhc", mix, xn), dtype=dt)
        y = np.empty_like(yn)
        rv.denorm(yn, affine, st, y)
        loss += float(np.sum(y * g_y))
        dyn, dst = np.empty_like(yn), np.empty((2, nb, c), dt)
        rv.denorm_backward(g_y.astype(dt), yn, affine, st, dyn, daff, dst)
        dxn = dxn + np.einsum("ht,bhc->btc", mix, dyn).astype(dt)
    dx = np.empty_like(x)
    rv.backward(np.ascontiguousarray(dxn), x, km, affine, st, dst, dx, daff,
                accumulate=denorm)
    return dict(loss=loss, xn=xn, stats=st, y=y if denorm else None, dx=dx, daffine=daff)


# ---- sliding windows: reference by loops, geometry, mask ----------------------------
def unfold_loops(win, x, km):
    """The documented unfold, element by element."""
    nb, t, c = x.shape
    n, lw = win.count(t), win.patch_len
    u = np.zeros((nb, n, lw * c))
    for b in range(nb):
        tb = valid_len(km, b, t)
        for w in range(n):
            for l in range(lw):
                i = w * win.stride + l - win.pad_left
                if not 0 <= i < tb:
                    if win.pad_mode == "zeros" or tb == 0:
                        continue
                    i = 0 if i < 0 else tb - 1
                if km is None or not km[b, i]:
                    u[b, w, l * c:(l + 1) * c] = x[b, i]
    return u


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["none", "ragged", "holes"])
@pytest.mark.parametrize("p", PATCHES, ids=_pid)
def test_unfold_matches_the_definition(p, kind, dtype, rng):
    win = E.Windows(*p)
    km = make_km(3, 11, rng, kind)
    x = rng.normal(size=(3, 11, 2)).astype(dtype)
    n = win.count(11)
    assert n == (11 + p[2] + p[3] - p[0]) // p[1] + 1
    u = np.full((3, n, p[0] * 2), 7.0, dtype)   # garbage first: every entry must be written
    win.forward(poisoned(x, km), km, u)
    np.testing.assert_array_equal(u, unfold_loops(win, x, km).astype(dtype))


def mask_loops(win, km):
    """The documented window mask."""
    nb, t = km.shape
    out = np.zeros((nb, win.count(t)), np.uint8)
    for b in range(nb):
        tb = valid_len(km, b, t)
        for w in range(out.shape[1]):
            steps = [w * win.stride + l - win.pad_left for l in range(win.patch_len)]
            real = [i for i in steps if 0 <= i < tb]
            valid = any(not km[b, i] for i in real)
            out[b, w] = 0 if w < n_own(win, tb) and (valid or not real) else 1
    return out


@pytest.mark.parametrize("kind", ["ragged", "holes"])
@pytest.mark.parametrize("p", PATCHES + [(2, 4, 0, 0, "zeros"), (3, 4, 0, 4, "zeros")],
                         ids=_pid)
def test_window_mask(p, kind, rng):
    win = E.Windows(*p)
    km = make_km(5, 13, rng, kind)
    km[1] = 1                              # a sequence with no valid step
    out = np.full((5, win.count(13)), 9, np.uint8)
    win.mask(km, out)
    np.testing.assert_array_equal(out, mask_loops(win, km))
    assert out[1].all()
    if kind == "ragged":                   # right padding only: padded = past its own windows
        for b in range(5):
            nb_own = n_own(win, valid_len(km, b, 13))
            assert not out[b, :nb_own].any() and out[b, nb_own:].all()
    out[...] = 9
    win.mask(None, out)
    assert not out.any()


def test_conv_same_padding_keeps_the_length():
    for k in range(1, 8):
        left, right = E.same_padding(k)
        assert left + right == k - 1 and left == (k - 1) // 2
        assert E.Windows(k, 1, left, right).count(9) == 9


# ---- PyTorch twins ------------------------------------------------------------------
def torch_patches(torch, xb, win):
    """Sequence xb (tb, C) -> its windows (N_b, L*C) with torch's padding modules and
    Tensor.unfold (PatchTST's construction: (C, T) series, windows along time)."""
    z = xb.T[None]                                             # (1, C, tb)
    pads = (win.pad_left, win.pad_right)
    if win.pad_mode == "replicate":
        z = torch.nn.ReplicationPad1d(pads)(z)
    else:
        z = torch.nn.ConstantPad1d(pads, 0.0)(z)
    z = z.unfold(-1, win.patch_len, win.stride)                # (1, C, N_b, L)
    return z[0].permute(1, 2, 0).reshape(z.shape[2], -1)      # (N_b, L*C)


def torch_clean(torch, x, km):
    """A leaf tensor of x and its copy with padded steps read as zero (torch.where:
    no gradient reaches them, NaN included)."""
    xt = torch.from_numpy(x.copy()).requires_grad_()
    if km is None:
        return xt, xt
    keep = torch.from_numpy(km == 0)[..., None]
    return xt, torch.where(keep, xt, torch.zeros((), dtype=xt.dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["none", "ragged", "holes"])
@pytest.mark.parametrize("p", PATCHES, ids=_pid)
def test_patch_embedding_vs_torch(torch, p, kind, dtype, rng):
    """Patches + nn.Linear, each sequence on its own in torch: outputs on the sequence's
    own windows, dx, dW, db."""
    nb, t, c, d = 4, 12, 3, 5
    win = E.Windows(*p)
    km = make_km(nb, t, rng, kind)
    x = rng.normal(size=(nb, t, c)).astype(dtype)
    w = (rng.normal(size=(p[0] * c, d)) * 0.3).astype(dtype)
    b = rng.normal(size=d).astype(dtype)
    g = rng.normal(size=(nb, win.count(t), d)).astype(dtype)
    lin = torch.nn.Linear(p[0] * c, d).to(torch.float64 if dtype == np.float64 else torch.float32)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(w.T.copy()))
        lin.bias.copy_(torch.from_numpy(b))
    xt, xc = torch_clean(torch, x, km)
    loss = 0
    own = []
    for bi in range(nb):
        tb = valid_len(km, bi, t)
        yb = lin(torch_patches(torch, xc[bi, :tb], win))
        own.append(yb.detach().numpy())
        loss = loss + (yb * torch.from_numpy(g[bi, :yb.shape[0]])).sum()
        g[bi, yb.shape[0]:] = 0        # the model masks the windows past the sequence
    loss.backward()

    u, y = embed_forward(win, poisoned(x, km), km, w, b)
    for bi in range(nb):
        assert rel_err(y[bi, :len(own[bi])], own[bi]) < TOL[dtype]
    dx, dw, db = embed_backward(win, u, km, w, g, x.shape)
    assert rel_err(dx, xt.grad.numpy()) < TOL[dtype]
    assert rel_err(dw, lin.weight.grad.numpy().T) < TOL[dtype]
    assert rel_err(db, lin.bias.grad.numpy()) < TOL[dtype]
    if km is not None:
        assert not dx[km.astype(bool)].any()


# torch warns that 'same' with an even kernel pads a copy of the input: expected here
@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["none", "ragged", "holes"])
@pytest.mark.parametrize("k", [1, 3, 4, 7])
def test_conv_stem_vs_torch_conv1d(torch, k, kind, dtype, rng):
    """Windows(k, 1, same padding) + GEMM = nn.Conv1d(C, D, k, padding='same') on each
    sequence's own steps (padded steps zero): outputs, dx, dW, db."""
    nb, t, c, d = 3, 10, 2, 6
    left, right = E.same_padding(k)
    win = E.Windows(k, 1, left, right)
    km = make_km(nb, t, rng, kind)
    x = rng.normal(size=(nb, t, c)).astype(dtype)
    tdt = torch.float64 if dtype == np.float64 else torch.float32
    conv = torch.nn.Conv1d(c, d, k, padding="same").to(tdt)
    # W[l*C + c, o] = weight[o, c, l]
    w = np.ascontiguousarray(conv.weight.detach().numpy().transpose(2, 1, 0).reshape(k * c, d))
    b = conv.bias.detach().numpy().copy()
    g = rng.normal(size=(nb, t, d)).astype(dtype)
    xt, xc = torch_clean(torch, x, km)
    loss = 0
    own = []
    for bi in range(nb):
        tb = valid_len(km, bi, t)
        yb = conv(xc[bi, :tb].T[None])[0].T                    # (tb, D)
        own.append(yb.detach().numpy())
        loss = loss + (yb * torch.from_numpy(g[bi, :tb])).sum()
        g[bi, tb:] = 0
    loss.backward()

    u, y = embed_forward(win, poisoned(x, km), km, w, b)
    assert y.shape == (nb, t, d)
    for bi in range(nb):
        assert rel_err(y[bi, :len(own[bi])], own[bi]) < TOL[dtype]
    dx, dw, db = embed_backward(win, u, km, w, g, x.shape)
    assert rel_err(dx, xt.grad.numpy()) < TOL[dtype]
    tw = conv.weight.grad.numpy().transpose(2, 1, 0).reshape(k * c, d)
    assert rel_err(dw, tw) < TOL[dtype]
    assert rel_err(db, conv.bias.grad.numpy()) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["none", "ragged", "holes"])
def test_max_pool_vs_torch(torch, kind, dtype, rng):
    nb, t, d = 4, 9, 6
    km = make_km(nb, t, rng, kind)
    h = rng.normal(size=(nb, t, d)).astype(dtype)
    g = rng.normal(size=(nb, d)).astype(dtype)
    ht = torch.from_numpy(h.copy()).requires_grad_()
    hm = ht if km is None else ht.masked_fill(torch.from_numpy(km.astype(bool))[..., None],
                                              float("-inf"))
    tv, ti = hm.max(dim=1)
    (tv * torch.from_numpy(g)).sum().backward()
    pooled, idx = np.empty((nb, d), dtype), np.empty((nb, d), np.int64)
    E.max_pool_forward(poisoned(h, km), km, pooled, idx)
    assert rel_err(pooled, tv.detach().numpy()) < TOL[dtype]
    np.testing.assert_array_equal(idx, ti.numpy())
    dh = np.full_like(h, 5.0)
    E.max_pool_backward(g, idx, dh)
    assert rel_err(dh, ht.grad.numpy()) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_class_token_vs_torch(torch, dtype, rng):
    nb, t, d = 3, 5, 4
    h = rng.normal(size=(nb, t, d)).astype(dtype)
    cls = rng.normal(size=d).astype(dtype)
    g = rng.normal(size=(nb, t + 1, d)).astype(dtype)
    ht = torch.from_numpy(h.copy()).requires_grad_()
    ct = torch.from_numpy(cls.copy()).requires_grad_()
    out_t = torch.cat([ct.expand(nb, 1, d), ht], dim=1)
    (out_t * torch.from_numpy(g)).sum().backward()
    out = np.empty((nb, t + 1, d), dtype)
    km = make_km(nb, t, rng, "ragged")
    out_km = np.full((nb, t + 1), 3, np.uint8)
    E.cls_forward(h, cls, out, km, out_km)
    np.testing.assert_array_equal(out, out_t.detach().numpy())
    assert not out_km[:, 0].any()
    np.testing.assert_array_equal(out_km[:, 1:], km)
    dh, dcls = np.empty_like(h), np.full(d, 9.0, dtype)
    E.cls_backward(g, dh, dcls)
    np.testing.assert_array_equal(dh, ht.grad.numpy())
    assert rel_err(dcls, ct.grad.numpy()) < TOL[dtype]
    E.cls_backward(g, dh, dcls, accumulate=True)
    assert rel_err(dcls, 2 * ct.grad.numpy()) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_class_token_pooling_vs_torch(torch, dtype, rng):
    """pooled = the token's row of the blocks' output (B, T+1, D); backward puts dpooled
    on that row and zeros elsewhere (outputs prefilled with garbage)."""
    nb, t, d = 3, 5, 4
    h = rng.normal(size=(nb, t + 1, d)).astype(dtype)
    g = rng.normal(size=(nb, d)).astype(dtype)
    ht = torch.from_numpy(h.copy()).requires_grad_()
    (ht[:, 0] * torch.from_numpy(g)).sum().backward()
    pooled, dh = np.full((nb, d), 7.0, dtype), np.full_like(h, 7.0)
    E.cls_pool_forward(h, pooled)
    np.testing.assert_array_equal(pooled, ht[:, 0].detach().numpy())
    E.cls_pool_backward(g, dh)
    np.testing.assert_array_equal(dh, ht.grad.numpy())


def revin_torch(torch, x, km, affine, mix, g_y, g_xn, eps, denorm=True):
    """RevIN written in torch: statistics over the valid steps (population variance),
    affine per channel, de-normalisation (yn - beta) / (gamma + eps^2) * std + mean."""
    xt, xc = torch_clean(torch, x, km)
    nb, t, c = x.shape
    valid = torch.ones((nb, t, 1), dtype=xt.dtype) if km is None else \
        torch.from_numpy((km == 0).astype(x.dtype))[..., None]
    n = valid.sum(1, keepdim=True)
    mean = (xc * valid).sum(1, keepdim=True) / n
    std = torch.sqrt((((xc - mean) ** 2) * valid).sum(1, keepdim=True) / n + eps)
    xn = (xc - mean) / std
    at = None
    if affine is not None:
        at = torch.from_numpy(affine.copy()).requires_grad_()
        xn = xn * at[0] + at[1]
    xn = xn * valid
    loss = (xn * torch.from_numpy(g_xn)).sum()
    y = None
    if denorm:
        yn = torch.einsum("ht,btc->bhc", torch.from_numpy(mix), xn)
        if at is not None:
            yn = (yn - at[1]) / (at[0] + eps * eps)
        y = yn * std + mean
        loss = loss + (y * torch.from_numpy(g_y)).sum()
    loss.backward()
    return dict(loss=loss.item(), xn=xn.detach().numpy(),
                stats=np.stack([mean[:, 0].detach().numpy(), std[:, 0].detach().numpy()]),
                y=None if y is None else y.detach().numpy(), dx=xt.grad.numpy(),
                daffine=None if at is None else at.grad.numpy())


def revin_case(dtype, kind, affine, rng, nb=4, t=10, c=3, h=4):
    km = make_km(nb, t, rng, kind)
    x = (rng.normal(size=(nb, t, c)) * 2 + 3).astype(dtype)
    aff = None
    if affine:
        aff = np.stack([1 + 0.3 * rng.normal(size=c), 0.5 * rng.normal(size=c)]).astype(dtype)
    mix = (rng.normal(size=(h, t)) * 0.4).astype(dtype)
    g_y = rng.normal(size=(nb, h, c)).astype(dtype)
    g_xn = rng.normal(size=(nb, t, c)).astype(dtype)
    return x, km, aff, mix, g_y, g_xn


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("denorm", [True, False], ids=["denorm", "norm-only"])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
@pytest.mark.parametrize("kind", ["none", "ragged", "holes"])
def test_revin_vs_torch(torch, kind, affine, denorm, dtype, rng):
    x, km, aff, mix, g_y, g_xn = revin_case(dtype, kind, affine, rng)
    rv = R.RevIN()
    assert rv.eps == 1e-5 and rv.eps2 == 1e-5 ** 2
    ref = revin_torch(torch, x, km, aff, mix, g_y, g_xn, rv.eps, denorm)
    got = revin_pipeline(rv, poisoned(x, km), km, aff, mix, g_y, g_xn, denorm)
    for k in ("xn", "stats", "y", "dx", "daffine"):
        if ref[k] is None:
            assert got[k] is None, k
            continue
        assert np.all(np.isfinite(got[k])), k
        assert rel_err(got[k], ref[k]) < TOL[dtype], k
    if dtype == np.float64:   # float32 sums cancel: xn and y are compared above instead
        assert got["loss"] == pytest.approx(ref["loss"], rel=TOL[dtype])


# ---- float64 finite differences -----------------------------------------------------
@pytest.mark.parametrize("kind", ["none", "ragged", "holes"])
@pytest.mark.parametrize("p", PATCHES + [(3, 1, 1, 1, "zeros")], ids=_pid)
def test_embedding_finite_differences(p, kind, rng):
    """dx, dW, db of unfold + GEMM; padded steps hold values the kernel must ignore
    (their finite difference is zero)."""
    win = E.Windows(*p)
    km = make_km(3, 11, rng, kind)
    x = rng.normal(size=(3, 11, 2))
    w = rng.normal(size=(p[0] * 2, 4))
    b = rng.normal(size=4)
    g = rng.normal(size=(3, win.count(11), 4))
    u, _ = embed_forward(win, x, km, w, b)
    dx, dw, db = embed_backward(win, u, km, w, g, x.shape)

    def loss():
        return float(np.sum(embed_forward(win, x, km, w, b)[1] * g))
    # the loss is linear in each array: a large step has no truncation error
    assert check_grads(loss, dict(x=x, w=w, b=b), dict(x=dx, w=dw, b=db), rng,
                       n_probe=30, h=1e-3, tol=1e-10) < 1e-10


@pytest.mark.parametrize("kind", ["none", "ragged", "holes"])
def test_max_pool_finite_differences(kind, rng):
    km = make_km(4, 8, rng, kind)
    h = rng.normal(size=(4, 8, 5))
    g = rng.normal(size=(4, 5))
    pooled, idx, dh = np.empty((4, 5)), np.empty((4, 5), np.int64), np.empty_like(h)
    E.max_pool_forward(h, km, pooled, idx)
    E.max_pool_backward(g, idx, dh)

    def loss():
        E.max_pool_forward(h, km, pooled, idx)
        return float(np.sum(pooled * g))
    # the step stays below the gap between the two largest valid values of any column
    assert check_grads(loss, dict(h=h), dict(h=dh), rng, n_probe=60, h=1e-7, tol=1e-8) < 1e-8


def test_class_token_finite_differences(rng):
    """Prepend, a nonlinear per-row stand-in for the blocks (sin), then the token's row
    and every row both in the loss."""
    h, cls = rng.normal(size=(3, 4, 5)), rng.normal(size=5)
    g, gp = rng.normal(size=(3, 5, 5)), rng.normal(size=(3, 5))
    out, pooled = np.empty((3, 5, 5)), np.empty((3, 5))

    def loss():
        E.cls_forward(h, cls, out)
        z = np.sin(out)
        E.cls_pool_forward(z, pooled)
        return float(np.sum(z * g) + np.sum(pooled * gp))
    loss()
    dz = np.empty_like(out)
    E.cls_pool_backward(gp, dz)
    dout = (dz + g) * np.cos(out)
    dh, dcls = np.empty_like(h), np.empty(5)
    E.cls_backward(dout, dh, dcls)
    assert check_grads(loss, dict(h=h, cls=cls), dict(h=dh, cls=dcls), rng,
                       h=1e-5, tol=1e-8) < 1e-8


@pytest.mark.parametrize("denorm", [True, False], ids=["denorm", "norm-only"])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
@pytest.mark.parametrize("kind", ["none", "ragged", "holes"])
def test_revin_finite_differences(kind, affine, denorm, rng):
    """dL/dx through xhat, the mean and the std (both used again by the
    de-normalisation), and dgamma, dbeta summed over the two places they enter."""
    x, km, aff, mix, g_y, g_xn = revin_case(np.float64, kind, affine, rng)
    rv = R.RevIN()
    got = revin_pipeline(rv, x, km, aff, mix, g_y, g_xn, denorm)
    arrays, grads = dict(x=x), dict(x=got["dx"])
    if affine:
        arrays["affine"], grads["affine"] = aff, got["daffine"]

    def loss():
        return revin_pipeline(rv, x, km, aff, mix, g_y, g_xn, denorm)["loss"]
    assert check_grads(loss, arrays, grads, rng, n_probe=40, h=1e-5, tol=1e-8) < 1e-8
    if km is not None:
        assert not got["dx"][km.astype(bool)].any()


# ---- contract: determinism, untouched inputs, degenerate sequences ------------------
def test_thread_count_does_not_change_results(rng):
    nb, t, c = 5, 12, 3
    km = make_km(nb, t, rng, "holes")
    x = rng.normal(size=(nb, t, c))
    runs = []
    for nth in (1, 2, 3):
        win = E.Windows(4, 2, 0, 2, "replicate")
        u = np.empty((nb, win.count(t), 4 * c))
        win.forward(x, km, u, nth)
        dx = np.empty_like(x)
        win.backward(u, km, dx, nth)
        pooled, idx, dh = np.empty((nb, c)), np.empty((nb, c), np.int64), np.empty_like(x)
        E.max_pool_forward(x, km, pooled, idx, nth)
        E.max_pool_backward(pooled, idx, dh, nth)
        out, dcls = np.empty((nb, t + 1, c)), np.empty(c)
        E.cls_forward(x, x[0, 0].copy(), out, nthreads=nth)
        E.cls_backward(out, dh.copy(), dcls, nthreads=nth)
        first, dfirst = np.empty((nb, c)), np.empty_like(out)
        E.cls_pool_forward(out, first, nth)
        E.cls_pool_backward(first, dfirst, nth)
        mix = rng.normal(size=(3, t)) if nth == 1 else runs[0][-1]
        aff = np.stack([np.linspace(0.5, 1.5, c), np.linspace(-1, 1, c)])
        rv = R.RevIN()
        xn, st = np.empty_like(x), np.empty((2, nb, c))
        rv.forward(x, km, aff, xn, st, nth)
        yn = np.ascontiguousarray(np.einsum("ht,btc->bhc", mix, xn))
        y, dyn, dst, daff = np.empty_like(yn), np.empty_like(yn), np.empty_like(st), \
            np.empty_like(aff)
        rv.denorm(yn, aff, st, y, nth)
        rv.denorm_backward(y, yn, aff, st, dyn, daff, dst, nthreads=nth)
        dxr = np.empty_like(x)
        rv.backward(xn, x, km, aff, st, dst, dxr, daff, True, nth)
        runs.append([u, dx, pooled, idx, dh, out, dcls, first, dfirst, xn, st, y, dyn, dst, daff, dxr, mix])
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            np.testing.assert_array_equal(a, b)


def test_inputs_are_not_modified(rng):
    km = make_km(3, 8, rng, "holes")
    x = poisoned(rng.normal(size=(3, 8, 2)), km)
    aff = np.stack([np.ones(2), np.zeros(2)])
    keep = [x.copy(), km.copy(), aff.copy()]
    win = E.Windows(3, 2, 1, 1, "replicate")
    u = np.empty((3, win.count(8), 6))
    win.forward(x, km, u)
    win.backward(u, km, np.empty_like(x))
    win.mask(km, np.empty((3, win.count(8)), np.uint8))
    E.max_pool_forward(x, km, np.empty((3, 2)), np.empty((3, 2), np.int64))
    rv = R.RevIN()
    xn, st = np.empty_like(x), np.empty((2, 3, 2))
    rv.forward(x, km, aff, xn, st)
    rv.backward(xn, x, km, aff, st, None, np.empty_like(x), np.empty_like(aff))
    for a, b in zip(keep, [x, km, aff]):
        np.testing.assert_array_equal(a, b)


def test_read_only_inputs_are_accepted(rng):
    x = rng.normal(size=(2, 6, 3))
    x.flags.writeable = False
    win = E.Windows(2, 2)
    u = np.empty((2, 3, 6))
    win.forward(x, None, u)
    np.testing.assert_array_equal(u, x.reshape(2, 3, 6))


def test_fully_padded_sequence(rng):
    """A sequence with no valid step: zero windows, zero pooling (index -1), mean 0 and
    std sqrt(eps) in RevIN, zero gradients; the other sequences are unaffected."""
    km = np.zeros((2, 6), np.uint8)
    km[1] = 1
    x = poisoned(rng.normal(size=(2, 6, 2)), km)
    win = E.Windows(3, 1, 1, 1, "replicate")
    u = np.empty((2, 6, 6))
    win.forward(x, km, u)
    assert not u[1].any() and np.isfinite(u).all()
    pooled, idx = np.empty((2, 2)), np.empty((2, 2), np.int64)
    E.max_pool_forward(x, km, pooled, idx)
    assert not pooled[1].any() and (idx[1] == -1).all()
    np.testing.assert_array_equal(pooled[0], x[0].max(axis=0))
    dh = np.empty_like(x)
    E.max_pool_backward(np.ones((2, 2)), idx, dh)
    assert not dh[1].any()
    rv = R.RevIN()
    xn, st = np.empty_like(x), np.empty((2, 2, 2))
    rv.forward(x, km, None, xn, st)
    assert np.isfinite(xn).all() and not xn[1].any()
    np.testing.assert_array_equal(st[:, 1], [[0, 0], [1e-5 ** 0.5] * 2])
    dx = np.empty_like(x)
    rv.backward(np.ones_like(x), x, km, None, st, np.ones((2, 2, 2)), dx, None)
    assert np.isfinite(dx).all() and not dx[1].any()


# ---- bad input ----------------------------------------------------------------------
def _bad_cases():
    x = np.zeros((2, 6, 3))
    km = np.zeros((2, 6), np.uint8)
    win = E.Windows(2, 2)
    u = np.zeros((2, 3, 6))
    h, pooled, idx = np.zeros((2, 6, 4)), np.zeros((2, 4)), np.zeros((2, 4), np.int64)
    aff, st = np.zeros((2, 3)), np.zeros((2, 2, 3))
    rv = R.RevIN()
    ro = np.zeros((2, 3, 6))
    ro.flags.writeable = False
    shared = np.zeros(2 * 6 * 3)
    return [
        (lambda: E.Windows(0), ValueError, "patch_len must be >= 1"),
        (lambda: E.Windows(2.0), TypeError, "patch_len must be an integer"),
        (lambda: E.Windows(2, 0), ValueError, "stride must be >= 1"),
        (lambda: E.Windows(2, True), TypeError, "stride must be an integer"),
        (lambda: E.Windows(2, 1, -1), ValueError, "pad_left must be >= 0"),
        (lambda: E.Windows(2, 1, 0, -2), ValueError, "pad_right must be >= 0"),
        (lambda: E.Windows(2, pad_mode="reflect"), ValueError, "pad_mode must be one of"),
        (lambda: E.Windows(8).count(6), ValueError, "patch_len 8 is longer than the sequence"),
        (lambda: E.Windows(8, 1, 4, 3).forward(x, None, u), ValueError, "patch_len 8"),
        (lambda: E.Windows(2).count(0), ValueError, "t must be >= 1"),
        (lambda: E.same_padding(0), ValueError, "kernel_size must be >= 1"),
        (lambda: win.forward(x.tolist(), None, u), TypeError, "x must be a numpy array"),
        (lambda: win.forward(x.astype(np.float16), None, u), ValueError,
         "x must be float32 or float64, got float16"),
        (lambda: win.forward(x, None, u.astype(np.float32)), ValueError,
         "u must have dtype float64, got float32"),
        (lambda: win.forward(x, None, np.zeros((2, 2, 6))), ValueError,
         r"u must have shape \(2, 3, 6\), got \(2, 2, 6\)"),
        (lambda: win.forward(np.zeros((2, 3, 6)).transpose(0, 2, 1), None, u), ValueError,
         "x must be C-contiguous"),
        (lambda: win.forward(x, km.astype(bool), u), ValueError,
         "key mask must have dtype uint8, got bool"),
        (lambda: win.forward(x, km[:, :5], u), ValueError, "key mask must have shape"),
        (lambda: win.forward(x, None, ro), ValueError, "u is an output and must be writeable"),
        (lambda: win.forward(shared.reshape(2, 6, 3), None, shared.reshape(2, 3, 6)),
         ValueError, "output u overlaps input x"),
        (lambda: win.forward(x, None, u, 0), ValueError, "nthreads must be >= 1, got 0"),
        (lambda: win.backward(u[:, :2].copy(), None, x.copy()), ValueError,
         "du must have shape"),
        (lambda: win.backward(u, None, np.zeros((2, 3, 6)).transpose(0, 2, 1)), ValueError,
         "dx must be C-contiguous"),
        (lambda: win.mask(km, np.zeros((2, 4), np.uint8)), ValueError,
         r"out must have shape \(2, 3\)"),
        (lambda: E.max_pool_forward(h, None, pooled, idx.astype(np.int32)), ValueError,
         "idx must have dtype int64"),
        (lambda: E.max_pool_forward(h, None, pooled[:1].copy(), idx), ValueError,
         "pooled must have shape"),
        (lambda: E.max_pool_backward(pooled, idx + 6, h.copy()), ValueError,
         r"idx must lie in \[-1, 6\)"),
        (lambda: E.cls_forward(h, np.zeros(3), np.zeros((2, 7, 4))), ValueError,
         r"cls must have shape \(4\)"),
        (lambda: E.cls_forward(h, np.zeros(4), np.zeros((2, 6, 4))), ValueError,
         r"out must have shape \(2, 7, 4\)"),
        (lambda: E.cls_forward(h, np.zeros(4), np.zeros((2, 7, 4)), km), ValueError,
         "km and out_km go together"),
        (lambda: E.cls_backward(np.zeros((2, 1, 4)), np.zeros((2, 0, 4)), np.zeros(4)),
         ValueError, "at least one step"),
        (lambda: E.cls_pool_forward(h, np.zeros((2, 5))), ValueError,
         r"pooled must have shape \(2, 4\)"),
        (lambda: E.cls_pool_backward(np.zeros((3, 4)), h.copy()), ValueError,
         r"dpooled must have shape \(2, 4\)"),
        (lambda: R.RevIN(eps=0), ValueError, "eps must be > 0"),
        (lambda: R.RevIN(eps2=-1.0), ValueError, "eps2 must be >= 0"),
        (lambda: rv.forward(x, None, np.zeros((3, 2)), x.copy(), st), ValueError,
         r"affine must have shape \(2, 3\)"),
        (lambda: rv.forward(x, None, aff, x.copy(), np.zeros((2, 3, 2))), ValueError,
         r"stats must have shape \(2, 2, 3\)"),
        (lambda: rv.forward(x, None, aff, x, st), ValueError, "output xn overlaps input x"),
        (lambda: rv.backward(x, x, None, aff, st, None, x.copy(), None), ValueError,
         "affine and daffine go together"),
        (lambda: rv.backward(x, x, None, None, st.astype(np.float32), None, x.copy(), None),
         ValueError, "stats must have dtype float64"),
        (lambda: rv.denorm(np.zeros((2, 4, 3)), aff, st, np.zeros((2, 4, 2))), ValueError,
         r"y must have shape \(2, 4, 3\)"),
        (lambda: rv.denorm_backward(np.zeros((2, 4, 3)), np.zeros((2, 4, 3)), aff, st,
                                    np.zeros((2, 4, 3)), np.zeros((2, 3)), None),
         TypeError, "dstats must be a numpy array, got None"),
    ]


@pytest.mark.parametrize("case", range(len(_bad_cases())))
def test_bad_input_names_the_argument(case):
    call, exc, msg = _bad_cases()[case]
    with pytest.raises(exc, match=msg):
        call()
