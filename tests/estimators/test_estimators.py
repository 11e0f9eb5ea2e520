"""AttentionRegressor / TransformerRegressor: the scikit-learn style API and the training loop."""
import math
import pickle
import signal
import subprocess
import sys
import tracemalloc
import warnings

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from bare_settings import BARE as OLD, BARE_CLS as OLD_CLS, merged  # noqa: F401
import attnx
from attnx.estimators import _hyper
import attnx.estimators._inference as inference_mod
import attnx.layers.losses as losses_mod
from attnx.datasets import max_position_task, mixing_task
from attnx.estimators import NotFittedError, TrainingDivergedError

REGRESSORS = [attnx.AttentionRegressor, attnx.TransformerRegressor]


@pytest.fixture(scope="module")
def task():
    X, Y = max_position_task(256, seq_len=6, d_model=4, random_state=0)
    Xt, Yt = max_position_task(128, seq_len=6, d_model=4, random_state=1)
    return X, Y, Xt, Yt


def small(cls=attnx.AttentionRegressor, **kw):
    opts = dict(n_heads=2, epochs=3, batch_size=32, lr=0.02, random_state=0)
    if cls is attnx.TransformerRegressor:   # the previous release's defaults: the bare X -> Y model
        opts = merged(OLD, opts, n_layers=1, d_hidden=8)
    return cls(**merged(opts, kw))


# ---- parameters --------------------------------------------------------------
def test_constructor_stores_hyperparameters_unchanged():
    betas = (0.8, 0.95)
    gen = np.random.default_rng(0)
    est = attnx.AttentionRegressor(3, dtype="float64", random_state=gen,
                                   epochs=-5, options={"betas": betas})  # checked at fit, not here
    p = est.get_params()
    assert p["options"]["betas"] is betas and p["random_state"] is gen
    assert p["n_heads"] == 3 and p["epochs"] == -5 and p["dtype"] == "float64"
    assert set(p) == {"n_heads", "epochs", "batch_size", "lr", "weight_decay",
                      "random_state", "verbose", "dtype", "d_model", "positional", "norm",
                      "pooling", "d_hidden", "dropout", "warm_start", "patch_len", "stem",
                      "layout", "missing", "instance_norm", "tokenizer", "loss", "pretrain",
                      "options"}
    tp = attnx.TransformerRegressor().get_params()
    assert set(tp) == set(p) | {"n_layers"}
    with pytest.raises(ValueError, match="epochs"):
        est.fit(*max_position_task(8, 3, 3, random_state=0))


def test_set_params_and_repr():
    est = attnx.TransformerRegressor()
    assert repr(est) == "TransformerRegressor()"
    assert est.set_params(lr=0.5, n_layers=3) is est
    assert est.lr == 0.5 and est.n_layers == 3
    assert repr(est) == "TransformerRegressor(n_layers=3, lr=0.5)"
    assert "dtype=np.float64" in repr(attnx.AttentionRegressor(dtype=np.float64))
    with pytest.raises(ValueError, match="'learning_rate'.*valid parameters"):
        est.set_params(learning_rate=0.1)


@pytest.mark.parametrize("name, value, exc", [
    ("epochs", 0, ValueError), ("batch_size", "8", TypeError), ("lr", -1.0, ValueError),
    ("betas", (0.9, 1.0), ValueError), ("validation_fraction", 1.0, ValueError),
    ("shuffle", "yes", TypeError), ("tol", -1e-3, ValueError), ("verbose", -1, ValueError),
    ("dtype", np.int32, TypeError), ("random_state", "seed", TypeError),
    ("n_heads", 3, ValueError),  # must divide d = 4
])
def test_bad_hyperparameters_raise_at_fit_naming_them(task, name, value, exc):
    X, Y, _, _ = task
    kw = ({"options": {name: value}} if name in _hyper.options_of("AttentionRegressor")
          else {name: value})
    with pytest.raises(exc, match=name):
        small(**kw).fit(X[:16], Y[:16])


