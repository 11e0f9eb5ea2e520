"""SequenceModel(position_scale=s): the sinusoidal table times s, against the PyTorch
twin and finite differences; its checks, config and export; and the estimators'
PPV-token fits, whose networks take POSITION_SCALE (the others keep 1)."""
import pickle

import numpy as np
import pytest

import attnx
from attnx import SequenceModel
from attnx.estimators import _ppv_tokens as P
from attnx.layers._positions import sinusoidal_table
from numeric_checks import rel_err
from gradcheck import check_grads

TOL = {np.float32: 1e-4, np.float64: 1e-10}
TC = attnx.TransformerClassifier
SMALL = dict(n_heads=2, n_layers=1, d_model=16, batch_size=8, epochs=3, random_state=0)


def _model(dtype, scale, pooling="mean", norm="pre", seed=0):
    m = SequenceModel(3, 8, 2, 2, 4, d_hidden=12, pooling=pooling, positional="sinusoidal",
                      norm=norm, dtype=dtype, random_state=seed, position_scale=scale)
    rng = np.random.default_rng(seed + 1)   # non-trivial biases and LayerNorm gains
    for n, v in m.params.items():
        if n.endswith((".b", "bq", "bk", "bv", "bo", "b1", "b2")) or n.endswith(".g"):
            v[...] = v + rng.normal(size=v.shape) * 0.3
    return m


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("pooling,norm", [("mean", "pre"), (None, None), ("cls", "pre")])
def test_matches_torch_twin(torch, dtype, pooling, norm, rng):
    from attnx.testing.torch_twin import SeqTwin
    m = _model(dtype, 4.0, pooling, norm)
    x = rng.normal(size=(3, 7, 3)).astype(dtype)
    kpm = np.arange(7)[None, :] >= np.array([7, 4, 2])[:, None]
    y = m.forward(x, kpm)
    g = rng.normal(size=y.shape).astype(dtype)
    dx = m.backward(g)
    tw = SeqTwin(m)
    assert tw.position_scale == 4.0
    xt = torch.tensor(x, requires_grad=True)
    yt = tw(xt, kpm)
    (yt * torch.tensor(g)).sum().backward()
    assert rel_err(y, yt.detach().numpy()) < TOL[dtype]
    assert rel_err(dx, xt.grad.numpy()) < TOL[dtype]
    tg = tw.grads()
    overall = max(np.max(np.abs(v)) for v in tg.values())
    for n in m.params:
        assert rel_err(m.grads[n], tg[n], floor=1e-3 * overall) < TOL[dtype], n


def test_finite_differences(rng):
    m = _model(np.float64, 2.5)
    x = rng.normal(size=(2, 6, 3))
    g = rng.normal(size=(2, 4))
    m.forward(x)
    dx = m.backward(g)
    analytic = {n: m.grads[n].copy() for n in m.params}
    analytic["x"] = dx.copy()
    arrays = dict(m.params)
    arrays["x"] = x
    check_grads(lambda: float(np.sum(m.forward(x, grad=False) * g)), arrays, analytic,
                rng, n_probe=6, tol=1e-6)


def test_scale_one_is_the_plain_table_and_the_scale_acts(rng):
    x = rng.normal(size=(2, 5, 3)).astype(np.float32)
    plain = SequenceModel(3, 8, 2, 1, 2, pooling="mean", positional="sinusoidal",
                          random_state=0)
    one = SequenceModel(3, 8, 2, 1, 2, pooling="mean", positional="sinusoidal",
                        random_state=0, position_scale=1)
    four = SequenceModel(3, 8, 2, 1, 2, pooling="mean", positional="sinusoidal",
                         random_state=0, position_scale=4)
    np.testing.assert_array_equal(one.forward(x), plain.forward(x))
    np.testing.assert_array_equal(four.stages.positions.table(5),
                                  (4 * sinusoidal_table(5, 8, np.float64)).astype(np.float32))
    assert not np.allclose(four.forward(x), plain.forward(x))
    # 1 is not written: the configurations of earlier models are unchanged
    assert "position_scale" not in plain.get_config() and "position_scale" not in repr(plain)
    assert four.get_config()["position_scale"] == 4.0 and "position_scale=4.0" in repr(four)
    back = SequenceModel(**four.get_config())
    back.params.flat[...] = four.params.flat
    np.testing.assert_array_equal(back.forward(x), four.forward(x))
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(four)).forward(x), four.forward(x))


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True, "2", None])
def test_bad_scale_raises(bad):
    with pytest.raises(ValueError, match="position_scale must be a finite number > 0"):
        SequenceModel(3, 8, 2, 1, 2, positional="sinusoidal", position_scale=bad)


@pytest.mark.parametrize("positional", ["none", "learned", "rope"])
def test_scale_needs_the_sinusoidal_table(positional):
    with pytest.raises(ValueError, match="scales the sinusoidal table"):
        SequenceModel(3, 8, 2, 1, 2, positional=positional, max_len=9, position_scale=2.0)
    SequenceModel(3, 8, 2, 1, 2, positional=positional, max_len=9, position_scale=1.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_onnx_export_scales_the_table(dtype, tmp_path):
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    import attnx.io.onnx as aonnx
    m = _model(dtype, 4.0)
    path = tmp_path / "m.onnx"
    aonnx.export(m, path)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(2).standard_normal((3, 9, 3)).astype(dtype)
    mask = np.zeros((3, 9), bool)
    mask[1, 5:] = True
    (y,) = sess.run(None, {"x": x, "key_padding_mask": mask})
    ref = m.forward(x, key_padding_mask=mask, grad=False)
    assert rel_err(y, ref, floor=1.0) < {np.float32: 1e-5, np.float64: 1e-10}[dtype]


def _two_patterns(n, t=96, seed=0):
    """Two classes told apart by where a shape comes: an up step in the first half and
    a down step in the second, or the other way round."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, t, 1))
    y = np.arange(n) % 2
    step = np.where(np.arange(8) < 4, -3.0, 3.0)
    for i in range(n):
        a, b = rng.integers(0, t // 2 - 8), rng.integers(t // 2, t - 8)
        X[i, a:a + 8, 0] += step if y[i] else -step
        X[i, b:b + 8, 0] += -step if y[i] else step
    return X, y


def test_ppv_token_fits_scale_their_positions(tmp_path):
    X, y = _two_patterns(24)
    est = TC(**SMALL).fit(X, y)   # 96 steps, one channel: PPV tokens
    assert est.plan_.ppv is not None and P.POSITION_SCALE == 2.0
    assert est.model_.position_scale == P.POSITION_SCALE == est.plan_.network["position_scale"]
    path = tmp_path / "m.safetensors"
    est.save(path)
    back = attnx.load(path)
    assert back.model_.position_scale == P.POSITION_SCALE
    np.testing.assert_array_equal(back.predict_proba(X), est.predict_proba(X))
    back.partial_fit(X, y)   # training goes on with the same network
    assert back.model_.position_scale == P.POSITION_SCALE
    # ragged series (resampled, then PPV tokens) too
    ragged = [X[i, :70 + i] for i in range(24)]
    assert TC(**SMALL).fit(ragged, y).model_.position_scale == P.POSITION_SCALE
    # other tokens keep the plain table and write nothing new
    for other in (TC(**SMALL, tokenizer="patch").fit(X, y), TC(**SMALL).fit(X[:, :40], y),
                  TC(**SMALL, positional="rope", tokenizer="ppv").fit(X, y)):
        assert other.model_.position_scale == 1.0 and "position_scale" not in other.plan_.network
