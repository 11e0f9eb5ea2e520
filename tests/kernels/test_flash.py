"""The fused small-head attention kernels (attnx.kernels._flash, csrc/attnx_flash*.h).

Against PyTorch autograd on identical weights (forward and every gradient),
against the dense path, against central finite differences, at every SIMD
level the CPU has (subprocesses with ATTNX_SIMD), on shapes that are not
multiples of the tile and block sizes, and with NaN inputs.
"""
import itertools
import json
import os
import subprocess
import tempfile
import sys

import numpy as np
import pytest

import attnx
from attnx.kernels import _attnargs, _flash, _ops, _testing
from attnx.layers.attention import FUSED_MAX_D_HEAD
from numeric_checks import rel_err
from gradcheck import check_grads
from reference import mha_torch

HELPERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "helpers")
TOL = {np.float32: 1e-4, np.float64: 1e-10}


def _layer(d, h, dtype, path="fused", bias=True, rng=None, **kw):
    layer = attnx.MultiHeadAttention(d, h, dtype=dtype, random_state=3, bias=bias,
                                     attention=path, **kw)
    if bias and rng is not None:
        for k in ("bq", "bk", "bv", "bo"):
            layer.params[k][...] = rng.normal(size=d) * 0.5
    return layer


def _inputs(rng, dtype, nb, tq, tk, d, cross, mask):
    x = rng.normal(size=(nb, tq, d)).astype(dtype)
    c = rng.normal(size=(nb, tk, d)).astype(dtype) if cross else None
    kpm = None
    if mask:
        kpm = rng.random((nb, tk)) < 0.3
        kpm[0, 0] = False          # the first sample attends to something
        if nb > 1:
            kpm[-1, :] = True      # the last ignores every key: zero rows
    return x, c, kpm


def _run(layer, x, c, kpm, dy):
    y = layer.forward(x, c, kpm)
    out = layer.backward(dy)
    dx, dc = out if c is not None else (out, None)
    return y, dx, dc, {k: v.copy() for k, v in layer.grads.items()}