# ---- fit / attributes ----------------------------------------------------------
@pytest.mark.parametrize("cls", REGRESSORS)
def test_fit_learns_and_sets_fitted_attributes(cls, task):
    X, Y, Xt, Yt = task
    est = small(cls, epochs=12)
    assert est.fit(X, Y) is est
    assert isinstance(est.model_, attnx.MultiHeadAttention if cls is attnx.AttentionRegressor
                      else attnx.Transformer)
    assert est.model_.input_grad is False and est.model_.d_model == 4
    assert est.n_features_in_ == 4 and est.n_iter_ == 12
    assert len(est.loss_curve_) == 12 and est.best_loss_ == min(est.loss_curve_)
    assert est.optimizer_.t == 12 * math.ceil(256 / 32)
    assert not hasattr(est, "validation_loss_curve_")
    # loose bounds (seeds 0-3 give 0.08-0.09 and 0.86-0.88 for attention, 0.2-0.42 and
    # 0.12-0.54 for the one-layer transformer): this checks learning, not model quality
    attention = cls is attnx.AttentionRegressor
    assert est.loss_curve_[-1] < (0.2 if attention else 0.6) * est.loss_curve_[0]
    # on held-out data: clearly below the error of the best constant prediction (the
    # training targets' per-feature mean), by a margin that an unfitted model misses
    mse = float(np.mean((est.predict(Xt) - Yt) ** 2))
    baseline = float(np.mean((Y.reshape(-1, 4).mean(axis=0) - Yt) ** 2))
    assert mse < (0.25 if attention else 0.9) * baseline, (mse, baseline)
    unfitted = cls(**est.get_params()).partial_fit(X[:1], Y[:1])
    assert float(np.mean((unfitted.predict(Xt) - Yt) ** 2)) > 0.9 * baseline


def test_fit_twice_starts_over_and_drops_stale_attributes(task):
    X, Y, _, _ = task
    est = small(options={"validation_fraction": 0.25}).fit(X, Y)
    assert len(est.validation_loss_curve_) == 3
    first = est.model_.params.flat.copy()
    est.set_params(options={"validation_fraction": 0.0}).fit(X, Y)
    assert not hasattr(est, "validation_loss_curve_") and not hasattr(est,
                                                                      "best_validation_loss_")
    assert est.n_iter_ == 3 and len(est.loss_curve_) == 3
    assert not np.array_equal(first, est.model_.params.flat)  # other training data


def test_same_seed_gives_bit_identical_weights(task):
    X, Y, _, _ = task
    with threadpool_limits(limits=1):
        for cls in REGRESSORS:
            a = small(cls, batch_size=24, random_state=7).fit(X, Y)
            b = small(cls, batch_size=24, random_state=7).fit(X, Y)
            c = small(cls, batch_size=24, random_state=8).fit(X, Y)
            assert a.model_.params.flat.tobytes() == b.model_.params.flat.tobytes()
            assert a.loss_curve_ == b.loss_curve_
            assert not np.array_equal(a.model_.params.flat, c.model_.params.flat)


def test_shuffle_changes_the_trajectory(task):
    X, Y, _, _ = task
    a = small(options={"shuffle": True}).fit(X, Y)
    b = small(options={"shuffle": False}).fit(X, Y)
    assert not np.array_equal(a.model_.params.flat, b.model_.params.flat)


def test_short_last_batch_gives_the_unpadded_gradient():
    """n = 13 with batch_size 8: the second batch holds 5 samples (padded to 8 rows with
    zero-weighted rows inside the estimator); the result must equal plain training."""
    X, Y = mixing_task(13, 5, 4, random_state=2, dtype=np.float64)
    kw = dict(n_heads=2, epochs=2, batch_size=8, lr=0.01, random_state=3,
              dtype=np.float64, options={"shuffle": False})
    est = attnx.AttentionRegressor(**kw).fit(X, Y)
    init = attnx.AttentionRegressor(**{**kw, "lr": 0.0}).fit(X, Y)  # lr 0: initial weights
    model = attnx.MultiHeadAttention(4, 2, bias=True, dtype=np.float64, input_grad=False)
    model.params.flat[...] = init.model_.params.flat
    opt = attnx.AdamW(model.params, lr=0.01, weight_decay=0.01)
    for _ in range(2):
        for s in (slice(0, 8), slice(8, 13)):
            y = model.forward(X[s])
            _, dy = attnx.mse_loss(y, Y[s])
            model.backward(dy)
            opt.step(model.grads)
    np.testing.assert_allclose(est.model_.params.flat, model.params.flat, rtol=1e-10,
                               atol=1e-12)


