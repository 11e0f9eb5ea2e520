"""Every SIMD level of the kernels (0 portable C, 1 AVX2+FMA, 2 AVX-512F) is reached
when asked for and the CPU has it, and gives the same answers as the others.

Each level runs in its own interpreter (the level is fixed at import by ATTNX_SIMD).
What the CPU supports is read from /proc/cpuinfo, independently of attnx's own
detection, so a dispatch that silently stays on a lower level fails here.
.ci/simd_levels.sh also runs the kernel-level test files once per supported level;
test_level_of_this_process checks the level of that run.
"""
import functools
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import attnx
from attnx.kernels import _attention, _flash, _mlp, _ops, _optim, _testing

HERE = os.path.dirname(os.path.abspath(__file__))
NAMES = {0: "portable", 1: "avx2", 2: "avx512"}


def cpu_max_level():
    """Highest level this CPU supports, from the kernel's CPU flags."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = set()
            for line in f:
                if line.startswith("flags"):
                    flags.update(line.split(":", 1)[1].split())
                    break
    except OSError:
        pytest.skip("no /proc/cpuinfo: cannot tell independently what the CPU supports")
    if {"avx2", "fma"} <= flags:
        return 2 if "avx512f" in flags else 1
    return 0


# ---------------------------------------------------------------- one level per process
# small products of the child: (ta, tb, m, n, k), chunk and row-tile edges of the tiles
GEMM_SHAPES = ((0, 0, 29, 33, 5), (1, 0, 7, 24, 40), (0, 1, 13, 17, 9), (1, 1, 6, 8, 300),
               (1, 0, 64, 64, 300), (0, 0, 40, 48, 64))

CHILD = f"GEMM_SHAPES = {GEMM_SHAPES!r}\n" + r"""
import json, sys
import numpy as np
import attnx
from attnx.kernels import _ops, _testing

out = {}
rng = np.random.default_rng(7)
_testing.set_block_sizes(32, 24)   # several query and key blocks at these lengths
for dt in (np.float32, np.float64):
    tag = np.dtype(dt).name
    for path in ("dense", "blocked", "fused"):
        cases = {
            "self": dict(layer=dict(causal=True, rope=True, bias=True), t=70, tk=None),
            "cross": dict(layer=dict(bias=True), t=37, tk=45),
        }
        for name, c in cases.items():
            layer = attnx.MultiHeadAttention(16, 2, dtype=dt, random_state=3,
                                             attention=path, **c["layer"])
            for k in ("bq", "bk", "bv", "bo"):
                layer.params[k][...] = rng.normal(size=16) * 0.3
            x = rng.normal(size=(3, c["t"], 16)).astype(dt)
            ctx = None if c["tk"] is None else rng.normal(size=(3, c["tk"], 16)).astype(dt)
            tk = c["t"] if ctx is None else c["tk"]
            mask = rng.random((3, tk)) < 0.25
            y = layer.forward(x, ctx, mask)
            g = layer.backward(rng.normal(size=y.shape).astype(dt))
            dx = g[0] if ctx is not None else g
            key = f"{tag}_{path}_{name}"
            out[key + "_y"], out[key + "_dx"] = y, dx
            out[key + "_grads"] = layer.grads.flat.copy()
            if ctx is not None:
                out[key + "_dctx"] = g[1]
        model = attnx.Transformer(16, 2, n_layers=2, bias=True, causal=True, dtype=dt,
                                  random_state=5, attention=path)
        x = rng.normal(size=(2, 50, 16)).astype(dt) * 3
        y = model.forward(x)
        out[f"{tag}_{path}_transformer_y"] = y
        out[f"{tag}_{path}_transformer_dx"] = model.backward(rng.normal(size=y.shape).astype(dt))
        out[f"{tag}_{path}_transformer_grads"] = model.grads.flat.copy()
    # the vectorised AdamW over one flat buffer (a length that leaves vector tails), on
    # gradients of one scale: model gradients near zero would let the m / sqrt(v)
    # normalisation amplify rounding differences to whole steps
    layer = attnx.MultiHeadAttention(12, 2, bias=True, dtype=dt, random_state=0)
    opt = attnx.AdamW(layer.params, lr=1e-2, weight_decay=0.1)
    for _ in range(3):
        layer.grads.flat[...] = rng.normal(size=layer.grads.flat.shape) + 2.0
        opt.step(layer.grads)
    out[f"{tag}_adamw_params"] = layer.params.flat.copy()