# d_head 2, 6, 8, 24, 64, 128 and T 1, 7, 129 (not multiples of the 32-row query block,
# the 128-key block or the 8/16-wide register tiles); 300 keys span three key blocks.
# Tq 260 and 300: three groups of query blocks (4 x 32 rows per sweep over the keys),
# the last one partial; 260+ keys: the transposes' padded row stride.
SHAPES = [  # (batch, Tq, Tk for cross, d_model, heads)
    (2, 1, 3, 4, 2),
    (2, 7, 5, 12, 2),
    (3, 7, 9, 16, 2),
    (1, 129, 129, 48, 2),
    (2, 33, 300, 64, 1),
    (1, 129, 40, 128, 2),
    (1, 300, 260, 32, 2),
    (1, 260, 300, 24, 3),
    (2, 70, 140, 256, 2),     # d_head 128 (auto takes the fused kernels at any width)
]
OPTS = [dict(), dict(causal=True), dict(mask=True), dict(cross=True), dict(rope=True),
        dict(causal=True, mask=True, cross=True, rope=True)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("opts", OPTS, ids=lambda o: "-".join(o) or "plain")
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_fused_matches_torch(torch, dtype, opts, shape, rng):
    nb, tq, tk, d, h = shape
    opts = dict(opts)
    cross, mask = opts.pop("cross", False), opts.pop("mask", False)
    tk = tk if cross else tq
    tdt = torch.float32 if dtype == np.float32 else torch.float64
    layer = _layer(d, h, dtype, rng=rng, **opts)
    x, c, kpm = _inputs(rng, dtype, nb, tq, tk, d, cross, mask)
    dy = rng.normal(size=(nb, tq, d)).astype(dtype)
    y, dx, dc, grads = _run(layer, x, c, kpm, dy)

    tp = {k: torch.tensor(np.array(v), dtype=tdt, requires_grad=True)
          for k, v in layer.params.items()}
    xt = torch.tensor(x, requires_grad=True)
    ct = torch.tensor(c, requires_grad=True) if cross else None
    yt = mha_torch(torch, tp, xt, h, causal=opts.get("causal", False), context=ct,
                   key_padding_mask=kpm, rope=opts.get("rope", False))
    (yt * torch.tensor(dy)).sum().backward()

    tol = TOL[dtype]
    assert rel_err(y, yt.detach().numpy()) < tol
    # dX is zero in exact arithmetic when a query sees a single key (P = 1, dS = 0):
    # judge it on dY's scale, as the weight gradients are judged on dW's
    assert rel_err(dx, xt.grad.numpy(), floor=np.abs(dy).max()) < tol
    if cross:
        assert rel_err(dc, ct.grad.numpy()) < tol
    wscale = max(np.abs(tp[w].grad.numpy()).max() for w in ("Wq", "Wk", "Wv", "Wo"))
    for k, v in tp.items():
        # bk's gradient is zero in exact arithmetic without rope: judge it on dW's scale
        assert rel_err(grads[k], v.grad.numpy(), floor=wscale) < tol, k
    if mask and nb > 1:  # the sample with every key ignored outputs bo only
        np.testing.assert_allclose(y[-1], np.broadcast_to(layer.params["bo"], y[-1].shape),
                                   rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fused_equals_dense_and_blocked(dtype, rng):
    """The three paths agree to rounding on a shape with several query and key blocks."""
    nb, tq, tk, d, h = 2, 70, 260, 24, 3
    outs = {}
    for path in ("dense", "blocked", "fused"):
        r = np.random.default_rng(7)
        layer = _layer(d, h, dtype, path, rng=r, causal=True, rope=True)
        x, c, kpm = _inputs(r, dtype, nb, tq, tk, d, True, True)
        dy = r.normal(size=(nb, tq, d)).astype(dtype)
        outs[path] = _run(layer, x, c, kpm, dy)
    for path in ("dense", "blocked"):
        a, b = outs["fused"], outs[path]
        for u, v in zip(a[:3], b[:3]):
            assert rel_err(u, v) < TOL[dtype], path
        for k in a[3]:
            assert rel_err(a[3][k], b[3][k], floor=np.abs(b[3]["Wq"]).max()) < TOL[dtype], k


def test_fused_finite_differences(rng):
    """float64 gradients of a masked causal cross-attention with rope against central
    differences (every weight, bias and both inputs)."""
    nb, tq, tk, d, h = 2, 5, 7, 12, 2
    layer = _layer(d, h, np.float64, rng=rng, causal=True, rope=True)
    x, c, kpm = _inputs(rng, np.float64, nb, tq, tk, d, True, True)
    kpm[-1, :] = False
    kpm[-1, 2] = True
    w = rng.normal(size=(nb, tq, d))

    def loss():
        return float(np.sum(layer.forward(x, c, kpm, grad=False) * w))

    layer.forward(x, c, kpm)
    dx, dc = layer.backward(w)
    arrays = dict(layer.params.items(), x=x, c=c)
    analytic = dict({k: v.copy() for k, v in layer.grads.items()}, x=dx, c=dc)
    worst = check_grads(loss, arrays, analytic, rng, n_probe=12, tol=1e-7)
    assert worst < 1e-7


@pytest.mark.parametrize("small_gemm", [False, True])
def test_auto_rule(monkeypatch, small_gemm):
    """The documented rule: fused from 128 x 128 scores at any d_head (64 x 64 for
    inference); below that, fused for d_head <= FUSED_MAX_D_HEAD when BLAS has no
    small-matrix kernels, in float64, or at d_head <= 8; else dense."""
    from attnx.layers import attention
    monkeypatch.setattr(attention, "_blas_small_gemm", lambda: small_gemm)
    for d, h, dtype, t, want in [
            (64, 8, np.float32, 64, "fused"),                     # d_head 8
            (64, 4, np.float32, 64, "dense" if small_gemm else "fused"),
            (64, 2, np.float32, 64, "dense" if small_gemm else "fused"),
            (64, 8, np.float64, 64, "fused"),
            (64, 2, np.float64, 64, "fused"),
            (128, 2, np.float64, 64, "dense"),                    # d_head 64, short
            (128, 2, np.float32, 64, "dense"),
            (64, 2, np.float32, 128, "fused"),                    # 128 x 128 scores
            (128, 2, np.float32, 128, "fused"),
            (256, 1, np.float32, 128, "fused"),
            (128, 2, np.float32, 4096, "fused"),
            (64, 8, np.float32, 2048, "fused")]:
        layer = attnx.MultiHeadAttention(d, h, dtype=dtype)
        assert layer._path(t, t) == want, (d, h, dtype, t)
    for d, h, t, want in [(64, 2, 64, "fused"), (128, 2, 64, "fused"), (256, 1, 64, "fused"),
                          (64, 2, 32, "dense" if small_gemm else "fused"),
                          (128, 2, 32, "dense")]:
        layer = attnx.MultiHeadAttention(d, h)
        assert layer._path(t, t, store=False) == want, (d, h, t)
    assert attnx.MultiHeadAttention(64, 2)._path(200, 82) == "fused"   # cross: Tq * Tk
    layer = attnx.MultiHeadAttention(64, 2)
    for t, want in [(32, "dense" if small_gemm else "fused"), (64, "fused")]:
        x = np.random.default_rng(0).normal(size=(2, t, 64)).astype(np.float32)
        layer.forward(x, grad=False)     # the forward takes the path of the rule
        assert [k[5] for k in layer._ws._items if k[1] == t] == [want]
    assert attention.FUSED_MIN_SCORES == 128 * 128 and attention.FUSED_INFER_MIN_SCORES == 64 * 64
    assert FUSED_MAX_D_HEAD == 32 and attention.FUSED_ALWAYS_D_HEAD == 8


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_propagates(dtype, rng):
    """A NaN reaching the kernels poisons exactly the rows the dense path poisons,
    never silently disappears into a max or a masked row. (The public forward
    rejects non-finite inputs, so the NaN goes in through the internal buffers.)"""
    nb, t, d, h = 2, 40, 16, 2
    x, _, _ = _inputs(rng, dtype, nb, t, t, d, False, False)
    res = {}
    for path in ("dense", "fused"):
        layer = _layer(d, h, dtype, path, rng=np.random.default_rng(1))
        layer.forward(x)                       # makes the workspace
        ws = layer._last[5]
        ws.x[5, 3] = np.nan                    # sample 0, position 5
        y = np.empty((nb * t, d), dtype)
        layer._forward_buffers(ws.x, None, None, y, nb, True, ws, _ops.max_threads())
        dx = np.empty_like(y)
        layer._backward_buffers(np.ones_like(y), dx, None)
        res[path] = (np.isnan(y).reshape(nb, t, d), np.isnan(dx).reshape(nb, t, d))
    assert res["fused"][0][0].all()          # key 5 is seen by every query of sample 0
    assert not res["fused"][0][1].any()      # sample 1 is untouched
    for a, b in zip(res["fused"], res["dense"]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shift", [0.0, 3.7, -12.5])
def test_softmax_exp_accuracy_and_specials(dtype, shift):
    """The kernels' exp(s - m) (m the row's max or log-sum-exp, so s - m <= 0) is
    2^(s log2e - m log2e): the polynomial's 1.9e-7 (float32) / 2e-16 (float64)
    relative error plus the rounding of t = s log2e - m log2e, about one unit in the
    last place of |s - m| + |m| relative. The |m| part is the same for a whole row
    and cancels in the softmax's normalisation; the |s - m| part is below 3e-8
    absolute on a probability (e^x |x| <= 1/e)."""
    f32 = dtype == np.float32
    lo = (-125 if f32 else -1021) * np.log(2.0)           # below it: exactly 0
    x = np.concatenate([np.linspace(lo + 0.01, 0, 20011), [0.0, -1e-30, -np.inf, np.nan]])
    x = (x + shift).astype(dtype)
    y = _testing.flash_exp(x, shift)
    d = x.astype(np.float64) - shift
    ref = np.exp(d)
    fin = np.isfinite(x)
    rel = np.abs(y[fin] - ref[fin]) / ref[fin]
    c0, c1 = (2.5e-7, 1.3e-7) if f32 else (5e-16, 2.5e-16)
    bound = c0 + c1 * (np.abs(d[fin]) + abs(shift))
    assert (rel <= bound).all(), (rel / bound).max()
    assert y[x == -np.inf] == 0
    assert np.isnan(y[np.isnan(x)]).all()
    if shift == 0.0:
        assert y[x == 0].tolist() == [1.0, 1.0]     # the row's max gets exactly 1
    tiny = np.array([lo - 0.01, lo - 5, -1e30], dtype=dtype) + dtype(shift)
    assert (_testing.flash_exp(tiny, shift) == 0).all()


_LEVEL_SCRIPT = r"""
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import attnx
from attnx.kernels import _flash
from reference import mha_numpy
errs = {}
rng = np.random.default_rng(0)
for dtype, (nb, tq, tk, d, h), causal, mask, cross in [
        (np.float64, (2, 7, 7, 12, 2), True, True, False),
        (np.float64, (2, 129, 33, 16, 2), False, True, True),
        (np.float64, (1, 40, 40, 64, 1), True, False, False),
        (np.float32, (2, 129, 129, 64, 8), True, True, False),
        (np.float32, (2, 33, 140, 48, 2), False, False, True)]:
    layer = attnx.MultiHeadAttention(d, h, dtype=dtype, random_state=1, causal=causal,
                                     attention="fused")
    x = rng.normal(size=(nb, tq, d)).astype(dtype)
    c = rng.normal(size=(nb, tk, d)).astype(dtype) if cross else None
    kpm = (rng.random((nb, tk if cross else tq)) < 0.3) if mask else None
    y = layer.forward(x, c, kpm)
    p64 = {k: np.asarray(v, np.float64) for k, v in layer.params.items()}
    ref = mha_numpy(p64, x.astype(np.float64), h, causal=causal,
                    context=None if c is None else c.astype(np.float64), key_padding_mask=kpm)
    e = float(np.abs(y - ref).max() / np.abs(ref).max())
    name = np.dtype(dtype).name
    errs[name] = max(errs.get(name, 0.0), e)
print(json.dumps({"level": _flash.dispatch_state()[0], "errs": errs}))
"""


@pytest.mark.parametrize("level", [0, 1, 2])
def test_every_simd_level(level):
    """Each instruction-set build of the kernels (portable C, AVX2+FMA, AVX-512F),
    forced through ATTNX_SIMD in a fresh interpreter, against a float64 NumPy
    reference. A level the CPU lacks is skipped (and says so)."""
    if _ops.cpu_level() < level:
        pytest.skip(f"this CPU has SIMD level {_ops.cpu_level()} < {level}")
    env = dict(os.environ, ATTNX_SIMD=str(level))
    env.pop("ATTNX_NO_SIMD", None)
    # cwd: not the checkout, whose unbuilt attnx/ would shadow the attnx under test
    out = subprocess.run([sys.executable, "-c", _LEVEL_SCRIPT, HELPERS], env=env,
                         capture_output=True, text=True, timeout=300,
                         cwd=tempfile.gettempdir())
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["level"] == level
    assert res["errs"]["float64"] < 1e-12, res
    assert res["errs"]["float32"] < 2e-5, res


def test_workspace_of_another_shape_is_refused():
    """The fused entry checks its buffers' shape (not only their sizes) and every
    weight and gradient shape through the layer's AttnParams."""
    layer = attnx.MultiHeadAttention(16, 2, attention="fused")
    x = np.zeros((1, 4, 16), np.float32)
    layer.forward(x)
    ws = layer._last[5]
    small = _attnargs.AttnBuffers(_attnargs.AttnShape("fused", 1, 3, 3, 16, 2, False, False,
                                                      True, ws.shape.threads, np.float32))
    with pytest.raises(ValueError, match="buffers were made for"):
        _flash.attention_forward(ws.shape, small, ws.params, ws.x, None, None, None, None,
                                 np.empty((4, 16), np.float32), 1)
    assert ws.params.w_qkv is layer._w["qkv"] and ws.params.dw_o is layer._g["o"]


# one or two heads whose keys span several key blocks: the backward splits each
# head into key ranges at 2 threads (B*H below 4 per thread)
SPLIT_SHAPES = [(1, 300, 300, 16, 1), (1, 140, 520, 24, 2), (2, 260, 140, 8, 1)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("opts", [OPTS[0], OPTS[1], OPTS[-1]],
                         ids=lambda o: "-".join(o) or "plain")
@pytest.mark.parametrize("shape", SPLIT_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_key_split_backward_matches_torch(torch, dtype, opts, shape, rng):
    """The backward with heads split into key ranges (dQ shares summed afterwards)
    against PyTorch autograd, forward and every gradient."""
    from attnx.runtime._threads import fixed_threads
    nb, tq, tk, d, h = shape
    tk_eff = tk if opts.get("cross") else tq
    split = _attnargs.AttnShape("fused", nb, tq, tk_eff, d, h, bool(opts.get("cross")),
                                False, True, 2, dtype)
    assert split.n_dq_parts > 0   # really split
    with fixed_threads(2):
        test_fused_matches_torch(torch, dtype, opts, shape, rng)


def test_threads_agree():
    """One and two OpenMP threads (query chunks and key ranges split differently)
    agree to rounding: the forward's projections split their GEMM rows between the
    threads, and OpenBLAS kernels may round a row differently by where it falls in
    a block (its Haswell kernels do: 300 rows split at 150); the backward also sums
    two threads' dQ shares. At a fixed thread count everything is the same to the
    bit from run to run."""
    code = r"""
import sys, numpy as np
from attnx.runtime._threads import fixed_threads
import attnx
rng = np.random.default_rng(0)
x = rng.normal(size=(1, 300, 32)).astype(np.float32)
dy = rng.normal(size=x.shape).astype(np.float32)
outs = {}
for n in (1, 2, 2, 1):
    with fixed_threads(n):
        layer = attnx.MultiHeadAttention(32, 2, causal=True, random_state=0, attention="fused")
        y = layer.forward(x)
        dx = layer.backward(dy)
        out = (y, dx, layer.grads.flat.copy())
    if n in outs:
        for a, b in zip(out, outs[n]):
            assert np.array_equal(a, b), n
    outs[n] = out
a, b = outs[1], outs[2]
assert np.abs(a[0] - b[0]).max() <= 1e-6 * np.abs(a[0]).max()
from attnx.kernels import _attnargs
assert _attnargs.AttnShape("fused", 1, 300, 300, 32, 2, False, True, True, 2,
                           np.float32).n_dq_parts > 0   # two threads split the heads
for u, v in zip(a[1:], b[1:]):
    err = np.abs(u - v).max() / np.abs(u).max()
    assert err < 1e-5, err
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, cwd=tempfile.gettempdir())
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr
