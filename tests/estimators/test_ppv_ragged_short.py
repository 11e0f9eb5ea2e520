"""PPV tokens of ragged and short series (issue 40): the kernel with each series' own
dilations and window against a NumPy statement, the own-length state (scaled
dilations, windows of ceil(T / tokens) steps, a series shorter than a window), states
saved before it (no reference length: the fixed rule), and the estimators' use of it
on ragged training series."""
import numpy as np
import pytest

import attnx
from attnx.estimators import _ppv_tokens as P
from attnx.estimators import _sequences as seqs
from attnx import distributed
from attnx.kernels._ppv import ppv
from attnx.layers import _stem

TC = attnx.TransformerClassifier
SMALL = dict(n_heads=2, n_layers=1, d_model=16, batch_size=8, epochs=15, random_state=0)


def _ragged(n=7, t=60, c=2, seed=0, lengths=(60, 3, 17, 41, 8, 60, 29), miss=True):
    """Dense (n, t, c) series with ragged lengths (steps past the end read 0) and a
    few missing steps (reading 0, as the estimator passes them)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, t, c)).cumsum(1) * 0.3
    lengths = np.asarray(lengths[:n])
    m = np.zeros((n, t), bool)
    if miss:
        m[0, 10:14] = True
        m[3, 2] = True
    for i, n_i in enumerate(lengths):
        x[i, n_i:] = 0
    x[m] = 0
    return x, lengths, m


def _numpy_tokens(xs, n_i, miss_i, dil, bias, w):
    """One series' tokens in NumPy: xs (T, C) centred (steps past n_i read 0), the
    fraction of each window's valid steps where each kernel output passes each bias."""
    t, c = xs.shape
    valid = np.arange(t) < n_i
    if miss_i is not None:
        valid &= ~miss_i
    ntok = -(-n_i // w)
    feats = []
    for i, d in enumerate(dil):
        out = P.conv_outputs(xs[None], np.array([n_i]), int(d), np.ones((1, t), bool))
        ind = (out.reshape(t, c, -1)[..., None] > bias[i][None]).reshape(t, -1)
        feats.append(ind)
    ind = np.concatenate(feats, -1).astype(np.float64)
    rows = []
    for k in range(ntok):
        sl = slice(k * w, min(k * w + w, n_i))
        cnt = valid[sl].sum()
        rows.append(ind[sl][valid[sl]].sum(0) / cnt if cnt else np.zeros(ind.shape[1]))
    return np.array(rows).reshape(ntok, -1)


def _own_state(x, lengths, miss, tokens=4):
    data = seqs.Data(x, lengths, np.zeros(len(x), np.int64), None, False, miss)
    return P.PPVTokens.fit(data, 15, 0, distributed.Local(), own=True, tokens=tokens)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_own_length_tokens_are_the_numpy_transform_per_series(dtype):
    x, lengths, miss = _ragged()
    tr = _own_state(*_ragged(seed=1))   # biases from other series: no output ties one
    got, tl, tmiss = tr.transform(x.astype(dtype), lengths, miss)
    assert got.dtype == dtype
    dil = tr.series_dilations(lengths)
    wins = tr.series_windows(lengths)
    valid = P._valid(*x.shape[:2], lengths, miss)
    xs = P._centred(x.astype(dtype), tr.mean, tr.scale, valid).astype(dtype).astype(np.float64)
    bias = tr.bias.astype(dtype).astype(np.float64)
    for i, n_i in enumerate(lengths):
        want = _numpy_tokens(xs[i], int(n_i), miss[i], dil[i], bias, int(wins[i]))
        assert tl[i] == len(want) == -(-n_i // wins[i])
        np.testing.assert_array_equal(got[i, :tl[i]], want.astype(dtype))
        assert not got[i, tl[i]:].any()   # tokens past a series' windows read 0
    # a token is masked only when every step of its window is missing
    assert tmiss.shape == got.shape[:2] and not tmiss[0].any()
    assert tmiss[1, 3:].all() and not tmiss[1, :3].any()


def test_scaled_dilations_and_windows_follow_each_length():
    x, lengths, miss = _ragged()
    tr = _own_state(x, lengths, miss)
    assert tr.reference_length == 60 and tr.tokens == 4
    np.testing.assert_array_equal(tr.dilations, P.dilations(60))   # fitted at T_ref
    d = tr.series_dilations(np.array([60, 30, 3, 1, 120]))
    np.testing.assert_array_equal(d[0], tr.dilations)                # T_ref: as fitted
    assert (d >= 1).all() and (d[1] <= d[0]).all() and (d[4] >= d[0]).all()
    assert d[4, -1] == tr.dilations[-1] * 119 // 59
    assert d[2].max() == d[3].max() == 1
    np.testing.assert_array_equal(tr.series_windows(np.array([60, 30, 3, 1, 0])),
                                  [15, 8, 1, 1, 1])
    # equal lengths: the same dilations as the fixed rule
    xe = x[[0, 5]]
    data = seqs.Data(xe, None, np.zeros(2, np.int64), None, False, None)
    assert not P.ragged(data, distributed.Local())
    assert P.ragged(seqs.Data(x, lengths, np.zeros(7), None, False, None), distributed.Local())


def test_a_series_shorter_than_a_window_gets_tokens():
    x, lengths, miss = _ragged(miss=False)
    tr = _own_state(x, lengths, None)
    out, tl, _ = tr.transform(x, lengths, None)
    assert tl[1] == 3 and out[1, :3].any(axis=1).all()   # 3 steps: 3 tokens of 1 step
    assert tl[4] == 4 and tl[0] == 4                      # 8 steps and 60: 4 tokens each
    # the fixed rule: a window longer than the series is one token of its steps
    fixed = P.PPVTokens(tr.mean, tr.scale, tr.dilations, tr.bias, 15)
    out, tl, _ = fixed.transform(x, lengths, None)
    assert tl[1] == 1 and out[1, 0].any() and not out[1, 1:].any()


def test_own_length_tokens_do_not_depend_on_batch_or_threads():
    x, lengths, miss = _ragged()
    tr = _own_state(x, lengths, miss)
    a = tr.transform(x, lengths, miss, nthreads=1)[0]
    b = tr.transform(x, lengths, miss, nthreads=2)[0]
    np.testing.assert_array_equal(a, b)
    for i in (1, 3):
        one = tr.transform(x[i:i + 1], lengths[i:i + 1], miss[i:i + 1])[0]
        np.testing.assert_array_equal(one[0], a[i, :one.shape[1]])


def test_state_without_reference_length_is_the_fixed_rule():
    """A state saved before own-length tokens has no reference_length / tokens: it
    loads as the fixed rule (one window, one set of dilations) and writes the same."""
    x, lengths, miss = _ragged()
    spec = _own_state(*_ragged(seed=1)).to_spec()
    assert spec["reference_length"] == 60 and spec["tokens"] == 4
    old = {k: v for k, v in spec.items() if k not in ("reference_length", "tokens")}
    tr = P.PPVTokens.from_spec(old)
    assert not tr.own_length and tr.window == 15 and tr.to_spec() == old
    got, tl, _ = tr.transform(x, lengths, miss)
    np.testing.assert_array_equal(tl, -(-lengths // 15))
    valid = P._valid(*x.shape[:2], lengths, miss)
    xs = P._centred(x, tr.mean, tr.scale, valid)
    for i, n_i in enumerate(lengths):
        want = _numpy_tokens(xs[i], int(n_i), miss[i], tr.dilations, tr.bias, 15)
        np.testing.assert_array_equal(got[i, :tl[i]], want)
    back = P.PPVTokens.from_spec(spec)
    np.testing.assert_array_equal(back.transform(x, lengths, miss)[0],
                                  _own_state(*_ragged(seed=1)).transform(x, lengths, miss)[0])
    with pytest.raises(ValueError, match="does not fit together"):
        P.PPVTokens.from_spec({**old, "tokens": 4})          # tokens need a reference
    with pytest.raises(ValueError, match="does not fit together"):
        P.PPVTokens.from_spec({**spec, "reference_length": 0})
    with pytest.raises(NotImplementedError, match="no single window"):
        back.window


def test_kernel_checks_per_series_arguments():
    x = np.zeros((2, 10, 1))
    lengths = np.array([10, 4], np.int32)
    dil = np.array([[1, 2], [1, 1]], np.int32)
    win = np.array([3, 1], np.int32)
    bias = np.zeros((2, 1, 84, 2))
    out = np.zeros((2, 4, 336))
    ppv(x, lengths, None, dil, P.COMB, bias, win, out)
    base = dict(dilations=dil, window=win, out=out)
    bad = [
        (dict(window=np.array([3, 0], np.int32)), "windows must be >= 1"),
        (dict(window=np.array([3, 1])), "window must have dtype int32"),
        (dict(window=np.array([3], np.int32)), "window must have shape"),
        (dict(dilations=np.array([[1, 2]], np.int32)), "dilations must have shape"),
        (dict(dilations=np.array([[1, 2], [1, 0]], np.int32)), "dilations must be >= 1"),
        (dict(out=np.zeros((2, 3, 336))), "at least ceil"),
    ]
    for change, msg in bad:
        a = {**base, **change}
        with pytest.raises(ValueError, match=msg):
            ppv(x, lengths, None, a["dilations"], P.COMB, bias, a["window"], a["out"])


def _shapes(n=40, seed=0, lo=20, hi=97):
    """Two classes told apart by a short local shape at a random place, in ragged
    noisy random walks of lo..hi steps."""
    rng = np.random.default_rng(seed)
    X, y = [], np.arange(n) % 2
    for i in range(n):
        t = int(rng.integers(lo, hi))
        x = rng.normal(size=(t, 1)) * 0.3
        at = int(rng.integers(0, t - 9))
        x[at:at + 9, 0] += [0, 0, 0, 2.0, -2.0, 2.0, 0, 0, 0] if y[i] else np.hanning(9) * 2
        X.append(x)
    return X, y


def test_estimator_fits_own_length_tokens_on_ragged_series_only(tmp_path):
    X, y = _shapes()
    est = TC(**SMALL, tokenizer="ppv").fit(X, y)
    assert est.plan_.ppv.to_spec()["reference_length"] == max(len(x) for x in X)
    assert est.plan_.ppv.to_spec()["tokens"] == P.RAGGED_TOKENS
    assert est.patch_len_ == -(-max(len(x) for x in X) // P.RAGGED_TOKENS)
    p = est.predict_proba(X[:5])
    for i in range(5):   # each series' tokens are its own: alone as in a batch
        np.testing.assert_allclose(est.predict_proba([X[i]])[0], p[i], atol=1e-6)
    est.save(tmp_path / "m.safetensors")
    np.testing.assert_array_equal(attnx.load(tmp_path / "m.safetensors").predict_proba(X[:5]), p)
    # an explicit patch_len keeps its windows (even one longer than the shortest
    # series, which makes one token); the dilations still follow the lengths
    est = TC(**SMALL, tokenizer="ppv", patch_len=25).fit(X, y)
    assert "tokens" not in est.plan_.ppv.to_spec() and est.plan_.ppv.to_spec()["window"] == 25
    assert est.plan_.ppv.to_spec()["reference_length"] == max(len(x) for x in X)
    assert min(len(x) for x in X) < 25
    with pytest.raises(ValueError, match="longer than the shortest"):
        TC(**SMALL, tokenizer="patch", patch_len=25).fit(X, y)
    # equal lengths: the fixed rule's state, as before
    dense = np.stack([x[:20] for x in X])
    est = TC(**SMALL, tokenizer="ppv").fit(dense, y)
    assert "reference_length" not in est.plan_.ppv.to_spec() and est.plan_.ppv.to_spec()["window"] == 5


def test_onnx_export_refuses_own_length_tokens(tmp_path):
    pytest.importorskip("onnx")
    from attnx.io import onnx as ax_onnx
    X, y = _shapes(n=16)
    est = TC(**{**SMALL, "epochs": 1}, tokenizer="ppv").fit(X, y)
    with pytest.raises(NotImplementedError, match="no single window"):
        ax_onnx.export(est, tmp_path / "m.onnx")


def test_auto_rule_on_ragged_and_short_series():
    X, y = _shapes(n=24, lo=20, hi=60)          # univariate, ragged, longest < 64
    assert max(len(x) for x in X) < P.AUTO_MIN_LENGTH
    # resampled to the longest, then the short stem (not PPV tokens)
    est = TC(**{**SMALL, "epochs": 1}).fit(X, y)
    lens = [len(x) for x in X]
    assert est.resample_length_ == max(lens) and est.plan_.ppv is None
    assert est.model_.stem == _stem.short(max(lens), max(lens))
    # with missing steps (no stem then): own-length PPV tokens
    Xm = [x.copy() for x in X]
    Xm[0][3] = np.nan
    est = TC(**{**SMALL, "epochs": 1}, missing="mask").fit(Xm, y)
    assert est.plan_.ppv.to_spec()["reference_length"] == max(lens) and est.model_.stem is None
    assert not hasattr(est, "resample_length_")
    # two channels, longest < 64: raw patches; the longest at 64 or more: PPV tokens
    X2 = [np.repeat(x, 2, axis=1) for x in X]
    assert TC(**{**SMALL, "epochs": 1}).fit(X2, y).plan_.ppv is None
    X2[0] = np.zeros((P.AUTO_MIN_LENGTH, 2))
    assert TC(**{**SMALL, "epochs": 1}).fit(X2, y).plan_.ppv is not None
    # very short, one channel: the short stem too, its kernels within the shortest
    short = [x[:P.AUTO_MIN_RAGGED - 1 - i % 3] for i, x in enumerate(X)]
    est = TC(**{**SMALL, "epochs": 1}).fit(short, y)
    assert est.plan_.ppv is None and est.model_.stem == ((3, 1), (2, 1))
    assert est.predict([x[:1] for x in short[:3]]).shape == (3,)   # one step each
    # equal lengths below AUTO_MIN_LENGTH, one channel: the short stem
    dense = np.stack([x[:20] for x in X])
    est = TC(**{**SMALL, "epochs": 1}).fit(dense, y)
    assert est.plan_.ppv is None and est.model_.stem == ((3, 1), (4, 2))
    local = distributed.Local()
    data = seqs.Data(np.zeros((3, 40, 1)), np.array([40, 16, 20]), np.zeros(3), None, False)
    assert P.extent(data, local) == (16, 40) and P.auto_pick(data, local)
    data.lengths = np.array([15, 15, 15])
    assert not P.ragged(data, local) and not P.auto_pick(data, local)


_LEVEL_SCRIPT = """
import sys, numpy as np
sys.path.insert(0, {tests!r})
import test_ppv_ragged_short as t
from attnx.kernels import _ppv
x, lengths, miss = t._ragged()
tr = t._own_state(*t._ragged(seed=1))
out = [tr.transform(x.astype(dt), lengths, miss, nthreads=2)[0] for dt in (np.float64, np.float32)]
np.savez({path!r}, level=_ppv.dispatch_state()[0], f64=out[0], f32=out[1])
"""


def test_own_length_tokens_identical_at_every_simd_level(tmp_path):
    """Per-series dilations and windows through each SIMD level's counting pass
    (ATTNX_SIMD caps the level at import; levels the CPU lacks are skipped)."""
    import os
    import subprocess
    import sys
    got = {}
    for level in (0, 1, 2):
        path = tmp_path / f"l{level}.npz"
        code = _LEVEL_SCRIPT.format(tests=os.path.dirname(__file__), path=str(path))
        env = {**os.environ, "ATTNX_SIMD": str(level)}
        subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=tmp_path)
        with np.load(path) as f:
            if int(f["level"]) == level:
                got[level] = (f["f64"], f["f32"])
    assert 0 in got
    for level, (a, b) in got.items():
        np.testing.assert_array_equal(a, got[0][0])
        np.testing.assert_array_equal(b, got[0][1])
