"""Kernel-level behaviour: float32 exp accuracy, the portable (non-SIMD) path,
and the multi-threaded paths giving the single-threaded results."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import attnx
from attnx import _ops
from conftest import rel_err
from reference import mha_numpy


def test_exp_f32_accuracy():
    x = np.concatenate([np.linspace(-87, 0, 200001), np.linspace(0, 88, 20001)]).astype(np.float32)
    got = _ops.exp_f32(x).astype(np.float64)
    ref = np.exp(x.astype(np.float64))
    rel = np.abs(got - ref) / ref
    assert rel.max() < 5e-7, rel.max()   # a few float32 ulps (ulp = 1.2e-7 relative)


def test_exp_f64_accuracy():
    x = np.concatenate([np.linspace(-700, 0, 300001), np.linspace(0, 700, 30001)])
    got = _ops.exp_f64(x)
    rel = np.abs(got - np.exp(x)) / np.exp(x)
    assert rel.max() < 1e-15, rel.max()   # a few float64 ulps (2.2e-16 each)
    assert np.all(_ops.exp_f64(np.array([-np.inf, -1e300, -750.0])) == 0.0)


def test_exp_f32_underflow_is_exact_zero():
    x = np.array([-np.inf, -1e30, -100.0, -87.5, -86.0], dtype=np.float32)
    got = _ops.exp_f32(x)
    assert np.all(got[:4] == 0.0)
    assert got[4] > 0


@pytest.mark.parametrize("level", [0, 1])
@pytest.mark.parametrize("opts", [dict(causal=True), dict(rope=True, bias=True)])
def test_lower_simd_levels_match_reference(level, opts, tmp_path):
    """ATTNX_SIMD=0 forces the portable C kernels, 1 the AVX2 ones (when the CPU
    has AVX2): each path must agree with the reference, exp included."""
    code = f"""
import numpy as np, attnx, sys
sys.path.insert(0, {os.path.dirname(__file__)!r})
from reference import mha_numpy
from attnx import _ops
assert _ops.cpu_level() <= {level}
x = np.linspace(-87, 10, 100003).astype(np.float32)
e = np.abs(_ops.exp_f32(x) / np.exp(x.astype(np.float64)) - 1).max()
assert e < 5e-7, e
x = np.linspace(-700, 10, 100003)
e = np.abs(_ops.exp_f64(x) / np.exp(x) - 1).max()
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
from attnx import _ops
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
        with threadpool_limits(limits=n):
            model = attnx.Transformer(32, 4, n_layers=2, causal=causal, dtype=dtype,
                                      random_state=0, bias=True)
            y = model.forward(x)
            dx = model.backward(dy)
            results.append((y, dx, model.grads.flat.copy()))
    tol = 1e-4 if dtype == np.float32 else 1e-11
    for a, b in zip(*results):
        assert rel_err(a, b) < tol
    layer = attnx.MultiHeadAttention(32, 4, causal=causal, dtype=dtype, random_state=1)
    with threadpool_limits(limits=2):
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
    from attnx import _attention, _blas
    _blas.check_blas_int("x", m=2**31 - 1, n=5)          # the largest that fits
    with pytest.raises(ValueError, match=r"m = 2147483648 exceeds 2147483647"):
        _blas.check_blas_int("x", m=2**31)
    with pytest.raises(ValueError, match=r"batch\*Tq = 4294967296"):
        _attention.check_sizes(65536, 65536, 16, 8)
    with pytest.raises(ValueError, match=r"batch\*Tk"):
        _attention.check_sizes(2, 16, 2**31, 8)
    with pytest.raises(ValueError, match=r"3\*d_model"):
        _attention.check_sizes(1, 16, 16, 2**30)
    # the layer checks before it sizes (or allocates) any workspace
    layer = attnx.MultiHeadAttention(8, 2, attention="blocked")
    with pytest.raises(ValueError, match=r"batch\*Tq"):
        layer._workspace(2**16, 2**16, 2**16, False, False)


# ---------------------------------------------------------------- blocked-path block sizes
def test_block_sizes_changed_after_a_forward(rng):
    """set_block_sizes after a forward: the next forward gets scratch of the new size
    (block sizes are in the workspace key) and the results stay right."""
    from attnx import _attention
    layer = attnx.MultiHeadAttention(16, 2, causal=True, attention="blocked", random_state=0)
    x = rng.normal(size=(3, 300, 16)).astype(np.float32)
    ref = mha_numpy(layer.params, x, 2, causal=True)
    old = _attention.block_sizes()
    try:
        y1 = layer.forward(x)
        _attention.set_block_sizes(256, 512)        # larger than the scratch made above
        y2 = layer.forward(x)
        dx2 = layer.backward(np.ones_like(y2))
        _attention.set_block_sizes(16, 8)           # smaller, ragged against T = 300
        y3 = layer.forward(x)
        dx3 = layer.backward(np.ones_like(y3))
    finally:
        _attention.set_block_sizes(*old)
    for y in (y1, y2, y3):
        assert rel_err(y, ref) < 2e-5
    assert rel_err(dx3, dx2) < 1e-4


def _kernel_args(nb=2, t=40, d=8, h=2, store=True, blocked=False, threads=1,
                 probs=None, tbuf=None, lse=None):
    f = np.float32
    x = np.ones((nb * t, d), f)
    w_qkv = np.ones((d, 3 * d), f) * 0.1
    w_o = np.ones((d, d), f) * 0.1
    qbuf = np.empty((nb * t, 3 * d), f)
    zcat = np.empty((nb * t, d), f)
    y = np.empty((nb * t, d), f)
    if probs is None:
        probs = np.empty((nb * h if store else threads) * t * t, f)
    if tbuf is None and not blocked:
        tbuf = np.empty(threads * (d // h) * t, f)
    return (x, None, w_qkv, None, w_o, None, qbuf, None, zcat, probs, y, nb, h, False,
            store, None, None, None), dict(lse=lse, tbuf=tbuf, nthreads=threads)


def test_kernels_check_their_scratch_before_work():
    """Handed scratch too small for the sizes, block sizes or thread count, a kernel
    raises ValueError before touching memory (before, it wrote past the buffer)."""
    from attnx import _attention
    args, kw = _kernel_args()
    _attention.attention_forward(*args, **kw)       # right sizes: runs
    args, kw = _kernel_args(probs=np.empty(10, np.float32))
    with pytest.raises(ValueError, match="probs"):
        _attention.attention_forward(*args, **kw)
    args, kw = _kernel_args(store=False, threads=1)
    kw["nthreads"] = 4                               # scratch made for one thread
    with pytest.raises(ValueError, match="probs|tbuf"):
        _attention.attention_forward(*args, **kw)
    args, kw = _kernel_args(tbuf=np.empty(3, np.float32))
    with pytest.raises(ValueError, match="tbuf"):
        _attention.attention_forward(*args, **kw)
    args, kw = _kernel_args()
    kw["nthreads"] = 0
    with pytest.raises(ValueError, match="nthreads"):
        _attention.attention_forward(*args, **kw)
    # blocked: scratch sized for 128x128 blocks, then the block sizes grow
    old = _attention.block_sizes()
    fwd, _ = _attention.blocked_scratch_sizes(40, 4)
    args, kw = _kernel_args(blocked=True, probs=np.empty(fwd, np.float32),
                            lse=np.empty(2 * 2 * 40, np.float32))
    _attention.attention_forward(*args, **kw)
    try:
        _attention.set_block_sizes(256, 256)
        with pytest.raises(ValueError, match="blocked scratch"):
            _attention.attention_forward(*args, **kw)
    finally:
        _attention.set_block_sizes(*old)


def test_mlp_kernel_checks_shapes():
    from attnx import _mlp
    f = np.float32
    z = np.ones((4, 8), f)
    w1, w2 = np.ones((8, 16), f), np.ones((16, 8), f)
    h, s, sg = (np.empty((4, 16), f) for _ in range(3))
    out = np.empty((4, 8), f)
    _mlp.mlp_forward(z, w1, None, w2, None, h, s, sg, out, nthreads=1)
    with pytest.raises(ValueError, match="sg"):
        _mlp.mlp_forward(z, w1, None, w2, None, h, s, np.empty((3, 16), f), out, nthreads=1)
    with pytest.raises(ValueError, match="nthreads"):
        _mlp.mlp_forward(z, w1, None, w2, None, h, s, sg, out)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mlp_forward_without_sigmoid_is_the_same(dtype, rng):
    """Inference passes sg=None: the same H, S and output, sigmoid(H) not written
    (33 columns: the vector loops and their scalar tails)."""
    from attnx import _mlp
    z = rng.normal(size=(5, 8)).astype(dtype)
    w1, w2 = rng.normal(size=(8, 33)).astype(dtype), rng.normal(size=(33, 8)).astype(dtype)
    b1, b2 = rng.normal(size=33).astype(dtype), rng.normal(size=8).astype(dtype)
    outs = []
    for keep in (True, False):
        h, s = np.empty((5, 33), dtype), np.empty((5, 33), dtype)
        sg = np.full((5, 33), 7.0, dtype)
        out = np.empty((5, 8), dtype)
        _mlp.mlp_forward(z, w1, b1, w2, b2, h, s, sg if keep else None, out, nthreads=1)
        outs.append((h, s, out))
        if keep:
            np.testing.assert_allclose(sg, 1 / (1 + np.exp(-h)), rtol=1e-6)
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)
    hh = z.astype(np.float64) @ w1 + b1
    want = (hh / (1 + np.exp(-hh))) @ w2 + b2 + z
    np.testing.assert_allclose(outs[1][2], want, rtol=1e-4 if dtype == np.float32 else 1e-12,
                               atol=1e-4 if dtype == np.float32 else 1e-12)
