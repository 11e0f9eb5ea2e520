"""attnx.SequenceModel's time-series options: max and class-token pooling, the
convolutional stem. PyTorch twin on identical weights (torch's own conv1d for the
stem), float64 finite differences of every gradient and dL/dX, ragged input, contract."""
import pickle

import numpy as np
import pytest

from attnx import SequenceModel
from attnx.kernels import _mlp
from numeric_checks import rel_err
from .test_sequence_model import check_grads_vs, fd_check, ragged_mask

TOL = {np.float32: 1e-4, np.float64: 1e-10}
STEMS = [None, ((3, 1),), ((4, 2), (3, 2)), ((1, 1), (5, 3))]
# (pooling, stem, positional, norm, dropout-free causal): every pooling with every stem
CASES = [(pool, stem, pos, norm)
         for i, (pool, stem) in enumerate((p, s) for p in (None, "mean", "last", "max", "cls")
                                          for s in STEMS)
         for pos, norm in [(("none", None), ("learned", "pre"), ("rope", "pre"),
                            ("sinusoidal", None))[i % 4]]
         if not (pool in (None, "mean", "last") and stem is None)]   # covered elsewhere


def _id(c):
    pool, stem, pos, norm = c
    st = "x".join(f"{k}s{s}" for k, s in stem) if stem else "nostem"
    return f"{pool or 'all'}-{st}-{pos}-{norm or 'post'}"


def make(dtype, pool, stem, pos="none", norm=None, causal=False, rng=None, n_layers=2, **kw):
    m = SequenceModel(3, 8, 2, n_layers, 4, d_hidden=12, pooling=pool, positional=pos,
                      norm=norm, causal=causal, max_len=13, stem=stem, dtype=dtype,
                      random_state=0, **kw)
    if rng is not None:  # non-trivial biases, LayerNorm affine parameters, class token
        for n, v in m.params.items():
            if n.endswith((".b", "bq", "bk", "bv", "bo", "b1", "b2", ".g")) or n == "cls":
                v[...] = v + rng.normal(size=v.shape) * 0.3
    return m


def twin(m):
    from attnx.testing.torch_twin import SeqTwin
    return SeqTwin(m)


def run_both(torch, m, x, kpm, rng):
    """The model and its torch twin (attnx.testing.torch_twin; needs the torch fixture)."""
    from attnx.testing import torch_twin
    return torch_twin.run_both(m, x, kpm, rng)


def assert_twin_matches(torch, m, x, kpm, rng, tol):
    """Output, dX and every weight gradient of m equal its torch twin's within tol;
    padded steps get a zero dX."""
    nb, t = x.shape[:2]
    y, dx, yt, dxt, tw = run_both(torch, m, x, kpm, rng)
    assert y.shape == yt.shape == m.output_shape(nb, t)
    assert rel_err(y, yt) < tol
    assert rel_err(dx, dxt) < tol, "dX"
    check_grads_vs(m, tw.grads(), tol)
    if kpm is not None:
        assert np.all(dx[kpm] == 0), "padded steps get zero dX"


