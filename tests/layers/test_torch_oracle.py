"""attnx against PyTorch autograd + torch.optim.AdamW on identical weights."""
import numpy as np
import pytest

import attnx
from numeric_checks import rel_err
from reference import mha_torch

TOL = {np.float32: 1e-4, np.float64: 1e-10}
WORST = {}  # dtype name -> largest relative error seen (printed at the end with -s)

OPTIONS = [
    {},
    dict(causal=True),
    dict(bias=True),
    dict(causal=True, bias=True),
    dict(rope=True),
    dict(cross=True),
    dict(mask=True),
    dict(rope=True, causal=True, mask=True, bias=True, cross=True),
    dict(blocked=True, causal=True, mask=True, rope=True, bias=True),
    dict(blocked=True, cross=True, mask=True),
]


def _record(dtype, err):
    key = np.dtype(dtype).name
    WORST[key] = max(WORST.get(key, 0.0), err)
    return err


def _check(dtype, a, b, what):
    err = _record(dtype, rel_err(a, b))
    assert err < TOL[dtype], f"{what}: relative error {err:.3g}"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: "-".join(o) or "plain")
@pytest.mark.parametrize("shape", [(3, 6, 16, 4), (2, 1, 8, 1), (2, 9, 12, 2), (2, 150, 16, 2)])
def test_layer_matches_torch(torch, dtype, opts, shape, rng):
    nb, t, d, h = shape
    opts = dict(opts)
    cross, mask = opts.pop("cross", False), opts.pop("mask", False)
    opts["attention"] = "blocked" if opts.pop("blocked", False) else "dense"
    assert not (opts.get("rope") and (d // h) % 2), "every SHAPE here has an even d_head"
    tdt = torch.float32 if dtype == np.float32 else torch.float64
    layer = attnx.MultiHeadAttention(d, h, dtype=dtype, random_state=3, **opts)
    if opts.get("bias"):
        for k in ("bq", "bk", "bv", "bo"):
            layer.params[k][...] = rng.normal(size=d) * 0.5
    tk = t + 3 if cross else t
    x = rng.normal(size=(nb, t, d)).astype(dtype)
    c = rng.normal(size=(nb, tk, d)).astype(dtype) if cross else None
    kpm = None
    if mask:
        kpm = rng.random((nb, tk)) < 0.3
        kpm[-1, :] = True
    y_true = rng.normal(size=(nb, t, d)).astype(dtype)

    tp = {k: torch.tensor(np.array(v), dtype=tdt, requires_grad=True)
          for k, v in layer.params.items()}
    kw = dict(lr=0.01, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.05)
    opt = attnx.AdamW(layer.params, **kw)
    topt = torch.optim.AdamW(list(tp.values()), **kw)

    for step in range(3):
        xt = torch.tensor(x, requires_grad=True)
        ct = torch.tensor(c, requires_grad=True) if cross else None
        yt = mha_torch(torch, tp, xt, h, causal=opts.get("causal", False), context=ct,
                       key_padding_mask=kpm, rope=opts.get("rope", False))
        tloss = ((yt - torch.tensor(y_true)) ** 2).mean()
        topt.zero_grad()
        tloss.backward()

        y = layer.forward(x, c, kpm)
        loss, dy = attnx.mse_loss(y, y_true)
        out = layer.backward(dy)
        dx, dc = out if cross else (out, None)

        _check(dtype, y, yt.detach().numpy(), f"step {step} Y")
        assert loss == pytest.approx(tloss.item(), rel=TOL[dtype])
        _check(dtype, dx, xt.grad.numpy(), f"step {step} dX")
        if cross:
            _check(dtype, dc, ct.grad.numpy(), f"step {step} dcontext")
        for k, v in tp.items():
            if k == "bk":  # zero in exact arithmetic: round-off on both sides, on dW's scale
                err = np.max(np.abs(layer.grads[k] - v.grad.numpy()))
                assert err <= TOL[dtype] * max(np.abs(tp[w].grad.numpy()).max()
                                              for w in ("Wq", "Wk", "Wv", "Wo"))
                continue
            _check(dtype, layer.grads[k], v.grad.numpy(), f"step {step} d{k}")

        opt.step(layer.grads)
        topt.step()
        for k, v in tp.items():
            if k == "bk":  # AdamW normalises bk's round-off gradient: both sides move at random
                continue
            _check(dtype, layer.params[k], v.detach().numpy(), f"step {step} {k} after AdamW")


def test_zz_oracle_comparisons_ran_for_both_dtypes(torch):
    """Runs last in this module: both dtypes were compared against torch (an oracle
    test that silently compared nothing would leave WORST empty), well inside the
    tolerances; `-s` prints the worst relative errors. Without torch it skips like
    the comparisons (the `torch` fixture; ATTNX_REQUIRE_TORCH=1 makes that a failure)."""
    assert set(WORST) >= {"float32", "float64"}, WORST
    for k, v in WORST.items():
        assert 0 <= v < TOL[getattr(np, k)], (k, v)
    print("\nworst relative error vs torch:", {k: f"{v:.2e}" for k, v in WORST.items()})