# ---- partial_fit -----------------------------------------------------------------
def test_partial_fit_builds_then_continues(task):
    X, Y, _, _ = task
    est = small()
    assert est.partial_fit(X, Y) is est
    assert est.n_iter_ == 1 and est.optimizer_.t == 8 and len(est.loss_curve_) == 1
    model = est.model_
    w1 = model.params.flat.copy()
    est.partial_fit(X[:100], Y[:100])   # any n; batches of 32, the last one short
    assert est.model_ is model and est.n_iter_ == 2 and est.optimizer_.t == 8 + 4
    assert not np.array_equal(w1, model.params.flat)
    # the first partial_fit equals fit with epochs=1
    fit1 = small(epochs=1).fit(X, Y)
    np.testing.assert_array_equal(fit1.model_.params.flat, w1)
    with pytest.raises(ValueError, match=r"X must have 4 features.*\(5, 6, 3\)"):
        est.partial_fit(np.zeros((5, 6, 3)), np.zeros((5, 6, 3)))


def test_partial_fit_after_fit_uses_the_new_lr(task):
    X, Y, _, _ = task
    est = small(epochs=2).fit(X, Y)
    est.set_params(lr=0.0, weight_decay=0.0)
    w = est.model_.params.flat.copy()
    est.partial_fit(X, Y)
    np.testing.assert_array_equal(w, est.model_.params.flat)  # lr 0: nothing moves
    assert est.n_iter_ == 3 and est.optimizer_.lr == 0.0


# ---- predict / score ---------------------------------------------------------------
@pytest.mark.parametrize("cls", REGRESSORS)
def test_predict_in_odd_chunks_matches_one_forward(cls, task, monkeypatch):
    X, Y, Xt, _ = task
    est = small(cls, epochs=1).fit(X, Y)
    whole = est.model_.forward(Xt[:53], grad=False).copy()
    monkeypatch.setattr(inference_mod, "_PREDICT_ROWS", 7 * 6)  # chunks of 7 samples
    for n in (1, 7, 13, 53):
        p = est.predict(Xt[:n])
        assert p.shape == (n, 6, 4) and p.dtype == np.float32
        np.testing.assert_allclose(p, whole[:n], rtol=1e-5, atol=1e-6)
    assert est.predict(Xt[:0]).shape == (0, 6, 4)
    assert est.predict(Xt[:3, :4]).shape == (3, 4, 4)   # another sequence length
    # predict never looks at the training batch size
    np.testing.assert_array_equal(est.set_params(batch_size=1).predict(Xt[:13]),
                                  est.set_params(batch_size=1000).predict(Xt[:13]))


def test_score_is_sklearn_r2_over_positions_and_features(task):
    from sklearn.metrics import r2_score

    X, Y, Xt, Yt = task
    est = small(epochs=4).fit(X, Y)
    P = est.predict(Xt).astype(np.float64)
    ref = r2_score(Yt.reshape(-1, 4), P.reshape(-1, 4))
    assert est.score(Xt, Yt) == pytest.approx(ref, rel=1e-9)
    assert est.score(Xt, P) == pytest.approx(1.0)


def test_attention_weights_of_the_fitted_model(task):
    X, Y, Xt, _ = task
    est = small(epochs=2).fit(X, Y)
    w = est.attention_weights(Xt[:5])
    assert w.shape == (5, 2, 6, 6)
    np.testing.assert_allclose(w.sum(axis=-1), 1.0, rtol=1e-5)
    tr = small(attnx.TransformerRegressor, n_layers=2, epochs=1).fit(X, Y)
    ws = tr.attention_weights(Xt[:3])
    assert isinstance(ws, list) and len(ws) == 2 and ws[1].shape == (3, 2, 6, 6)


