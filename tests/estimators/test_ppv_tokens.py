"""PPV tokens (tokenizer="ppv" / "auto"): the kernel against a NumPy statement of
the same transform, its argument checks, and the estimators that use it (the auto
rule, learning a shifted local shape, ragged and missing steps, save / load /
pickle / clone, bad input)."""
import pickle

import numpy as np
import pytest

import attnx
from attnx.estimators import _ppv_tokens as P
from attnx.estimators import _sequences as seqs
from attnx import distributed
from attnx.kernels._ppv import ppv
from attnx.layers import _stem

TC, TR = attnx.TransformerClassifier, attnx.TransformerRegressor
SMALL = dict(n_heads=2, n_layers=1, d_model=16, batch_size=8, epochs=15, random_state=0)


def _series(n=6, t=90, c=2, seed=0, short=(70, 41, 77)):
    """Series with ragged lengths and missing steps (reading 0, as the estimator
    passes them)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, t, c)).cumsum(1) * 0.3
    lengths = np.full(n, t)
    lengths[1:1 + len(short)] = short
    miss = np.zeros((n, t), bool)
    miss[0, 5:9] = True
    miss[2, 30:] = True
    for i, n_i in enumerate(lengths):
        x[i, n_i:] = 0
    x[miss] = 0
    return x, lengths, miss


def _reference(tr, x, lengths, miss, dt, shift=0.0):
    """The tokens in NumPy: every kernel output at every step, thresholded, and the
    fractions over each window's valid steps. shift moves every bias (a quantile bias
    can equal a training output, whose sum the kernel may round the other way:
    +-shift bound the tokens such a tie can make)."""
    n, t, c = x.shape
    valid = P._valid(n, t, lengths, miss)
    xs = P._centred(x.astype(dt), tr.mean, tr.scale, valid).astype(dt).astype(np.float64)
    bias = tr.bias.astype(dt).astype(np.float64)
    w = tr.window
    tp = -(-t // w) * w
    blocks = []
    for i, d in enumerate(tr.dilations):
        out = P.conv_outputs(xs, lengths, int(d), np.ones((n, t), bool)).reshape(n, t, c, -1)
        ind = (out[..., None] > bias[i][None, None] + shift).reshape(n, t, -1).astype(
            np.float64)
        ind[~valid] = 0
        pad = np.zeros((n, tp, ind.shape[-1]))
        pad[:, :t] = ind
        blocks.append(pad.reshape(n, tp // w, w, -1).sum(2))
    cnt = np.zeros((n, tp))
    cnt[:, :t] = valid
    cnt = cnt.reshape(n, tp // w, w).sum(2)
    return np.concatenate(blocks, -1) / np.maximum(cnt, 1)[..., None]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("window", [1, 7, 16])
def test_kernel_is_the_numpy_transform(dtype, window):
    x, lengths, miss = _series()
    data = seqs.Data(x, lengths, np.zeros(len(x), np.int64), None, False, miss)
    tr = P.PPVTokens.fit(data, window, 0, distributed.Local())
    assert list(tr.dilations) == list(P.dilations(41)) and len(tr.dilations) > 1
    nq = len(P.QUANTILES)
    assert tr.bias.shape == (len(tr.dilations), 2, 84, nq) and nq == 5
    out, tl, tm = tr.transform(x.astype(dtype), lengths, miss)
    assert out.dtype == dtype and out.shape == (6, -(-90 // window), tr.n_features)
    ref = _reference(tr, x, lengths, miss, dtype)
    tol = 0 if dtype == np.float64 else 1e-6
    # exact except where an output ties with a bias to rounding (a few in 1e4)
    eps = 1e-9 if dtype == np.float64 else 1e-4
    hi = _reference(tr, x, lengths, miss, dtype, -eps)
    lo = _reference(tr, x, lengths, miss, dtype, eps)
    assert np.all(out >= lo - tol) and np.all(out <= hi + tol)
    ties = hi != lo
    assert ties.mean() < 2e-2   # tokens with a tie in their window
    np.testing.assert_allclose(out[~ties], ref[~ties], rtol=0, atol=tol)
    assert list(tl) == list(-(-lengths // window))
    np.testing.assert_array_equal(tm, seqs.patch_missing(miss, lengths, window))
    # fractions: in [0, 1]; most outputs lie above the lowest (0.1 quantile) bias, fewer
    # above each next one, few above the highest (0.9)
    assert out.min() >= 0 and out.max() <= 1
    means = [out[0, 1, q::nq].mean() for q in range(nq)]
    assert means[0] > 0.6 and means[-1] < 0.4 and all(np.diff(means) < 0)


def test_kernel_threads_give_the_same_tokens():
    x, lengths, miss = _series(n=9)
    data = seqs.Data(x, lengths, np.zeros(len(x), np.int64), None, False, miss)
    tr = P.PPVTokens.fit(data, 8, 0, distributed.Local())
    a = tr.transform(x, lengths, miss, nthreads=1)[0]
    b = tr.transform(x, lengths, miss, nthreads=2)[0]
    np.testing.assert_array_equal(a, b)


def test_kernel_checks_its_arguments():
    x = np.zeros((2, 10, 1))
    lengths = np.array([10, 4], np.int32)
    dil = np.array([1], np.int32)
    comb = P.COMB
    bias = np.zeros((1, 1, 84, 2))
    out = np.zeros((2, 5, 168))
    ppv(x, lengths, None, dil, comb, bias, 2, out)
    bad = [
        (dict(window=0), "window must be >= 1"),
        (dict(lengths=np.array([11, 4], np.int32)), "lengths must lie in"),
        (dict(lengths=np.array([10, 4])), "lengths must have dtype int32"),
        (dict(dilations=np.array([0], np.int32)), "dilations must be >= 1"),
        (dict(bias=np.zeros((1, 1, 84, 2), np.float32)), "bias must have dtype float64"),
        (dict(out=np.zeros((2, 4, 168))), "out must have shape"),
        (dict(missing=np.zeros((2, 9), np.uint8)), "missing must have shape"),
        (dict(comb=np.full((84, 3), 9, np.int32)), "comb entries"),
    ]
    base = dict(x=x, lengths=lengths, missing=None, dilations=dil, comb=comb, bias=bias,
                window=2, out=out)
    for change, msg in bad:
        args = {**base, **change}
        with pytest.raises(ValueError, match=msg):
            ppv(args["x"], args["lengths"], args["missing"], args["dilations"], args["comb"],
                args["bias"], args["window"], args["out"])
    with pytest.raises(TypeError, match="x must be a numpy array"):
        ppv([[0.0]], lengths, None, dil, comb, bias, 2, out)


def test_state_round_trip_and_bad_state():
    x, lengths, miss = _series()
    data = seqs.Data(x, lengths, np.zeros(len(x), np.int64), None, False, miss)
    tr = P.PPVTokens.fit(data, 8, 0, distributed.Local())
    back = P.PPVTokens.from_spec(tr.to_spec())
    np.testing.assert_array_equal(back.transform(x, lengths, miss)[0],
                                  tr.transform(x, lengths, miss)[0])
    spec = tr.to_spec()
    with pytest.raises(ValueError, match="incomplete"):
        P.PPVTokens.from_spec({k: v for k, v in spec.items() if k != "bias"})
    with pytest.raises(ValueError, match="does not fit together"):
        P.PPVTokens.from_spec({**spec, "scale": [1.0]})
    with pytest.raises(ValueError, match="fitted on 2"):
        tr.transform(np.zeros((1, 90, 3)), None, None)


def test_many_channels_keep_two_biases_and_every_dilation():
    # five biases at 8 dilations would pass MAX_FEATURES with 5 channels: the two
    # earlier quantiles (0.2, 0.8) keep all 8 dilations; 4 channels keep five
    x = np.random.default_rng(1).standard_normal((4, 300, 5))
    for c, qs in ((5, P.FEW_QUANTILES), (4, P.QUANTILES)):
        data = seqs.Data(x[..., :c], None, np.zeros(4, np.int64), None, False, None)
        tr = P.PPVTokens.fit(data, 75, 0, distributed.Local())
        nd = len(P.dilations(300))   # every dilation 300 steps allow
        assert tr.bias.shape == (nd, c, 84, len(qs)) and list(tr.dilations) == list(
            P.dilations(300))
        assert tr.n_features == nd * c * 84 * len(qs) <= P.MAX_FEATURES
        xs = P._centred(x[:, :, :c], tr.mean, tr.scale, np.ones((4, 300), bool))
        out = P.conv_outputs(xs, np.full(4, 300), int(tr.dilations[2]),
                             np.ones((4, 300), bool))   # (n, C, 84) as fit pools them
        rows = out.reshape(out.shape[0], -1).T
        np.testing.assert_allclose(tr.bias[2].reshape(c * 84, -1),
                                   np.quantile(rows, qs, axis=1).T, rtol=1e-12)


def test_dilations_and_feature_cap():
    assert list(P.dilations(10)) == [1]
    d = P.dilations(2000)
    assert d[0] == 1 and d[-1] == 249 and len(d) == 8
    # many channels: fewer dilations, then one bias, keep the tokens' width bounded
    x = np.random.default_rng(0).standard_normal((3, 200, 60))
    data = seqs.Data(x, None, np.zeros(3, np.int64), None, False, None)
    tr = P.PPVTokens.fit(data, 50, 0, distributed.Local())
    assert tr.n_features <= P.MAX_FEATURES and len(tr.dilations) == 1


def _shifted_shape(n=60, t=96, seed=0):
    """Two classes that differ only in a short local shape (a sharp spike or a slow
    bump) at a random place in a noisy random walk: what PPV tokens capture."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, t, 1)) * 0.3
    y = np.arange(n) % 2
    for i in range(n):
        at = rng.integers(10, t - 20)
        if y[i]:
            X[i, at:at + 3, 0] += [2.0, -2.0, 2.0]
        else:
            X[i, at:at + 9, 0] += np.hanning(9) * 2.0
    return X, y