# the PPV tokens' counting pass: ragged lengths, missing steps, a short last window,
# two biases (the fused path) and three (the general one), both dtypes
from attnx.kernels import _ppv
for dt in (np.float32, np.float64):
    x = rng.normal(size=(3, 61, 2)).astype(dt)
    lengths = np.array([61, 40, 7], np.int32)
    miss = (rng.random((3, 61)) < 0.1).astype(np.uint8)
    x[miss.astype(bool)] = 0
    dil = np.array([1, 2, 5], np.int32)
    comb = np.array([[0, 1, 2], [1, 4, 8], [0, 3, 6]], np.int32)
    for nq in (2, 3):
        bias = rng.normal(size=(3, 2, 3, nq)).astype(dt)
        o = np.empty((3, 7, 3 * 2 * 3 * nq), dt)
        _ppv.ppv(x, lengths, miss, dil, comb, bias, 9, o)
        out[f"ppv_{np.dtype(dt).name}_{nq}"] = o

# SiLU's backward pass (the MLP's elementwise step) on rows that leave vector tails
from attnx.kernels import _mlp
for dt in (np.float32, np.float64):
    h = (rng.normal(size=(5, 37)) * 4).astype(dt)
    sg = (1 / (1 + np.exp(-h.astype(np.float64)))).astype(dt)
    ds = rng.normal(size=(5, 37)).astype(dt)
    dh = np.empty_like(ds)
    _mlp.silu_backward(ds, h, sg, dh)
    out[f"silubwd_{np.dtype(dt).name}"] = dh
    out[f"silubwd_{np.dtype(dt).name}_in"] = np.stack([h, sg, ds])

# the dropout masks' random bits (SplitMix64 stream), lengths that leave tails
from attnx.kernels import _seq
for n in (1, 2, 17, 1001):
    bits = np.zeros(n, np.uint32)
    _seq.random_bits(np.random.PCG64(11), bits)
    out[f"splitmix_{n}"] = bits

# small float32 products (csrc/attnx_gemm_small.h's tiles at levels 1 and 2, BLAS elsewhere)
from attnx.kernels._testing import gemm_into
for i, (ta, tb, m, n, k) in enumerate(GEMM_SHAPES):
    a = rng.normal(size=(k, m) if ta else (m, k)).astype(np.float32)
    b = rng.normal(size=(n, k) if tb else (k, n)).astype(np.float32)
    c = rng.normal(size=(m, n)).astype(np.float32)
    out[f"gemm_{i}_a"], out[f"gemm_{i}_b"], out[f"gemm_{i}_c0"] = a, b, c.copy()
    gemm_into(bool(ta), bool(tb), a, b, c, m, n, k, alpha=0.5, beta=1.0)
    out[f"gemm_{i}_c"] = c

# the MSE loss and the non-finite check (the input and loss passes), lengths around the
# 8- and 16-element steps; one inf or NaN at every position of a short array
for dt in (np.float32, np.float64):
    name = np.dtype(dt).name
    for n in (1, 7, 8, 15, 16, 17, 1001):
        y, t = rng.normal(size=(2, n)).astype(dt)
        dy = np.empty_like(y)
        loss, _ = attnx.mse_loss(y, t, out=dy)
        out[f"mse_{name}_{n}"] = np.concatenate([[loss], dy.astype(np.float64)])
    flags = []
    for n in (5, 16, 33):
        for i in range(n):
            for bad in (np.inf, -np.inf, np.nan):
                a = np.ones(n, dt)
                a[i] = bad
                flags.append(_ops.all_finite(a))
        flags.append(_ops.all_finite(np.ones(n, dt)))
    out[f"finite_{name}"] = np.array(flags)

# special values at every lane position and in the ragged tails
special = np.array([np.nan, np.inf, -np.inf, 100.0, 88.7, 88.8, -87.5, -1e30, 0.0, 1.0],
                   dtype=np.float64)
f64 = np.tile(np.linspace(-5, 5, 37), 3)
f64[::7] = special[np.arange(len(f64[::7])) % len(special)]
out["exp_f64"] = _testing.exp_f64(np.concatenate([f64, [800.0, 709.7, -708.5]]))
out["exp_f32"] = _testing.exp_f32(f64.astype(np.float32))

