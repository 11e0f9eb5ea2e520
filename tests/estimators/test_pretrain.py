"""pretrain="masked": the mask, the masked MSE and the reconstruction network's
gradients (finite differences in float64, the PyTorch twin on identical weights),
the estimators' option and its bad inputs."""
import pickle

import numpy as np
import pytest

import attnx
from attnx.estimators import _pretrain
from numeric_checks import rel_err
from gradcheck import check_grads

TOL = {np.float32: 1e-4, np.float64: 1e-10}


def spec(dtype, f=4, pooling="mean", norm="pre", positional="sinusoidal", n_layers=2):
    return dict(kind="sequence", n_features=f, d_model=8, n_heads=2, n_layers=n_layers,
                n_outputs=3, d_hidden=None, pooling=pooling, positional=positional,
                norm=norm, causal=False, bias=True, dropout=0.0, max_len=16, stem=None,
                dtype=np.dtype(dtype).name)


def ragged(nb, t, rng):
    lengths = rng.integers(2, t + 1, size=nb)
    lengths[0] = t
    return np.arange(t)[None, :] >= lengths[:, None]


# ---- the masked MSE ----------------------------------------------------------------------
def test_masked_mse_value_and_gradient(rng):
    y = rng.normal(size=(3, 5, 4))
    target = rng.normal(size=(3, 5, 4))
    mask = rng.random((3, 5, 4)) < 0.3
    loss, dy = _pretrain.masked_mse(y, target, mask)
    assert loss == pytest.approx(np.mean((y - target)[mask] ** 2), rel=1e-12)
    assert np.all(dy[~mask] == 0)
    check_grads(lambda: _pretrain.masked_mse(y, target, mask)[0], {"y": y}, {"y": dy}, rng,
                n_probe=60, tol=1e-7)


def test_masked_mse_ignores_unmasked_values(rng):
    y = rng.normal(size=(2, 3, 2))
    target = y.copy()
    mask = np.zeros(y.shape, bool)
    mask[0, 1, 0] = True
    target[~mask] += 100.0   # far off where nothing is masked
    loss, dy = _pretrain.masked_mse(y, target, mask)
    assert loss == 0.0 and not dy.any()
    loss, dy = _pretrain.masked_mse(y, target, np.zeros(y.shape, bool))
    assert loss == 0.0 and dy.dtype == y.dtype and not dy.any()


def test_masked_mse_shapes_must_agree():
    with pytest.raises(ValueError, match="one shape"):
        _pretrain.masked_mse(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 4), bool))


# ---- the reconstruction network: finite differences and the torch twin -----------------
def objective(pre, x, mask, kpm):
    """The pre-training loss of one batch, and dL/dy into pre's grads."""
    xin = np.where(mask, 0, x).astype(x.dtype)
    y = pre.forward(xin, key_padding_mask=kpm, grad=True)
    loss, dy = _pretrain.masked_mse(y, x, mask)
    pre.backward(dy)
    return loss