def test_standardize_scales_ppv_token_features_by_token_scale_times_std():
    X, y = _shifted_shape()
    est = TC(**SMALL).fit(X, y)
    tokens = est.plan_.ppv.transform(X, None, None)[0]
    flat = tokens.reshape(-1, tokens.shape[-1]).astype(np.float64)
    std = flat.std(axis=0)
    np.testing.assert_allclose(est.input_mean_, flat.mean(axis=0), rtol=1e-6, atol=1e-8)
    # powers of two within sqrt(2) of TOKEN_SCALE x std (1 where a feature is constant)
    ratio = est.input_scale_[std > 0] / (P.TOKEN_SCALE * std[std > 0])
    assert P.TOKEN_SCALE == 8.0 and np.all(np.log2(est.input_scale_) % 1 == 0)
    assert np.all((ratio >= 2 ** -0.5 - 1e-5) & (ratio <= 2 ** 0.5 + 1e-5))
    np.testing.assert_array_equal(est.input_scale_[std == 0], 1.0)
    # raw patches of the same series keep unit variance (no token factor)
    raw = TC(**SMALL, tokenizer="patch").fit(X, y)
    assert np.all((raw.input_scale_ / X.std() >= 0.5) & (raw.input_scale_ / X.std() <= 2))


def test_auto_rule_picks_ppv_for_long_classification_series_only():
    X, y = _shifted_shape()
    est = TC(**SMALL).fit(X, y)
    assert est.plan_.ppv is not None and est.n_features_in_ == 1
    assert est.patch_len_ == 24 == 96 / P.PPV_TOKENS   # 96 steps in 4 windows
    assert est.model_.params["embed.W"].shape[0] == est.plan_.ppv.n_features
    # shorter than 64 steps, one channel: raw values through the short stem (16 tokens)
    short = TC(**SMALL).fit(X[:, :63], y)
    assert short.plan_.ppv is None and short.patch_len_ == 1
    assert short.model_.stem == ((3, 1), (8, 4)) == _stem.short(63, 63)
    # raw patches when asked, or with two channels (at most 16 tokens)
    patched = TC(**SMALL, tokenizer="patch").fit(X[:, :63], y)
    assert patched.patch_len_ == 4 and patched.model_.stem is None
    two = TC(**SMALL).fit(np.repeat(X[:, :63], 2, axis=2), y)
    assert two.plan_.ppv is None and two.patch_len_ == 4 and two.model_.stem is None
    assert TC(**SMALL, tokenizer="patch").fit(X, y).plan_.ppv is None
    assert TC(**SMALL, instance_norm="input").fit(X, y).plan_.ppv is None
    assert TR(**SMALL).fit(X, y.astype(float)).plan_.ppv is None   # regressors: "patch"
    assert TR(**SMALL, tokenizer="ppv").fit(X, y.astype(float)).plan_.ppv is not None
    asked = TC(**SMALL, tokenizer="ppv").fit(X[:, :20], y)
    assert asked.plan_.ppv is not None and asked.patch_len_ == 5   # 20 steps in 4 windows
    assert TC(**SMALL, tokenizer="ppv", patch_len=2).fit(X[:, :20], y).patch_len_ == 2


