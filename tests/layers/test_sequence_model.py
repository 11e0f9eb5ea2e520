"""attnx.SequenceModel: PyTorch twin on identical weights, finite differences, contract."""
import itertools

import numpy as np
import pytest

import attnx
from attnx import SequenceModel
from numeric_checks import rel_err
from gradcheck import check_grads

TOL = {np.float32: 1e-4, np.float64: 1e-10}
POOLING = [None, "mean", "last"]
POSITIONAL = ["none", "sinusoidal", "learned", "rope"]
NORM = [None, "pre"]
GRID = list(itertools.product(POOLING, POSITIONAL, NORM, [False, True], [False, True]))


def _id(c):
    pool, pos, norm, causal, mask = c
    return f"{pool or 'all'}-{pos}-{norm or 'post'}{'-causal' if causal else ''}" \
           f"{'-mask' if mask else ''}"


def ragged_mask(nb, t, rng, full_row=False):
    """Right-padded (B, T) mask, True = padding: lengths T, T-2, ..., at least 1
    (or 0 for the last sequence when full_row)."""
    lengths = [max(t - 2 * b, 1) for b in range(nb)]
    rng.shuffle(lengths)
    if full_row:
        lengths[-1] = 0
    return np.arange(t)[None, :] >= np.array(lengths)[:, None]


def make(dtype, pool, pos, norm, causal, n_layers=2, seed=0, rng=None, **kw):
    m = SequenceModel(3, 8, 2, n_layers, 4, d_hidden=12, pooling=pool, positional=pos,
                      norm=norm, causal=causal, max_len=9, dtype=dtype, random_state=seed, **kw)
    if rng is not None:  # non-trivial biases and LayerNorm affine parameters
        for n, v in m.params.items():
            if n.endswith((".b", "bq", "bk", "bv", "bo", "b1", "b2")) or n.endswith(".g"):
                v[...] = v + rng.normal(size=v.shape) * 0.3
    return m


def check_grads_vs(m, tg, tol):
    """Every parameter gradient against the twin's; arrays that are zero in exact
    arithmetic (bk under softmax) are judged on the scale of the other gradients."""
    overall = max(np.max(np.abs(v)) for v in tg.values())
    for n in m.params:
        err = rel_err(m.grads[n], tg[n], floor=1e-3 * overall)
        assert err < tol, f"{n}: relative error {err:.3g}"


def fd_check(m, x, kpm, g, rng, n_probe, names=None):
    """Finite differences of sum(Y * g) for the parameters `names` (all by default)
    and x, against the model's backward (float64)."""
    m.forward(x, kpm)
    dx = m.backward(g)
    names = list(m.params) if names is None else names
    analytic = {n: m.grads[n].copy() for n in names}
    analytic["x"] = dx.copy()
    arrays = {n: m.params[n] for n in names}
    arrays["x"] = x
    check_grads(lambda: float(np.sum(m.forward(x, kpm, grad=False) * g)), arrays, analytic,
                rng, n_probe=n_probe, tol=1e-6)


def twin_of(torch, m):
    from attnx.testing.torch_twin import SeqTwin
    return SeqTwin(m)


