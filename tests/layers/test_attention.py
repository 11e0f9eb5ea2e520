"""MultiHeadAttention: finite differences, NumPy reference, and the layer's API."""
import tracemalloc

import numpy as np
import pytest

import attnx
from gradcheck import check_grads
from reference import mha_numpy
from numeric_checks import rel_err

SHAPES = [  # (B, T, d_model, n_heads)
    (2, 5, 8, 2),
    (1, 1, 6, 3),     # T = 1
    (3, 4, 6, 1),     # one head
    (2, 7, 12, 4),    # d_head = 3, not a power of two
]


def _layer(d, h, dtype=np.float64, **kw):
    return attnx.MultiHeadAttention(d, h, dtype=dtype, random_state=0, **kw)


def _fd_case(shape, rng, cross=False, mask=False, **opts):
    nb, t, d, h = shape
    layer = _layer(d, h, **opts)
    if opts.get("bias"):
        for k in ("bq", "bk", "bv", "bo"):
            layer.params[k][...] = rng.normal(size=d) * 0.3
    x = rng.normal(size=(nb, t, d))
    tk = t + 2 if cross else t
    ctx = rng.normal(size=(nb, tk, d)) if cross else None
    kpm = None
    if mask:
        kpm = rng.random((nb, tk)) < 0.3
        kpm[0, :] = True          # one sample with every key masked
    r = rng.normal(size=(nb, t, d))  # L = sum(Y * R), so dL/dY = R

    def loss():
        return float(np.sum(layer.forward(x, ctx, kpm) * r))

    layer.forward(x, ctx, kpm)
    out = layer.backward(r)
    dx, dctx = out if cross else (out, None)
    arrays = dict(layer.params)
    grads = {k: layer.grads[k].copy() for k in layer.params}
    arrays["X"], grads["X"] = x, dx
    if cross:
        arrays["C"], grads["C"] = ctx, dctx
    return check_grads(loss, arrays, grads, rng)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_finite_differences(shape, causal, bias, rng):
    assert _fd_case(shape, rng, causal=causal, bias=bias) < 1e-6


@pytest.mark.parametrize("opts", [
    dict(rope=True), dict(rope=True, causal=True),
    dict(cross=True), dict(cross=True, bias=True),
    dict(mask=True), dict(mask=True, causal=True),
    dict(rope=True, causal=True, mask=True, bias=True, cross=True),
])
def test_finite_differences_options(opts, rng):
    assert _fd_case((2, 5, 8, 2), rng, **opts) < 1e-6


# rope needs an even d_head, so it is paired only with such shapes
REF_CASES = [(shape, opts) for shape in SHAPES
             for opts in ({}, dict(causal=True, bias=True), dict(rope=True))
             if not (opts.get("rope") and (shape[2] // shape[3]) % 2)]


@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-5), (np.float64, 1e-12)])
@pytest.mark.parametrize("shape,opts", REF_CASES)
def test_matches_numpy_reference(dtype, tol, shape, opts, rng):
    nb, t, d, h = shape
    layer = _layer(d, h, dtype=dtype, **opts)
    if opts.get("bias"):
        for k in ("bq", "bk", "bv", "bo"):
            layer.params[k][...] = rng.normal(size=d)
    x = rng.normal(size=(nb, t, d)).astype(dtype)
    y = layer.forward(x)
    assert y.dtype == dtype
    expect = mha_numpy(layer.params, x, h, causal=opts.get("causal", False),
                       rope=opts.get("rope", False))
    assert rel_err(y, expect) < tol


def test_cross_attention_and_mask_match_numpy(rng):
    layer = _layer(8, 2, causal=True)
    x, c = rng.normal(size=(3, 4, 8)), rng.normal(size=(3, 6, 8))
    kpm = rng.random((3, 6)) < 0.4
    kpm[1] = True
    y = layer.forward(x, c, kpm)
    expect = mha_numpy(layer.params, x, 2, causal=True, context=c, key_padding_mask=kpm)
    assert rel_err(y, expect) < 1e-12
    assert np.all(y[1] == 0)  # every key masked: zero output, no NaN


