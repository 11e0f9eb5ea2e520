"""The vectorised AdamW kernel (attnx.kernels._optim) that attnx.AdamW runs over its flat buffer."""
import json
import os
import subprocess
import tempfile
import sys

import numpy as np
import pytest

import attnx
from attnx.kernels import _ops, _optim, _testing

TOL = {np.float32: 2e-6, np.float64: 1e-14}
HYPER = (1e-2, 0.9, 0.999, 1e-8, 0.05)   # lr, beta1, beta2, eps, weight_decay


def _adamw_numpy(p, g, m, v, lr, b1, b2, eps, wd, t):
    """The update in float64, in torch.optim.AdamW's order."""
    p, g, m, v = (np.asarray(a, np.float64) for a in (p, g, m, v))
    p = p * (1 - lr * wd)
    m = m + (g - m) * (1 - b1)
    v = v * b2 + g * g * (1 - b2)
    p = p - lr / (1 - b1 ** t) * m / (np.sqrt(v) / np.sqrt(1 - b2 ** t) + eps)
    return p, m, v


def _state(n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    p = rng.normal(size=n).astype(dtype)
    m = (rng.normal(size=n) * 0.1).astype(dtype)
    v = (rng.random(n) * 0.01).astype(dtype)
    return p, m, v, rng


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 7, 16, 17, 1000, 200003])
def test_matches_float64_formula(dtype, n):
    """Five steps from one state against the formula in float64, and against the
    plain loop of attnx.kernels._testing, on lengths that leave vector tails and several slabs."""
    p, m, v, rng = _state(n, dtype)
    p2, m2, v2 = p.copy(), m.copy(), v.copy()
    for t in range(1, 6):
        g = rng.normal(size=n).astype(dtype)
        ref = _adamw_numpy(p, g, m, v, *HYPER, t)
        _optim.adamw_step(p, g, m, v, *HYPER, t, nthreads=2)
        _testing.adamw_reference(p2, g, m2, v2, *HYPER, t, 1)
        for a, r in zip((p, m, v), ref):
            assert np.max(np.abs(a - r)) <= TOL[dtype] * max(np.max(np.abs(r)), 1e-30)
        for a, b in zip((p, m, v), (p2, m2, v2)):
            assert np.max(np.abs(a - b)) <= TOL[dtype] * max(np.max(np.abs(b)), 1e-30)


def test_threads_split_the_buffer_not_the_result():
    n = 300001
    res = []
    for nth in (1, 2, 3):
        p, m, v, rng = _state(n, np.float32, seed=1)
        g = rng.normal(size=n).astype(np.float32)
        _optim.adamw_step(p, g, m, v, *HYPER, 1, nthreads=nth)
        res.append((p, m, v))
    for other in res[1:]:
        for a, b in zip(res[0], other):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=0)