# ---- validation / early stopping ---------------------------------------------------
def test_validation_curve_and_early_stopping_keep_the_best_weights(task):
    X, Y, _, _ = task
    est = small(epochs=40, options={"validation_fraction": 0.25, "early_stopping": True, "n_iter_no_change": 3, "tol": 0.5})  # a huge tol: every epoch after the first counts as no improvement
    est.fit(X, Y)
    assert est.n_iter_ == 4 and len(est.validation_loss_curve_) == 4
    assert est.best_validation_loss_ == min(est.validation_loss_curve_)
    assert est.optimizer_.t == 4 * math.ceil(192 / 32)   # 64 of 256 samples held out
    best_epoch = int(np.argmin(est.validation_loss_curve_)) + 1
    ref = small(epochs=best_epoch, options={"validation_fraction": 0.25}).fit(X, Y)
    np.testing.assert_array_equal(est.model_.params.flat, ref.model_.params.flat)


def test_early_stopping_without_validation_watches_the_training_loss(task):
    X, Y, _, _ = task
    est = small(epochs=50, options={"early_stopping": True, "n_iter_no_change": 2, "tol": 10.0}).fit(X, Y)
    assert est.n_iter_ == 3 and not hasattr(est, "validation_loss_curve_")
    assert small(epochs=5, options={"tol": 10.0}).fit(X, Y).n_iter_ == 5  # off by default


# ---- failures ----------------------------------------------------------------------
def test_divergence_names_the_epoch_and_restores_the_last_good_epoch(task):
    X, Y, _, _ = task
    est = small(epochs=1).fit(X, Y)
    good = est.model_.params.flat.copy()
    state = est.optimizer_.state_dict()
    est.set_params(lr=1e30)
    with pytest.raises(TrainingDivergedError, match="epoch 2") as info:
        est.partial_fit(X, Y)
    assert "restored to the end of epoch 1" in str(info.value)
    assert np.isfinite(est.model_.params.flat).all()
    np.testing.assert_array_equal(est.model_.params.flat, good)
    assert est.optimizer_.t == state["t"] and est.n_iter_ == 1 and len(est.loss_curve_) == 1
    assert np.isfinite(est.predict(X[:4])).all()
    with pytest.raises(FloatingPointError, match="epoch 1"):  # from scratch
        small(lr=1e30).fit(X, Y)


def _call_counter(monkeypatch, action, at):
    real = losses_mod.mse_loss
    calls = [0]

    def wrapped(*a, **k):
        calls[0] += 1
        if calls[0] == at:
            action()
        return real(*a, **k)

    monkeypatch.setattr(losses_mod, "mse_loss", wrapped)


def test_ctrl_c_stops_after_the_current_step(task, monkeypatch):
    X, Y, _, _ = task
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT is handled by someone else here")
    _call_counter(monkeypatch, lambda: signal.raise_signal(signal.SIGINT), at=11)
    est = small(epochs=5)
    with pytest.warns(UserWarning, match="interrupted in epoch 2 after 3 of 8 batches"):
        assert est.fit(X, Y) is est
    assert est.optimizer_.t == 11          # the step in progress was completed
    assert est.n_iter_ == 1 and len(est.loss_curve_) == 1
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert np.isfinite(est.predict(X[:3])).all()


def test_keyboard_interrupt_exception_keeps_the_last_completed_step(task, monkeypatch):
    X, Y, _, _ = task

    def boom():
        raise KeyboardInterrupt

    _call_counter(monkeypatch, boom, at=3)
    est = small(epochs=5)
    with pytest.warns(UserWarning, match="after 2 of 8 batches"):
        est.fit(X, Y)
    assert est.optimizer_.t == 2 and est.n_iter_ == 0 and est.loss_curve_ == []
    monkeypatch.undo()
    est.partial_fit(X, Y)   # usable: training goes on
    assert est.n_iter_ == 1 and est.optimizer_.t == 10