def test_fully_masked_rows_have_zero_gradient(rng):
    layer = _layer(8, 2, bias=True)
    x = rng.normal(size=(2, 3, 8))
    kpm = np.zeros((2, 3), dtype=bool)
    kpm[0] = True
    layer.forward(x, key_padding_mask=kpm)
    dx = layer.backward(np.ones((2, 3, 8)))
    assert np.isfinite(dx).all()
    np.testing.assert_allclose(dx[0], 0.0, atol=1e-14)  # sample 0 only sees bo


def test_params_are_live_views(rng):
    layer = _layer(8, 2)
    x = rng.normal(size=(2, 3, 8))
    w = rng.normal(size=(8, 8))
    layer.params["Wq"][...] = w
    np.testing.assert_array_equal(layer.params["Wq"], w)
    y = layer.forward(x)
    ref = mha_numpy({k: v.copy() for k, v in layer.params.items()}, x, 2)
    assert rel_err(y, ref) < 1e-12
    with pytest.raises(TypeError):
        layer.params["Wq"] = w
    assert set(layer.params) == {"Wq", "Wk", "Wv", "Wo"}
    assert set(_layer(8, 2, bias=True).params) == {"Wq", "Wk", "Wv", "Wo", "bq", "bk", "bv", "bo"}
    for v in layer.params.values():
        assert v.shape == (8, 8)


def test_init_is_seeded_uniform():
    a = _layer(16, 4)
    b = _layer(16, 4)
    c = attnx.MultiHeadAttention(16, 4, random_state=1)
    for k in a.params:
        np.testing.assert_array_equal(a.params[k], b.params[k])
        assert np.abs(a.params[k]).max() <= 1 / 4
        assert np.abs(a.params[k]).max() > 0.2  # spread over the whole interval
    assert not np.allclose(np.asarray(a.params["Wq"], np.float32), c.params["Wq"])


def test_inputs_not_modified_and_outputs_fresh(rng):
    layer = _layer(8, 2, rope=True)
    x = rng.normal(size=(2, 3, 8))
    x0 = x.copy()
    y1 = layer.forward(x)
    y1c = y1.copy()
    dy = rng.normal(size=y1.shape)
    dy0 = dy.copy()
    layer.backward(dy)
    layer.forward(x * 2)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(dy, dy0)
    np.testing.assert_array_equal(y1, y1c)  # an earlier result is not overwritten


@pytest.mark.parametrize("path", ["dense", "blocked", "fused"])
@pytest.mark.parametrize("cross", [False, True])
def test_inference_reads_inputs_in_place(path, cross, rng):
    """grad=False reads x (and context) without copying them: the inputs stay as they
    were, the result equals a training forward's, and out= may be x itself."""
    layer = attnx.MultiHeadAttention(16, 2, attention=path, random_state=0, bias=True,
                                     dtype=np.float64)
    x = rng.normal(size=(2, 9, 16))
    c = rng.normal(size=(2, 5, 16)) if cross else None
    x0, c0 = x.copy(), (None if c is None else c.copy())
    want = layer.forward(x, c)
    got = layer.forward(x, c, grad=False)
    np.testing.assert_array_equal(x, x0)
    if cross:
        np.testing.assert_array_equal(c, c0)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    layer.forward(x, c, grad=False, out=x)          # in place over the input
    np.testing.assert_allclose(x, want, rtol=1e-12, atol=1e-14)
    # a non-contiguous or other-dtype input still works (copied then)
    xf = np.asfortranarray(x0.astype(np.float32))
    np.testing.assert_allclose(layer.forward(xf, c, grad=False), want, rtol=1e-5, atol=1e-5)


def test_input_grad_off_returns_none(rng):
    layer = _layer(8, 2, input_grad=False)
    layer.forward(rng.normal(size=(2, 3, 8)))
    assert layer.backward(np.ones((2, 3, 8))) is None
    assert np.abs(layer.grads["Wq"]).sum() > 0


def test_training_step_does_not_allocate(rng):
    """After the first step at a shape, a step allocates nothing that grows with B*T."""
    def step_allocations(nb, t):
        layer = attnx.MultiHeadAttention(32, 4, bias=True, input_grad=False, random_state=0)
        opt = attnx.AdamW(layer.params, lr=1e-3)
        x = rng.normal(size=(nb, t, 32)).astype(np.float32)
        yt = rng.normal(size=(nb, t, 32)).astype(np.float32)
        y = np.empty_like(x)
        dy = np.empty_like(x)

        def step():
            layer.forward(x, out=y)
            attnx.mse_loss(y, yt, out=dy)
            layer.backward(dy)
            opt.step(layer.grads)
        step()
        tracemalloc.start()
        for _ in range(3):
            step()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return peak

    small, large = step_allocations(2, 16), step_allocations(16, 64)
    assert large < 64 * 1024, large        # a few kilobytes of Python objects at most
    assert large < small + 16 * 1024       # and not growing with B*T (x32 here)


