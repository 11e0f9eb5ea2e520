"""attnx against PyTorch's own modules, not the formula re-typed in torch ops:
torch.nn.MultiheadAttention (weights mapped from attnx's (in, out) layout) and
torch.nn.functional.scaled_dot_product_attention, outputs and every gradient."""
import numpy as np
import pytest

import attnx
from numeric_checks import rel_err

TOL = {np.float32: 2e-5, np.float64: 1e-10}


def _close(a, b, tol, name=""):
    """Relative error below tol; dL/dbk is zero in exact arithmetic (softmax ignores a
    shift shared by every key), so it is compared against the scale 1 instead."""
    floor = 1.0 if name == "bk" else 1e-300
    assert rel_err(a, b, floor=floor) < tol, name


def _layer_and_data(dtype, d, h, *, bias, causal, cross, masked, seed=0):
    rng = np.random.default_rng(seed)
    layer = attnx.MultiHeadAttention(d, h, causal=causal, bias=bias, dtype=dtype,
                                     random_state=seed, attention="dense")
    if bias:  # non-zero biases, so that their mapping is really tested
        for k in ("bq", "bk", "bv", "bo"):
            layer.params[k][...] = rng.normal(size=d) * 0.3
    b, tq, tk = 3, 7, (5 if cross else 7)
    x = rng.normal(size=(b, tq, d)).astype(dtype)
    ctx = rng.normal(size=(b, tk, d)).astype(dtype) if cross else None
    mask = None
    if masked:  # a few keys ignored per sample, never all of them
        mask = np.zeros((b, tk), dtype=bool)
        mask[0, -2:] = True
        mask[2, 1] = True
    dy = rng.normal(size=(b, tq, d)).astype(dtype)
    return layer, x, ctx, mask, dy


def _attnx_run(layer, x, ctx, mask, dy):
    y = layer.forward(x, context=ctx, key_padding_mask=mask)
    out = layer.backward(dy)
    dx, dctx = out if ctx is not None else (out, None)
    return y, dx, dctx, {k: v.copy() for k, v in layer.grads.items()}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("bias, causal, cross, masked", [
    (False, False, False, False),
    (True, False, False, False),
    (True, True, False, False),
    (False, False, False, True),
    (True, True, False, True),
    (True, False, True, True),
])
def test_matches_torch_nn_multiheadattention(torch, dtype, bias, causal, cross, masked):
    d, h = 12, 3
    layer, x, ctx, mask, dy = _layer_and_data(dtype, d, h, bias=bias, causal=causal,
                                              cross=cross, masked=masked)
    y, dx, dctx, grads = _attnx_run(layer, x, ctx, mask, dy)

    tdt = torch.float64 if dtype == np.float64 else torch.float32
    mha = torch.nn.MultiheadAttention(d, h, bias=bias, batch_first=True, dtype=tdt)
    p = layer.params
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.from_numpy(
            np.concatenate([p["Wq"].T, p["Wk"].T, p["Wv"].T])))
        mha.out_proj.weight.copy_(torch.from_numpy(np.ascontiguousarray(p["Wo"].T)))
        if bias:
            mha.in_proj_bias.copy_(torch.from_numpy(np.concatenate([p["bq"], p["bk"], p["bv"]])))
            mha.out_proj.bias.copy_(torch.from_numpy(np.asarray(p["bo"])))
    tx = torch.from_numpy(x).requires_grad_(True)
    tc = torch.from_numpy(ctx).requires_grad_(True) if cross else tx
    tq, tk = x.shape[1], tc.shape[1]
    attn_mask = (torch.triu(torch.ones(tq, tk, dtype=torch.bool), diagonal=1)
                 if causal else None)
    kpm = torch.from_numpy(mask) if mask is not None else None
    ty, _ = mha(tx, tc, tc, key_padding_mask=kpm, attn_mask=attn_mask, need_weights=False)
    ty.backward(torch.from_numpy(dy))

    tol = TOL[dtype]
    assert rel_err(y, ty.detach().numpy()) < tol
    assert rel_err(dx, tx.grad.numpy()) < tol
    if cross:
        assert rel_err(dctx, tc.grad.numpy()) < tol
    gw = mha.in_proj_weight.grad.numpy()
    for i, name in enumerate(("Wq", "Wk", "Wv")):
        assert rel_err(grads[name], gw[i * d:(i + 1) * d].T) < tol, name
    assert rel_err(grads["Wo"], mha.out_proj.weight.grad.numpy().T) < tol
    if bias:
        gb = mha.in_proj_bias.grad.numpy()
        for i, name in enumerate(("bq", "bk", "bv")):
            _close(grads[name], gb[i * d:(i + 1) * d], tol, name)
        assert rel_err(grads["bo"], mha.out_proj.bias.grad.numpy()) < tol


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("attention", ["dense", "blocked"])
@pytest.mark.parametrize("causal, masked, cross", [
    (False, False, False), (True, False, False), (False, True, False), (True, True, True),
])
def test_matches_torch_scaled_dot_product_attention(torch, dtype, attention, causal, masked,
                                                     cross):
    """The per-head core against F.scaled_dot_product_attention, with the projections
    done in torch around it (torch's SDPA takes boolean masks with True = attend)."""
    import torch.nn.functional as F

    d, h = 16, 4
    layer, x, ctx, mask, dy = _layer_and_data(dtype, d, h, bias=True, causal=causal,
                                              cross=cross, masked=masked, seed=3)
    layer.attention = attention
    y, dx, dctx, grads = _attnx_run(layer, x, ctx, mask, dy)

    p = {k: torch.from_numpy(np.ascontiguousarray(v)).requires_grad_(True)
         for k, v in layer.params.items()}
    tx = torch.from_numpy(x).requires_grad_(True)
    tc = torch.from_numpy(ctx).requires_grad_(True) if cross else tx
    b, tq, tk = x.shape[0], x.shape[1], tc.shape[1]

    def heads(t, n):
        return t.reshape(b, n, h, d // h).transpose(1, 2)

    q = heads(tx @ p["Wq"] + p["bq"], tq)
    k = heads(tc @ p["Wk"] + p["bk"], tk)
    v = heads(tc @ p["Wv"] + p["bv"], tk)
    allowed = torch.ones(b, 1, tq, tk, dtype=torch.bool)
    if causal:
        allowed &= torch.tril(torch.ones(tq, tk, dtype=torch.bool))
    if mask is not None:
        allowed &= ~torch.from_numpy(mask)[:, None, None, :]
    z = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    ty = z.transpose(1, 2).reshape(b, tq, d) @ p["Wo"] + p["bo"]
    ty.backward(torch.from_numpy(dy))

    tol = TOL[dtype]
    assert rel_err(y, ty.detach().numpy()) < tol
    assert rel_err(dx, tx.grad.numpy()) < tol
    if cross:
        assert rel_err(dctx, tc.grad.numpy()) < tol
    for name, g in grads.items():
        _close(g, p[name].grad.numpy(), tol, name)
