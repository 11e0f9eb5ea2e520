"""Saving and loading estimators: exact resume, the file format, and damaged files."""
import json
import os
import warnings

import numpy as np
import pytest

from bare_settings import BARE as OLD, merged  # noqa: F401
import attnx
from attnx import io as aio
from attnx.datasets import max_position_task, mixing_task


@pytest.fixture(scope="module")
def data():
    return mixing_task(90, seq_len=5, d_model=4, random_state=0)


def _est(cls=attnx.AttentionRegressor, **kw):
    opts = dict(n_heads=2, epochs=2, batch_size=16, lr=0.02, random_state=4)
    if cls is attnx.TransformerRegressor:   # the previous release's defaults: the bare X -> Y model
        opts = merged(OLD, opts, n_layers=2, d_hidden=12)
    return cls(**merged(opts, kw))


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
    full = _est(cls, epochs=4, options={"shuffle": shuffle}).fit(X, Y)
    half = _est(cls, epochs=2, options={"shuffle": shuffle}).fit(X, Y)
    half.save(tmp_path / "half.safetensors")
    resumed = attnx.load(tmp_path / "half.safetensors")
    _same_state(resumed, half)
    resumed.partial_fit(X, Y)
    resumed.partial_fit(X, Y)
    _same_state(resumed, full)
    np.testing.assert_array_equal(resumed.predict(X), full.predict(X))


SEQUENCE_CASES = [
    (attnx.TransformerClassifier, dict(n_layers=1, d_model=8, d_hidden=16, norm="pre",
                                       positional="learned", dropout=0.1, pooling="last",
                                       class_weight={"b": 2.0, "a": 1.0}, options={"lr_schedule": "constant"})),
    (attnx.AttentionClassifier, dict(d_model=8, positional="rope", options={"causal": True})),
    (attnx.TransformerRegressor, dict(n_layers=2, d_model=8, norm="pre", dropout=0.2,
                                      positional="sinusoidal", dtype=np.float64, options={"lr_schedule": "constant"})),
    (attnx.AttentionRegressor, dict(d_model=6, pooling="mean")),
]


@pytest.mark.parametrize("cls,kw", SEQUENCE_CASES, ids=lambda c: getattr(c, "__name__", ""))
def test_sequence_estimators_resume_exactly_from_a_file_and_a_pickle(cls, kw, tmp_path):
    """Classifiers (string labels, class weights) and sequence models with dropout,
    LayerNorm and learned positions: fit 2 + save + load + 2 partial_fit == fit 4 (the
    Transformer estimators with their new defaults, standardisation and clipping
    included; a constant rate, as a schedule spans one fit)."""
    import pickle

    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 6, 4))
    if cls._estimator_type == "classifier":
        y = np.where(X[:, :, 0].sum(axis=1) > 0, "a", "b")
    else:
        y = X[:, :, :2].mean(axis=1)
    opts = dict(n_heads=2, batch_size=16, lr=0.02, random_state=3, **kw)
    full = cls(epochs=4, **opts).fit(X, y)
    half = cls(epochs=2, **opts).fit(X, y)
    half.save(tmp_path / "h.safetensors")
    for resumed in (attnx.load(tmp_path / "h.safetensors"), pickle.loads(pickle.dumps(half))):
        assert resumed.get_params() == half.get_params()
        np.testing.assert_array_equal(resumed.predict(X), half.predict(X))
        resumed.partial_fit(X, y)
        resumed.partial_fit(X, y)
        _same_state(resumed, full)
        np.testing.assert_array_equal(resumed.predict(X), full.predict(X))
        if cls._estimator_type == "classifier":
            assert list(resumed.classes_) == ["a", "b"]
            np.testing.assert_array_equal(resumed.predict_proba(X), full.predict_proba(X))