def test_new_shape_reallocates(rng):
    layer = _layer(8, 2)
    for t in (3, 9, 3):
        x = rng.normal(size=(2, t, 8))
        y = layer.forward(x)
        assert rel_err(y, mha_numpy(layer.params, x, 2)) < 1e-12
        assert layer.backward(np.ones_like(y)).shape == x.shape


def test_attention_weights_rows_sum_to_one(rng):
    layer = _layer(8, 2, causal=True)
    layer.forward(rng.normal(size=(2, 5, 8)))
    a = layer.attention_weights()
    assert a.shape == (2, 2, 5, 5)
    np.testing.assert_allclose(a.sum(-1), 1.0, rtol=1e-12)
    assert np.all(np.triu(a[0, 0], 1) == 0)


@pytest.mark.parametrize("bad,exc,words", [
    (np.zeros((2, 3)), ValueError, "3-D array"),
    (np.zeros((2, 3, 5)), ValueError, "8 features"),
    (np.zeros((0, 3, 8)), ValueError, "empty"),
    (np.zeros((2, 3, 8), dtype=complex), TypeError, "real numbers"),
    (np.full((2, 3, 8), np.nan), ValueError, "NaN"),
    ("abc", TypeError, "real numbers"),
])
def test_bad_input_raises_clearly(bad, exc, words):
    layer = _layer(8, 2)
    with pytest.raises(exc, match=words):
        layer.forward(bad)


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="divide"):
        attnx.MultiHeadAttention(10, 3)
    with pytest.raises(TypeError, match="dtype"):
        attnx.MultiHeadAttention(8, 2, dtype=np.int32)
    with pytest.raises(ValueError, match="even d_head"):
        attnx.MultiHeadAttention(6, 2, rope=True)
    with pytest.raises(ValueError, match="d_model"):
        attnx.MultiHeadAttention(0, 1)


def test_backward_checks(rng):
    layer = _layer(8, 2)
    with pytest.raises(RuntimeError, match="forward"):
        layer.backward(np.ones((2, 3, 8)))
    layer.forward(rng.normal(size=(2, 3, 8)))
    with pytest.raises(ValueError, match="sequence length 3"):
        layer.backward(np.ones((2, 4, 8)))
    with pytest.raises(ValueError, match="out must be"):
        layer.backward(np.ones((2, 3, 8)), out=np.empty((2, 3, 8), np.float32))


def test_mse_loss(rng):
    y = rng.normal(size=(3, 4, 5))
    t = rng.normal(size=(3, 4, 5))
    loss, dy = attnx.mse_loss(y, t)
    assert loss == pytest.approx(np.mean((y - t) ** 2), rel=1e-12)
    np.testing.assert_allclose(dy, 2 * (y - t) / y.size, rtol=1e-12)
    with pytest.raises(ValueError, match="shape"):
        attnx.mse_loss(y, t[:2])


def test_blas_small_gemm_reads_the_openblas_architecture():
    """The auto rule's BLAS probe reports what threadpoolctl says of the OpenBLAS
    that attnx calls (it used to import a helper that does not exist and so always
    answered False, sending every small-head float32 layer to the fused path)."""
    from threadpoolctl import threadpool_info

    from attnx.runtime import _threads
    from attnx.layers import attention
    attention._blas_small_gemm.cache_clear()
    try:
        got = attention._blas_small_gemm()
    finally:
        attention._blas_small_gemm.cache_clear()
    _threads.controller()  # identifies scipy's BLAS (BLAS_PATH) when it can
    libs = [i for i in threadpool_info() if i.get("internal_api") == "openblas"
            and (_threads.BLAS_PATH is None or i["filepath"] == _threads.BLAS_PATH)]
    want = bool(libs) and all(str(i.get("architecture")).lower()
                              in attention._SMALL_GEMM_CORES for i in libs)
    assert got is want