def test_input_validation_names_the_argument(task):
    X, Y, _, _ = task
    est = small()
    with pytest.raises(NotFittedError, match="not fitted"):
        est.predict(X)
    with pytest.raises(ValueError, match=r"X must be a 3-D array .* got shape \(256, 24\)"):
        est.fit(X.reshape(256, 24), Y)
    with pytest.raises(ValueError, match=r"y must have 256 rows, one per sequence of X, got "
                                         r"shape \(255, 6, 4\)"):
        est.fit(X, Y[:255])
    with pytest.raises(ValueError, match=r"y must have the sequence length of X \(6\)"):
        est.fit(X, Y[:, :5])
    bad = X.copy()
    bad[3, 2, 1] = np.nan
    with pytest.raises(ValueError, match="X contains NaN"):
        est.fit(bad, Y)
    with pytest.raises(ValueError, match="y contains NaN or infinity \\(after conversion"):
        est.fit(X, np.full(Y.shape, 1e300))
    with pytest.raises(TypeError, match="y must hold real numbers"):
        est.fit(X, Y.astype(np.complex64))
    with pytest.raises(TypeError, match="X must hold real numbers"):
        est.fit(np.full(X.shape, "a"), Y)
    with pytest.raises(ValueError, match="X is empty"):
        est.fit(X[:0], Y[:0])
    with pytest.raises(ValueError, match="validation_fraction=0.5 leaves no training sample"):
        small(options={"validation_fraction": 0.5}).fit(X[:1], Y[:1])
    est.fit(X.astype(np.float64).tolist(), Y.astype(np.int64))  # lists and ints are fine
    with pytest.raises(ValueError, match=r"X must have 4 features.*\(2, 6, 5\)"):
        est.predict(np.zeros((2, 6, 5)))
    with pytest.raises(ValueError, match="y must have the shape of X"):
        est.score(X, Y[:10])


# ---- verbose -----------------------------------------------------------------------
def test_verbose_zero_prints_nothing_and_one_shows_one_bar_per_phase(task, capsys):
    X, Y, _, _ = task
    small(epochs=2, verbose=0, options={"validation_fraction": 0.25}).fit(X, Y)
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""
    small(epochs=2, verbose=1, options={"validation_fraction": 0.25}).fit(X, Y)
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.count("\n") == 1              # one bar for the whole fit, left on screen
    last = out.err.split("\r")[-1]                # the bar as it was left
    assert last.startswith("fit:")                # named for its phase
    assert "12/12" in last                        # 2 epochs x 192 samples / 32 per batch
    assert "epoch 1/2" in out.err and "epoch 2/2" in last
    assert "loss=" in last and "val_loss=" in last


def test_progress_phase_names_the_bar(task, capsys):
    """A forecaster names its fits' phases; the name is gone after its block."""
    from attnx.runtime._progress import progress_phase
    X, Y, _, _ = task
    with progress_phase("held-out run"):
        small(epochs=1, verbose=1).fit(X, Y)
    assert capsys.readouterr().err.split("\r")[-1].startswith("held-out run:")
    small(epochs=1, verbose=1).fit(X, Y)
    assert capsys.readouterr().err.split("\r")[-1].startswith("fit:")


# ---- scikit-learn --------------------------------------------------------------------
def test_sklearn_clone_cross_val_score_and_grid_search(task):
    from sklearn.base import clone, is_regressor
    from sklearn.model_selection import GridSearchCV, cross_val_score

    X, Y, _, _ = task
    est = small(epochs=4).fit(X, Y)
    c = clone(est)
    assert c.get_params() == est.get_params() and not hasattr(c, "model_")
    assert is_regressor(est)
    scores = cross_val_score(small(epochs=10), X, Y, cv=3)
    assert scores.shape == (3,) and np.all(scores > 0.3), scores   # 0.53-0.70 here
    grid = GridSearchCV(small(epochs=4), {"lr": [1e-4, 0.03], "n_heads": [1, 2]}, cv=2)
    grid.fit(X, Y)
    assert grid.best_params_["lr"] == 0.03   # 4 epochs at 1e-4 learn nothing
    assert grid.best_estimator_.n_iter_ == 4
    assert grid.score(X, Y) == pytest.approx(grid.best_estimator_.score(X, Y))


