"""ONNX export: onnxruntime runs the exported graph and agrees with attnx's own forward
and predict, across options and sequence lengths the export never saw."""
import dataclasses
import json
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from bare_settings import BARE as OLD, merged  # noqa: F401
import attnx
import attnx.io.onnx as aonnx
from numeric_checks import rel_err

TOL = {np.float32: 1e-5, np.float64: 1e-10}
LENGTHS = (1, 5, 13)          # none of them is special to the export


def _session(path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _masks(rng, b, t):
    mask = np.zeros((b, t), dtype=bool)
    mask[1, max(1, t // 2):] = True         # a right-padded sequence
    mask[2, :] = True                       # a sequence with nothing valid
    mask[3] = rng.random(t) < 0.3           # holes anywhere
    return mask


def _check_model(model, dtype, tmp_path, n_in, lengths=LENGTHS):
    path = tmp_path / "m.onnx"
    proto = aonnx.export(model, path)
    onnx.checker.check_model(onnx.load(path), full_check=True)
    assert [i.name for i in proto.graph.input] == ["x", "key_padding_mask"]
    assert [o.name for o in proto.graph.output] == ["y"]
    sess = _session(path)
    rng = np.random.default_rng(1)
    for t in lengths:
        x = rng.standard_normal((4, t, n_in)).astype(dtype)
        for mask in (np.zeros((4, t), dtype=bool), _masks(rng, 4, t)):
            (y,) = sess.run(None, {"x": x, "key_padding_mask": mask})
            ref = model.forward(x, key_padding_mask=mask, grad=False)
            assert y.dtype == dtype and y.shape == ref.shape
            assert rel_err(y, ref, floor=1.0) < TOL[dtype], (t, rel_err(y, ref))


ATTENTION_OPTIONS = [dict(), dict(causal=True), dict(bias=True, rope=True),
                     dict(causal=True, bias=True, rope=True)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("opts", ATTENTION_OPTIONS, ids=str)
def test_attention_and_transformer(dtype, opts, tmp_path):
    _check_model(attnx.MultiHeadAttention(12, 3 if not opts.get("rope") else 2, dtype=dtype,
                                          random_state=0, **opts), dtype, tmp_path, 12)
    _check_model(attnx.Transformer(8, 2, n_layers=2, d_hidden=12, dtype=dtype, random_state=1,
                                   **opts), dtype, tmp_path, 8)


SEQUENCE_OPTIONS = [
    dict(),
    dict(norm="pre", positional="sinusoidal", pooling="mean"),
    dict(norm="pre", positional="learned", max_len=16, pooling="last", causal=True),
    dict(positional="rope", bias=False, pooling="mean"),
    dict(d_model=7, n_heads=1, positional="sinusoidal", norm="pre"),   # odd width
    dict(norm="pre", positional="rope", causal=True, dropout=0.3),    # no dropout in inference
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("opts", SEQUENCE_OPTIONS, ids=str)
def test_sequence_model(dtype, opts, tmp_path):
    kw = dict(n_features=5, d_model=8, n_heads=2, n_layers=2, n_outputs=3, d_hidden=16)
    kw.update(opts)
    model = attnx.SequenceModel(**kw, dtype=dtype, random_state=0)
    for name, w in model.params.items():   # LayerNorm gains/biases away from 1 and 0
        if ".g" in name or name.endswith((".b", "b1", "b2", "bo", "bq")):
            w[...] += np.random.default_rng(len(name)).normal(0, 0.3, w.shape)
    _check_model(model, dtype, tmp_path, 5)


# the time-series options; a stem needs every kernel to fit its layer's input
STEM_OPTIONS = [
    dict(pooling="max", stem=((3, 2), (2, 1)), norm="pre", positional="sinusoidal"),
    dict(pooling="cls", norm="pre", positional="learned", max_len=16),
    dict(stem=((4, 1),), positional="rope"),                       # per token, stride 1
    dict(stem=((1, 1), (3, 3)), norm="pre", positional="learned", max_len=5),   # per token
    dict(pooling="cls", stem=((3, 3),), positional="rope", norm="pre"),
    dict(pooling="max", causal=True, positional="rope"),
    dict(pooling="mean", stem=((2, 2), (2, 2)), bias=False),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("opts", STEM_OPTIONS, ids=str)
def test_sequence_model_stem_and_pooling(dtype, opts, tmp_path):
    """Stem (Conv, or strided slices in float64, which onnxruntime lacks a Conv for),
    class token and max pooling, with holes and fully padded sequences in the mask."""
    kw = dict(n_features=5, d_model=8, n_heads=2, n_layers=2, n_outputs=3, d_hidden=16)
    kw.update(opts)
    model = attnx.SequenceModel(**kw, dtype=dtype, random_state=0)
    for name, w in model.params.items():
        if ".g" in name or name.endswith((".b", "b1", "b2", "bo", "bq")) or name == "cls":
            w[...] += np.random.default_rng(len(name)).normal(0, 0.3, w.shape)
    _check_model(model, dtype, tmp_path, 5, lengths=(4, 9, 13))


def _fit(cls, X, y, **kw):
    return cls(n_heads=2, epochs=2, batch_size=16, random_state=0, **kw).fit(X, y)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_estimators_match_predict(dtype, tmp_path):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((32, 6, 4))
    labels = np.array(["x", "y", "z"])[(X[:, :, 0].sum(axis=1) > 0).astype(int)
                                       + (X[:, 0, 1] > 0.5)]
    cases = [
        (attnx.AttentionRegressor(2, epochs=2, random_state=0, dtype=dtype, options={"causal": True}), X),
        (attnx.TransformerRegressor(2, n_layers=1, **merged(OLD, epochs=2, positional="rope"),
                                    random_state=0, dtype=dtype), X),       # the bare X -> Y model
        (attnx.TransformerRegressor(2, n_layers=1, d_model=8, norm="pre", epochs=2,
                                    random_state=0, dtype=dtype), X[:, :, :2].mean(axis=1)),
        (attnx.TransformerRegressor(2, n_layers=1, d_model=8, epochs=2, pooling="last",
                                    positional="sinusoidal", random_state=0, dtype=dtype),
         X[:, :, 0].sum(axis=1)),                                      # y (n,): predict (n,)
        (attnx.TransformerClassifier(2, n_layers=1, d_model=8, norm="pre", epochs=2,
                                     positional="learned", random_state=0, dtype=dtype), labels),
        (attnx.AttentionClassifier(2, d_model=8, epochs=2, random_state=0, dtype=dtype,
                                   pooling="last"), labels),
    ]
    for est, y in cases:
        est.fit(X, y)
        path = tmp_path / "e.onnx"
        proto = aonnx.export(est, path)
        sess = _session(path)
        classifier = hasattr(est, "classes_")
        assert [o.name for o in proto.graph.output] == (["probabilities"] if classifier
                                                        else ["y"])
        for t in (3, 6):
            Xt = rng.standard_normal((5, t, 4)).astype(dtype)
            feed = {"x": Xt, "key_padding_mask": np.zeros((5, t), dtype=bool)}
            (out,) = sess.run(None, feed)
            ref = est.predict_proba(Xt) if classifier else est.predict(Xt)
            assert out.shape == ref.shape and out.dtype == dtype
            assert rel_err(out, ref, floor=1.0) < TOL[dtype], (est, rel_err(out, ref))
        if classifier:
            props = {p.key: p.value for p in proto.metadata_props}
            assert json.loads(props["classes"]) == list(est.classes_)


def _right_padded(X):
    """Ragged (T_i, f) sequences as one zero-padded (B, max T, f) batch and its key
    padding mask (True = padding)."""
    t_max = max(len(s) for s in X)
    xp = np.zeros((len(X), t_max, X[0].shape[1]))
    mask = np.ones((len(X), t_max), dtype=bool)
    for i, s in enumerate(X):
        xp[i, :len(s)] = s
        mask[i, :len(s)] = False
    return xp, mask


def test_padding_mask_matches_ragged_predict(tmp_path):
    """A right-padded batch through the graph gives what predict gives for ragged input."""
    rng = np.random.default_rng(3)
    X = [rng.standard_normal((t, 3)) for t in (4, 7, 2, 7, 5)]
    y = np.array([0, 1, 0, 1, 1])
    est = attnx.TransformerClassifier(2, n_layers=1, d_model=8, norm="pre", epochs=2,
                                      random_state=0, dtype=np.float64).fit(X, y)
    aonnx.export(est, tmp_path / "r.onnx")
    xp, mask = _right_padded(X)
    (p,) = _session(tmp_path / "r.onnx").run(None, {"x": xp, "key_padding_mask": mask})
    assert rel_err(p, est.predict_proba(X), floor=1.0) < 1e-10


@pytest.mark.parametrize("opts", [dict(pooling="max", stem=((3, 2),)),
                                  dict(pooling="cls", stem=((2, 1), (3, 2))),
                                  dict(pooling="max")], ids=str)
def test_stem_and_pooling_estimators_match_ragged_predict(opts, tmp_path):
    rng = np.random.default_rng(5)
    X = [rng.standard_normal((t, 3)) for t in (6, 9, 4, 9, 7, 5)]
    y = np.array([0, 1, 2, 1, 0, 2])
    est = attnx.TransformerClassifier(2, n_layers=1, d_model=8, epochs=2, random_state=0,
                                      dtype=np.float64, **opts).fit(X, y)
    aonnx.export(est, tmp_path / "s.onnx")
    xp, mask = _right_padded(X)
    (p,) = _session(tmp_path / "s.onnx").run(None, {"x": xp, "key_padding_mask": mask})
    assert rel_err(p, est.predict_proba(X), floor=1.0) < 1e-10
    (p1,) = _session(tmp_path / "s.onnx").run(None, {"x": xp[:1], "key_padding_mask":
                                                       mask[:1]})
    assert rel_err(p1, est.predict_proba(X[:1]), floor=1.0) < 1e-10


def test_per_position_stem_regressor_matches_ragged_predict(tmp_path):
    rng = np.random.default_rng(6)
    lengths = (5, 8, 3, 6)
    X = [rng.standard_normal((t, 3)) for t in lengths]
    y = [rng.standard_normal(t) for t in lengths]
    est = attnx.TransformerRegressor(2, d_model=8, epochs=2, random_state=0, stem=((3, 1),),
                                     dtype=np.float32).fit(X, y)
    aonnx.export(est, tmp_path / "p.onnx")
    xp, mask = _right_padded(X)
    (out,) = _session(tmp_path / "p.onnx").run(None, {"x": xp.astype(np.float32),
                                                      "key_padding_mask": mask})
    ref = est.predict(X)
    for i, t in enumerate(lengths):
        assert rel_err(out[i, :t], ref[i], floor=1.0) < 1e-5
        assert np.all(out[i, t:] == 0)


@pytest.mark.parametrize("kind", ["regressor", "classifier"])
def test_per_position_outputs_at_padded_positions(tmp_path, kind):
    """Per-position models: valid positions match ragged predict; padded positions are
    defined (regression 0, class probabilities uniform), as README documents."""
    rng = np.random.default_rng(4)
    lengths = (5, 8, 3, 6)
    X = [rng.standard_normal((t, 3)) for t in lengths]
    if kind == "regressor":
        y = [rng.standard_normal(t) for t in lengths]
        est = attnx.TransformerRegressor(2, d_model=8, epochs=2, random_state=0,
                                         dtype=np.float64).fit(X, y)
        ref = est.predict(X)
    else:
        y = [rng.integers(0, 3, size=t) for t in lengths]
        est = attnx.TransformerClassifier(2, d_model=8, epochs=2, random_state=0,
                                          dtype=np.float64).fit(X, y)
        ref = est.predict_proba(X)
    aonnx.export(est, tmp_path / "p.onnx")
    xp, mask = _right_padded(X)
    (out,) = _session(tmp_path / "p.onnx").run(None, {"x": xp, "key_padding_mask": mask})
    for i, t in enumerate(lengths):
        assert rel_err(out[i, :t], ref[i], floor=1.0) < 1e-10
        pad = out[i, t:]
        expected = 0.0 if kind == "regressor" else 1.0 / 3
        assert pad.size == 0 or np.array_equal(pad, np.full_like(pad, expected)), pad


def test_without_mask_input_and_other_opsets(tmp_path):
    model = attnx.SequenceModel(4, 8, 2, 1, 2, norm="pre", pooling="mean", dtype=np.float64,
                                random_state=0)
    x = np.random.default_rng(0).standard_normal((3, 9, 4))
    ref = model.forward(x, grad=False)
    for opset in (17, 18, 21):
        proto = aonnx.export(model, tmp_path / "n.onnx", opset=opset, key_padding_mask=False)
        assert [i.name for i in proto.graph.input] == ["x"]
        assert proto.opset_import[0].version == opset
        (y,) = _session(tmp_path / "n.onnx").run(None, {"x": x})
        assert rel_err(y, ref) < 1e-10


def test_learned_positions_refuse_sequences_beyond_max_len(tmp_path):
    """As predict does, the graph refuses T > max_len (a shape error, not garbage)."""
    model = attnx.SequenceModel(3, 4, 2, 1, 2, positional="learned", max_len=6,
                                pooling="mean", random_state=0)
    aonnx.export(model, tmp_path / "l.onnx", key_padding_mask=False)
    sess = _session(tmp_path / "l.onnx")
    sess.run(None, {"x": np.zeros((2, 6, 3), dtype=np.float32)})
    with pytest.raises(Exception, match="(?i)broadcast|shape|dimension"):
        sess.run(None, {"x": np.zeros((2, 7, 3), dtype=np.float32)})


def test_export_refuses_bad_input(tmp_path):
    with pytest.raises(ValueError, match="opset must be an int in \\[17, 21\\], got 12"):
        aonnx.export(attnx.MultiHeadAttention(4, 2), tmp_path / "a.onnx", opset=12)
    with pytest.raises(ValueError, match="not fitted yet"):
        aonnx.export(attnx.AttentionRegressor(), tmp_path / "a.onnx")
    with pytest.raises(TypeError, match="got dict"):
        aonnx.export({}, tmp_path / "a.onnx")
    assert not list(tmp_path.iterdir())


def test_export_never_imports_torch(tmp_path):
    code = ("import sys, attnx, attnx.io.onnx\n"
            "m = attnx.SequenceModel(3, 4, 2, 1, 2, norm='pre', pooling='mean')\n"
            "attnx.io.onnx.export(m, 'm.onnx')\n"
            "print('torch' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_patches_of_ragged_and_uneven_series_match_predict(tmp_path):
    """Patches whose last one is partial (T or a sequence's length not a multiple of
    patch_len): its steps past the end repeat the last step, in predict and in the
    graph, with and without the key padding mask input."""
    rng = np.random.default_rng(8)
    X = [rng.standard_normal((t, 3)) for t in (7, 4, 9, 5, 8, 6)]
    y = np.array([0, 1, 0, 1, 1, 0])
    est = attnx.TransformerClassifier(2, n_layers=1, d_model=8, norm="pre", epochs=2,
                                      patch_len=3, random_state=0,
                                      dtype=np.float64).fit(X, y)
    aonnx.export(est, tmp_path / "p.onnx")
    xp, mask = _right_padded(X)
    (p,) = _session(tmp_path / "p.onnx").run(None, {"x": xp, "key_padding_mask": mask})
    assert rel_err(p, est.predict_proba(X), floor=1.0) < 1e-10
    dense = rng.standard_normal((4, 7, 3))   # 7 steps: the third patch holds one
    aonnx.export(est, tmp_path / "d.onnx", key_padding_mask=False)
    (pd,) = _session(tmp_path / "d.onnx").run(None, {"x": dense})
    assert rel_err(pd, est.predict_proba(dense), floor=1.0) < 1e-10
    # the fill is the last step, not 0: the same series ending one step later differs
    assert rel_err(est.predict_proba(dense[:, :7]), est.predict_proba(dense[:, :6])) > 1e-6


def test_models_fitted_before_the_fill_rule_keep_zero_filled_patches(tmp_path):
    """A fitted estimator whose plan fills patches with zeros (a file from before the
    fill rule) predicts, saves, loads and exports with the zero fill it was trained with."""
    rng = np.random.default_rng(9)
    X = [rng.standard_normal((t, 3)) for t in (7, 4, 9, 5, 8, 6)]
    y = np.array([0, 1, 0, 1, 1, 0])
    est = attnx.TransformerClassifier(2, n_layers=1, d_model=8, epochs=2, patch_len=3,
                                      random_state=0, dtype=np.float64).fit(X, y)
    new = est.predict_proba(X)
    est.plan_ = dataclasses.replace(est.plan_, patch_fill="zero")   # a model from before the rule
    old = est.predict_proba(X)
    assert rel_err(old, new) > 1e-6
    xp, mask = _right_padded(X)
    from attnx.estimators import _sequences as seqs
    zeros, _ = seqs.patch(xp, np.array([len(s) for s in X]), 3, fill="zero")
    assert not zeros[0, 2, 3:].any()   # 7 steps: the last patch's two fill steps are 0
    est.save(tmp_path / "legacy.safetensors")
    back = attnx.load(tmp_path / "legacy.safetensors")
    assert rel_err(back.predict_proba(X), old) < 1e-12
    aonnx.export(back, tmp_path / "z.onnx")
    (p,) = _session(tmp_path / "z.onnx").run(None, {"x": xp, "key_padding_mask": mask})
    assert rel_err(p, old, floor=1.0) < 1e-10