def test_load_restores_configuration_and_fitted_attributes(data, tmp_path):
    X, Y = data
    est = _est(attnx.TransformerRegressor, positional="rope", dtype=np.float64, epochs=3, options={"causal": True, "betas": (0.8, 0.99), "validation_fraction": 0.2}).fit(X, Y)
    path = tmp_path / "model"          # no suffix: the file is written exactly there
    aio.save(est, path)
    assert os.listdir(tmp_path) == ["model"]
    back = attnx.load(str(path))
    assert type(back) is attnx.TransformerRegressor
    assert back.get_params() == est.get_params()
    assert back.get_params()["dtype"] is np.float64 and back.options["betas"] == (0.8, 0.99)
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
    est.save(tmp_path / "d.safetensors")
    back = attnx.load(tmp_path / "d.safetensors").dtype
    assert back == dtype and type(back) is type(dtype)


def test_unfitted_estimator_round_trips(tmp_path):
    est = attnx.AttentionRegressor(4, lr=0.5, random_state=np.random.default_rng(1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est.save(tmp_path / "u.safetensors")
    back = attnx.load(tmp_path / "u.safetensors")
    assert not hasattr(back, "model_")
    # a Generator cannot be stored as JSON: it is saved as None (see attnx.io)
    assert back.get_params() == {**est.get_params(), "random_state": None}


def test_file_is_plain_safetensors_with_params_names_and_metadata(data, tmp_path):
    from safetensors import safe_open
    from safetensors.numpy import load_file

    X, Y = data
    est = _est(attnx.TransformerRegressor).fit(X, Y)
    path = tmp_path / "m.safetensors"
    est.save(path)
    tensors = load_file(path)
    params = est.model_.params
    for name, w in params.items():                  # weights under their params names
        np.testing.assert_array_equal(tensors[name], w)
        m = tensors[f"optimizer.exp_avg.{name}"]
        assert m.shape == w.shape and m.dtype == w.dtype
    # the moments by name are the optimizer's flat buffers, every value once
    flat_m = np.concatenate([tensors[f"optimizer.exp_avg.{k}"].ravel() for k in params])
    assert np.sort(flat_m).tobytes() == np.sort(est.optimizer_.m[0]).tobytes()
    np.testing.assert_array_equal(tensors["attribute.loss_curve_"], est.loss_curve_)
    np.testing.assert_array_equal(tensors["attribute.lr_curve_"], est.lr_curve_)
    assert len(tensors) == 3 * len(params) + 2
    with safe_open(path, framework="np") as f:
        meta = f.metadata()
    assert meta["format"] == "attnx-estimator"
    assert meta["format_version"] == str(aio.FORMAT_VERSION) == "3"
    assert meta["checksum"].startswith("sha256:")
    config = json.loads(meta["config"])
    assert config["class"] == "TransformerRegressor"
    assert config["params"]["dtype"] == {"dtype": "float32", "given_as": "type"}
    assert config["optimizer"]["t"] == est.optimizer_.t
    assert config["attributes"]["shuffle_rng_"]["state"]["bit_generator"] == "PCG64"
    assert config["model"] == est._model_spec()


# ---- damaged and foreign files ---------------------------------------------------------
@pytest.fixture()
def saved(data, tmp_path):
    X, Y = data
    est = _est(options={"validation_fraction": 0.2}).fit(X, Y)
    path = tmp_path / "good.safetensors"
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
    p = _write(tmp_path, "cut.safetensors", raw[:n])
    with pytest.raises(ValueError, match="cut.safetensors"):
        attnx.load(p)


def test_bit_flips_raise_or_change_nothing(saved, tmp_path):
    """Every 7th byte flipped in turn: either a ValueError naming the file, or (a space
    of the header's padding turned into other JSON whitespace) the very same estimator."""
    est, _, raw = saved
    p = tmp_path / "flip.safetensors"
    errors = 0
    for off in range(0, len(raw), 7):
        b = bytearray(raw)
        b[off] ^= 0x20
        p.write_bytes(bytes(b))
        try:
            back = attnx.load(p)
        except ValueError as exc:
            assert "flip.safetensors" in str(exc)
            errors += 1
            continue
        _same_state(back, est)
        assert back.get_params() == est.get_params()
        assert back.validation_loss_curve_ == est.validation_loss_curve_
    assert errors > 0.8 * (len(raw) / 7)


def test_flip_inside_the_weights_is_caught(saved, tmp_path):
    est, _, raw = saved
    needle = est.model_.params["Wo"].ravel()[5:9].tobytes()
    off = raw.find(needle)
    assert off > 0
    b = bytearray(raw)
    b[off + 1] ^= 0x01
    p = _write(tmp_path, "w.safetensors", bytes(b))
    with pytest.raises(ValueError, match="w.safetensors is corrupted: its checksum"):
        attnx.load(p)


def _rewrite(src, dst, change_meta=None, change_arrays=None, fix_checksum=True):
    """A copy of the file src with its metadata / tensors changed (and, with
    fix_checksum, a checksum matching the change: what a deliberate edit gives)."""
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    arrays = load_file(src)
    with safe_open(src, framework="np") as f:
        meta = dict(f.metadata())
    if change_arrays:
        arrays = change_arrays(arrays)
    if change_meta:
        meta = change_meta(meta)
    if fix_checksum and "config" in meta:
        meta["checksum"] = aio._checksum(meta["config"], arrays)
    save_file(arrays, dst, metadata=meta)
    return dst


def _config(change):
    def f(meta):
        c = json.loads(meta["config"])
        change(c)
        return {**meta, "config": json.dumps(c)}
    return f


def test_wrong_version_foreign_and_altered_files(saved, tmp_path):
    from safetensors.numpy import save_file

    _, path, _ = saved
    p = _rewrite(path, tmp_path / "v99.st", lambda m: {**m, "format_version": "99"})
    with pytest.raises(ValueError, match=r"v99.st has model file format version '99', which is "
                                         r"not supported"):
        attnx.load(p)
    p = tmp_path / "foreign.st"
    save_file({"X": np.zeros((2, 3)), "Y": np.ones(4)}, p)
    with pytest.raises(ValueError, match="foreign.st is not an attnx model file"):
        attnx.load(p)
    p = _rewrite(path, tmp_path / "noconf.st",
                 lambda m: {k: v for k, v in m.items() if k != "config"})
    with pytest.raises(ValueError, match=r"noconf.st is not a valid attnx model file "
                                         r"\(no configuration\)"):
        attnx.load(p)
    p = _rewrite(path, tmp_path / "badjson.st", lambda m: {**m, "config": "{not json"})
    with pytest.raises(ValueError, match="badjson.st is not a valid attnx model file"):
        attnx.load(p)
    p = _rewrite(path, tmp_path / "short.st",
                 change_arrays=lambda a: {**a, "Wq": a["Wq"][:-1]})
    with pytest.raises(ValueError, match="short.st .*the weights .* do not fit the model"):
        attnx.load(p)
    p = _rewrite(path, tmp_path / "extra.st",
                 change_arrays=lambda a: {**a, "attribute.evil_": np.zeros(3)})
    with pytest.raises(ValueError, match="extra.st: unexpected arrays"):
        attnx.load(p)
    p = _rewrite(path, tmp_path / "cls.st", _config(lambda c: c.update({"class": "os"})))
    with pytest.raises(ValueError, match="cls.st: unknown estimator class 'os'"):
        attnx.load(p)
    p = _rewrite(path, tmp_path / "big.st",
                 _config(lambda c: c["model"].update(d_model=10**6)))
    with pytest.raises(ValueError, match="big.st .*the weights .* do not fit the model"):
        attnx.load(p)
    p = _rewrite(path, tmp_path / "rng.st", _config(
        lambda c: c["attributes"]["shuffle_rng_"]["state"].update(bit_generator="os")))
    with pytest.raises(ValueError, match="rng.st: unsupported random generator"):
        attnx.load(p)
    p = _rewrite(path, tmp_path / "nosum.st", lambda m: {**m, "config": m["config"] + " "},
                 fix_checksum=False)
    with pytest.raises(ValueError, match="nosum.st is corrupted: its checksum"):
        attnx.load(p)
    p = tmp_path / "old.npz"       # the format of attnx 0.1 is no longer read
    np.savez(p, format=np.array("attnx-estimator"), version=np.array(1))
    with pytest.raises(ValueError, match="old.npz is not an attnx model file"):
        attnx.load(p)
    p = _write(tmp_path, "text.st", b"hello, I am not a model file\n" * 10)
    with pytest.raises(ValueError, match="text.st is not an attnx model file"):
        attnx.load(p)
    with pytest.raises(FileNotFoundError):
        attnx.load(tmp_path / "missing.st")


def test_failed_save_leaves_the_previous_file_intact(saved, data, tmp_path, monkeypatch):
    est, path, raw = saved
    X, Y = data
    other = _est(random_state=99, epochs=1).fit(X, Y)
    real_fsync = os.fsync

    def broken(fd):
        os.ftruncate(fd, 100)        # everything written, then "the disk fills up"
        raise OSError("No space left on device")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(OSError, match="No space left"):
        other.save(path)
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert path.read_bytes() == raw
    assert sorted(os.listdir(tmp_path)) == ["good.safetensors"]   # no temporary file left
    _same_state(attnx.load(path), est)
    other.save(path)                                       # a working save replaces it
    _same_state(attnx.load(path), other)
    assert sorted(os.listdir(tmp_path)) == ["good.safetensors"]


def test_save_refuses_other_objects(tmp_path):
    with pytest.raises(TypeError, match="save needs an attnx estimator .*AttentionRegressor"
                                        ".*got MultiHeadAttention"):
        aio.save(attnx.MultiHeadAttention(4, 2), tmp_path / "x.safetensors")
    assert not os.listdir(tmp_path)


def test_saved_model_predicts_the_max_position_task(tmp_path):
    X, Y = max_position_task(256, 6, 4, random_state=0)
    est = attnx.AttentionRegressor(2, epochs=10, lr=0.02, random_state=0).fit(X, Y)
    est.save(tmp_path / "m.safetensors")
    assert attnx.load(tmp_path / "m.safetensors").score(X, Y) == est.score(X, Y) > 0.7  # 0.86 here


# ---- the sequence model's options, classifiers and ragged data -----------------------
def _ragged(n, seed):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(int(t), 3)) for t in rng.integers(2, 9, size=n)]


