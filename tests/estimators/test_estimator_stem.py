"""The estimators' time-series options: pooling "max" / "cls" and the convolutional
stem (fit, predict, attention_weights, standardisation, save / load, bad
input)."""
import numpy as np
import pytest

import attnx
from attnx.estimators import _scaling

TC, TR = attnx.TransformerClassifier, attnx.TransformerRegressor
SMALL = dict(n_heads=2, n_layers=1, d_model=8, batch_size=8, random_state=0)


def _classes(n=48, t=12, seed=0):
    """A label that a convolution sees at once: whether a bump is up or down."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, t, 2)) * 0.3
    y = rng.integers(0, 2, size=n)
    at = rng.integers(1, t - 2, size=n)
    for i in range(n):
        X[i, at[i]:at[i] + 2, 0] += 2.0 if y[i] else -2.0
    return X, y


def _ragged(n, seed, lo=3, hi=10):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(int(t), 3)) for t in rng.integers(lo, hi, size=n)]


@pytest.mark.parametrize("pooling", ["max", "cls", "mean"])
def test_classifier_with_a_stem_learns(pooling):
    X, y = _classes()
    est = TC(**SMALL, stem=((3, 1), (3, 2)), pooling=pooling, epochs=30, lr=0.01,
             dropout=0.0).fit(X, y)
    assert est.model_.stem == ((3, 1), (3, 2)) and est.model_.pooling == pooling
    assert est.patch_len_ == 1 and est.n_features_in_ == 2
    assert est.model_.params["stem.0.W"].shape == (6, 8)
    assert est.score(X, y) > 0.9   # training accuracy: the bump is local
    assert est.predict_proba(X[:5]).shape == (5, 2)


def test_per_position_targets_with_a_stride_1_stem():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 7, 3))
    Y = np.cumsum(X[..., :1], axis=1)
    est = TR(**SMALL, stem=((3, 1),), epochs=2).fit(X, Y)
    assert est.predict(X).shape == (20, 7, 1)
    with pytest.raises(ValueError, match=r"stem=\(\(3, 2\),\) has strides > 1, which need one "
                                         "target per sequence"):
        TR(**SMALL, stem=((3, 2),), epochs=1).fit(X, Y)


@pytest.mark.parametrize("patch_len, ok", [(None, True), (1, True), (4, False)])
def test_stem_turns_patches_off(patch_len, ok):
    X, y = _classes(16)
    est = TC(**SMALL, stem=((3, 2),), patch_len=patch_len, epochs=1)
    if ok:
        assert est.fit(X, y).patch_len_ == 1
        assert est.model_.n_features == 2
    else:
        with pytest.raises(ValueError, match=r"patch_len=4 and stem=\(\(3, 2\),\) both make "
                                             "the tokens"):
            est.fit(X, y)


def test_kernel_longer_than_the_shortest_sequence():
    X = _ragged(12, 0, lo=4, hi=9)
    X[3] = X[3][:3]
    y = np.arange(12) % 2
    with pytest.raises(ValueError, match=r"stem=\(\(4, 1\),\) does not fit the shortest "
                                         r"sequence \(3 steps\): stem layer 0 has kernel 4"):
        TC(**SMALL, stem=((4, 1),), epochs=1).fit(X, y)
    with pytest.raises(ValueError, match=r"shortest sequence \(3 steps\): stem layer 1 has "
                                         r"kernel 3, longer than its input of 2 steps"):
        TC(**SMALL, stem=((3, 2), (3, 1)), epochs=1).fit(X, y)
    TC(**SMALL, stem=((3, 2), (2, 1)), epochs=1).fit(X, y)


@pytest.mark.parametrize("kw, err, match", [
    (dict(stem="3"), ValueError, "stem must be None, 'auto' or a sequence of .kernel, "
                                 "stride. pairs, got the string '3'"),
    (dict(stem=3), TypeError, "stem must be None or a sequence of .kernel, stride. pairs, "
                              "got int"),
    (dict(stem=((3, 0),)), ValueError, r"stem\[0\] stride must be >= 1, got 0"),
    (dict(stem=((3.5, 1),)), TypeError, r"stem\[0\] kernel must be an int, got float"),
    (dict(stem=[]), ValueError, "stem must hold at least one"),
    (dict(pooling="min"), ValueError, "pooling must be one of .*'max', 'cls'.*got 'min'"),
    (dict(pooling="cls", options={"causal": True}), ValueError, "pooling='cls' needs causal=False"),
])
def test_bad_parameters(kw, err, match):
    X, y = _classes(16)
    with pytest.raises(err, match=match):
        TC(**SMALL, epochs=1, **kw).fit(X, y)


@pytest.mark.parametrize("pooling", ["cls", "max"])
def test_attention_weights_with_a_stem(pooling):
    X = _ragged(10, 2, lo=4, hi=11)
    y = np.arange(10) % 2
    est = TC(**SMALL, stem=((3, 2),), pooling=pooling, epochs=1).fit(X, y)
    w = est.attention_weights(X)
    longest = max(len(x) for x in X)
    tok = -(-longest // 2) + (pooling == "cls")
    assert len(w) == 1 and w[0].shape == (10, 2, tok, tok)
    for i, x in enumerate(X):
        valid = -(-len(x) // 2) + (pooling == "cls")
        a = w[0][i]
        np.testing.assert_allclose(a[:, :valid].sum(axis=-1), 1, rtol=1e-5)
        assert np.all(a[:, valid:] == 0) and np.all(a[:, :, valid:] == 0)


def test_standardize_with_a_stem_folds_exactly():
    X, y = _classes(24, seed=1)
    X = X * 5 + 3
    est = TC(**SMALL, stem=((3, 2),), epochs=2, dtype=np.float64, options={"standardize": True}).fit(X, y)
    assert np.all(est.input_mean_ == 0)   # scaled, not centred: zero padding stays zero
    m = est.model_
    folded = m.forward(X, grad=False).copy()
    _scaling.unfold(est)
    std = m.forward(X / est.input_scale_, grad=False).copy()
    _scaling.fold(est)
    np.testing.assert_allclose(folded, std, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(m.forward(X, grad=False), folded)


@pytest.mark.parametrize("pooling, stem", [("cls", ((3, 2),)), ("max", ((2, 1), (3, 3)))])
def test_save_load_resumes_exactly(pooling, stem, tmp_path):
    X = _ragged(21, 3, lo=6, hi=12)
    y = np.arange(21) % 3
    kw = dict(SMALL, stem=stem, pooling=pooling, dropout=0.1, options={"lr_schedule": "constant"})
    full = TC(**kw, epochs=4).fit(X, y)
    half = TC(**kw, epochs=2).fit(X, y)
    half.save(tmp_path / "m.safetensors")
    back = attnx.load(tmp_path / "m.safetensors")
    assert back.get_params()["stem"] in (stem, [list(s) for s in stem])
    assert back.model_.stem == stem and back.model_.pooling == pooling
    back.partial_fit(X, y)
    back.partial_fit(X, y)
    assert back.model_.params.flat.tobytes() == full.model_.params.flat.tobytes()
    np.testing.assert_array_equal(back.predict_proba(X), full.predict_proba(X))


@pytest.mark.parametrize("t_max, t_min, want", [
    (24, 24, ((8, 1), (4, 2))),        # short: stride 1, then 12 tokens
    (29, 7, ((7, 1), (4, 2))),         # ragged: kernels within the shortest sequence
    (32, 32, ((8, 4), (3, 1))),        # 8 tokens
    (427, 427, ((8, 4), (14, 7))),     # 16 tokens
    (2000, 2000, ((8, 4), (64, 32))),  # 16 tokens
    (100, 1, ((1, 4), (1, 2))),        # a one-step sequence still fits
    (1, 1, ((1, 1), (1, 1))),
])
def test_auto_stem_rule(t_max, t_min, want):
    from attnx.layers import _stem
    got = _stem.auto(t_max, t_min)
    assert got == want
    n = _stem.lengths(got, t_max)[-1]
    assert n <= _stem.AUTO_TOKENS
    _stem.lengths(got, t_min)   # no kernel longer than its input


def test_auto_stem_is_resolved_at_fit():
    X, y = _classes(t=40)
    assert TC().get_params()["stem"] is None and TR().get_params()["stem"] is None
    est = TC(**SMALL, epochs=2, stem="auto").fit(X, y)
    assert est.get_params()["stem"] == "auto"       # the parameter is not changed
    assert est.model_.stem == ((8, 4), (3, 1)) and est.patch_len_ == 1
    ref = TC(**SMALL, epochs=2, stem=((8, 4), (3, 1))).fit(X, y)
    np.testing.assert_array_equal(est.predict_proba(X), ref.predict_proba(X))
    est.set_params(warm_start=True).fit(X, y)       # warm start keeps the fitted stem
    assert est.model_.stem == ((8, 4), (3, 1))
    ragged = _ragged(12, 1, lo=5, hi=40)
    est = TC(**SMALL, epochs=1, stem="auto").fit(ragged, np.arange(12) % 2)
    assert est.model_.stem == attnx.layers._stem.auto(max(map(len, ragged)), min(map(len, ragged)))
    # per-position targets and the bare network get no stem
    assert TR(**SMALL, epochs=1, stem="auto").fit(X, X[..., :1]).model_.stem is None


def test_predict_on_sequences_shorter_than_the_stems_kernels():
    """A pooled model predicts sequences shorter than its kernels: zero steps (masked)
    are added, which is what the 'same' padding reads, so each prediction is the one
    of the sequence alone, dense or in a ragged batch."""
    X, y = _classes(t=12)
    est = TC(**SMALL, epochs=2, stem=((6, 1), (3, 2))).fit(X, y)
    short = np.random.default_rng(3).normal(size=(4, 3, 2))
    dense = est.predict_proba(short)
    ragged = est.predict_proba([short[0], short[1], X[0], short[2][:2]])
    np.testing.assert_allclose(ragged[:2], dense[:2], rtol=1e-6)
    np.testing.assert_allclose(ragged[2], est.predict_proba(X[:1])[0], rtol=1e-6)
    # the same as the model on explicitly padded input with its mask
    padded = np.zeros((4, 6, 2), dtype=est.model_.dtype)   # the scaling is in the weights
    padded[:, :3] = short
    mask = np.zeros((4, 6), bool)
    mask[:, 3:] = True
    logits = est.model_.forward(padded, key_padding_mask=mask, grad=False)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    np.testing.assert_allclose(dense, p / p.sum(axis=1, keepdims=True), rtol=1e-5)
