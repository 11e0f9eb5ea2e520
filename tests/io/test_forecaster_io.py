"""TransformerForecaster save/load and pickle: the same forecasts bit for bit, the
wrapped regressor's training resumes exactly, damaged files are refused."""
import pickle

import numpy as np
import pytest

import attnx

TINY = dict(d_model=8, n_heads=2, n_layers=1, steps=40, random_state=0, method="network")


def _series(n, seed, level=10.0):
    rng = np.random.default_rng(seed)
    return level + np.sin(np.arange(n) / 2.0) + 0.1 * rng.normal(size=n)


@pytest.fixture(scope="module")
def fitted():
    """A global model over two series of different lengths, with past and future
    covariates and static features: every piece of fitted state is in use."""
    y = [_series(70, 0), _series(85, 1, level=30.0)]
    X = [np.cos(np.arange(len(s)))[:, None] for s in y]
    F = [np.sin(np.arange(len(s)) / 3.0)[:, None] for s in y]
    f = attnx.TransformerForecaster(4, **TINY).fit(y, X=X, X_future=F, static=[[1.0], [2.0]])
    fut = [np.ones((4, 1)), np.zeros((4, 1))]
    return f, y, X, fut


def _outputs(f, X, fut):
    return (f.predict(X=X, X_future=fut), f.predict_interval(X=X, X_future=fut),
            f.predict_quantiles(X=X, X_future=fut, quantiles=(0.05, 0.5, 0.8)))


def _assert_same(a, b):
    if isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for u, v in zip(a, b):
            _assert_same(u, v)
    else:
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype


@pytest.mark.parametrize("way", ["file", "pickle"])
def test_round_trip_predicts_the_same_bits(fitted, tmp_path, way):
    f, y, X, fut = fitted
    if way == "file":
        f.save(tmp_path / "f.safetensors")
        g = attnx.load(tmp_path / "f.safetensors")
    else:
        g = pickle.loads(pickle.dumps(f))
    assert type(g) is attnx.TransformerForecaster and g.get_params() == f.get_params()
    _assert_same(_outputs(g, X, fut), _outputs(f, X, fut))
    # forecasts from another history use the stored window, patches and scaling
    other = [s[:60] + 5.0 for s in y]
    Xo = [x[:60] for x in X]
    _assert_same(g.predict(other, Xo, X_future=fut), f.predict(other, Xo, X_future=fut))
    assert g.window_ == f.window_ and g.patch_len_ == f.patch_len_
    for a, b in zip(g.history_, f.history_):
        np.testing.assert_array_equal(a, b)


def test_wrapped_regressor_resumes_exactly(fitted, tmp_path):
    """The AdamW moments, step count and shuffling RNG come back: one more epoch of
    training from the loaded file gives the same weights as from the original."""
    f, *_ = fitted
    f.save(tmp_path / "f.safetensors")
    g = attnx.load(tmp_path / "f.safetensors")
    h = pickle.loads(pickle.dumps(f))  # leaves f itself untouched
    opt = f.regressor_.optimizer_
    assert opt.t > 0
    for est in (g, h):
        assert est.regressor_.optimizer_.t == opt.t
        np.testing.assert_array_equal(est.regressor_.optimizer_.v[0], opt.v[0])
    rng = np.random.default_rng(3)
    xin = rng.normal(size=(16, 3, h.regressor_.n_features_in_))
    tgt = rng.normal(size=(16, h.horizon_))
    for est in (g, h):
        est.regressor_.set_params(epochs=1, warm_start=True).fit(xin, tgt)
    for name, w in h.regressor_.model_.params.items():
        np.testing.assert_array_equal(g.regressor_.model_.params[name], w, err_msg=name)


def test_unfitted_and_single_series_round_trip(tmp_path):
    f = attnx.TransformerForecaster(3, **TINY, intervals=None)
    f.save(tmp_path / "u.safetensors")
    u = attnx.load(tmp_path / "u.safetensors")
    assert u.get_params() == f.get_params() and not hasattr(u, "regressor_")
    with pytest.raises(ValueError, match="not fitted"):
        u.predict()
    f.fit(_series(50, 2))
    f.save(tmp_path / "s.safetensors")
    g = attnx.load(tmp_path / "s.safetensors")
    _assert_same(g.predict(), f.predict())
    assert g.calibration_scores_ is None
    with pytest.raises(ValueError, match="intervals=None"):
        g.predict_interval()


def test_damaged_forecaster_file_is_refused(fitted, tmp_path):
    f, *_ = fitted
    path = tmp_path / "f.safetensors"
    f.save(path)
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0xFF   # a byte of the last tensor
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="checksum"):
        attnx.load(bad)
    with pytest.raises(TypeError, match="save needs an attnx estimator"):
        attnx.io.save(object(), tmp_path / "x.safetensors")


def test_altered_state_is_refused(fitted):
    """A state whose pieces do not fit (as a hand-edited file would give) is a
    StateError naming the piece, never a forecaster with missing parts."""
    from attnx.forecasting import _forecaster_state as fs
    from attnx.estimators._state import StateError

    f, *_ = fitted
    arrays, config = fs.get_state(f, portable=True)
    assert config["array_lists"]["history_"] == 2
    for edit, msg in [
        (lambda a, c: c["array_lists"].update(history_=10 ** 12), "invalid array list"),
        (lambda a, c: a.pop("attribute.history_.1"), "history_.1' is missing"),
        (lambda a, c: a.update({"attribute.junk_": np.ones(2)}), "unexpected arrays"),
        (lambda a, c: c.update({"class": "TransformerRegressor"}), "unknown forecaster"),
    ]:
        a, c = dict(arrays), {**config, "array_lists": dict(config["array_lists"])}
        edit(a, c)
        with pytest.raises(StateError, match=msg):
            fs.new_from_state(a, c, {"TransformerForecaster": attnx.TransformerForecaster})