# float32 score overflow: huge queries and keys make scores of +-inf
for path in ("dense", "blocked", "fused"):
    layer = attnx.MultiHeadAttention(16, 2, random_state=1, attention=path)
    x = np.random.default_rng(2).normal(size=(2, 40, 16)).astype(np.float32)
    x[:, ::3] *= np.float32(1e20)
    out["overflow_" + path] = layer.forward(x)

np.savez(sys.argv[1], **out)
print(json.dumps({"level": _ops.simd_level(), "name": _ops.simd_level_name(),
                  "modules": dispatching_modules()}))
"""

# Every compiled attnx module that includes attnx_math.h exposes dispatch_state()
# (see attnx/kernels/_ops.pxd); new kernel modules are found here without editing this file.
DISCOVER = r"""
import importlib, importlib.machinery, os
import attnx.kernels

def dispatching_modules():
    found = {}
    folder = os.path.dirname(attnx.kernels.__file__)
    for fn in sorted(os.listdir(folder)):
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            if fn.endswith(suffix):
                mod = importlib.import_module("attnx.kernels." + fn[:-len(suffix)])
                if hasattr(mod, "dispatch_state"):
                    found[mod.__name__.split(".")[-1]] = list(mod.dispatch_state())
                break
    return found
"""
# modules whose kernels the workload above certainly runs (all through the one
# dispatch mechanism of csrc/attnx_simd.h: the fused kernels and AdamW included)
EXERCISED = ("_ops", "_attention", "_mlp", "_flash", "_optim", "_testing", "_ppv", "_seq",
             "_blas")


@functools.lru_cache(maxsize=None)
def run_level(level, tmpdir):
    path = os.path.join(tmpdir, f"level{level}.npz")
    env = dict(os.environ, ATTNX_SIMD=str(level))
    env.pop("ATTNX_NO_SIMD", None)
    r = subprocess.run([sys.executable, "-c", DISCOVER + CHILD, path], env=env, capture_output=True,
                       text=True, cwd=tmpdir, timeout=600)
    assert r.returncode == 0, r.stderr
    state = json.loads(r.stdout.strip().splitlines()[-1])
    with np.load(path) as data:
        return state, {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def levels(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("simd"))
    return lambda level: run_level(level, tmp)


@pytest.mark.parametrize("level", [0, 1, 2])
def test_requested_level_is_reached(level, levels):
    """ATTNX_SIMD=level runs that level's kernels in every module when the CPU has
    it (else the best one it has), and no other level's."""
    expect = min(level, cpu_max_level())
    state, _ = levels(level)
    assert state["level"] == expect, state
    assert state["name"] == NAMES[expect]
    assert set(EXERCISED) <= set(state["modules"]), state
    for module, (attached, ran) in state["modules"].items():
        assert attached == expect, (module, state)
        if module in EXERCISED:
            assert ran == 1 << expect, f"{module} ran levels mask {ran:#b}, expected {expect}"
        else:   # a module the workload may not reach: whatever ran, ran at this level
            assert ran in (0, 1 << expect), f"{module} ran levels mask {ran:#b}"


TOL = {"float32": 5e-5, "float64": 1e-12}


@pytest.mark.parametrize("level", [1, 2])
def test_levels_agree_with_portable(level, levels):
    """Forward, dL/dX (and dL/dcontext) and every weight gradient, both dtypes, dense,
    blocked and fused, attention and transformer (SiLU MLP), and AdamW: level vs
    portable C."""
    _, ref = levels(0)
    _, got = levels(level)
    assert set(ref) == set(got)
    checked = 0
    for key, r in ref.items():
        if key.startswith(("exp_", "overflow_", "ppv_", "silubwd_", "splitmix_", "gemm_", "mse_",
                           "finite_")):
            continue
        g = got[key]
        assert np.isfinite(r).all() and np.isfinite(g).all(), key
        err = np.abs(g.astype(np.float64) - r).max() / np.abs(r).max()
        assert err < TOL[key.split("_")[0]], (key, err)
        checked += 1
    # dtypes * (paths * (self, cross, transformer) + AdamW)
    assert checked == 2 * (3 * (3 + 4 + 3) + 1)