def test_bad_arguments():
    p = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="one length"):
        _optim.adamw_step(p, np.zeros(3, np.float32), p.copy(), p.copy(), *HYPER, 1)
    with pytest.raises(ValueError, match="step"):
        _optim.adamw_step(p, p.copy(), p.copy(), p.copy(), *HYPER, 0)
    with pytest.raises(ValueError, match="nthreads"):
        _optim.adamw_step(p, p.copy(), p.copy(), p.copy(), *HYPER, 1, nthreads=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_runs_equal_the_step_of_each_run(dtype):
    """adamw_step_runs (one call over a buffer of many small parameters, the decay on
    some runs only) is bit for bit adamw_step on each run with its own decay."""
    n = 1000
    runs = np.array([(0, 100, 1), (100, 103, 0), (103, 103, 1), (103, 640, 1),
                     (640, 1000, 0)], np.int64)
    p, m, v, rng = _state(n, dtype)
    p0, p2, m2, v2 = p.copy(), p.copy(), m.copy(), v.copy()
    lr, b1, b2, eps, wd = HYPER
    for t in range(1, 4):
        g = rng.normal(size=n).astype(dtype)
        _optim.adamw_step_runs(p, g, m, v, *HYPER, t, runs)
        for a, z, dec in runs:
            _optim.adamw_step(p2[a:z], g[a:z], m2[a:z], v2[a:z], lr, b1, b2, eps,
                              wd if dec else 0.0, t, 1)
        for a, b in zip((p, m, v), (p2, m2, v2)):
            np.testing.assert_array_equal(a, b)
    assert np.all(p[:103] != p0[:103]) and np.all(p[640:] != p0[640:])   # every run moved
    with pytest.raises(ValueError, match=r"runs\[1\] = \(5, 1001\) is not a range"):
        _optim.adamw_step_runs(p, g, m, v, *HYPER, 1, np.array([(0, 5, 1), (5, 1001, 0)]))
    with pytest.raises(ValueError, match=r"runs must be \(k, 3\)"):
        _optim.adamw_step_runs(p, g, m, v, *HYPER, 1, np.zeros((2, 2), np.int64))


def test_reference_checks_lengths():
    """The test hook's plain AdamW loop checks its buffers like the kernel (before, it
    read and wrote past a shorter g, m or v)."""
    p = np.zeros(4, np.float32)
    for short in range(3):
        bufs = [p.copy(), p.copy(), p.copy()]
        bufs[short] = np.zeros(3, np.float32)
        with pytest.raises(ValueError, match="one length"):
            _testing.adamw_reference(p, *bufs, *HYPER, 1, 1)
    with pytest.raises(ValueError, match="step"):
        _testing.adamw_reference(p, p.copy(), p.copy(), p.copy(), *HYPER, 0, 1)


def test_adamw_hyperparameters_any_finite_real():
    """Hyper-parameters: any finite real (a Fraction too, which np.isfinite rejects);
    others raise TypeError naming the argument."""
    from fractions import Fraction
    layer = attnx.MultiHeadAttention(8, 2, random_state=0)
    opt = attnx.AdamW(layer.params, lr=Fraction(1, 100), betas=(Fraction(9, 10), 0.999))
    assert opt.lr == 0.01 and opt.betas == (0.9, 0.999) and type(opt.lr) is float
    for kw, name in [({"lr": 10**400}, "lr"), ({"lr": float("nan")}, "lr"),
                     ({"eps": "1e-8"}, "eps"), ({"weight_decay": True}, "weight_decay"),
                     ({"betas": (0.9, None)}, r"betas\[1\]")]:
        with pytest.raises(TypeError, match=name):
            attnx.AdamW(layer.params, **kw)


def test_adamw_class_uses_the_kernel():
    """attnx.AdamW over a model's flat buffer equals the kernel applied by hand."""
    layer = attnx.MultiHeadAttention(16, 2, random_state=0)
    x = np.random.default_rng(0).normal(size=(2, 5, 16)).astype(np.float32)
    y = layer.forward(x)
    layer.backward(np.ones_like(y))
    p0 = layer.params.flat.copy()
    m, v = np.zeros_like(p0), np.zeros_like(p0)
    opt = attnx.AdamW(layer.params, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05)
    opt.step(layer.grads)
    _optim.adamw_step(p0, layer.grads.flat, m, v, *HYPER, 1)
    np.testing.assert_array_equal(layer.params.flat, p0)


_LEVEL_SCRIPT = r"""
import json, sys
import numpy as np
from attnx.kernels import _optim
sys.path.insert(0, sys.argv[1])
from test_optim import _adamw_numpy, _state, HYPER
errs = {}
for dtype in (np.float32, np.float64):
    p, m, v, rng = _state(1031, dtype)
    g = rng.normal(size=1031).astype(dtype)
    ref = _adamw_numpy(p, g, m, v, *HYPER, 3)
    _optim.adamw_step(p, g, m, v, *HYPER, 3)
    errs[np.dtype(dtype).name] = max(float(np.max(np.abs(a - r)) / np.max(np.abs(r)))
                                     for a, r in zip((p, m, v), ref))
print(json.dumps({"level": _optim.dispatch_state()[0], "errs": errs}))
"""


@pytest.mark.parametrize("level", [0, 1, 2])
def test_every_simd_level(level):
    """Portable C, AVX2+FMA and AVX-512F builds (ATTNX_SIMD in a fresh interpreter)
    against the float64 formula; a level the CPU lacks is skipped and says so."""
    if _ops.cpu_level() < level:
        pytest.skip(f"this CPU has SIMD level {_ops.cpu_level()} < {level}")
    env = dict(os.environ, ATTNX_SIMD=str(level))
    env.pop("ATTNX_NO_SIMD", None)
    out = subprocess.run([sys.executable, "-c", _LEVEL_SCRIPT,
                          os.path.dirname(os.path.abspath(__file__))],
                         env=env, capture_output=True, text=True, timeout=120,
                         cwd=tempfile.gettempdir())   # not the checkout's unbuilt attnx/
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["level"] == level
    assert res["errs"]["float32"] < TOL[np.float32], res
    assert res["errs"]["float64"] < TOL[np.float64], res