# ---- pickling ------------------------------------------------------------------------
@pytest.mark.parametrize("cls", REGRESSORS)
def test_pickle_drops_scratch_buffers_and_resumes_exactly(cls, tmp_path):
    import joblib

    X, Y = max_position_task(64, seq_len=48, d_model=4, random_state=0)
    est = small(cls, epochs=2, batch_size=32).fit(X, Y)
    est.predict(X)  # fills the inference workspaces too
    blob = pickle.dumps(est)
    # weights + 2 AdamW moments are 3 x flat; the workspaces (probabilities alone are
    # 32 x 2 x 48 x 48 floats = 590 kB) must not be in there
    assert len(blob) < 3 * est.model_.params.flat.nbytes + 20_000
    assert "_batch" not in est.__getstate__() and "_snapshot" not in est.__getstate__()
    copy = pickle.loads(blob)
    np.testing.assert_array_equal(copy.predict(X), est.predict(X))
    assert copy.loss_curve_ == est.loss_curve_ and copy.get_params() == est.get_params()
    joblib.dump(est, tmp_path / "est.joblib")
    jl = joblib.load(tmp_path / "est.joblib")
    for e in (est, copy, jl):
        e.partial_fit(X, Y)
    np.testing.assert_array_equal(copy.model_.params.flat, est.model_.params.flat)
    np.testing.assert_array_equal(jl.model_.params.flat, est.model_.params.flat)
    unfitted = pickle.loads(pickle.dumps(small(cls)))
    assert not hasattr(unfitted, "model_") and unfitted.get_params() == small(cls).get_params()


# ---- memory / imports ------------------------------------------------------------------
def test_training_steps_allocate_no_batch_sized_arrays():
    X, Y = mixing_task(100, 32, 16, random_state=0)
    est = attnx.TransformerRegressor(2, n_layers=1, **merged(OLD, epochs=1, batch_size=16),
                                     random_state=0)
    est.partial_fit(X, Y)        # builds the model, buffers and workspaces
    tracemalloc.start()
    est.partial_fit(X, Y)        # 7 steps, the last one short
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    batch_bytes = 16 * 32 * 16 * 4
    assert peak < batch_bytes / 2, peak


def test_estimators_need_neither_sklearn_nor_matplotlib_at_run_time(tmp_path):
    code = ("import sys, numpy as np, attnx\n"
            "from attnx.datasets import max_position_task\n"
            "X, Y = max_position_task(32, 4, 4, random_state=0)\n"
            "e = attnx.TransformerRegressor(2, epochs=2, verbose=0).fit(X, Y)\n"
            "e.score(X, Y); e.save('m.npz'); attnx.load('m.npz').predict(X)\n"
            "import attnx.plot\n"
            "bad = [m for m in ('sklearn', 'matplotlib', 'torch', 'tqdm') if m in sys.modules]\n"
            "print('loaded:', bad)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "loaded: []"


def test_no_warnings_in_a_normal_fit(task):
    X, Y, _, _ = task
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        small(options={"validation_fraction": 0.2, "early_stopping": True}).fit(X, Y).predict(X)


# ---- sequence-level and per-position targets (SequenceModel) -------------------------
def three_feature_task(n, seed, t=10):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, t, 3)).astype(np.float32)
    y = X[:, :, 0].mean(axis=1) * 2 + (X[:, :, 1] * X[:, :, 2]).mean(axis=1)
    return X, y


def test_a_three_feature_series_trains_a_64_wide_model_in_two_lines():
    X, y = three_feature_task(400, 0)
    Xt, yt = three_feature_task(200, 1)
    est = attnx.TransformerRegressor(n_heads=4, d_model=64, epochs=15, lr=2e-3,
                                     random_state=0).fit(X, y)
    assert isinstance(est.model_, attnx.SequenceModel)
    assert est.model_.d_model == 64 and est.model_.n_features == 3 and est.n_outputs_ == 1
    assert est.model_.pooling == "mean" and est.model_.input_grad is False
    p = est.predict(Xt)
    assert p.shape == (200,) and p.dtype == np.float32
    # held-out error well below the best constant prediction (the training mean)
    mse, base = np.mean((p - yt) ** 2), np.mean((y.mean() - yt) ** 2)
    assert mse < 0.5 * base, (mse, base)
    assert est.score(Xt, yt) == pytest.approx(1 - mse * len(yt) / np.sum((yt - yt.mean()) ** 2),
                                              rel=1e-4)


