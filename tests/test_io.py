"""Saving and loading estimators: exact resume, the file format, and damaged files."""
import json
import os
import warnings

import numpy as np
import pytest

import attnx
from attnx import io as aio
from attnx.datasets import max_position_task, mixing_task


@pytest.fixture(scope="module")
def data():
    return mixing_task(90, seq_len=5, d_model=4, random_state=0)


def _est(cls=attnx.AttentionRegressor, **kw):
    opts = dict(n_heads=2, epochs=2, batch_size=16, lr=0.02, random_state=4)
    if cls is attnx.TransformerRegressor:
        opts.update(n_layers=2, d_hidden=12)
    opts.update(kw)
    return cls(**opts)


def _same_state(a, b):
    assert a.model_.params.flat.tobytes() == b.model_.params.flat.tobytes()
    sa, sb = a.optimizer_.state_dict(), b.optimizer_.state_dict()
    assert sa["t"] == sb["t"]
    for x, y in zip(sa["m"] + sa["v"], sb["m"] + sb["v"]):
        assert x.tobytes() == y.tobytes()
    assert a.shuffle_rng_.bit_generator.state == b.shuffle_rng_.bit_generator.state
    assert a.loss_curve_ == b.loss_curve_ and a.n_iter_ == b.n_iter_


@pytest.mark.parametrize("cls", [attnx.AttentionRegressor, attnx.TransformerRegressor])
@pytest.mark.parametrize("shuffle", [True, False])
def test_fit_2_save_load_2_partial_fits_equals_fit_4(cls, shuffle, data, tmp_path):
    X, Y = data   # 90 samples in batches of 16: the last batch is short
    full = _est(cls, epochs=4, shuffle=shuffle).fit(X, Y)
    half = _est(cls, epochs=2, shuffle=shuffle).fit(X, Y)
    half.save(tmp_path / "half.npz")
    resumed = attnx.load(tmp_path / "half.npz")
    _same_state(resumed, half)
    resumed.partial_fit(X, Y)
    resumed.partial_fit(X, Y)
    _same_state(resumed, full)
    np.testing.assert_array_equal(resumed.predict(X), full.predict(X))


def test_load_restores_configuration_and_fitted_attributes(data, tmp_path):
    X, Y = data
    est = _est(attnx.TransformerRegressor, causal=True, rope=True, betas=(0.8, 0.99),
               dtype=np.float64, validation_fraction=0.2, epochs=3).fit(X, Y)
    path = tmp_path / "model"          # no suffix: the file is written exactly there
    aio.save(est, path)
    assert os.listdir(tmp_path) == ["model"]
    back = attnx.load(str(path))
    assert type(back) is attnx.TransformerRegressor
    assert back.get_params() == est.get_params()
    assert back.get_params()["dtype"] is np.float64 and back.betas == (0.8, 0.99)
    assert back.model_.causal and back.model_.rope and back.model_.n_layers == 2
    assert back.model_.d_hidden == 12 and back.model_.dtype == np.float64
    assert back.validation_loss_curve_ == est.validation_loss_curve_
    assert back.best_validation_loss_ == est.best_validation_loss_
    assert back.best_loss_ == est.best_loss_ and back.n_features_in_ == 4
    assert back.model_.input_grad is False
    np.testing.assert_array_equal(back.predict(X), est.predict(X))


@pytest.mark.parametrize("dtype", [np.float64, "float64", np.dtype("float32")])
def test_dtype_comes_back_in_the_form_it_was_given(dtype, tmp_path):
    est = attnx.AttentionRegressor(dtype=dtype)
    est.save(tmp_path / "d.npz")
    back = attnx.load(tmp_path / "d.npz").dtype
    assert back == dtype and type(back) is type(dtype)