@pytest.mark.parametrize("level", [1, 2])
def test_loss_and_input_checks_identical_across_levels(level, levels):
    """The MSE loss and dL/dY, and the non-finite check of every input, bit for bit the
    portable code's at every level (the loss keeps the portable code's eight partial
    sums; an inf or NaN is found at every lane position and in the tails)."""
    _, ref = levels(0)
    _, got = levels(level)
    keys = [k for k in ref if k.startswith(("mse_", "finite_"))]
    assert len(keys) == 2 * (7 + 1)
    for key in keys:
        np.testing.assert_array_equal(got[key], ref[key], err_msg=key)
    for name in ("float32", "float64"):
        flags = ref[f"finite_{name}"]
        assert flags.sum() == 3   # only the three all-ones arrays are finite


@pytest.mark.parametrize("level", [0, 1, 2])
def test_small_products_at_every_level(level, levels):
    """C = 0.5 op(A) op(B) + C at every level (the small-GEMM tiles at level 1, and at
    level 2 on Intel CPUs; BLAS elsewhere) against float64 matmul: edge columns, edge
    rows, both transposes."""
    state, got = levels(level)
    for i, (ta, tb, m, n, k) in enumerate(GEMM_SHAPES):
        a, b = got[f"gemm_{i}_a"].astype(np.float64), got[f"gemm_{i}_b"].astype(np.float64)
        want = 0.5 * ((a.T if ta else a) @ (b.T if tb else b)) + got[f"gemm_{i}_c0"]
        np.testing.assert_allclose(got[f"gemm_{i}_c"], want, rtol=1e-5, atol=1e-5 * np.sqrt(k),
                                   err_msg=str((level, ta, tb, m, n, k)))
    attached, ran = state["modules"]["_blas"]
    assert attached == min(level, cpu_max_level()) and ran == 1 << attached


@pytest.mark.parametrize("level", [1, 2])
def test_ppv_counts_identical_across_levels(level, levels):
    """The PPV counting pass gives the same fractions, bit for bit, at every level
    (integer counts of comparisons of the same doubles)."""
    _, ref = levels(0)
    _, got = levels(level)
    keys = [k for k in ref if k.startswith("ppv_")]
    assert len(keys) == 4
    for key in keys:
        assert np.any(ref[key] > 0) and np.any(ref[key] < 1), key   # not all 0 or 1
        np.testing.assert_array_equal(got[key], ref[key], err_msg=key)


