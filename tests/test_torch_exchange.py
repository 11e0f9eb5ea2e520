"""Weights exchanged with PyTorch modules give the same outputs in both directions."""
import numpy as np
import pytest

import attnx
from conftest import rel_err

TOL = {np.float32: 1e-5, np.float64: 1e-12}


def _torch_mha(torch, d, h, bias, dtype, seed):
    torch.manual_seed(seed)
    m = torch.nn.MultiheadAttention(d, h, bias=bias, batch_first=True)
    m = m.to(torch.float64 if dtype == np.float64 else torch.float32).eval()
    if bias:  # torch starts its biases at zero: make them matter
        with torch.no_grad():
            m.in_proj_bias.normal_()
            m.out_proj.bias.normal_()
    return m


def _torch_forward(torch, m, x, causal, mask):
    t = x.shape[1]
    xt = torch.from_numpy(x)
    attn_mask = torch.ones(t, t, dtype=torch.bool).triu(1) if causal else None
    kpm = None if mask is None else torch.from_numpy(mask)
    with torch.no_grad():
        y, _ = m(xt, xt, xt, attn_mask=attn_mask, key_padding_mask=kpm, need_weights=False)
    return y.numpy()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("causal", [False, True])
def test_multihead_attention_both_directions(torch, dtype, bias, causal):
    d, h, b, t = 12, 3, 3, 7
    rng = np.random.default_rng(0)
    x = rng.standard_normal((b, t, d)).astype(dtype)
    mask = np.zeros((b, t), dtype=bool)
    mask[1, 5:] = True
    mask[2, :2] = True
    for kpm in (None, mask):
        # torch -> attnx
        tm = _torch_mha(torch, d, h, bias, dtype, seed=1)
        att = attnx.MultiHeadAttention(d, h, bias=bias, causal=causal, dtype=dtype,
                                       random_state=5)
        assert att.load_torch_state_dict(tm.state_dict()) is att
        ref = _torch_forward(torch, tm, x, causal, kpm)
        got = att.forward(x, key_padding_mask=kpm, grad=False)
        assert rel_err(got, ref) < TOL[dtype]
        # attnx -> torch
        att2 = attnx.MultiHeadAttention(d, h, bias=bias, causal=causal, dtype=dtype,
                                        random_state=7)
        if bias:
            for k in ("bq", "bk", "bv", "bo"):
                att2.params[k][...] = rng.standard_normal(d)
        tm2 = _torch_mha(torch, d, h, bias, dtype, seed=2)
        sd = att2.torch_state_dict()
        assert set(sd) == set(tm2.state_dict())
        tm2.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})
        ref2 = att2.forward(x, key_padding_mask=kpm, grad=False)
        assert rel_err(_torch_forward(torch, tm2, x, causal, kpm), ref2) < TOL[dtype]
        # and back again: the very same weights
        att3 = attnx.MultiHeadAttention(d, h, bias=bias, dtype=dtype, random_state=9)
        att3.load_torch_state_dict(tm2.state_dict())
        np.testing.assert_array_equal(att3.params.flat, att2.params.flat)


def test_load_torch_state_dict_checks_everything_first(torch):
    att = attnx.MultiHeadAttention(8, 2, bias=True, random_state=0)
    before = att.params.flat.copy()
    good = _torch_mha(torch, 8, 2, True, np.float32, seed=0).state_dict()
    with pytest.raises(ValueError, match=r"missing keys \['in_proj_bias', 'out_proj.bias'\]"):
        att.load_torch_state_dict(
            _torch_mha(torch, 8, 2, False, np.float32, seed=0).state_dict())
    with pytest.raises(ValueError, match=r"unexpected keys \['extra'\]"):
        att.load_torch_state_dict({**good, "extra": torch.zeros(1)})
    with pytest.raises(ValueError, match=r"in_proj_weight'\] must be a real array of "
                                         r"shape \(24, 8\), got float32 \(12, 8\)"):
        att.load_torch_state_dict({**good, "in_proj_weight": good["in_proj_weight"][:12]})
    bad = {**good, "out_proj.bias": good["out_proj.bias"].clone()}
    bad["out_proj.bias"][3] = float("nan")
    with pytest.raises(ValueError, match="out_proj.bias'\\] contains NaN"):
        att.load_torch_state_dict(bad)
    with pytest.raises(TypeError, match="pass module.state_dict"):
        att.load_torch_state_dict({**good, "in_proj_bias": torch.zeros(24, requires_grad=True)})
    with pytest.raises(ValueError, match="overflows float32"):
        att.load_torch_state_dict({k: v.numpy().astype(np.float64) * (1e300 if k == "in_proj_bias"
                                                                      else 1)
                                   for k, v in good.items()})
    with pytest.raises(TypeError, match="state_dict must be a mapping"):
        att.load_torch_state_dict([1, 2])
    np.testing.assert_array_equal(att.params.flat, before)   # nothing was half-loaded


def test_torch_state_dict_returns_copies():
    att = attnx.MultiHeadAttention(4, 2, bias=True, random_state=0)
    sd = att.torch_state_dict()
    for v in sd.values():
        v[...] = 0
        assert v.flags.c_contiguous
    assert np.abs(att.params.flat).max() > 0
