"""Bad input, extreme values, threads: clear errors, never crashes or garbage."""
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import attnx
from numeric_checks import rel_err
from reference import mha_numpy, mha_numpy_backward


# ---------------------------------------------------------------- property tests
@st.composite
def cases(draw):
    h = draw(st.integers(1, 4))
    dh = draw(st.integers(1, 5)) * (2 if draw(st.booleans()) else 1)
    d = h * dh
    rope = dh % 2 == 0 and draw(st.booleans())
    cross = draw(st.booleans())
    t = draw(st.integers(1, 9))
    tk = draw(st.integers(1, 9)) if cross else t
    return dict(nb=draw(st.integers(1, 3)), t=t, tk=tk, d=d, h=h, rope=rope, cross=cross,
                causal=draw(st.booleans()), bias=draw(st.booleans()),
                mask=draw(st.booleans()), attention=draw(st.sampled_from(["dense", "blocked"])),
                dtype=draw(st.sampled_from([np.float32, np.float64])),
                seed=draw(st.integers(0, 2**32 - 1)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_property_forward_and_gradients_match_numpy(c):
    rng = np.random.default_rng(c["seed"])
    dt = c["dtype"]
    layer = attnx.MultiHeadAttention(c["d"], c["h"], causal=c["causal"], bias=c["bias"],
                                     rope=c["rope"], dtype=dt, random_state=c["seed"],
                                     attention=c["attention"])
    if c["bias"]:
        for k in ("bq", "bk", "bv", "bo"):
            layer.params[k][...] = rng.normal(size=c["d"]) * 0.3
    x = rng.normal(size=(c["nb"], c["t"], c["d"])).astype(dt)
    ctx = rng.normal(size=(c["nb"], c["tk"], c["d"])).astype(dt) if c["cross"] else None
    kpm = (rng.random((c["nb"], c["tk"])) < 0.3) if c["mask"] else None
    y = layer.forward(x, ctx, kpm)
    kw = dict(causal=c["causal"], context=ctx, key_padding_mask=kpm, rope=c["rope"])
    tol = 2e-4 if dt == np.float32 else 1e-10
    assert np.isfinite(y).all()
    assert rel_err(y, mha_numpy(layer.params, x, c["h"], **kw), floor=1e-3) < tol
    dy = rng.normal(size=y.shape).astype(dt)
    out = layer.backward(dy)
    dx, dctx = out if c["cross"] else (out, None)
    g, dxr, dcr = mha_numpy_backward(layer.params, x, dy, c["h"], **kw)
    assert rel_err(dx, dxr, floor=1e-2) < tol
    if c["cross"]:
        assert rel_err(dctx, dcr, floor=1e-2) < tol
    scale = max(np.abs(v).max() for v in g.values())
    for k in g:
        assert np.abs(layer.grads[k] - g[k]).max() <= tol * max(scale, 1e-2), k


INVALID_KINDS = ("ndim", "features", "empty_batch", "empty_t", "dtype_complex", "dtype_object",
                 "nan", "inf", "ctx_batch", "ctx_features", "mask_shape", "mask_dtype",
                 "out_shape", "out_dtype", "dy_shape", "dy_nan")


@st.composite
def invalid_calls(draw):
    """One thing wrong with a call of a valid layer: (kind, d_model, batch, steps)."""
    kind = draw(st.sampled_from(INVALID_KINDS))
    d = draw(st.sampled_from([4, 6, 8]))
    nb, t = draw(st.integers(1, 3)), draw(st.integers(1, 6))
    return kind, d, nb, t


def test_property_invalid_input_raises():
    """300 drawn invalid calls each raise the expected exception, and hypothesis really
    drew that many, of every kind."""
    kinds = []

    @settings(max_examples=300, deadline=None)
    @given(invalid_calls())
    def check(case):
        kinds.append(case[0])
        _invalid_call_raises(*case)

    check()
    assert len(kinds) >= 300 and set(kinds) == set(INVALID_KINDS), (len(kinds), set(kinds))


def _invalid_call_raises(kind, d, nb, t):
    layer = attnx.MultiHeadAttention(d, 2, random_state=0, dtype=np.float64)
    x = np.ones((nb, t, d))
    args, kw = [x], {}
    exc = ValueError
    if kind == "ndim":
        args = [np.ones((nb, t))]
    elif kind == "features":
        args = [np.ones((nb, t, d + 1))]
    elif kind == "empty_batch":
        args = [np.ones((0, t, d))]
    elif kind == "empty_t":
        args = [np.ones((nb, 0, d))]
    elif kind == "dtype_complex":
        args, exc = [x.astype(complex)], TypeError
    elif kind == "dtype_object":
        args, exc = [np.full((nb, t, d), None, dtype=object)], TypeError
    elif kind in ("nan", "inf"):
        bad = x.copy()
        bad[-1, -1, -1] = np.nan if kind == "nan" else np.inf
        args = [bad]
    elif kind == "ctx_batch":
        kw["context"] = np.ones((nb + 1, t, d))
    elif kind == "ctx_features":
        kw["context"] = np.ones((nb, t, d - 1))
    elif kind == "mask_shape":
        kw["key_padding_mask"] = np.zeros((nb, t + 1), dtype=bool)
    elif kind == "mask_dtype":
        kw["key_padding_mask"], exc = np.zeros((nb, t), dtype=np.int64), TypeError
    elif kind == "out_shape":
        kw["out"] = np.empty((nb, t + 1, d))
    elif kind == "out_dtype":
        kw["out"] = np.empty((nb, t, d), dtype=np.float32)
    if kind in ("dy_shape", "dy_nan"):
        layer.forward(x)
        dy = np.ones((nb, t + 1, d)) if kind == "dy_shape" else np.full((nb, t, d), np.nan)
        with pytest.raises(ValueError, match="dy"):
            layer.backward(dy)
        return
    with pytest.raises(exc):
        layer.forward(*args, **kw)


# ---------------------------------------------------------------- extremes
@pytest.mark.parametrize("attention", ["dense", "blocked"])
def test_large_inputs_never_give_nan(attention, rng):
    layer = attnx.MultiHeadAttention(16, 4, causal=True, random_state=0, attention=attention)
    x = (rng.normal(size=(2, 40, 16)) * 1e4).astype(np.float32)
    y = layer.forward(x)
    assert np.isfinite(y).all()
    assert np.isfinite(layer.backward(np.ones_like(y))).all()
    np.testing.assert_allclose(layer.attention_weights().sum(-1), 1.0, rtol=1e-5)


def test_absurd_size_is_a_memory_error_before_allocating():
    layer = attnx.MultiHeadAttention(8, 2, attention="dense")
    x = np.zeros((1, 400_000, 8), dtype=np.float32)   # 400k^2 scores: ~640 GB
    with pytest.raises(MemoryError, match="GiB"):
        layer.forward(x)


def test_nan_weights_are_rejected(rng):
    layer = attnx.MultiHeadAttention(8, 2)
    layer.params["Wv"][0, 0] = np.nan
    with pytest.raises(ValueError, match="Wv"):
        layer.forward(rng.normal(size=(1, 3, 8)))
    model = attnx.Transformer(8, 2, n_layers=1)
    model.params["layers.0.W2"][...] = np.inf
    with pytest.raises(ValueError, match="layers.0.W2"):
        model.forward(rng.normal(size=(1, 3, 8)))


def test_other_dtypes_and_layouts_are_converted(rng):
    layer = attnx.MultiHeadAttention(8, 2, dtype=np.float64, random_state=0)
    x = rng.normal(size=(2, 12, 8))
    ref = layer.forward(x)
    assert rel_err(layer.forward(x.astype(np.float32)), ref) < 1e-6
    assert rel_err(layer.forward(np.round(x * 3).astype(np.int64)),
                   layer.forward(np.round(x * 3))) < 1e-14
    wide = np.zeros((2, 24, 16))
    wide[:, ::2, ::2] = x
    view = wide[:, ::2, ::2]                 # non-contiguous view of the same values
    assert not view.flags.c_contiguous
    np.testing.assert_array_equal(layer.forward(view), ref)
    np.testing.assert_array_equal(layer.forward(x.tolist()), ref)


# ---------------------------------------------------------------- threads
@pytest.mark.parametrize("model_cls", ["attention", "transformer"])
def test_concurrent_inference_matches_serial(model_cls, rng):
    if model_cls == "attention":
        model = attnx.MultiHeadAttention(16, 4, causal=True, random_state=0)
    else:
        model = attnx.Transformer(16, 4, n_layers=2, random_state=0)
    inputs = [rng.normal(size=(3, 20 + i, 16)).astype(np.float32) for i in range(6)]
    serial = [model.forward(x, grad=False) for x in inputs]
    results = [[None] * len(inputs) for _ in range(4)]
    errors = []

    def work(w):
        try:
            for _ in range(10):
                for i, x in enumerate(inputs):
                    results[w][i] = model.forward(x, grad=False)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    for w in range(4):
        for i in range(len(inputs)):
            np.testing.assert_array_equal(results[w][i], serial[i])
