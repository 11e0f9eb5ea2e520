"""Kernel-level behaviour: float32 exp accuracy, the portable (non-SIMD) path,
and the multi-threaded paths giving the single-threaded results."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from attnx.runtime._threads import fixed_threads

import attnx
from attnx.kernels import _attnargs, _ops, _testing
from numeric_checks import rel_err
from reference import mha_numpy


def test_exp_f32_accuracy():
    x = np.concatenate([np.linspace(-87, 0, 200001), np.linspace(0, 88, 20001)]).astype(np.float32)
    got = _testing.exp_f32(x).astype(np.float64)
    ref = np.exp(x.astype(np.float64))
    rel = np.abs(got - ref) / ref
    assert rel.max() < 5e-7, rel.max()   # a few float32 ulps (ulp = 1.2e-7 relative)


def test_exp_f64_accuracy():
    x = np.concatenate([np.linspace(-700, 0, 300001), np.linspace(0, 700, 30001)])
    got = _testing.exp_f64(x)
    rel = np.abs(got - np.exp(x)) / np.exp(x)
    assert rel.max() < 1e-15, rel.max()   # a few float64 ulps (2.2e-16 each)
    assert np.all(_testing.exp_f64(np.array([-np.inf, -1e300, -750.0])) == 0.0)


def test_exp_f32_underflow_is_exact_zero():
    x = np.array([-np.inf, -1e30, -100.0, -87.5, -86.0], dtype=np.float32)
    got = _testing.exp_f32(x)
    assert np.all(got[:4] == 0.0)
    assert got[4] > 0


@pytest.mark.parametrize("level", [0, 1])
@pytest.mark.parametrize("opts", [dict(causal=True), dict(rope=True, bias=True)])
def test_lower_simd_levels_match_reference(level, opts, tmp_path):
    """ATTNX_SIMD=0 forces the portable C kernels, 1 the AVX2 ones (when the CPU
    has AVX2): each path must agree with the reference, exp included."""
    code = f"""
import numpy as np, attnx, sys
sys.path.insert(0, {os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "helpers")!r})
from reference import mha_numpy
from attnx.kernels import _ops, _testing
assert _ops.cpu_level() <= {level}
x = np.linspace(-87, 10, 100003).astype(np.float32)
e = np.abs(_testing.exp_f32(x) / np.exp(x.astype(np.float64)) - 1).max()
assert e < 5e-7, e
x = np.linspace(-700, 10, 100003)
e = np.abs(_testing.exp_f64(x) / np.exp(x) - 1).max()
assert e < 1e-15, e
layer = attnx.MultiHeadAttention(16, 4, random_state=0, **{opts!r})
x = np.random.default_rng(0).normal(size=(3, 70, 16)).astype(np.float32)
y = layer.forward(x)
ref = mha_numpy(layer.params, x, 4, causal={opts.get('causal', False)}, rope={opts.get('rope', False)})
err = float(np.abs(y - ref).max() / np.abs(ref).max())
assert err < 2e-5, err
print("ok", err)
"""
    env = dict(os.environ, ATTNX_SIMD=str(level))
    # run outside the checkout: `python -c` puts the working directory on sys.path
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ok")


_CHECKS_SCRIPT = r"""
import hashlib, json
import numpy as np
from attnx.kernels import _ops
rng = np.random.default_rng(0)
out = {"level": _ops.cpu_level()}
for dt in (np.float32, np.float64):
    for n in (1, 7, 8, 13, 1000, 65541):
        y = rng.standard_normal(n).astype(dt)
        t = (rng.standard_normal(n) * 3).astype(dt)
        dy = np.empty_like(y)
        loss = _ops.mse_into(y, t, dy)
        out[f"mse {np.dtype(dt).name} {n}"] = [loss.hex(),
                                               hashlib.sha1(dy.tobytes()).hexdigest()]
    x = rng.standard_normal(1001).astype(dt)
    bad = [bool(_ops.all_finite(x))]
    for v in (np.inf, -np.inf, np.nan):
        for pos in (0, 3, 500, 996, 1000):       # vector body and the tails
            z = x.copy()
            z[pos] = v
            bad.append(bool(_ops.all_finite(z)))
    out[f"finite {np.dtype(dt).name}"] = bad