# ---- PyTorch twin -------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("use_mask", [False, True], ids=["full", "ragged"])
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_matches_torch_twin(torch, dtype, use_mask, case, rng):
    pool, stem, pos, norm = case
    m = make(dtype, pool, stem, pos, norm, rng=rng)
    nb, t = 4, 11
    x = rng.normal(size=(nb, t, 3)).astype(dtype)
    kpm = ragged_mask(nb, t, rng) if use_mask else None
    assert_twin_matches(torch, m, x, kpm, rng, TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("pool", ["max", "cls", None])
def test_fully_padded_sequence_and_causal(torch, dtype, pool, rng):
    """A sequence of padding only, with a strided stem and causal attention (not
    with "cls", which refuses causal)."""
    m = make(dtype, pool, ((3, 2),), "learned", "pre", causal=pool != "cls", rng=rng)
    x = rng.normal(size=(3, 8, 3)).astype(dtype)
    kpm = ragged_mask(3, 8, rng, full_row=True)
    y, dx, yt, dxt, tw = run_both(torch, m, x, kpm, rng)
    x[kpm] = 1e6   # what padded steps hold does not matter
    np.testing.assert_array_equal(m.forward(x, kpm, grad=False), y)
    assert np.isfinite(dx).all() and np.isfinite(m.grads.flat).all()
    assert rel_err(y, yt) < TOL[dtype] and rel_err(dx, dxt) < TOL[dtype]
    check_grads_vs(m, tw.grads(), TOL[dtype])
    if pool == "max":   # no valid token: pools to zeros
        np.testing.assert_array_equal(y[-1], m.params["head.b"])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dropout_with_stem_and_cls_matches_twin(torch, dtype, rng):
    m = make(dtype, "cls", ((3, 2),), "sinusoidal", "pre", rng=rng, dropout=0.3)
    x = rng.normal(size=(3, 9, 3)).astype(dtype)
    kpm = ragged_mask(3, 9, rng)
    y = m.forward(x, kpm)
    g = rng.normal(size=y.shape).astype(dtype)
    dx = m.backward(g)
    masks = {k: torch.tensor(v) for k, v in m.dropout_masks().items()}
    assert masks["layers.0.res1"].shape == (3, 6, 8)   # ceil(9 / 2) tokens + the class token
    tw = twin(m)
    tw.train()
    xt = torch.tensor(x, requires_grad=True)
    yt = tw(xt, kpm, masks=masks)
    (yt * torch.tensor(g)).sum().backward()
    assert rel_err(y, yt.detach().numpy()) < TOL[dtype]
    assert rel_err(dx, xt.grad.numpy()) < TOL[dtype]
    check_grads_vs(m, tw.grads(), TOL[dtype])


# ---- finite differences (float64) ---------------------------------------
@pytest.mark.parametrize("use_mask", [False, True], ids=["full", "ragged"])
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_finite_differences(use_mask, case, rng):
    pool, stem, pos, norm = case
    m = make(np.float64, pool, stem, pos, norm, rng=rng)
    nb, t = 3, 9
    x = rng.normal(size=(nb, t, 3))
    kpm = ragged_mask(nb, t, rng) if use_mask else None
    fd_check(m, x, kpm, rng.normal(size=m.output_shape(nb, t)), rng, n_probe=6)


def test_finite_differences_stem_every_entry(rng):
    """Every entry of the stem's weights, the class token and dL/dX."""
    m = make(np.float64, "cls", ((3, 2), (2, 1)), "learned", "pre", n_layers=1, rng=rng)
    x = rng.normal(size=(2, 7, 3))
    kpm = ragged_mask(2, 7, rng)
    names = [n for n in m.params if n.startswith("stem.")] + ["cls", "embed.W"]
    fd_check(m, x, kpm, rng.normal(size=(2, 4)), rng, n_probe=10**6, names=names)


# ---- semantics ----------------------------------------------------------
@pytest.mark.parametrize("pool", [None, "mean", "last", "max", "cls"])
@pytest.mark.parametrize("stem", STEMS[1:])
def test_ragged_sequence_gives_what_it_gives_alone(pool, stem, rng):
    """A right-padded sequence yields the tokens (and Y) it yields unpadded."""
    m = make(np.float64, pool, stem, "learned", "pre", rng=rng)
    t = 12
    x = rng.normal(size=(3, t, 3))
    lengths = [12, 7, 5]
    kpm = np.arange(t)[None, :] >= np.array(lengths)[:, None]
    y = m.forward(x, kpm, grad=False).copy()
    for b, tb in enumerate(lengths):
        alone = m.forward(x[b:b + 1, :tb], grad=False)
        if pool is None:
            n = m.n_tokens(tb)
            np.testing.assert_allclose(y[b, :n], alone[0], rtol=1e-12, atol=1e-12)
            assert np.all(y[b, n:] == 0)
        else:
            np.testing.assert_allclose(y[b], alone[0], rtol=1e-12, atol=1e-12)


def test_max_pooling_is_a_maximum(rng):
    """With no blocks' effect on the pooled rows checked via the final rows: the
    pooled vector is the per-feature maximum of the normed token rows."""
    m = make(np.float64, "max", None, "none", "pre", rng=rng)
    x = rng.normal(size=(3, 6, 3))
    kpm = ragged_mask(3, 6, rng)
    m.forward(x, kpm)
    b = m._last.bufs
    hf = b.hf.reshape(3, 6, 8)
    for s in range(3):
        np.testing.assert_array_equal(b.pooled[s], hf[s][~kpm[s]].max(axis=0))


def test_output_shapes_and_tokens():
    m = SequenceModel(3, 8, 2, 1, 4, stem=((3, 2), (3, 2)))
    assert m.n_tokens(10) == 3 and m.n_tokens(9) == 3 and m.n_tokens(5) == 2
    assert m.output_shape(2, 10) == (2, 3, 4)
    assert m.forward(np.zeros((2, 10, 3))).shape == (2, 3, 4)
    c = SequenceModel(3, 8, 2, 1, 4, pooling="cls")
    assert c.forward(np.zeros((2, 5, 3))).shape == (2, 4)
    assert c.dropout_masks() == {}


# ---- contract -----------------------------------------------------------
def test_param_names_shapes_and_init():
    stem = ((5, 2), (3, 1))
    m = SequenceModel(3, 8, 2, 1, 4, pooling="cls", positional="learned", max_len=7,
                      stem=stem, random_state=1)
    names = list(m.params)
    assert names[:6] == ["stem.0.W", "stem.0.b", "stem.1.W", "stem.1.b", "embed.W", "embed.b"]
    assert names[6:8] == ["pos.P", "cls"]
    assert m.params["stem.0.W"].shape == (15, 8) and m.params["stem.1.W"].shape == (24, 8)
    assert m.params["stem.0.b"].shape == (8,) and m.params["embed.W"].shape == (8, 8)
    assert m.params["cls"].shape == (8,)
    assert np.all(m.params["stem.0.b"] == 0) and np.all(m.params["stem.1.b"] == 0)
    assert np.abs(m.params["stem.0.W"]).max() <= 1 / np.sqrt(15)
    assert np.abs(m.params["stem.1.W"]).max() <= 1 / np.sqrt(24)
    assert 0 < np.abs(m.params["cls"]).max() < 0.1
    assert m.n_params == SequenceModel.config_n_params(m.get_config())
    assert sum(v.size for v in m.params.values()) == m.params.flat.size
    for n, v in m.params.items():
        assert np.shares_memory(v, m.params.flat), n
        assert np.shares_memory(m.grads[n], m.grads.flat), n
    # the class token draws last: the other weights are those of a model without it
    c = SequenceModel(3, 8, 2, 1, 4, pooling="cls", positional="learned", max_len=7,
                      random_state=1)
    plain = SequenceModel(3, 8, 2, 1, 4, positional="learned", max_len=7, random_state=1)
    for n in plain.params:
        np.testing.assert_array_equal(c.params[n], plain.params[n])
    assert m.get_config()["stem"] == stem
    assert "stem=((5, 2), (3, 1))" in repr(m) and "pooling='cls'" in repr(m)


@pytest.mark.parametrize("pool", ["max", "cls"])
def test_pickle_inference_and_buffer_reuse(pool, rng):
    m = make(np.float64, pool, ((3, 2),), "sinusoidal", "pre", rng=rng)
    x = rng.normal(size=(2, 7, 3))
    kpm = ragged_mask(2, 7, rng)
    y1 = m.forward(x, kpm).copy()
    bufs = m._last.bufs
    np.testing.assert_array_equal(m.forward(x, kpm, grad=False), y1)
    m.backward(np.ones_like(y1))
    g1 = m.grads.flat.copy()
    m.forward(x, kpm)
    assert m._last.bufs is bufs
    m.backward(np.ones_like(y1))
    np.testing.assert_array_equal(m.grads.flat, g1)
    m2 = pickle.loads(pickle.dumps(m))
    assert m2.stem == ((3, 2),) and m2.pooling == pool
    np.testing.assert_array_equal(m2.forward(x, kpm, grad=False), y1)


def test_does_not_modify_inputs(rng):
    m = make(np.float32, "max", ((3, 2),))
    x = rng.normal(size=(2, 6, 3))
    kpm = ragged_mask(2, 6, rng)
    x0, k0 = x.copy(), kpm.copy()
    m.backward(np.ones_like(m.forward(x, kpm)))
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(kpm, k0)


@pytest.mark.parametrize("stem, err, match", [
    ("3,1", TypeError, "stem must be None or a sequence"),
    (3, TypeError, "stem must be None or a sequence"),
    ((), ValueError, "at least one"),
    ((3, 1), TypeError, r"stem\[0\] must be a \(kernel, stride\) pair"),
    (((3, 1, 1),), TypeError, r"stem\[0\] must be a \(kernel, stride\) pair"),
    (((3, 1), (2.0, 1)), TypeError, r"stem\[1\] kernel must be an int, got float"),
    (((3, True),), TypeError, r"stem\[0\] stride must be an int, got bool"),
    (((0, 1),), ValueError, r"stem\[0\] kernel must be >= 1, got 0"),
    (((3, -1),), ValueError, r"stem\[0\] stride must be >= 1, got -1"),
])
def test_bad_stem(stem, err, match):
    with pytest.raises(err, match=match):
        SequenceModel(3, 8, 2, 1, 1, stem=stem)


def test_bad_input_for_new_options():
    with pytest.raises(ValueError, match="pooling='cls' needs causal=False"):
        SequenceModel(3, 8, 2, 1, 1, pooling="cls", causal=True)
    with pytest.raises(ValueError, match="pooling must be one of"):
        SequenceModel(3, 8, 2, 1, 1, pooling="min")
    m = SequenceModel(3, 8, 2, 1, 1, stem=((5, 2), (4, 1)))
    with pytest.raises(ValueError, match="stem layer 0 has kernel 5, longer than its input "
                                         "of 4 steps"):
        m.forward(np.zeros((1, 4, 3)))
    with pytest.raises(ValueError, match=r"stem layer 1 has kernel 4, longer than its input "
                                         r"of 3 steps \(x has T=6\)"):
        m.forward(np.zeros((1, 6, 3)))
    p = SequenceModel(3, 8, 2, 1, 1, stem=((3, 2),), positional="learned", max_len=4)
    p.forward(np.zeros((1, 8, 3)))   # 4 tokens
    with pytest.raises(ValueError, match="5 tokens after the stem, longer than max_len=4"):
        p.forward(np.zeros((1, 9, 3)))


# ---- the SiLU row kernels the stem runs -------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("nthreads", [1, 2])
def test_silu_kernels_match_numpy(dtype, nthreads, rng):
    h = (rng.normal(size=(300, 67)) * 4).astype(dtype)   # > 16384 entries: threaded
    s, sg = np.empty_like(h), np.empty_like(h)
    _mlp.silu_forward(h, s, sg, nthreads)
    h64 = h.astype(np.float64)
    sig = 1 / (1 + np.exp(-h64))
    assert rel_err(sg, sig) < TOL[dtype] and rel_err(s, h64 * sig) < TOL[dtype]
    s2 = np.empty_like(h)
    _mlp.silu_forward(h, s2, None, nthreads)
    np.testing.assert_array_equal(s2, s)
    ds = rng.normal(size=h.shape).astype(dtype)
    dh = np.empty_like(h)
    _mlp.silu_backward(ds, h, sg, dh, nthreads)
    assert rel_err(dh, ds * sig * (1 + h64 * (1 - sig))) < TOL[dtype]
    _mlp.silu_backward(ds, h, sg, ds, nthreads)   # in place
    np.testing.assert_array_equal(ds, dh)
    with pytest.raises(ValueError, match="sg must be"):
        _mlp.silu_forward(h, s, sg[:-1], nthreads)
    with pytest.raises(ValueError, match="dh must be"):
        _mlp.silu_backward(ds, h, sg, dh[:-1], nthreads)


def test_token_padding_is_the_blocks_mask_of_the_last_training_forward(rng):
    m = SequenceModel(3, 8, 2, 1, 2, pooling="cls", stem=((3, 2),), random_state=0)
    with pytest.raises(RuntimeError, match="grad=True"):
        m.token_padding()
    x = rng.normal(size=(2, 8, 3)).astype(np.float32)
    mask = np.zeros((2, 8), bool)
    mask[1, 4:] = True
    m.forward(x, mask)
    km = m.token_padding()
    # 4 tokens after the stride-2 layer, the class token's column first (never padded)
    np.testing.assert_array_equal(km, [[0, 0, 0, 0, 0], [0, 0, 0, 1, 1]])
    m.forward(x, mask, grad=False)   # inference leaves the training forward's state
    assert m.token_padding() is km
    m.forward(x)
    assert m.token_padding() is None
