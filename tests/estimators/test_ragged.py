"""Ragged input: lists of (T_i, n_features) arrays, padded and masked by the estimators."""
import numpy as np
import pytest

from bare_settings import BARE as OLD, BARE_CLS as OLD_CLS, merged  # noqa: F401
import attnx
from attnx.estimators._batches import PAD_MULTIPLE, WINDOW_BATCHES, batch_plan


def ragged(n, f=3, lo=2, hi=15, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(int(t), f)).astype(dtype) for t in rng.integers(lo, hi, size=n)]


def reg(cls=attnx.TransformerRegressor, **kw):
    opts = dict(n_heads=2, d_model=8, epochs=3, batch_size=8, lr=5e-3, random_state=0,
                dtype=np.float64)
    if cls in (attnx.TransformerRegressor, attnx.TransformerClassifier):   # the previous release's recipe
        old = OLD_CLS if cls is attnx.TransformerClassifier else OLD
        opts = merged(old, opts, n_layers=1, d_hidden=16)
    return cls(**merged(opts, kw))


@pytest.mark.parametrize("pooling", ["mean", "last"])
def test_ragged_predict_equals_one_sequence_at_a_time(pooling):
    X = ragged(40)
    y = np.array([x[:, 0].sum() for x in X])
    est = reg(pooling=pooling, positional="sinusoidal", norm="pre").fit(X, y)
    p = est.predict(X)
    assert p.shape == (40,) and p.dtype == np.float64
    alone = np.array([est.predict(x[None])[0] for x in X])  # no padding at all
    np.testing.assert_allclose(p, alone, rtol=1e-10, atol=1e-12)
    assert est.score(X, y) == pytest.approx(1 - np.sum((y - p) ** 2) / np.sum((y - y.mean()) ** 2))


def test_ragged_per_position_targets_come_back_ragged():
    X = ragged(30, seed=1)
    y = [np.cumsum(x[:, :2], axis=0) for x in X]           # (T_i, 2)
    est = reg(options={"causal": True}).fit(X, y)
    p = est.predict(X)
    assert isinstance(p, list) and [a.shape for a in p] == [a.shape for a in y]
    for i in (0, 7, 29):
        np.testing.assert_allclose(p[i], est.predict(X[i][None])[0], rtol=1e-10, atol=1e-12)
    y1 = [x[:, 0] * 2 for x in X]                          # (T_i,): no output axis
    est1 = reg().fit(X, y1)
    assert [a.shape for a in est1.predict(X[:3])] == [a.shape for a in y1[:3]]
    with pytest.raises(ValueError, match=r"y\[2\] must have shape \(\d+,\)"):
        reg().fit(X, y1[:2] + [y1[2][:-1]] + y1[3:])


def test_ragged_classification_per_sequence_and_per_position():
    X = ragged(50, seed=2)
    y = np.where([x[:, 1].mean() > 0 for x in X], "up", "down")
    clf = reg(attnx.AttentionClassifier).fit(X, y)
    assert clf.predict(X).shape == (50,) and clf.predict_proba(X).shape == (50, 2)
    lab = [np.where(x[:, 0] > 0, 1, 0) for x in X]
    pos = reg(attnx.AttentionClassifier).fit(X, lab)
    proba = pos.predict_proba(X)
    assert [a.shape for a in proba] == [(len(x), 2) for x in X]
    np.testing.assert_allclose(np.concatenate(proba).sum(axis=1), 1.0, rtol=1e-12)
    acc = pos.score(X, lab)
    flat_pred, flat_true = np.concatenate(pos.predict(X)), np.concatenate(lab)
    assert acc == pytest.approx(np.mean(flat_pred == flat_true))


def test_equal_lengths_in_a_list_train_as_the_dense_array():
    """With shuffle=False the ragged path (masks of no padding) and the dense path
    see the same batches: the same weights to rounding."""
    rng = np.random.default_rng(3)
    Xd = rng.normal(size=(20, 6, 3))
    y = Xd[:, :, 0].mean(axis=1)
    a = reg(options={"shuffle": False}).fit(Xd, y)
    b = reg(options={"shuffle": False}).fit(list(Xd), y)
    np.testing.assert_allclose(b.model_.params.flat, a.model_.params.flat, rtol=1e-9,
                               atol=1e-12)
    assert isinstance(b.predict(list(Xd)), np.ndarray)  # pooled: one row per sequence