@pytest.mark.parametrize("cls", REGRESSORS)
def test_target_shapes_choose_the_output(cls):
    X, y = three_feature_task(60, 2, t=6)
    kw = merged(OLD, n_heads=1, epochs=2, random_state=0)
    two = cls(**kw).fit(X, np.stack([y, -y], axis=1))
    assert two.predict(X).shape == (60, 2) and two.n_outputs_ == 2
    assert two.model_.d_model == 3            # d_model=None: the number of features
    per_pos = cls(**kw, pooling="last").fit(X, np.cumsum(X[:, :, :2], axis=1))
    assert per_pos.predict(X).shape == (60, 6, 2) and per_pos.model_.pooling is None
    assert per_pos.predict(X[:4, :3]).shape == (4, 3, 2)   # other lengths too
    # the bare X -> Y model unless a new option asks for more
    assert not isinstance(cls(**kw).fit(X, X).model_, attnx.SequenceModel)
    seq = cls(**dict(kw, norm="pre")).fit(X, X)
    assert isinstance(seq.model_, attnx.SequenceModel) and seq.predict(X).shape == X.shape
    if cls is attnx.AttentionRegressor:   # one block: attention and its MLP
        assert seq.model_.n_layers == 1 and seq.model_.d_hidden == 12
    with pytest.raises(ValueError, match=r"n_heads=2 must divide d_model=3 \(d_model=None "
                                         r"means the number of features"):
        cls(**merged(OLD, n_heads=2, epochs=1)).fit(X, y)
    bad = y.copy()
    bad[4] = np.nan
    with pytest.raises(ValueError, match="y contains NaN"):
        cls(**kw).fit(X, bad)
    with pytest.raises(ValueError, match=r"y must have 2 output\(s\) as at fit, got 3"):
        two.partial_fit(X, np.zeros((60, 3)))
    with pytest.raises(ValueError, match=r"pooling must be one of \('mean', 'last', 'max', "
                                         r"'cls'\) .*got None"):
        cls(**kw, pooling=None).fit(X, y)


def test_sequence_regression_matches_pytorch_with_sample_weights(torch):
    """Three full-batch AdamW steps == the torch twin trained on the weighted MSE."""
    from attnx.testing.torch_twin import SeqTwin

    X, y = three_feature_task(16, 3, t=5)
    X, y = X.astype(np.float64), np.stack([y, y ** 2], axis=1)
    sw = np.linspace(0.2, 2.0, 16)
    kw = merged(OLD, n_heads=2, n_layers=2, d_model=8, positional="learned", pooling="last",
              batch_size=16, random_state=1, dtype=np.float64, options={"causal": True, "shuffle": False})
    del kw["epochs"]
    init = attnx.TransformerRegressor(**kw, epochs=1, lr=0.0).fit(X, y, sample_weight=sw)
    est = attnx.TransformerRegressor(**kw, epochs=3, lr=0.01).fit(X, y, sample_weight=sw)
    twin = SeqTwin(init.model_)
    opt = torch.optim.AdamW(twin.parameters(), lr=0.01, weight_decay=0.01)
    w = torch.tensor(sw)[:, None]
    for _ in range(3):
        opt.zero_grad()
        loss = (w * (twin(torch.tensor(X)) - torch.tensor(y)) ** 2).sum() / (2 * w.sum())
        loss.backward()
        opt.step()
    for name in est.model_.params:
        np.testing.assert_allclose(est.model_.params[name], twin.w(name).detach().numpy(),
                                   rtol=1e-9, atol=1e-11, err_msg=name)