@pytest.mark.parametrize("level", [0, 1, 2])
def test_random_bits_identical_across_levels(level, levels):
    """The dropout bits are the SplitMix64 stream of their key at every level: z_i =
    mix(key + (i + 1) * golden), two 32-bit draws per z, low half first."""
    _, got = levels(level)
    key = np.uint64(np.random.PCG64(11).random_raw())
    for n in (1, 2, 17, 1001):
        i = np.arange((n + 1) // 2, dtype=np.uint64)
        z = key + (i + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
        want = np.empty(2 * len(z), np.uint32)
        want[0::2] = (z & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        want[1::2] = (z >> np.uint64(32)).astype(np.uint32)
        np.testing.assert_array_equal(got[f"splitmix_{n}"], want[:n], err_msg=str(n))


@pytest.mark.parametrize("level", [0, 1, 2])
def test_silu_backward_identical_across_levels(level, levels):
    """SiLU's backward gives the bits of its defining arithmetic at every level:
    float32 dh = float(double(ds * sg) * (1 + double(h) * (1 - double(sg)))) with
    separate roundings (no FMA), float64 ds * sg * (1 + h * (1 - sg))."""
    _, got = levels(level)
    for dt in (np.float32, np.float64):
        key = f"silubwd_{np.dtype(dt).name}"
        h, sg, ds = got[key + "_in"]
        if dt is np.float32:
            f64 = np.float64
            want = ((ds * sg).astype(f64) * (1.0 + h.astype(f64) * (1.0 - sg.astype(f64)))
                    ).astype(np.float32)
        else:
            want = ds * sg * (1.0 + h * (1.0 - sg))
        assert got[key].dtype == dt
        np.testing.assert_array_equal(got[key], want, err_msg=key)


@pytest.mark.parametrize("level", [1, 2])
def test_special_values_identical_across_levels(level, levels):
    """NaN stays NaN, exp(+-inf) = inf / 0 and overflow gives inf at every level."""
    _, ref = levels(0)
    _, got = levels(level)
    for key in ("exp_f32", "exp_f64"):
        r, g = ref[key], got[key]
        np.testing.assert_array_equal(np.isnan(g), np.isnan(r), err_msg=key)
        np.testing.assert_array_equal(np.isinf(g), np.isinf(r), err_msg=key)
        np.testing.assert_array_equal(g == 0, r == 0, err_msg=key)
        fin = np.isfinite(r) & (r != 0)
        np.testing.assert_allclose(g[fin], r[fin], rtol=1e-6 if key == "exp_f32" else 1e-14)


def test_special_values_match_numpy(levels):
    """The portable exp against numpy on the special inputs."""
    _, ref = levels(0)
    x = np.tile(np.linspace(-5, 5, 37), 3)
    special = np.array([np.nan, np.inf, -np.inf, 100.0, 88.7, 88.8, -87.5, -1e30, 0.0, 1.0])
    x[::7] = special[np.arange(len(x[::7])) % len(special)]
    with np.errstate(over="ignore"):
        e32 = np.exp(x.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(ref["exp_f32"]), np.isnan(e32))
    np.testing.assert_array_equal(np.isinf(ref["exp_f32"]), np.isinf(e32))
    big = np.array([800.0, 709.7, -708.5])
    got = ref["exp_f64"][-3:]
    assert got[0] == np.inf and np.isclose(got[1], np.exp(709.7), rtol=1e-14)


@pytest.mark.parametrize("level", [1, 2])
def test_float32_score_overflow_identical_across_levels(level, levels):
    """Queries and keys near 1e20 overflow float32 scores to +-inf. Before, the AVX2 /
    AVX-512 exp turned the resulting NaN into a tiny number (finite garbage) while
    the portable path kept NaN. Now every level gives NaN in the same places, and
    the same finite values elsewhere."""
    _, ref = levels(0)
    _, got = levels(level)
    for path in ("dense", "blocked"):
        r, g = ref["overflow_" + path], got["overflow_" + path]
        nan = np.isnan(r)
        assert nan.any() and not nan.all(), "the case must overflow some rows only"
        np.testing.assert_array_equal(np.isnan(g), nan, err_msg=path)
        # (outputs of ~1e19 that cancel to ~1e13: the products' summation order, BLAS
        # at level 0 and the small-GEMM tiles at level 1, moves those by 1e-7 of the scale)
        np.testing.assert_allclose(g[~nan], r[~nan], rtol=1e-5,
                                   atol=1e-6 * np.abs(r[~nan]).max(), err_msg=path)
    np.testing.assert_array_equal(np.isnan(ref["overflow_dense"]),
                                  np.isnan(ref["overflow_blocked"]))


def test_level_of_this_process():
    """The level of the process running the suite (set by .ci/simd_levels.sh through
    ATTNX_SIMD) is the one asked for, capped by the CPU, in every module."""
    raw = os.environ.get("ATTNX_SIMD", "2")
    want = 0 if os.environ.get("ATTNX_NO_SIMD") else int(raw or 2)
    expect = min(want, cpu_max_level())
    assert _ops.simd_level() == expect
    for dt in (np.float32, np.float64):
        x = np.random.default_rng(0).normal(size=(1, 20, 8)).astype(dt)
        for path in ("dense", "fused"):
            layer = attnx.Transformer(8, 2, n_layers=1, random_state=0, dtype=dt,
                                      attention=path)
            layer.backward(layer.forward(x))
    ns = {}
    exec(DISCOVER, ns)
    for name, (attached, ran) in ns["dispatching_modules"]().items():
        assert attached == expect, name
        assert ran in (0, 1 << expect), name
    for mod in (_attention, _mlp, _flash):
        assert mod.dispatch_state()[1] == 1 << expect, mod.__name__
    assert _optim.dispatch_state()[0] == expect
    print(f"SIMD level in this process: {expect} ({NAMES[expect]})")


def test_unattached_module_fails_loudly():
    """A module whose dispatch state was never attached (level -1) refuses to run its
    kernels with RuntimeError instead of silently running the portable code; attached
    again, it runs."""
    x = np.linspace(-3, 0, 11)
    level = _testing.dispatch_state()[0]
    assert level >= 0
    _testing.simd_detach()
    try:
        assert _testing.dispatch_state()[0] == -1
        with pytest.raises(RuntimeError, match="simd_attach"):
            _testing.exp_f64(x)
        with pytest.raises(RuntimeError, match="simd_attach"):
            _testing.exp_f32(x.astype(np.float32))
    finally:
        _testing.simd_reattach()
    assert _testing.dispatch_state()[0] == level
    np.testing.assert_allclose(_testing.exp_f64(x), np.exp(x), rtol=1e-14)