def test_ragged_training_matches_pytorch(torch):
    """Two full-batch steps on ragged per-position targets == the torch twin trained
    with the MSE over the valid positions only, from the same initial weights."""
    from attnx.testing.torch_twin import SeqTwin

    X = ragged(9, f=2, lo=1, hi=7, seed=4)
    y = [np.sin(x) for x in X]
    kw = dict(batch_size=9, weight_decay=0.05, positional="learned", options={"shuffle": False, "max_len": 8})
    init = reg(**kw, epochs=1, lr=0.0).fit(X, y)
    est = reg(**kw, epochs=2, lr=0.02).fit(X, y)
    twin = SeqTwin(init.model_)
    opt = torch.optim.AdamW(twin.parameters(), lr=0.02, weight_decay=0.05)
    t = max(len(x) for x in X)
    xp = np.zeros((9, t, 2))
    yp = np.zeros((9, t, 2))
    valid = np.zeros((9, t), bool)
    for i, (a, b) in enumerate(zip(X, y)):
        xp[i, :len(a)], yp[i, :len(a)], valid[i, :len(a)] = a, b, True
    v = torch.tensor(valid, dtype=torch.float64)[:, :, None]
    for _ in range(2):
        opt.zero_grad()
        out = twin(torch.tensor(xp), ~valid)
        loss = (v * (out - torch.tensor(yp)) ** 2).sum() / (2 * v.sum())
        loss.backward()
        opt.step()
    for name in est.model_.params:
        np.testing.assert_allclose(est.model_.params[name], twin.w(name).detach().numpy(),
                                   rtol=1e-9, atol=1e-11, err_msg=name)


def test_batches_sort_lengths_within_windows():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 200, size=1000)
    order, plan = batch_plan(1000, 8, np.random.default_rng(1), lengths)
    seen = np.concatenate([order[s:s + m] for s, m, _ in plan])
    assert sorted(seen.tolist()) == list(range(1000))       # every sample once
    padded = sum(t * m for _, m, t in plan)
    for s, m, t in plan:
        ls = lengths[order[s:s + m]]
        assert ls.max() <= t <= max(ls.max(), 1) + PAD_MULTIPLE - 1
    # a plain shuffled batching pads far more (here about 3x the data)
    plain = sum(int(lengths[order_i].max()) * len(order_i)
                for order_i in np.array_split(np.random.default_rng(1).permutation(1000), 125))
    assert padded < 0.7 * plain, (padded, plain, lengths.sum())
    # the batch order is shuffled: not sorted by length within a window
    firsts = [int(lengths[order[s]]) for s, _, _ in plan[:WINDOW_BATCHES]]
    assert firsts != sorted(firsts)
    again = batch_plan(1000, 8, np.random.default_rng(1), lengths)
    np.testing.assert_array_equal(again[0], order)


def test_ragged_input_errors_name_the_argument():
    X = ragged(10)
    y = np.arange(10.0)
    with pytest.raises(ValueError, match=r"X\[3\] is an empty sequence"):
        reg().fit(X[:3] + [np.zeros((0, 3))] + X[4:], y)
    with pytest.raises(ValueError, match=r"X\[1\] has 2 features, X\[0\] has 3"):
        reg().fit([X[0], X[1][:, :2]] + X[2:], y)
    with pytest.raises(ValueError, match=r"X\[2\] must be a 2-D array"):
        reg().fit(X[:2] + [X[2][:, 0]] + X[3:], y)
    bad = [x.copy() for x in X]
    bad[5][1, 1] = np.nan
    with pytest.raises(ValueError, match="X contains NaN"):
        reg().fit(bad, y)
    with pytest.raises(ValueError, match="y must have 10 rows"):
        reg().fit(X, y[:9])
    est = reg(positional="learned").fit(X, y)
    longest = max(len(x) for x in X)
    assert est.model_.max_len == longest
    with pytest.raises(ValueError, match=rf"longer than max_len={longest} of the learned"):
        est.predict([np.zeros((longest + 1, 3))])
    with pytest.raises(ValueError, match="must have 3 features"):
        est.predict([np.zeros((4, 2))])
    with pytest.raises(ValueError, match="n_outputs mismatch"):
        est.partial_fit(X, np.zeros((10, 2)))
    with pytest.raises(ValueError, match="targets per sequence"):
        est.partial_fit(X, [x[:, 0] for x in X])


def test_patches_repeat_a_sequences_last_step_to_the_end_of_its_patch():
    from attnx.estimators import _sequences as seqs
    x = np.arange(2 * 5 * 2, dtype=np.float64).reshape(2, 5, 2) + 1
    x[1, 3:] = 0   # the second sequence has 3 steps
    out, plen = seqs.patch(x, np.array([5, 3]), 2)
    assert out.shape == (2, 3, 4) and plen.tolist() == [3, 2]
    np.testing.assert_array_equal(out[0, 2], np.r_[x[0, 4], x[0, 4]])   # 5 steps: filled
    np.testing.assert_array_equal(out[1, 1], np.r_[x[1, 2], x[1, 2]])   # 3 steps: filled
    np.testing.assert_array_equal(out[1, 2], 0)                        # a padding token
    # a trailing missing step ends the sequence; an interior one reads 0
    missing = np.zeros((2, 5), bool)
    missing[0, 4] = missing[0, 1] = True
    xm = x.copy()
    xm[0, [1, 4]] = 0
    out, _ = seqs.patch(xm, None, 2, missing)
    np.testing.assert_array_equal(out[0, 0], np.r_[xm[0, 0], 0, 0])
    np.testing.assert_array_equal(out[0, 1], np.r_[xm[0, 2], xm[0, 3]])
    np.testing.assert_array_equal(out[0, 2], 0)   # every step of it missing or fill
