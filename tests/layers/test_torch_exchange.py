"""Weights exchanged with PyTorch modules give the same outputs in both directions."""
import numpy as np
import pytest

import attnx
from numeric_checks import rel_err

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


# ---- SequenceModel pre-norm blocks <-> torch.nn.TransformerEncoderLayer ---------------
def _torch_stack(torch, model, dtype):
    import torch.nn.functional as F

    layers = []
    for _ in range(model.n_layers):
        layer = torch.nn.TransformerEncoderLayer(
            model.d_model, model.n_heads, model.d_hidden, dropout=0.0, activation=F.silu,
            batch_first=True, norm_first=True, bias=model.bias)
        # train mode: torch's inference fast path treats padding differently
        layers.append(layer.to(torch.float64 if dtype == np.float64 else torch.float32).train())
    return layers


def _torch_sequence_forward(torch, model, layers, x, mask):
    """model.forward (pooling=None, norm='pre', no positions) with torch's layers."""
    w = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in model.params.items()}
    t = x.shape[1]
    h = torch.from_numpy(x) @ w["embed.W"] + w["embed.b"]
    causal = torch.ones(t, t, dtype=torch.bool).triu(1) if model.causal else None
    kpm = torch.from_numpy(mask)
    with torch.no_grad():
        for layer in layers:
            h = layer(h, src_mask=causal, src_key_padding_mask=kpm)
        h = torch.nn.functional.layer_norm(h, (model.d_model,), w["norm.g"], w["norm.b"], 1e-5)
        y = h @ w["head.W"] + w["head.b"]
    return y.numpy()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias,causal", [(True, False), (True, True), (False, True)])
def test_sequence_model_blocks_both_directions(torch, dtype, bias, causal):
    kw = dict(n_features=5, d_model=12, n_heads=3, n_layers=2, n_outputs=4, d_hidden=20,
              norm="pre", bias=bias, causal=causal, dtype=dtype)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 6, 5)).astype(dtype)
    mask = np.zeros((3, 6), dtype=bool)
    mask[1, 4:] = True
    valid = ~mask

    # torch -> attnx: random torch layers (LayerNorm affine away from 1 and 0)
    torch.manual_seed(0)
    layers = _torch_stack(torch, attnx.SequenceModel(**kw, random_state=0), dtype)
    with torch.no_grad():
        for layer in layers:
            for name, p in layer.named_parameters():
                if "norm" in name or name.endswith("bias"):
                    p.add_(torch.randn_like(p) * 0.3)
    model = attnx.SequenceModel(**kw, random_state=1)
    for i, layer in enumerate(layers):
        assert model.load_torch_encoder_layer_state_dict(i, layer.state_dict()) is model
    ref = _torch_sequence_forward(torch, model, layers, x, mask)
    got = model.forward(x, key_padding_mask=mask, grad=False)
    assert rel_err(got[valid], ref[valid]) < 10 * TOL[dtype]

    # attnx -> torch: a model with its own random weights
    model2 = attnx.SequenceModel(**kw, random_state=2)
    for name, w in model2.params.items():
        if ".ln" in name and (name.endswith(".g") or bias):
            w[...] += rng.normal(0, 0.3, w.shape)
    layers2 = _torch_stack(torch, model2, dtype)
    for i, layer in enumerate(layers2):
        sd = model2.torch_encoder_layer_state_dict(i)
        assert set(sd) == set(layer.state_dict())
        layer.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})
    ref2 = model2.forward(x, key_padding_mask=mask, grad=False)
    got2 = _torch_sequence_forward(torch, model2, layers2, x, mask)
    assert rel_err(got2[valid], ref2[valid]) < 10 * TOL[dtype]


def test_encoder_layer_exchange_refuses_what_does_not_map(torch):
    post = attnx.SequenceModel(4, 8, 2, 1, 2)
    with pytest.raises(ValueError, match="norm='pre'"):
        post.torch_encoder_layer_state_dict(0)
    pre = attnx.SequenceModel(4, 8, 2, 2, 2, norm="pre", bias=False)
    with pytest.raises(ValueError, match=r"layer must be an int in \[0, 2\), got 2"):
        pre.torch_encoder_layer_state_dict(2)
    pre.params["layers.1.ln2.b"][...] = 0.5
    with pytest.raises(ValueError, match="layers.1.ln2.b is not zero"):
        pre.torch_encoder_layer_state_dict(1)
    sd = pre.torch_encoder_layer_state_dict(0)
    with pytest.raises(ValueError, match=r"unexpected keys \['linear1.bias'\]"):
        pre.load_torch_encoder_layer_state_dict(0, {**sd, "linear1.bias": np.zeros(32)})


def test_saved_model_file_loads_into_torch(torch, tmp_path):
    """README recipe: an estimator's file read with safetensors.torch onto a torch module."""
    from safetensors.torch import load_file

    from attnx.datasets import max_position_task

    X, Y = max_position_task(64, seq_len=6, d_model=8, random_state=0)
    est = attnx.AttentionRegressor(2, epochs=3, random_state=0,
                                   dtype=np.float64, options={"bias": True}).fit(X, Y)
    est.save(tmp_path / "model.safetensors")
    w = load_file(tmp_path / "model.safetensors")
    mha = torch.nn.MultiheadAttention(8, 2, bias=True, batch_first=True).double()
    mha.load_state_dict({
        "in_proj_weight": torch.cat([w["Wq"].T, w["Wk"].T, w["Wv"].T]),
        "in_proj_bias": torch.cat([w["bq"], w["bk"], w["bv"]]),
        "out_proj.weight": w["Wo"].T, "out_proj.bias": w["bo"]})
    x = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float64))
    with torch.no_grad():
        y, _ = mha(x, x, x, need_weights=False)
    assert rel_err(y.numpy(), est.predict(X)) < 1e-12