def test_ppv_tokens_learn_a_shifted_local_shape():
    X, y = _shifted_shape(n=80)
    Xt, yt = _shifted_shape(n=80, seed=1)
    # windows of 6 steps (16 tokens): a 3-9 step shape is a large part of its window;
    # the default 4 windows of 24 steps dilute it (0.86-0.89 over seeds 0-3, against
    # 0.96-1.0 here; README, choosing settings)
    kw = {**SMALL, "epochs": 40}
    ppv_acc = TC(**kw, tokenizer="ppv", patch_len=6).fit(X, y).score(Xt, yt)
    assert ppv_acc >= 0.9


def test_ragged_missing_and_predict_match_per_sequence():
    X, y = _shifted_shape(n=40)
    rng = np.random.default_rng(3)
    ragged = [X[i, :int(rng.integers(70, 97))] for i in range(40)]
    est = TC(**SMALL, tokenizer="ppv", missing="mask").fit(ragged, y)
    p_all = est.predict_proba(ragged[:6])
    for i in range(6):
        np.testing.assert_allclose(est.predict_proba([ragged[i]])[0], p_all[i], atol=1e-6)
    # trailing NaN steps are the shorter sequence
    dense = X[:6].copy()
    dense[0, 80:] = np.nan
    short = [dense[0, :80]] + [dense[i] for i in range(1, 6)]
    np.testing.assert_allclose(est.predict_proba(dense), est.predict_proba(short), atol=1e-6)
    assert np.isnan(dense[0, 80:]).all()   # the caller's array is untouched