def test_unfitted_estimator_round_trips(tmp_path):
    est = attnx.AttentionRegressor(4, lr=0.5, random_state=np.random.default_rng(1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est.save(tmp_path / "u.npz")
    back = attnx.load(tmp_path / "u.npz")
    assert not hasattr(back, "model_")
    # a Generator cannot be stored as JSON: it is saved as None (see attnx.io)
    assert back.get_params() == {**est.get_params(), "random_state": None}


def test_file_holds_no_pickle_and_a_format_version(data, tmp_path):
    X, Y = data
    path = tmp_path / "m.npz"
    _est().fit(X, Y).save(path)
    with np.load(path, allow_pickle=False) as f:
        assert str(f["format"]) == "attnx-estimator"
        assert int(f["version"]) == aio.FORMAT_VERSION
        assert all(f[k].dtype != object for k in f.files)
        meta = json.loads(str(f["meta"]))
    assert meta["class"] == "AttentionRegressor" and meta["params"]["dtype"] == "float32"
    assert meta["rng"]["bit_generator"] == "PCG64"


# ---- damaged and foreign files ---------------------------------------------------------
@pytest.fixture()
def saved(data, tmp_path):
    X, Y = data
    est = _est(validation_fraction=0.2).fit(X, Y)
    path = tmp_path / "good.npz"
    est.save(path)
    return est, path, path.read_bytes()


def _write(tmp_path, name, content):
    p = tmp_path / name
    p.write_bytes(content)
    return p


@pytest.mark.parametrize("keep", [0, 1, 30, 0.5, -1])
def test_truncated_file_raises_naming_the_file(saved, tmp_path, keep):
    _, _, raw = saved
    n = int(len(raw) * keep) if isinstance(keep, float) else keep % len(raw)
    p = _write(tmp_path, "cut.npz", raw[:n])
    with pytest.raises(ValueError, match="cut.npz"):
        attnx.load(p)


def test_bit_flips_raise_or_change_nothing(saved, tmp_path):
    """Every 7th byte flipped in turn: either a ValueError naming the file, or (a flip in
    zip metadata nobody reads, such as a time stamp) the very same estimator."""
    est, _, raw = saved
    p = tmp_path / "flip.npz"
    errors = 0
    for off in range(0, len(raw), 7):
        b = bytearray(raw)
        b[off] ^= 0x20
        p.write_bytes(bytes(b))
        try:
            back = attnx.load(p)
        except ValueError as exc:
            assert "flip.npz" in str(exc)
            errors += 1
            continue
        _same_state(back, est)
        assert back.get_params() == est.get_params()
        assert back.validation_loss_curve_ == est.validation_loss_curve_
    assert errors > 0.8 * (len(raw) / 7)


def test_flip_inside_the_weights_is_caught(saved, tmp_path):
    est, _, raw = saved
    needle = est.model_.params.flat[5:9].tobytes()
    off = raw.find(needle)
    assert off > 0
    b = bytearray(raw)
    b[off + 1] ^= 0x01
    p = _write(tmp_path, "w.npz", bytes(b))
    with pytest.raises(ValueError, match="w.npz is corrupted"):
        attnx.load(p)


def test_wrong_version_foreign_npz_and_other_files(saved, tmp_path):
    _, path, _ = saved
    with np.load(path, allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    p = tmp_path / "v99.npz"
    np.savez(p, **{**arrays, "version": np.array(99)})
    with pytest.raises(ValueError, match=r"v99.npz: model file format version 99 is not "
                                         r"supported"):
        attnx.load(p)
    p = tmp_path / "foreign.npz"
    np.savez(p, X=np.zeros((2, 3)), Y=np.ones(4))
    with pytest.raises(ValueError, match="foreign.npz: not an attnx model file"):
        attnx.load(p)
    p = tmp_path / "nometa.npz"
    np.savez(p, **{k: v for k, v in arrays.items() if k != "meta"})
    with pytest.raises(ValueError, match="nometa.npz is not a valid attnx model file"):
        attnx.load(p)
    p = tmp_path / "badjson.npz"
    np.savez(p, **{**arrays, "meta": np.array("{not json")})
    with pytest.raises(ValueError, match="badjson.npz"):
        attnx.load(p)
    p = tmp_path / "short.npz"
    np.savez(p, **{**arrays, "params": arrays["params"][:-1]})
    with pytest.raises(ValueError, match="short.npz.*do not fit the model"):
        attnx.load(p)
    p = tmp_path / "one.npy"
    np.save(p, np.arange(3))
    with pytest.raises(ValueError, match="one.npy is not an attnx model file"):
        attnx.load(p)
    p = _write(tmp_path, "text.npz", b"hello, I am not a zip file\n" * 10)
    with pytest.raises(ValueError, match="text.npz is not an attnx model file"):
        attnx.load(p)
    p = tmp_path / "pickled.npz"
    np.savez(p, format=np.array(["attnx-estimator", None], dtype=object))
    with pytest.raises(ValueError, match="pickled.npz"):
        attnx.load(p)
    with pytest.raises(FileNotFoundError):
        attnx.load(tmp_path / "missing.npz")


def test_failed_save_leaves_the_previous_file_intact(saved, data, tmp_path, monkeypatch):
    est, path, raw = saved
    X, Y = data
    other = _est(random_state=99, epochs=1).fit(X, Y)
    real_savez = np.savez

    def broken(file, **arrays):
        real_savez(file, **arrays)   # writes everything, then "the disk fills up"
        file.truncate(100)
        raise OSError("No space left on device")

    monkeypatch.setattr(np, "savez", broken)
    with pytest.raises(OSError, match="No space left"):
        other.save(path)
    monkeypatch.undo()
    assert path.read_bytes() == raw
    assert sorted(os.listdir(tmp_path)) == ["good.npz"]   # no temporary file left behind
    _same_state(attnx.load(path), est)
    other.save(path)                                       # a working save replaces it
    _same_state(attnx.load(path), other)
    assert sorted(os.listdir(tmp_path)) == ["good.npz"]


def test_save_refuses_other_objects(tmp_path):
    with pytest.raises(TypeError, match="AttentionRegressor, TransformerRegressor, AttentionClassifier or "
                                        "TransformerClassifier, got MultiHeadAttention"):
        aio.save(attnx.MultiHeadAttention(4, 2), tmp_path / "x.npz")
    assert not os.listdir(tmp_path)


def test_saved_model_predicts_the_max_position_task(tmp_path):
    X, Y = max_position_task(256, 6, 4, random_state=0)
    est = attnx.AttentionRegressor(2, epochs=10, lr=0.02, random_state=0).fit(X, Y)
    est.save(tmp_path / "m.npz")
    assert attnx.load(tmp_path / "m.npz").score(X, Y) == est.score(X, Y) > 0.7  # 0.86 here


# ---- the sequence model's options, classifiers and ragged data -----------------------
def _ragged(n, seed):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(int(t), 3)) for t in rng.integers(2, 9, size=n)]


@pytest.mark.parametrize("cls, opts", [
    (attnx.TransformerRegressor, dict(d_model=8, positional="learned", norm="pre",
                                      pooling="last", dropout=0.2, causal=True)),
    (attnx.AttentionRegressor, dict(d_model=4, positional="sinusoidal", d_hidden=6,
                                    dropout=0.1)),
    (attnx.TransformerClassifier, dict(d_model=8, positional="rope", norm="pre",
                                       class_weight={2: 0.5, 7: 2.0}, dropout=0.3)),
    (attnx.AttentionClassifier, dict(d_model=8, class_weight="balanced", pooling="last")),
])
@pytest.mark.parametrize("ragged", [False, True])
def test_new_options_resume_exactly(cls, opts, ragged, tmp_path):
    """fit 2 + save + load + 2 partial_fit == fit 4, bit for bit (dropout masks included)."""
    rng = np.random.default_rng(0)
    X = _ragged(37, 1) if ragged else rng.normal(size=(37, 6, 3))
    if cls in (attnx.TransformerClassifier, attnx.AttentionClassifier):
        y = np.where([x[:, 0].mean() > 0 for x in X], 7, 2)
    else:
        y = np.array([x[:, :2].sum(axis=0) for x in X])
    kw = dict(n_heads=2, batch_size=8, lr=0.01, random_state=3, **opts)
    if cls is attnx.TransformerClassifier or cls is attnx.TransformerRegressor:
        kw.update(n_layers=2)
    full = cls(**kw, epochs=4).fit(X, y)
    half = cls(**kw, epochs=2).fit(X, y)
    half.save(tmp_path / "m.npz")
    back = attnx.load(tmp_path / "m.npz")
    assert back.get_params() == half.get_params()
    assert back.model_.positional == half.model_.positional
    assert back.model_.dropout == half.model_.dropout and back.model_.norm == half.model_.norm
    back.partial_fit(X, y)
    back.partial_fit(X, y)
    _same_state(back, full)
    if hasattr(full, "classes_"):
        assert back.classes_.tolist() == [2, 7] and back.classes_.dtype == full.classes_.dtype
    pa, pb = full.predict(X), back.predict(X)
    for a, b in zip(pa, pb):
        np.testing.assert_array_equal(a, b)


def test_a_file_with_a_mismatched_sequence_model_is_refused(data, tmp_path):
    X, _ = data
    est = attnx.TransformerRegressor(2, d_model=8, epochs=1).fit(X, X[:, :, 0].sum(axis=1))
    est.save(tmp_path / "s.npz")
    with np.load(tmp_path / "s.npz", allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    meta = json.loads(str(arrays["meta"]))
    meta["model"]["d_model"] = 10_000      # would need 100s of MB: refused before building
    np.savez(tmp_path / "big.npz", **{**arrays, "meta": np.array(json.dumps(meta))})
    with pytest.raises(ValueError, match="big.npz.*do not fit the model"):
        attnx.load(tmp_path / "big.npz")