print(json.dumps(out))
"""


def test_loss_and_finite_check_same_bits_at_every_level(tmp_path):
    """The MSE loss and its gradient are bit-for-bit the same at every SIMD level
    (same partial sums, no fused multiply-add), the loss matches a float64 NumPy
    sum, and the non-finite check finds an inf or NaN anywhere, tails included."""
    runs = []
    for level in (0, 1, 2):
        env = dict(os.environ, ATTNX_SIMD=str(level))
        r = subprocess.run([sys.executable, "-c", _CHECKS_SCRIPT], env=env,
                           capture_output=True, text=True, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        runs.append(json.loads(r.stdout))
    assert runs[0]["level"] == 0
    for run in runs:
        for k, v in run.items():
            if k.startswith("finite"):
                assert v == [True] + [False] * 15, (run["level"], k)
        assert {k: v for k, v in run.items() if k != "level"} == \
            {k: v for k, v in runs[0].items() if k != "level"}, run["level"]
    rng = np.random.default_rng(5)
    for dt in (np.float32, np.float64):
        y = rng.standard_normal(1003).astype(dt)
        t = rng.standard_normal(1003).astype(dt)
        dy = np.empty_like(y)
        loss = _ops.mse_into(y, t, dy)
        ref = np.mean((y.astype(np.float64) - t.astype(np.float64)) ** 2)
        assert abs(loss - ref) <= 1e-13 * ref
        np.testing.assert_array_equal(dy, (y - t) * dt(2 / 1003))


def test_mse_into_refuses_mismatched_lengths():
    y = np.zeros(8)
    with pytest.raises(ValueError, match="one length"):
        _ops.mse_into(y, np.zeros(7), np.empty(8))
    with pytest.raises(ValueError, match="one length"):
        _ops.mse_into(y, np.zeros(8), np.empty(9))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("causal", [False, True])
def test_threads_agree_with_one_thread(dtype, causal, rng):
    """Shapes large enough for the OpenMP paths (heads prange, split GEMMs, MLP)."""
    x = rng.normal(size=(4, 150, 32)).astype(dtype)   # 150: causal blocks with a ragged end
    dy = rng.normal(size=x.shape).astype(dtype)
    results = []
    for n in (1, 2):
        with fixed_threads(n):
            model = attnx.Transformer(32, 4, n_layers=2, causal=causal, dtype=dtype,
                                      random_state=0, bias=True)
            y = model.forward(x)
            dx = model.backward(dy)
            results.append((y, dx, model.grads.flat.copy()))
    tol = 1e-4 if dtype == np.float32 else 1e-11
    for a, b in zip(*results):
        assert rel_err(a, b) < tol
    layer = attnx.MultiHeadAttention(32, 4, causal=causal, dtype=dtype, random_state=1)
    with fixed_threads(2):
        y = layer.forward(x)
    assert rel_err(y, mha_numpy(layer.params, x, 4, causal=causal)) < tol


def test_cpu_level_reported():
    assert _ops.cpu_level() in (0, 1, 2)
    assert _ops.max_threads() >= 1


# ---------------------------------------------------------------- 32-bit BLAS sizes
def test_blas_int_limit_is_a_clear_error():
    """BLAS takes 32-bit ints: a GEMM dimension or leading dimension beyond 2**31 - 1
    is a ValueError naming it, raised before any allocation or work (checked with
    sizes only, nothing this large is allocated)."""
    from attnx.kernels import _blas
    _blas.check_blas_int("x", ("m", 2**31 - 1), ("n", 5))     # the largest that fits
    with pytest.raises(ValueError, match=r"x: m = 2147483648 exceeds 2147483647"):
        _blas.check_blas_int("x", ("n", 5), ("m", 2**31))
    with pytest.raises(ValueError, match=r"batch\*Tq = 4294967296"):
        _attnargs.check_sizes(65536, 65536, 16, 8)
    with pytest.raises(ValueError, match=r"batch\*Tk"):
        _attnargs.check_sizes(2, 16, 2**31, 8)
    with pytest.raises(ValueError, match=r"3\*d_model"):
        _attnargs.check_sizes(1, 16, 16, 2**30)
    # the layer checks before it sizes (or allocates) any workspace
    layer = attnx.MultiHeadAttention(8, 2, attention="blocked")
    with pytest.raises(ValueError, match=r"batch\*Tq"):
        layer._workspace(2**16, 2**16, 2**16, False, False)


# ---------------------------------------------------------------- blocked-path block sizes
def test_block_sizes_changed_after_a_forward(rng):
    """set_block_sizes after a forward: the next forward gets scratch of the new size
    (block sizes are in the workspace key) and the results stay right."""
    layer = attnx.MultiHeadAttention(16, 2, causal=True, attention="blocked", random_state=0)
    x = rng.normal(size=(3, 300, 16)).astype(np.float32)
    ref = mha_numpy(layer.params, x, 2, causal=True)
    old = _attnargs.block_sizes()
    try:
        y1 = layer.forward(x)
        _testing.set_block_sizes(256, 512)        # larger than the scratch made above
        y2 = layer.forward(x)
        assert layer._last[5].shape.block_sizes == (256, 512)
        dx2 = layer.backward(np.ones_like(y2))
        _testing.set_block_sizes(16, 8)           # smaller, ragged against T = 300
        y3 = layer.forward(x)
        dx3 = layer.backward(np.ones_like(y3))
    finally:
        _testing.set_block_sizes(*old)
    for y in (y1, y2, y3):
        assert rel_err(y, ref) < 2e-5
    assert rel_err(dx3, dx2) < 1e-4


#: AttnParams' weights (then their gradients) in its argument order
ORDER = ("qkv", "o", "bqkv", "bo")


def _kernel_call(path="dense", nb=2, t=40, d=8, h=2, store=True, threads=1, bias=False,
                 dtype=np.float32):
    """A shape, its buffers, parameters and per-call arrays for a direct kernel call."""
    f = dtype
    shape = _attnargs.AttnShape(path, nb, t, t, d, h, False, False, store, threads, f)
    bufs = _attnargs.AttnBuffers(shape)
    w = {"qkv": np.full((d, 3 * d), 0.1, f), "o": np.full((d, d), 0.1, f),
         "bqkv": np.zeros(3 * d, f) if bias else None, "bo": np.zeros(d, f) if bias else None}
    g = {k: None if v is None else np.empty_like(v) for k, v in w.items()}
    params = _attnargs.AttnParams(*(w[k] for k in ORDER), *(g[k] for k in ORDER))
    x = np.ones((nb * t, d), f)
    y = np.empty((nb * t, d), f)
    return shape, bufs, params, x, y


def _kernels(shape):
    from attnx.kernels import _attention, _flash
    return _flash if shape.path == _attnargs.FUSED else _attention


@pytest.mark.parametrize("path", ["dense", "blocked", "fused"])
def test_kernels_check_every_argument_before_work(path):
    """Every entry point (dense, blocked, fused alike) checks its shapes, buffers,
    parameters and per-call arrays before touching memory: ValueError (or TypeError)
    naming the argument."""
    shape, bufs, params, x, y = _kernel_call(path)
    k = _kernels(shape)
    k.attention_forward(shape, bufs, params, x, None, None, None, None, y, 1)   # runs
    bad_x = np.ones((2 * 39, 8), np.float32)
    with pytest.raises(ValueError, match="x must have shape"):
        k.attention_forward(shape, bufs, params, bad_x, None, None, None, None, y, 1)
    with pytest.raises(ValueError, match="y must have shape"):
        k.attention_forward(shape, bufs, params, x, None, None, None, None, y[:-1], 1)
    with pytest.raises(ValueError, match="y must be float32"):
        k.attention_forward(shape, bufs, params, x, None, None, None, None,
                            y.astype(np.float64), 1)
    with pytest.raises(ValueError, match="residual"):
        k.attention_forward(shape, bufs, params, x, None, None, None, x[:, :4].copy(), y, 1)
    with pytest.raises(ValueError, match="key_padding_mask"):
        k.attention_forward(shape, bufs, params, x, None, np.zeros((2, 39), np.uint8), None,
                            None, y, 1)
    with pytest.raises(ValueError, match="ctx must be None"):
        k.attention_forward(shape, bufs, params, x, x, None, None, None, y, 1)
    cos = np.ones((40, 2), np.float32)
    with pytest.raises(ValueError, match="rope sin"):
        k.attention_forward(shape, bufs, params, x, None, None, (cos, cos[:39]), None, y, 1)
    with pytest.raises(ValueError, match="nthreads"):     # scratch made for one thread
        k.attention_forward(shape, bufs, params, x, None, None, None, None, y, 2)
    with pytest.raises(ValueError, match="nthreads"):
        k.attention_forward(shape, bufs, params, x, None, None, None, None, y, 0)
    other, obufs, oparams, *_ = _kernel_call(path, t=20)
    with pytest.raises(ValueError, match="buffers were made for"):
        k.attention_forward(shape, obufs, params, x, None, None, None, None, y, 1)
    _, _, wide, _, _ = _kernel_call(path, d=16)
    with pytest.raises(ValueError, match="params of width 16"):
        k.attention_forward(shape, bufs, wide, x, None, None, None, None, y, 1)
    with pytest.raises(TypeError):
        k.attention_forward(shape, bufs, None, x, None, None, None, None, y, 1)
    # backward: the backward part of the buffers first, then dy, dx
    with pytest.raises(ValueError, match="for_backward"):
        k.attention_backward(shape, bufs, params, x, None, None, None, y, None, None, 0, 1)
    bufs.for_backward()
    k.attention_backward(shape, bufs, params, x, None, None, None, y, np.empty_like(x), None,
                         0, 1)
    with pytest.raises(ValueError, match="dy must have shape"):
        k.attention_backward(shape, bufs, params, x, None, None, None, y[1:], None, None, 0, 1)
    ro = np.empty_like(x)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="dx must be writeable"):
        k.attention_backward(shape, bufs, params, x, None, None, None, y, ro, None, 0, 1)
    # the other family's entry refuses this shape
    from attnx.kernels import _attention, _flash
    wrong = _attention if k is _flash else _flash
    with pytest.raises(ValueError, match="fused"):
        wrong.attention_forward(shape, bufs, params, x, None, None, None, None, y, 1)


def test_params_check_weight_bias_and_gradient_shapes():
    """AttnParams checks every weight, bias and gradient once (the fused path's
    entry took them unchecked before)."""
    f = np.float32
    d = 8
    w = {"qkv": np.ones((d, 3 * d), f), "o": np.ones((d, d), f), "bqkv": np.zeros(3 * d, f),
         "bo": np.zeros(d, f)}
    g = {k: np.empty_like(v) for k, v in w.items()}

    def params(ww, gg):
        return _attnargs.AttnParams(*(ww[k] for k in ORDER), *(gg[k] for k in ORDER))

    p = params(w, g)
    assert p.w_qkv is w["qkv"] and p.db_o is g["bo"] and p.d == d
    for which, key, bad, match in [
            ("w", "qkv", np.ones((d, 2 * d), f), r"w_qkv must have shape \(8, 24\)"),
            ("w", "bqkv", np.zeros(2 * d, f), r"b_qkv must have shape"),
            ("w", "o", np.ones((d, d), np.float16), "w_o must be float32 or float64"),
            ("g", "o", np.ones((d, d + 1), f), r"dw_o must have shape"),
            ("g", "bo", None, "all None"),
            ("g", "qkv", np.ones((d, 3 * d), np.float64), "float32"),
            ("g", "qkv", np.ones((3 * d, d), f).T, "shape|C-contiguous")]:
        ww, gg = dict(w), dict(g)
        (ww if which == "w" else gg)[key] = bad
        with pytest.raises(ValueError, match=match):
            params(ww, gg)
    ro = {k: v.copy() for k, v in g.items()}
    ro["o"].flags.writeable = False
    with pytest.raises(ValueError, match="dw_o must be writeable"):
        params(w, ro)


def test_shape_checks_sizes_first():
    """AttnShape checks its sizes before anything is computed from them (no
    `rows // nb` of unchecked numbers) and refuses what does not fit."""
    with pytest.raises(ValueError, match="n_heads dividing"):
        _attnargs.AttnShape("dense", 2, 4, 4, 10, 3, False, False, True, 1, np.float32)
    with pytest.raises(ValueError, match="positive"):
        _attnargs.AttnShape("fused", 0, 4, 4, 8, 2, False, False, True, 1, np.float32)
    with pytest.raises(ValueError, match="tk == tq"):
        _attnargs.AttnShape("fused", 1, 4, 5, 8, 2, False, False, True, 1, np.float32)
    with pytest.raises(ValueError, match="path"):
        _attnargs.AttnShape("flash", 1, 4, 4, 8, 2, False, False, True, 1, np.float32)
    with pytest.raises(ValueError, match="dtype"):
        _attnargs.AttnShape("dense", 1, 4, 4, 8, 2, False, False, True, 1, np.float16)
    with pytest.raises(ValueError, match="threads"):
        _attnargs.AttnShape("dense", 1, 4, 4, 8, 2, False, False, True, 0, np.float32)


@pytest.mark.parametrize("path", ["dense", "blocked", "fused"])
@pytest.mark.parametrize("store", [True, False])
@pytest.mark.parametrize("cross", [True, False])
def test_size_table_is_what_is_allocated(path, store, cross):
    """The shape's size table is the one source of every buffer size: the buffers
    hold exactly its counts, and elements() (the memory estimate) is their sum."""
    tk = 24 if cross else 16
    shape = _attnargs.AttnShape(path, 3, 16, tk, 16, 2, cross, True, store, 2, np.float64)
    bufs = _attnargs.AttnBuffers(shape)
    if store:
        bufs.for_backward()
    total = shape.n_inputs
    for name in ("q", "kv", "zcat", "probs", "tbuf", "lse", "fwd_scratch", "dzcat", "dq",
                 "dkv", "bwd_scratch", "dq_parts"):
        a = getattr(bufs, name)
        n = getattr(shape, "n_" + name)
        assert (0 if a is None else a.size) == n, name
        total += n
    assert shape.elements() == total
    assert (bufs.probs is not None) == (path == "dense")
    assert (bufs.lse is not None) == (path == "blocked" or (path == "fused" and store))


def test_mlp_kernel_checks_shapes():
    from attnx.kernels import _mlp
    f = np.float32
    z = np.ones((4, 8), f)
    w1, w2 = np.ones((8, 16), f), np.ones((16, 8), f)
    h, s, sg = (np.empty((4, 16), f) for _ in range(3))
    out = np.empty((4, 8), f)
    _mlp.mlp_forward(z, (w1, None, w2, None), (h, s, sg), out, nthreads=1)
    with pytest.raises(ValueError, match="sg"):
        _mlp.mlp_forward(z, (w1, None, w2, None), (h, s, np.empty((3, 16), f)), out,
                         nthreads=1)
    with pytest.raises(ValueError, match="nthreads"):
        _mlp.mlp_forward(z, (w1, None, w2, None), (h, s, sg), out)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mlp_forward_without_sigmoid_is_the_same(dtype, rng):
    """Inference passes sg=None: the same H, S and output, sigmoid(H) not written
    (33 columns: the vector loops and their scalar tails)."""
    from attnx.kernels import _mlp
    z = rng.normal(size=(5, 8)).astype(dtype)
    w1, w2 = rng.normal(size=(8, 33)).astype(dtype), rng.normal(size=(33, 8)).astype(dtype)
    b1, b2 = rng.normal(size=33).astype(dtype), rng.normal(size=8).astype(dtype)
    outs = []
    for keep in (True, False):
        h, s = np.empty((5, 33), dtype), np.empty((5, 33), dtype)
        sg = np.full((5, 33), 7.0, dtype)
        out = np.empty((5, 8), dtype)
        _mlp.mlp_forward(z, (w1, b1, w2, b2), (h, s, sg if keep else None), out,
                         nthreads=1)
        outs.append((h, s, out))
        if keep:
            np.testing.assert_allclose(sg, 1 / (1 + np.exp(-h)), rtol=1e-6)
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)
    hh = z.astype(np.float64) @ w1 + b1
    want = (hh / (1 + np.exp(-hh))) @ w2 + b2 + z
    np.testing.assert_allclose(outs[1][2], want, rtol=1e-4 if dtype == np.float32 else 1e-12,
                               atol=1e-4 if dtype == np.float32 else 1e-12)