@pytest.mark.parametrize("norm", [None, "pre"])
@pytest.mark.parametrize("use_mask", [False, True])
def test_reconstruction_gradients_finite_differences(rng, norm, use_mask):
    pre = _pretrain.reconstruction_model(spec(np.float64, norm=norm), 3)
    assert pre.pooling is None and pre.n_outputs == 4   # a head per token, width = token
    nb, t = 3, 6
    x = rng.normal(size=(nb, t, 4))
    kpm = ragged(nb, t, rng) if use_mask else None
    valid = np.ones((nb, t), bool) if kpm is None else ~kpm
    mask = _pretrain.token_mask(rng, valid, 4, 2, False, ratio=0.3)
    objective(pre, x, mask, kpm)
    analytic = {n: pre.grads[n].copy() for n in pre.params}
    arrays = {n: pre.params[n] for n in pre.params}

    def loss():
        xin = np.where(mask, 0, x)
        return _pretrain.masked_mse(pre.forward(xin, key_padding_mask=kpm, grad=False), x,
                                    mask)[0]
    check_grads(loss, arrays, analytic, rng, n_probe=15, tol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("use_mask", [False, True])
def test_reconstruction_matches_torch(torch, rng, dtype, use_mask):
    from attnx.testing.torch_twin import SeqTwin

    pre = _pretrain.reconstruction_model(spec(dtype, f=6), 5)
    nb, t = 4, 7
    x = rng.normal(size=(nb, t, 6)).astype(dtype)
    kpm = ragged(nb, t, rng) if use_mask else None
    valid = np.ones((nb, t), bool) if kpm is None else ~kpm
    mask = _pretrain.token_mask(rng, valid, 6, 3, False)   # patches of 3 steps, 2 channels
    loss = objective(pre, x, mask, kpm)
    tw = SeqTwin(pre)
    xin = torch.tensor(np.where(mask, 0, x).astype(dtype))
    yt = tw(xin, kpm)
    mt = torch.tensor(mask)
    lt = ((yt - torch.tensor(x)) ** 2 * mt).sum() / mt.sum()
    lt.backward()
    assert loss == pytest.approx(float(lt.detach()), rel=TOL[dtype])
    grads = tw.grads()
    # bk is zero in exact arithmetic (softmax ignores a key bias): judged on the
    # scale of the other gradients
    overall = max(np.max(np.abs(v)) for v in grads.values())
    for name in pre.params:
        err = rel_err(pre.grads[name], grads[name], floor=1e-3 * overall)
        assert err < TOL[dtype], f"{name}: {err:.3g}"


# ---- the mask ------------------------------------------------------------------------------
def test_span_mask_ratio_and_spans():
    m = _pretrain.span_mask(np.random.default_rng(0), (200, 300, 2))
    share = m.mean()
    assert abs(share - (1 - np.exp(-_pretrain.MASK_RATIO))) < 0.01
    # the mean length of a run of masked steps: spans of mean MEAN_SPAN, some merged
    flat = np.concatenate([m[:, :, 0], np.zeros((200, 1), bool)], axis=1).ravel()
    runs = np.count_nonzero(flat[1:] & ~flat[:-1]) + int(flat[0])
    assert 2.5 < flat.sum() / runs < 4.5
    # independent channels
    assert abs(np.mean(m[:, :, 0] & m[:, :, 1]) - share ** 2) < 0.01


def test_token_mask_patch_layout():
    """Patch tokens: the mask is span_mask over the steps of each channel, token n
    feature l * C + c being step n * p + l of channel c."""
    valid = np.ones((5, 4, ), bool)
    a = _pretrain.token_mask(np.random.default_rng(3), valid, 6, 3, False)
    steps = _pretrain.span_mask(np.random.default_rng(3), (5, 12, 2))
    if steps.reshape(5, -1).any(axis=1).all():   # no sequence got a forced feature
        assert np.array_equal(a, steps.reshape(5, 4, 6))


def test_token_mask_valid_tokens_only_and_never_empty():
    rng = np.random.default_rng(1)
    valid = np.ones((50, 6), bool)
    valid[:, 4:] = False
    valid[7, 1:] = False   # one valid token
    valid[9] = False       # no valid token: nothing to mask
    for ppv in (False, True):
        m = _pretrain.token_mask(rng, valid, 3, 1, ppv, ratio=0.01)
        assert not m[~valid].any()
        has = m.reshape(50, -1).any(axis=1)
        assert has[valid.any(axis=1)].all() and not has[9]


def test_token_mask_ppv_features_alone():
    m = _pretrain.token_mask(np.random.default_rng(2), np.ones((400, 4), bool), 50, 1, True)
    assert abs(m.mean() - _pretrain.MASK_RATIO) < 0.01
    # no spans: neighbouring features are independent
    assert abs(np.mean(m[:, :, 1:] & m[:, :, :-1]) - m.mean() ** 2) < 0.01


def test_copy_encoder_leaves_the_task_weights():
    src = _pretrain.reconstruction_model(spec(np.float64, pooling="cls"), 1)
    dst = attnx.SequenceModel(4, 8, 2, 2, 3, pooling="cls", positional="sinusoidal",
                              norm="pre", dtype=np.float64, random_state=2)
    head = dst.params["head.W"].copy()
    cls = dst.params["cls"].copy()
    names = _pretrain.copy_encoder(src, dst)
    assert "head.W" not in names and "head.b" not in names and "embed.W" in names
    assert np.array_equal(dst.params["head.W"], head) and np.array_equal(dst.params["cls"], cls)
    for n in names:
        assert np.array_equal(dst.params[n], src.params[n])


# ---- the estimators --------------------------------------------------------------------
def series(n=40, t=80, c=1, seed=0):
    r = np.random.default_rng(seed)
    y = r.integers(0, 2, n)
    x = r.normal(size=(n, t, c)) + (2 * y - 1)[:, None, None] * np.sin(
        np.linspace(0, 6, t))[None, :, None]
    return x.astype(np.float32), y


@pytest.mark.parametrize("tokenizer", ["patch", "ppv"])
def test_classifier_pretrains_and_fits(tokenizer):
    X, y = series()
    kw = dict(random_state=0, epochs=3, tokenizer=tokenizer, options={"pretrain_epochs": 6})
    a = attnx.TransformerClassifier(pretrain="masked", **kw).fit(X[:20], y[:20],
                                                                X_unlabelled=X[20:])
    b = attnx.TransformerClassifier(pretrain="masked", **kw).fit(X[:20], y[:20],
                                                                X_unlabelled=X[20:])
    plain = attnx.TransformerClassifier(**kw).fit(X[:20], y[:20])
    alone = attnx.TransformerClassifier(pretrain="masked", **kw).fit(X[:20], y[:20])
    assert len(a.pretrain_loss_curve_) == 6
    assert a.pretrain_loss_curve_[-1] < a.pretrain_loss_curve_[0]
    assert np.array_equal(a.model_.params.flat, b.model_.params.flat)   # seeded
    assert not np.array_equal(a.model_.params.flat, plain.model_.params.flat)
    assert not np.array_equal(a.model_.params.flat, alone.model_.params.flat)
    assert "pretrain_loss_curve_" not in vars(plain) and "_pretrained" not in vars(a)
    assert (a.plan_.ppv is not None) == (tokenizer == "ppv")
    assert a.predict(X).shape == (40,)


def test_pretrain_off_is_the_plain_fit():
    X, y = series(n=16)
    a = attnx.TransformerClassifier(random_state=1, epochs=2).fit(X, y)
    b = attnx.TransformerClassifier(random_state=1, epochs=2, pretrain=None, options={"pretrain_epochs": 7}).fit(X, y)
    assert np.array_equal(a.model_.params.flat, b.model_.params.flat)


def test_ragged_and_unlabelled_of_other_lengths():
    r = np.random.default_rng(4)
    X = [r.normal(size=(int(k), 3)).astype(np.float32) for k in r.integers(10, 30, 24)]
    y = r.integers(0, 3, 24)
    un = r.normal(size=(10, 40, 3)).astype(np.float32)   # dense, longer than X
    est = attnx.TransformerClassifier(random_state=0, epochs=2, pretrain="masked", options={"pretrain_epochs": 3}).fit(X, y, X_unlabelled=un)
    assert len(est.pretrain_loss_curve_) == 3 and np.isfinite(est.pretrain_loss_curve_).all()
    assert len(est.predict(X)) == 24


def test_regressor_epoch_selection_keeps_the_pretrained_encoder(monkeypatch):
    X, y = series(n=30)
    target = X[:, -1, 0].astype(np.float64)
    loads = []
    real = _pretrain.load

    def counted(model, pretrained):
        loads.append(sorted(pretrained.weights))
        return real(model, pretrained)
    monkeypatch.setattr(_pretrain, "load", counted)
    est = attnx.TransformerRegressor(random_state=0, pretrain="masked", instance_norm=None, options={"pretrain_epochs": 2})
    est.fit(X, target)
    assert "epoch_selection_" in vars(est) and len(est.pretrain_loss_curve_) == 2
    # the re-initialised network (after the held-out run) loads the encoder again
    assert len(loads) == 1 and "head.W" not in loads[0] and "embed.W" in loads[0]


def test_save_load_and_pickle(tmp_path):
    X, y = series(n=16)
    est = attnx.TransformerClassifier(random_state=0, epochs=2, pretrain="masked", options={"pretrain_epochs": 2}).fit(X, y)
    path = tmp_path / "m.safetensors"
    est.save(path)
    back = attnx.load(path)
    assert back.get_params()["pretrain"] == "masked"
    assert back.pretrain_loss_curve_ == pytest.approx(est.pretrain_loss_curve_)
    assert np.array_equal(back.predict(X), est.predict(X))
    again = pickle.loads(pickle.dumps(est))
    assert np.array_equal(again.predict(X), est.predict(X))


def test_warm_start_does_not_pretrain_again():
    X, y = series(n=16)
    est = attnx.TransformerClassifier(random_state=0, epochs=1, pretrain="masked",
                                      warm_start=True, options={"pretrain_epochs": 2}).fit(X, y)
    curve = list(est.pretrain_loss_curve_)
    est.fit(X, y)
    assert est.pretrain_loss_curve_ == curve and est.n_iter_ == 2
    with pytest.raises(ValueError, match="X_unlabelled.*warm_start"):
        est.fit(X, y, X_unlabelled=X)


# ---- bad input ---------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["bert", True, 1])
def test_bad_pretrain(value):
    X, y = series(n=8)
    with pytest.raises(ValueError, match=r"pretrain must be one of \(None, 'masked'\).*got"):
        attnx.TransformerClassifier(pretrain=value, epochs=1).fit(X, y)


@pytest.mark.parametrize("value,exc", [(0, ValueError), (-3, ValueError), (2.5, TypeError),
                                       (True, TypeError), ("10", TypeError)])
def test_bad_pretrain_epochs(value, exc):
    X, y = series(n=8)
    with pytest.raises(exc, match="pretrain_epochs"):
        attnx.AttentionClassifier(pretrain="masked", epochs=1, options={"pretrain_epochs": value}).fit(X, y)


def test_unlabelled_needs_pretrain_and_X_channels():
    X, y = series(n=8)
    with pytest.raises(ValueError, match="X_unlabelled.*pretrain='masked'.*pretrain=None"):
        attnx.TransformerClassifier(epochs=1).fit(X, y, X_unlabelled=X)
    with pytest.raises(ValueError, match="X_unlabelled"):
        attnx.TransformerClassifier(epochs=1, pretrain="masked").fit(
            X, y, X_unlabelled=np.zeros((4, 80, 2), np.float32))
    est = attnx.TransformerClassifier(epochs=1, pretrain="masked")
    with pytest.raises(ValueError, match="X_unlabelled"):
        est.fit(X, y, X_unlabelled=np.full((4, 80, 1), np.nan, np.float32))
    assert "model_" not in vars(est)   # refused before anything was fitted


@pytest.mark.parametrize("kw,match", [
    (dict(stem=((3, 1),)), "stem"),
    (dict(instance_norm="input"), "instance_norm=None"),
])
def test_pretrain_refuses_what_it_cannot_serve(kw, match):
    X, y = series(n=8)
    with pytest.raises(ValueError, match=match):
        attnx.TransformerClassifier(epochs=1, pretrain="masked", **kw).fit(X, y)


def test_pretrain_refuses_the_bare_network():
    X = np.random.default_rng(0).normal(size=(6, 5, 2))
    with pytest.raises(ValueError, match="bare X -> Y"):
        attnx.AttentionRegressor(epochs=1, pretrain="masked").fit(X, X)


def test_token_mask_whole_ppv_tokens(monkeypatch):
    """PPV_MASK="token" (the alternative measured against "feature"): a PPV token is
    masked with all its features or not at all."""
    monkeypatch.setattr(_pretrain, "PPV_MASK", "token")
    m = _pretrain.token_mask(np.random.default_rng(5), np.ones((300, 4), bool), 7, 1, True)
    whole = m.all(axis=2) | ~m.any(axis=2)
    forced = ~whole   # only a sequence that drew no token gets one forced feature
    assert forced.reshape(300, -1).sum(axis=1).max() <= 1
    assert abs(m.all(axis=2).mean() - _pretrain.MASK_RATIO) < 0.03


def test_benchmark_label_subsets():
    """benchmarks/accuracy.py --label-fraction: per class max(1, round(F * n_c)),
    seeded, the rest unlabelled."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "accuracy.py"
    spec = importlib.util.spec_from_file_location("attnx_bench_accuracy_pre", path)
    acc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(acc)
    xs = [np.full((5, 1), i, float) for i in range(43)]
    y = np.array([0] * 30 + [1] * 10 + [2] * 3)
    d = acc.Data("toy", "classify", "test", xs, y, xs[:2], y[:2])
    a, b, c = d.labelled(0.1, 0), d.labelled(0.1, 0), d.labelled(0.1, 1)
    assert sorted(np.bincount(a.ytr).tolist()) == [1, 1, 3]
    assert [x[0, 0] for x in a.Xtr] == [x[0, 0] for x in b.Xtr]
    assert [x[0, 0] for x in a.Xtr] != [x[0, 0] for x in c.Xtr]
    ids = sorted([x[0, 0] for x in a.Xtr] + [x[0, 0] for x in a.Xun])
    assert ids == list(range(43))
    r = acc.Data("toy", "regress", "test", xs, np.arange(43.0), xs[:2], np.zeros(2))
    assert len(r.labelled(0.01, 0).Xtr) == 2