# ---- PyTorch oracle -----------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", GRID, ids=_id)
def test_matches_torch_twin(torch, dtype, case, rng):
    pool, pos, norm, causal, use_mask = case
    m = make(dtype, pool, pos, norm, causal, rng=rng)
    nb, t = 3, 7
    x = rng.normal(size=(nb, t, 3)).astype(dtype)
    kpm = ragged_mask(nb, t, rng) if use_mask else None
    y = m.forward(x, kpm)
    g = rng.normal(size=y.shape).astype(dtype)
    dx = m.backward(g)

    tw = twin_of(torch, m)
    xt = torch.tensor(x, requires_grad=True)
    yt = tw(xt, kpm)
    (yt * torch.tensor(g)).sum().backward()
    tol = TOL[dtype]
    assert y.shape == tuple(yt.shape)
    assert rel_err(y, yt.detach().numpy()) < tol
    assert rel_err(dx, xt.grad.numpy()) < tol, "dX"
    check_grads_vs(m, tw.grads(), tol)
    if kpm is not None:
        assert np.all(dx[kpm] == 0), "padded positions get zero dX"
        if pool is None:
            assert np.all(y[kpm] == 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("path", ["dense", "blocked", "fused"])
@pytest.mark.parametrize("case", [("mean", "rope", "pre", True, True),
                                  (None, "learned", None, False, True),
                                  ("last", "sinusoidal", "pre", True, False)], ids=_id)
def test_every_attention_path_matches_torch_twin(torch, dtype, path, case, rng):
    """The blocks run on each of the attention layer's kernels ("auto" picks one
    by shape; the grid above covers what it picks for these small heads)."""
    pool, pos, norm, causal, use_mask = case
    m = make(dtype, pool, pos, norm, causal, rng=rng)
    for att in m.attn:
        att.attention = path
    assert m.attn[0]._path(7, 7) == path
    x = rng.normal(size=(3, 7, 3)).astype(dtype)
    kpm = ragged_mask(3, 7, rng, full_row=True) if use_mask else None
    y = m.forward(x, kpm)
    g = rng.normal(size=y.shape).astype(dtype)
    dx = m.backward(g)
    tw = twin_of(torch, m)
    xt = torch.tensor(x, requires_grad=True)
    yt = tw(xt, kpm)
    (yt * torch.tensor(g)).sum().backward()
    assert rel_err(y, yt.detach().numpy()) < TOL[dtype]
    assert rel_err(dx, xt.grad.numpy()) < TOL[dtype]
    check_grads_vs(m, tw.grads(), TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("pool", POOLING)
def test_fully_padded_sequence_is_finite(torch, dtype, pool, rng):
    m = make(dtype, pool, "learned", "pre", True, rng=rng)
    x = rng.normal(size=(3, 6, 3)).astype(dtype)
    kpm = ragged_mask(3, 6, rng, full_row=True)
    y = m.forward(x, kpm)
    dx = m.backward(np.ones_like(y))
    assert np.isfinite(y).all() and np.isfinite(dx).all()
    assert np.isfinite(m.grads.flat).all()
    if pool is not None:  # an empty sequence pools to zeros: Y = head.b
        np.testing.assert_array_equal(y[-1], m.params["head.b"])
    tw = twin_of(torch, m)
    xt = torch.tensor(x, requires_grad=True)
    yt = tw(xt, kpm)
    yt.sum().backward()
    assert rel_err(y, yt.detach().numpy()) < TOL[dtype]
    assert rel_err(dx, xt.grad.numpy()) < TOL[dtype]
    check_grads_vs(m, tw.grads(), TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("pool", [None, "mean"])
def test_three_adamw_steps_cross_entropy_match_torch(torch, dtype, pool, rng):
    """Classification with class and sample weights: three AdamW steps in both."""
    F = torch.nn.functional
    m = make(dtype, pool, "sinusoidal", "pre", False)
    nb, t, c = 4, 6, 4
    x = rng.normal(size=(nb, t, 3)).astype(dtype)
    kpm = ragged_mask(nb, t, rng)
    lead = (nb,) if pool else (nb, t)
    labels = rng.integers(0, c, size=lead)
    class_w = np.array([1.0, 2.0, 0.5, 1.5])
    sw = class_w[labels] * rng.uniform(0.5, 2, size=lead)
    if pool is None:
        sw = sw * ~kpm   # padding: weight 0
    tw = twin_of(torch, m)
    kw = dict(lr=0.01, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.05)
    opt = attnx.AdamW(m.params, **kw)
    topt = torch.optim.AdamW(tw.parameters(), **kw)
    for step in range(3):
        y = m.forward(x, kpm)
        loss, dy = attnx.cross_entropy_loss(y, labels, sample_weight=sw)
        m.backward(dy)
        opt.step(m.grads)
        yt = tw(torch.tensor(x), kpm)
        lt = F.cross_entropy(yt.reshape(-1, c), torch.tensor(labels.reshape(-1)),
                             reduction="none")
        swt = torch.tensor(sw.reshape(-1), dtype=yt.dtype)
        tloss = (lt * swt).sum() / swt.sum()
        topt.zero_grad()
        tloss.backward()
        topt.step()
        assert abs(loss - tloss.item()) <= TOL[dtype] * max(1.0, abs(loss)), step
    for n in m.params:
        if n.endswith(".bk"):
            # dL/dbk is zero in exact arithmetic (softmax ignores a per-row constant);
            # Adam normalises the rounding noise to steps of size ~lr in both
            assert np.abs(m.params[n]).max() <= 3 * kw["lr"]
            continue
        err = rel_err(m.params[n], tw.w(n).detach().numpy())
        assert err < 10 * TOL[dtype], f"{n} after 3 steps: {err:.3g}"


# ---- finite differences (float64) ----------------------------------------
@pytest.mark.parametrize("case", GRID, ids=_id)
def test_finite_differences(case, rng):
    pool, pos, norm, causal, use_mask = case
    m = make(np.float64, pool, pos, norm, causal, rng=rng)
    nb, t = 3, 6
    x = rng.normal(size=(nb, t, 3))
    kpm = ragged_mask(nb, t, rng) if use_mask else None
    g = rng.normal(size=m.output_shape(nb, t))
    fd_check(m, x, kpm, g, rng, n_probe=5)


def test_finite_differences_one_layer_every_entry(rng):
    """Every entry of every parameter of a small pre-norm model with mean pooling."""
    m = make(np.float64, "mean", "learned", "pre", True, n_layers=1, rng=rng)
    x = rng.normal(size=(2, 5, 3))
    kpm = ragged_mask(2, 5, rng)
    fd_check(m, x, kpm, rng.normal(size=(2, 4)), rng, n_probe=10**6)


# ---- contract ------------------------------------------------------------
def test_param_names_and_flat_storage():
    m = SequenceModel(3, 8, 2, 2, 5, pooling="mean", positional="learned", norm="pre",
                      max_len=11, random_state=0)
    names = list(m.params)
    assert names[:3] == ["embed.W", "embed.b", "pos.P"]
    assert names[-4:] == ["norm.g", "norm.b", "head.W", "head.b"]
    for i in range(2):
        for k in ("Wq", "Wk", "Wv", "Wo", "W1", "W2", "bq", "bk", "bv", "bo", "b1", "b2",
                  "ln1.g", "ln1.b", "ln2.g", "ln2.b"):
            assert f"layers.{i}.{k}" in m.params
    assert m.params["embed.W"].shape == (3, 8)
    assert m.params["pos.P"].shape == (11, 8)
    assert m.params["head.W"].shape == (8, 5)
    assert sum(v.size for v in m.params.values()) == m.params.flat.size == m.n_params
    for n, v in m.params.items():
        assert np.shares_memory(v, m.params.flat), n
        assert np.shares_memory(m.grads[n], m.grads.flat), n
    with pytest.raises(TypeError):
        m.params["head.W"] = np.zeros((8, 5))
    nb = SequenceModel(3, 8, 2, 1, 1, bias=False)
    assert "layers.0.bq" not in nb.params and "embed.b" in nb.params and "head.b" in nb.params
    assert "norm.g" not in nb.params and "pos.P" not in nb.params


def test_seeded_and_dtypes(rng):
    a = SequenceModel(3, 8, 2, 1, 2, random_state=5)
    b = SequenceModel(3, 8, 2, 1, 2, random_state=5)
    np.testing.assert_array_equal(a.params.flat, b.params.flat)
    assert a.params.flat.dtype == np.float32
    c = SequenceModel(3, 8, 2, 1, 2, random_state=5, dtype=np.float64)
    x = rng.normal(size=(2, 4, 3))
    assert c.forward(x).dtype == np.float64 and a.forward(x).dtype == np.float32
    assert a.forward(x).shape == (2, 4, 2)
    p = SequenceModel(3, 8, 2, 1, 1, pooling="last")
    assert p.forward(x).shape == (2, 1)


@pytest.mark.parametrize("pool", POOLING)
def test_inference_equals_training_forward_and_reuses_buffers(pool, rng):
    m = make(np.float64, pool, "sinusoidal", "pre", False, rng=rng)
    x = rng.normal(size=(2, 5, 3))
    kpm = ragged_mask(2, 5, rng)
    y1 = m.forward(x, kpm).copy()
    bufs = m._last[2]
    out = np.empty(m.output_shape(2, 5))
    y2 = m.forward(x, kpm, grad=False, out=out)
    assert y2 is out
    np.testing.assert_array_equal(y1, y2)
    # inference keeps one layer's activations (two alternating block inputs)
    inf = [v for k, v in m._bufs._items.items() if k[3] is False][0]
    assert len({id(a) for a in inf.hs}) == 2 and len({id(a) for a in inf.hid}) == 1
    assert len({id(a) for a in bufs.hs}) == m.n_layers + 1
    # a training step at a fixed shape reuses its buffers, inference in between or not
    m.forward(x, kpm)
    assert m._last[2] is bufs
    dxo = np.empty_like(x)
    assert m.backward(np.ones_like(y1), out=dxo) is dxo
    m.forward(x, kpm)
    assert m._last[2] is bufs
    # inference does not disturb the state backward needs
    m.forward(x, kpm)
    m.backward(np.ones_like(y1))
    g1 = m.grads.flat.copy()
    m.forward(x, kpm)
    m.forward(rng.normal(size=(2, 5, 3)), kpm, grad=False)
    m.backward(np.ones_like(y1))
    np.testing.assert_array_equal(m.grads.flat, g1)


def test_does_not_modify_inputs(rng):
    m = make(np.float32, "mean", "none", "pre", False)
    x = rng.normal(size=(2, 5, 3))
    kpm = ragged_mask(2, 5, rng)
    x0, k0 = x.copy(), kpm.copy()
    y = m.forward(x, kpm)
    dy = np.ones_like(y)
    m.backward(dy)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(kpm, k0)
    np.testing.assert_array_equal(dy, 1)


@pytest.mark.parametrize("pool, kw", [(None, {}), ("mean", dict(stem=((3, 2), (2, 2))))])
def test_input_grad_false(pool, kw, rng):
    """Without dL/dX the weights' gradients (a stem's too) are unchanged."""
    m = make(np.float64, pool, "none", None, False, **kw)
    x = rng.normal(size=(2, 8, 3))
    y = m.forward(x)
    m.backward(np.ones_like(y))
    g = m.grads.flat.copy()
    m.input_grad = False
    m.forward(x)
    assert m.backward(np.ones_like(y)) is None
    np.testing.assert_array_equal(m.grads.flat, g)


def test_errors(rng):
    with pytest.raises(ValueError, match="max_len"):
        SequenceModel(3, 8, 2, 1, 1, positional="learned")
    with pytest.raises(ValueError, match="pooling"):
        SequenceModel(3, 8, 2, 1, 1, pooling="min")
    with pytest.raises(ValueError, match="positional"):
        SequenceModel(3, 8, 2, 1, 1, positional="alibi")
    with pytest.raises(ValueError, match="norm"):
        SequenceModel(3, 8, 2, 1, 1, norm="post")
    with pytest.raises(ValueError, match="n_heads"):
        SequenceModel(3, 8, 3, 1, 1)
    with pytest.raises(ValueError, match="rope"):
        SequenceModel(3, 6, 2, 1, 1, positional="rope")
    with pytest.raises(ValueError, match="dropout"):
        SequenceModel(3, 8, 2, 1, 1, dropout=1.0)
    with pytest.raises(TypeError, match="n_outputs"):
        SequenceModel(3, 8, 2, 1, 1.5)
    with pytest.raises(TypeError, match="dtype"):
        SequenceModel(3, 8, 2, 1, 1, dtype=np.int32)
    m = SequenceModel(3, 8, 2, 1, 2, positional="learned", max_len=4)
    with pytest.raises(ValueError, match="max_len=4"):
        m.forward(np.zeros((1, 5, 3)))
    with pytest.raises(ValueError, match="x must have 3 features"):
        m.forward(np.zeros((1, 4, 2)))
    with pytest.raises(ValueError, match="NaN"):
        m.forward(np.full((1, 4, 3), np.nan))
    with pytest.raises(ValueError, match="key_padding_mask"):
        m.forward(np.zeros((2, 4, 3)), np.zeros((2, 3), bool))
    with pytest.raises(TypeError, match="key_padding_mask"):
        m.forward(np.zeros((2, 4, 3)), np.zeros((2, 4)))
    with pytest.raises(RuntimeError, match="forward"):
        SequenceModel(3, 8, 2, 1, 2).backward(np.zeros((1, 4, 2)))
    y = m.forward(np.zeros((2, 4, 3)))
    with pytest.raises(ValueError, match="dy"):
        m.backward(np.zeros((2, 4, 3)))
    with pytest.raises(ValueError, match="out"):
        m.forward(np.zeros((2, 4, 3)), out=np.zeros((2, 4, 2)))  # float64 vs float32
    assert y.shape == (2, 4, 2)


# ---- the Cython kernels against their NumPy reference -------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("nthreads", [1, 2])
def test_kernels_match_numpy_reference(dtype, nthreads, rng):
    from attnx.kernels import _seq
    from attnx.testing import numpy_kernels as ref
    tol = TOL[dtype]
    nb, t, d, f = 4, 9, 12, 5
    rows = nb * t
    km = ragged_mask(nb, t, rng, full_row=True).astype(np.uint8)
    a = lambda *s: rng.normal(size=s).astype(dtype)  # noqa: E731
    x, w, bvec, h = a(rows, f), a(f, d), a(d), a(rows, d)
    g, dy, add, table = a(d), a(rows, d), a(rows, d), a(t, d)
    bits = rng.integers(0, 2**32, size=rows * d + 3, dtype=np.uint32)
    for mod_out in ("linear", "ln", "pool", "misc"):
        outs = []
        for k in (_seq, ref):
            if mod_out == "linear":
                y = np.empty((rows, d), dtype)
                k.linear_forward(x, w, bvec, y, nthreads)
                yp = np.empty((rows, d), dtype)
                k.linear_forward(x, w, bvec, yp, nthreads, table, t)
                dw, db, dx = np.empty_like(w), np.empty_like(bvec), np.empty_like(x)
                k.linear_backward(h, x, w, dw, db, dx, nthreads)
                outs.append((y, yp, dw, db, dx))
            elif mod_out == "ln":
                y, st = np.empty_like(h), np.empty((2, rows), dtype)
                k.layernorm_forward(h, g, bvec, y, st, 1e-5, nthreads)
                dg, db, dx = np.empty_like(g), np.empty_like(g), np.empty_like(h)
                k.layernorm_backward(dy, h, g, (dg, db), (st, np.empty((2, 2 * d), dtype)),
                                     dx, add, nthreads)
                dx2 = np.empty_like(h)
                k.layernorm_backward(dy, h, g, (dg, db), (st, np.empty((2, 2 * d), dtype)),
                                     dx2, None, nthreads)
                outs.append((y, st, dg, db, dx, dx2))
            elif mod_out == "pool":
                res = []
                for last in (False, True):
                    for m in (km, None):
                        p = np.empty((nb, d), dtype)
                        k.pool_forward(h, m, p, nb, t, last, nthreads)
                        dh = np.empty_like(h)
                        k.pool_backward(p, m, dh, nb, t, last, nthreads)
                        res += [p, dh]
                outs.append(res)
            else:
                hh = h.copy()
                k.add_positions(hh, table, t, nthreads)
                dp = np.empty((t + 3, d), dtype)
                k.positions_backward(h, dp, t, nthreads)
                yy = h.copy()
                k.zero_masked_rows(yy, km)
                o1 = np.empty_like(h)
                k.masked_add(o1, x @ w, h, bvec + h, h * h, nthreads)
                o2 = np.empty_like(h)
                k.masked_add(o2, None, h, None, x @ w, nthreads)
                s1 = h.copy()
                k.add_sub(s1, x @ w, h * 2, nthreads)
                u = np.full((rows, d), np.nan, dtype)
                k.dropout_mask(bits, u, 0.3, nthreads)
                outs.append((hh, dp, yy, o1, o2, s1, u))
        for got, want in zip(outs[0], outs[1]):
            assert got.dtype == dtype
            assert rel_err(got, want, floor=1e-30) < tol, mod_out


def test_random_bits_from_one_draw_of_the_generator():
    """The dropout masks' bits: one 64-bit draw of the generator keys the stream, so a
    seeded generator gives the same bits, the generator advances by exactly one draw,
    and the bits look uniform (each of the 32 bit positions set half of the time)."""
    from attnx.kernels import _seq
    g1, g2 = np.random.default_rng(7), np.random.default_rng(7)
    a, b = np.zeros(100_001, np.uint32), np.zeros(100_001, np.uint32)
    _seq.random_bits(g1.bit_generator, a)
    _seq.random_bits(g2.bit_generator, b)
    np.testing.assert_array_equal(a, b)
    g3 = np.random.default_rng(7)
    g3.integers(0, 2**63)   # one 64-bit draw
    assert g1.random() == g3.random()
    _seq.random_bits(g2.bit_generator, b)   # the next call: other bits
    assert np.mean(a == b) < 1e-3
    ones = (a[:, None] >> np.arange(32, dtype=np.uint32)) & 1
    assert np.all(np.abs(ones.mean(axis=0) - 0.5) < 0.01)
    assert abs(a.astype(np.float64).mean() / 2**32 - 0.5) < 0.005
    assert len(np.unique(a)) > 99_990
    with pytest.raises(TypeError, match="bit_generator must be a numpy BitGenerator"):
        _seq.random_bits(g1, np.zeros(3, np.uint32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dropout_masks_in_one_call(dtype):
    """dropout_masks: random_bits, then each mask from its slice of the bits, in order;
    the same values as the two kernels called one by one."""
    from attnx.kernels import _seq
    outs = [np.empty(s, dtype) for s in ((7, 5), (3, 4), (0, 4), (9, 1))]
    want = [np.empty_like(o) for o in outs]
    bits, ref = np.zeros(60, np.uint32), np.zeros(60, np.uint32)
    _seq.dropout_masks(np.random.PCG64(3), bits, outs, 0.3)
    _seq.random_bits(np.random.PCG64(3), ref)
    np.testing.assert_array_equal(bits, ref)
    at = 0
    for w in want:
        _seq.dropout_mask(ref[at:at + w.size], w, 0.3)
        at += w.size
    for o, w in zip(outs, want):
        np.testing.assert_array_equal(o, w)
    assert {float(v) for o in outs for v in o.ravel()} == {0.0, float(dtype(1 / 0.7))}
    with pytest.raises(ValueError, match="bits must hold >= 56 draws, got 55"):
        _seq.dropout_masks(np.random.PCG64(3), np.zeros(55, np.uint32), outs, 0.3)
    with pytest.raises(ValueError, match=r"p must lie in \[0, 1\)"):
        _seq.dropout_masks(np.random.PCG64(3), bits, outs, 1.0)


def test_dropout_mask_kernel(rng):
    from attnx.kernels import _seq
    bits = rng.integers(0, 2**32, size=50_007, dtype=np.uint32)
    bits[:4] = [0, 2**30 - 1, 2**30, 2**32 - 1]   # p = 0.25: the cut is 2**30
    want = np.where(bits[:50_000].reshape(1000, 50) >= 2**30, 1 / 0.75, 0.0)
    for dtype in (np.float32, np.float64):
        u = np.full((1000, 50), np.nan, dtype)
        _seq.dropout_mask(bits, u, 0.25, 2)
        np.testing.assert_array_equal(u, want.astype(dtype))
    assert list(u.reshape(-1)[:4]) == [0, 0, 1 / 0.75, 1 / 0.75]
    # the dropped fraction is p
    u = np.empty((1000, 50))
    _seq.dropout_mask(rng.integers(0, 2**32, size=50_000, dtype=np.uint32), u, 0.1, 1)
    assert abs((u == 0).mean() - 0.1) < 0.005
    full = np.full(50_000, 2**32 - 1, np.uint32)   # the largest draw
    _seq.dropout_mask(full, u, 1 - 2.0**-33, 1)   # p * 2**32 above every draw
    assert np.all(u == 0)
    _seq.dropout_mask(full, u, 1 - 2.0**-31, 1)   # below the largest draw
    assert np.all(u == 2.0**31)
    with pytest.raises(ValueError, match="bits must hold >= 50000"):
        _seq.dropout_mask(bits[:49_999], u, 0.1, 1)


@pytest.mark.parametrize("case", [(None, "learned", "pre", True, True),
                                  ("mean", "sinusoidal", None, False, True),
                                  ("last", "rope", "pre", False, False)], ids=_id)
def test_model_on_numpy_reference_kernels(case, rng):
    """The model's compiled pass against the layer-by-layer reference on the NumPy
    kernels (attnx.testing.numpy_kernels, written from the formulas)."""
    from attnx.testing import numpy_kernels, reference_pass
    pool, pos, norm, causal, use_mask = case
    a = make(np.float64, pool, pos, norm, causal, rng=rng)
    b = make(np.float64, pool, pos, norm, causal)
    b.params.flat[...] = a.params.flat
    x = rng.normal(size=(3, 6, 3))
    kpm = ragged_mask(3, 6, rng) if use_mask else None
    ya = a.forward(x, kpm)
    yb, state = reference_pass.forward(b, x, kpm, kernels=numpy_kernels)
    assert rel_err(ya, yb) < 1e-12
    g = rng.normal(size=ya.shape)
    assert rel_err(a.backward(g), reference_pass.backward(b, state, g)) < 1e-12
    assert rel_err(a.grads.flat, b.grads.flat) < 1e-12


# ---- dropout (residual branches) -----------------------------------------
@pytest.mark.parametrize("norm", NORM)
@pytest.mark.parametrize("pool", [None, "mean"])
def test_dropout_finite_differences_fixed_mask(norm, pool, rng):
    m = make(np.float64, pool, "learned", norm, True, rng=rng, dropout=0.3)
    x = rng.normal(size=(3, 6, 3))
    kpm = ragged_mask(3, 6, rng)
    y = m.forward(x, kpm)
    masks = m.dropout_masks()
    assert set(masks) == {f"layers.{i}.{r}" for i in range(2) for r in ("res1", "res2")}
    g = rng.normal(size=y.shape)
    dx = m.backward(g)
    analytic = {n: m.grads[n].copy() for n in m.params}
    analytic["x"] = dx.copy()
    arrays = dict(m.params)
    arrays["x"] = x
    m._freeze_dropout = True   # the training forward keeps the last masks

    def loss():
        out = float(np.sum(m.forward(x, kpm) * g))
        for n, v in m.dropout_masks().items():
            np.testing.assert_array_equal(v, masks[n])
        return out

    check_grads(loss, arrays, analytic, rng, n_probe=8, tol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("norm", NORM)
def test_dropout_matches_torch_twin_with_same_masks(torch, dtype, norm, rng):
    m = make(dtype, "last", "sinusoidal", norm, False, rng=rng, dropout=0.4)
    x = rng.normal(size=(3, 7, 3)).astype(dtype)
    kpm = ragged_mask(3, 7, rng)
    y = m.forward(x, kpm)
    g = rng.normal(size=y.shape).astype(dtype)
    dx = m.backward(g)
    tw = twin_of(torch, m)
    xt = torch.tensor(x, requires_grad=True)
    masks = {n: torch.tensor(v) for n, v in m.dropout_masks().items()}
    yt = tw(xt, kpm, masks=masks)
    (yt * torch.tensor(g)).sum().backward()
    assert rel_err(y, yt.detach().numpy()) < TOL[dtype]
    assert rel_err(dx, xt.grad.numpy()) < TOL[dtype]
    check_grads_vs(m, tw.grads(), TOL[dtype])
    # without the masks the outputs differ: dropout really acted
    assert rel_err(y, tw(torch.tensor(x), kpm, masks={}).detach().numpy()) > 1e-3


def test_dropout_mask_statistics_and_reproducibility(rng):
    p = 0.3
    m = SequenceModel(3, 32, 4, 2, 2, dropout=p, random_state=7, dtype=np.float64)
    x = rng.normal(size=(8, 50, 3))
    m.forward(x)
    first = m.dropout_masks()
    vals = np.concatenate([v.ravel() for v in first.values()])
    assert set(np.unique(vals)) == {0.0, 1 / (1 - p)}
    frac = np.mean(vals == 0)
    n = vals.size   # 4 * 8 * 50 * 32 = 51200 draws: 5 sigma is about 0.01
    assert abs(frac - p) < 5 * np.sqrt(p * (1 - p) / n)
    assert abs(vals.mean() - 1) < 5 * np.sqrt(p / (1 - p) / n)
    # the masks of different layers / branches are different draws
    assert not np.array_equal(first["layers.0.res1"], first["layers.0.res2"])
    # a new training step draws new masks; the same seed repeats the whole sequence
    y_second = m.forward(x).copy()
    second = m.dropout_masks()
    assert not np.array_equal(first["layers.1.res2"], second["layers.1.res2"])
    m2 = SequenceModel(3, 32, 4, 2, 2, dropout=p, random_state=7, dtype=np.float64)
    m2.forward(x)
    y2 = m2.forward(x)
    for k in second:
        np.testing.assert_array_equal(m2.dropout_masks()[k], second[k])
    np.testing.assert_array_equal(y2, y_second)   # bit-reproducible training forward


def test_dropout_off_in_inference(rng):
    m = SequenceModel(3, 16, 2, 2, 2, dropout=0.5, random_state=1, dtype=np.float64,
                      norm="pre", pooling="mean")
    ref = SequenceModel(3, 16, 2, 2, 2, dropout=0.0, random_state=1, dtype=np.float64,
                        norm="pre", pooling="mean")
    np.testing.assert_array_equal(m.params.flat, ref.params.flat)
    x = rng.normal(size=(2, 6, 3))
    np.testing.assert_array_equal(m.forward(x, grad=False), ref.forward(x, grad=False))
    assert m.dropout_masks() == {}
    # a training forward drops
    yt = m.forward(x)
    assert not np.allclose(yt, ref.forward(x, grad=False))


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_training_step_allocates_no_arrays(dropout, rng):
    """At a fixed shape a forward/backward/AdamW step reuses every buffer: the
    traced peak stays far below the size of one activation (B*T*d floats)."""
    m = SequenceModel(3, 32, 4, 2, 5, pooling=None, positional="learned", norm="pre",
                      max_len=64, dropout=dropout, random_state=0)
    x = rng.normal(size=(8, 64, 3)).astype(np.float32)
    kpm = ragged_mask(8, 64, rng)
    labels = rng.integers(0, 5, size=(8, 64))
    sw = (~kpm).astype(np.float64)
    y = np.empty(m.output_shape(8, 64), np.float32)
    dy = np.empty_like(y)
    dx = np.empty_like(x)
    opt = attnx.AdamW(m.params)

    def step():
        m.forward(x, kpm, out=y)
        attnx.cross_entropy_loss(y, labels, sample_weight=sw, out=dy)
        m.backward(dy, out=dx)
        opt.step(m.grads)

    peak = step_peak_bytes(step)
    activation = 8 * 64 * 32 * 4
    assert peak < activation // 4, f"peak {peak} bytes during a step"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1, 1, 4, 2, 1), (2, 1, 4, 4, 4, 3), (1, 40, 2, 6, 6, 1),
                                   (1, 520, 2, 8, 2, 2)],
                         ids=["B1-T1-f1", "T1", "dhead1-T40", "blocked-T520"])
@pytest.mark.parametrize("pool", POOLING)
def test_edge_shapes_match_torch(torch, dtype, shape, pool, rng):
    """T = 1, one feature, d_head = 1, and T long enough for attention='auto' to take
    the blocked (linear-memory) attention path, with causal attention and padding."""
    nb, t, f, d, h, k = shape
    m = SequenceModel(f, d, h, 2, k, d_hidden=5, pooling=pool, norm="pre", causal=True,
                      positional="sinusoidal", dtype=dtype, random_state=2)
    if t >= 512:   # the linear-memory path, whatever "auto" would pick for this d_head
        for att in m.attn:
            att.attention = "blocked"
        assert m.attn[0]._path(t, t) == "blocked"
    x = rng.normal(size=(nb, t, f)).astype(dtype)
    kpm = np.zeros((nb, t), bool)
    kpm[:, max(1, t - 7):] = True
    y = m.forward(x, kpm)
    g = rng.normal(size=y.shape).astype(dtype)
    dx = m.backward(g)
    tw = twin_of(torch, m)
    xt = torch.tensor(x, requires_grad=True)
    yt = tw(xt, kpm)
    (yt * torch.tensor(g)).sum().backward()
    tol = TOL[dtype]
    assert y.shape == tuple(yt.shape) == m.output_shape(nb, t)
    assert rel_err(y, yt.detach().numpy()) < tol
    assert rel_err(dx, xt.grad.numpy()) < tol
    check_grads_vs(m, tw.grads(), tol)


def test_attention_weights(rng):
    m = SequenceModel(3, 8, 2, 2, 1, pooling="mean", random_state=0)
    x = rng.normal(size=(2, 5, 3))
    kpm = ragged_mask(2, 5, rng)
    with pytest.raises(RuntimeError):
        m.attention_weights()
    m.forward(x, kpm)
    ws = m.attention_weights()
    assert len(ws) == 2 and ws[0].shape == (2, 2, 5, 5)
    np.testing.assert_allclose(ws[1].sum(-1), 1, rtol=1e-5)
    assert np.all(ws[0][np.broadcast_to(kpm[:, None, None, :], ws[0].shape)] == 0)
    assert m.attention_weights(layer=1, sample=0, head=1).shape == (5, 5)


def test_concurrent_inference_threads(rng):
    """Inference buffers are per thread: parallel forward(grad=False) calls on one
    model give the single-threaded results and leave the training state alone."""
    from concurrent.futures import ThreadPoolExecutor
    m = make(np.float64, "mean", "learned", "pre", True, rng=rng, dropout=0.2)
    xs = [rng.normal(size=(3, 6, 3)) for _ in range(8)]
    kpm = ragged_mask(3, 6, rng)
    want = [m.forward(x, kpm, grad=False).copy() for x in xs]
    m.forward(xs[0], kpm)
    g = np.ones((3, 4))
    with ThreadPoolExecutor(4) as ex:
        got = list(ex.map(lambda x: m.forward(x, kpm, grad=False).copy(), xs * 4))
    for i, y in enumerate(got):
        np.testing.assert_array_equal(y, want[i % len(xs)])
    dx = m.backward(g)
    masks = m.dropout_masks()
    m._freeze_dropout = True
    m.forward(xs[0], kpm)
    np.testing.assert_array_equal(m.backward(g), dx)
    for n, v in m.dropout_masks().items():
        np.testing.assert_array_equal(v, masks[n])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("pool", [None, "last"])
def test_three_adamw_steps_regression_match_torch(torch, dtype, pool, rng):
    """Regression (mean squared error) with padding: three AdamW steps in both."""
    m = make(dtype, pool, "rope", None, True, rng=rng)
    nb, t = 4, 6
    x = rng.normal(size=(nb, t, 3)).astype(dtype)
    kpm = ragged_mask(nb, t, rng)
    y_true = rng.normal(size=m.output_shape(nb, t)).astype(dtype)
    if pool is None:
        y_true[kpm] = 0   # padded outputs are zero in both: no loss there
    tw = twin_of(torch, m)
    kw = dict(lr=0.01, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.05)
    opt = attnx.AdamW(m.params, **kw)
    topt = torch.optim.AdamW(tw.parameters(), **kw)
    for step in range(3):
        loss, dy = attnx.mse_loss(m.forward(x, kpm), y_true)
        m.backward(dy)
        opt.step(m.grads)
        tloss = ((tw(torch.tensor(x), kpm) - torch.tensor(y_true)) ** 2).mean()
        topt.zero_grad()
        tloss.backward()
        topt.step()
        assert abs(loss - tloss.item()) <= TOL[dtype] * max(1.0, abs(loss)), step
    for n in m.params:
        if n.endswith(".bk"):   # zero gradient in exact arithmetic (see above)
            continue
        err = rel_err(m.params[n], tw.w(n).detach().numpy())
        assert err < 10 * TOL[dtype], f"{n} after 3 steps: {err:.3g}"


def test_kernels_reject_mismatched_buffers():
    """The private kernels check their buffers before touching memory."""
    from attnx.kernels import _seq
    f = np.float64
    x, w, b = np.zeros((6, 3)), np.zeros((3, 4)), np.zeros(4)
    with pytest.raises(ValueError, match="y must be"):
        _seq.linear_forward(x, w, b, np.zeros((5, 4)), 1)
    with pytest.raises(ValueError, match="pos must be"):
        _seq.linear_forward(x, w, b, np.zeros((6, 4)), 1, np.zeros((2, 4)), 3)
    with pytest.raises(ValueError, match="dx must be"):
        _seq.linear_backward(np.zeros((6, 4)), x, w, np.zeros((3, 4)), b, np.zeros((6, 2)), 1)
    with pytest.raises(ValueError, match="nthreads"):
        _seq.layernorm_forward(np.zeros((6, 4)), b, b, np.zeros((6, 4)), np.zeros((2, 6)),
                               1e-5, 0)
    with pytest.raises(ValueError, match="st must be"):
        _seq.layernorm_forward(np.zeros((6, 4)), b, b, np.zeros((6, 4)), np.zeros((2, 5)),
                               1e-5, 1)
    with pytest.raises(ValueError, match="part must be"):
        _seq.layernorm_backward(np.zeros((6, 4)), np.zeros((6, 4)), b, (b.copy(), b.copy()),
                                (np.zeros((2, 6)), np.zeros((1, 7))), np.zeros((6, 4)), None, 1)
    with pytest.raises(ValueError, match="key mask must be"):
        _seq.pool_forward(np.zeros((6, 4)), np.zeros((2, 2), np.uint8), np.zeros((2, 4)),
                          2, 3, False, 1)
    with pytest.raises(ValueError, match="whole sequences"):
        _seq.positions_backward(np.zeros((6, 4)), np.zeros((4, 4)), 4, 1)
    with pytest.raises(ValueError, match="label 3 at row 1"):
        _seq.cross_entropy_rows(np.zeros((2, 3), f), np.array([0, 3]), None, 2.0,
                                np.zeros((2, 3)))
    with pytest.raises(ValueError, match="p must lie"):
        _seq.dropout_mask(np.zeros(6, np.uint32), np.zeros((2, 3)), 1.0, 1)


def test_pickle_and_config(rng):
    import pickle
    m = make(np.float32, "mean", "learned", "pre", True, rng=rng, dropout=0.25)
    x = rng.normal(size=(2, 5, 3))
    m.forward(x)                       # advance the dropout stream
    m.input_grad = False
    c = pickle.loads(pickle.dumps(m))
    assert c.get_config() == m.get_config() and repr(c) == repr(m)
    assert SequenceModel(**m.get_config()).params.flat.shape == m.params.flat.shape
    np.testing.assert_array_equal(c.params.flat, m.params.flat)
    assert list(c.params) == list(m.params) and c.input_grad is False
    np.testing.assert_array_equal(c.forward(x, grad=False), m.forward(x, grad=False))
    # the copy continues the same dropout stream
    np.testing.assert_array_equal(c.forward(x), m.forward(x))
    c.params.flat[0] += 1   # an independent copy
    assert c.params.flat[0] != m.params.flat[0]


def step_peak_bytes(step):
    """Bytes a third call of step() allocates at its peak (Python-tracked), after two
    warm-up calls that make the workspaces."""
    import tracemalloc
    step()
    step()
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    step()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak
