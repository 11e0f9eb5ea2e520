"""Kernel-level behaviour: float32 exp accuracy, the portable (non-SIMD) path,
and the multi-threaded paths giving the single-threaded results."""
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