def test_save_load_pickle_clone(tmp_path):
    from sklearn.base import clone
    X, y = _shifted_shape(n=30)
    est = TC(**SMALL).fit(X, y)
    path = tmp_path / "m.safetensors"
    est.save(path)
    back = attnx.load(path)
    np.testing.assert_array_equal(back.predict_proba(X), est.predict_proba(X))
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(est)).predict_proba(X),
                                  est.predict_proba(X))
    assert clone(est).get_params()["tokenizer"] == "auto"
    # training goes on with the same tokens
    back.partial_fit(X, y)
    assert back.plan_.ppv == est.plan_.ppv


def test_bad_input():
    X, y = _shifted_shape(n=20)
    with pytest.raises(ValueError, match="tokenizer must be one of"):
        TC(**SMALL, tokenizer="rocket").fit(X, y)
    with pytest.raises(ValueError, match="cannot be combined with instance"):
        TC(**SMALL, tokenizer="ppv", instance_norm="input").fit(X, y)
    with pytest.raises(ValueError, match="cannot be combined with a stem"):
        TC(**SMALL, tokenizer="ppv", stem=((3, 1),)).fit(X, y)
    with pytest.raises(ValueError, match="one target per sequence"):
        TC(**SMALL, tokenizer="ppv").fit(X, np.tile(y[:, None], (1, 96)))
    est = TC(**SMALL).fit(X, y)
    with pytest.raises(ValueError, match="1 feature"):
        est.predict(np.zeros((2, 96, 2)))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", ["dense", "ragged_missing"])
def test_onnx_graph_makes_the_tokens_as_predict(dtype, case, tmp_path):
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from attnx.io import onnx as ax_onnx
    X, y = _shifted_shape(n=24, t=100)
    Xt = _shifted_shape(n=8, t=100, seed=5)[0]
    kw = {**SMALL, "epochs": 3, "dtype": dtype}
    if case == "dense":
        est = TC(**kw, tokenizer="ppv").fit(X, y)
        feed = {"x": Xt.astype(dtype)}
        want = est.predict_proba(Xt)
        ax_onnx.export(est, tmp_path / "m.onnx", key_padding_mask=False)
    else:
        est = TC(**kw, tokenizer="ppv", missing="mask").fit(X, y)
        Xt[1, 40:43] = np.nan
        Xt[2, 90:] = np.nan   # a series 90 steps long
        feed = {"x": Xt.astype(dtype), "key_padding_mask": np.zeros((8, 100), bool)}
        feed["key_padding_mask"][3, 77:] = True   # and one 77 steps long
        want = est.predict_proba([Xt[i, :77] if i == 3 else Xt[i] for i in range(8)])
        ax_onnx.export(est, tmp_path / "m.onnx", key_padding_mask=True)
    sess = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    got = sess.run(None, feed)[0]
    tol = 1e-10 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)