@pytest.mark.parametrize("cls, opts", [
    (attnx.TransformerRegressor, dict(d_model=8, positional="learned", norm="pre",
                                      pooling="last", dropout=0.2, options={"causal": True, "lr_schedule": "constant"})),
    (attnx.AttentionRegressor, dict(d_model=4, positional="sinusoidal", d_hidden=6,
                                    dropout=0.1)),
    (attnx.TransformerClassifier, dict(d_model=8, positional="rope", norm="pre",
                                       class_weight={2: 0.5, 7: 2.0}, dropout=0.3, options={"lr_schedule": "constant"})),
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
    half.save(tmp_path / "m.safetensors")
    back = attnx.load(tmp_path / "m.safetensors")
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


def test_load_lets_memory_errors_and_bugs_through(tmp_path, monkeypatch):
    """Only a format error of the file becomes "not a valid attnx model file"; a
    MemoryError or an attnx bug (here: an AttributeError) keeps its own type."""
    X, Y = max_position_task(16, 4, 4, random_state=0)
    path = str(tmp_path / "m.safetensors")
    attnx.AttentionRegressor(epochs=1, random_state=0).fit(X, Y).save(path)
    for exc in (MemoryError("no room"), AttributeError("a bug")):
        def failing(*a, exc=exc, **k):
            raise exc
        monkeypatch.setattr(aio._state, "new_from_state", failing)
        with pytest.raises(type(exc)):
            aio.load(path)
    monkeypatch.setattr(aio._state, "new_from_state",
                        lambda *a, **k: {}["a missing field"])
    with pytest.raises(ValueError, match="not a valid attnx model file"):
        aio.load(path)