def test_dropout_trains_reproducibly_and_predicts_deterministically():
    X, y = three_feature_task(64, 4, t=6)
    kw = dict(n_heads=2, d_model=8, epochs=3, dropout=0.3, random_state=0)
    a = attnx.AttentionRegressor(**kw).fit(X, y)
    b = attnx.AttentionRegressor(**kw).fit(X, y)
    np.testing.assert_array_equal(a.model_.params.flat, b.model_.params.flat)
    c = attnx.AttentionRegressor(**{**kw, "dropout": 0.0}).fit(X, y)
    assert not np.array_equal(a.model_.params.flat, c.model_.params.flat)
    np.testing.assert_array_equal(a.predict(X), a.predict(X))   # no dropout at predict
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
        attnx.AttentionRegressor(dropout=1.0).fit(X, y)


@pytest.mark.parametrize("cls", REGRESSORS)
def test_bare_model_sample_weight_two_equals_a_duplicate(cls):
    X, Y = mixing_task(12, 4, 4, random_state=5, dtype=np.float64)
    kw = merged(OLD, n_heads=2, epochs=3, batch_size=64, lr=0.01, random_state=0,
              dtype=np.float64)
    if cls is attnx.TransformerRegressor:
        kw.update(n_layers=1, d_hidden=8)
    w = np.ones(12)
    w[4] = 2.0
    a = cls(**kw).fit(X, Y, sample_weight=w)
    keep = list(range(12)) + [4]
    b = cls(**kw).fit(X[keep], Y[keep])
    assert not isinstance(a.model_, attnx.SequenceModel)
    # atol: the key bias has a zero gradient in exact arithmetic; AdamW scales its
    # rounding noise up to ~1e-12
    np.testing.assert_allclose(a.model_.params.flat, b.model_.params.flat, rtol=1e-9,
                               atol=1e-10)
    sw = np.linspace(0.1, 1, 12)
    from sklearn.metrics import r2_score

    assert a.score(X, Y, sample_weight=sw) == pytest.approx(
        r2_score(Y.reshape(-1, 4), a.predict(X).reshape(-1, 4), sample_weight=np.repeat(sw, 4)))


# (kept in this file rather than test_classifiers.py: the session's torch fixture pins
# OpenMP to one thread for the whole process, which test_concurrency.py must not see)
def test_classifier_training_matches_pytorch_with_class_and_sample_weights(torch):
    """Three full-batch AdamW steps of the estimator == the torch twin trained on the
    same weighted cross-entropy from the same initial weights (float64)."""
    from attnx.testing.torch_twin import SeqTwin

    rng = np.random.default_rng(5)
    X = rng.normal(size=(20, 5, 3))
    y = rng.choice(np.array(["a", "b", "c"]), size=20)
    sw = rng.uniform(0.5, 2.0, size=20)
    kw = merged(OLD_CLS, n_heads=2, d_model=8, n_layers=1, norm="pre", positional="sinusoidal",
              batch_size=20, random_state=4, dtype=np.float64,
              class_weight={"a": 2.0, "c": 0.5}, lr=0.01, options={"shuffle": False})
    del kw["epochs"]
    init = attnx.TransformerClassifier(**{**kw, "lr": 0.0}, epochs=1)
    init.fit(X, y, sample_weight=sw)
    est = attnx.TransformerClassifier(**kw, epochs=3).fit(X, y, sample_weight=sw)
    twin = SeqTwin(init.model_)
    opt = torch.optim.AdamW(twin.parameters(), lr=0.01, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01)
    codes = torch.tensor(np.searchsorted(est.classes_, y))
    w = torch.tensor(sw * np.array([{"a": 2.0, "b": 1.0, "c": 0.5}[v] for v in y]))
    for _ in range(3):
        opt.zero_grad()
        logits = twin(torch.tensor(X))
        loss = (w * torch.nn.functional.cross_entropy(logits, codes, reduction="none")).sum() \
            / w.sum()
        loss.backward()
        opt.step()
    for name in est.model_.params:
        np.testing.assert_allclose(est.model_.params[name], twin.w(name).detach().numpy(),
                                   rtol=1e-9, atol=1e-11, err_msg=name)
