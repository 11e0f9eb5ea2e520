"""attnx.SequenceModel's instance normalisation (instance_norm "input" / "revin", RevIN):
PyTorch twin on identical weights, float64 finite differences of every gradient and
dL/dX, ragged input, patches (instance_steps), stems, contract."""
import pickle

import numpy as np
import pytest

from attnx import SequenceModel
from .test_sequence_model import fd_check, ragged_mask, step_peak_bytes
from .test_sequence_stem import assert_twin_matches

TOL = {np.float32: 1e-4, np.float64: 1e-10}
# (mode, affine, pooling, stem, steps, n_features, n_outputs)
CASES = [
    ("input", False, "mean", None, 1, 3, 4),
    ("input", True, "max", ((3, 1),), 1, 3, 2),
    ("input", True, "cls", None, 2, 4, 1),
    ("revin", False, "mean", None, 1, 3, 3),       # output j <- channel j
    ("revin", True, "last", None, 1, 1, 3),        # every output <- the one channel
    ("revin", True, None, ((3, 1),), 1, 2, 2),     # per position
    ("revin", True, "mean", ((4, 2),), 2, 2, 1),   # patches of 2 steps, one channel
    ("revin", False, None, None, 1, 1, 2),
]


def _id(c):
    mode, aff, pool, stem, p, f, k = c
    return f"{mode}-{'aff' if aff else 'noaff'}-{pool or 'all'}-{'stem' if stem else 'nostem'}" \
           f"-p{p}-f{f}-k{k}"


def make(dtype, case, rng, **kw):
    mode, aff, pool, stem, p, f, k = case
    m = SequenceModel(f, 8, 2, 2, k, d_hidden=12, pooling=pool, positional="sinusoidal",
                      norm="pre", stem=stem, instance_norm=mode, instance_affine=aff,
                      instance_steps=p, dtype=dtype, random_state=0, **kw)
    for n, v in m.params.items():   # non-trivial biases, gains and the affine map
        if n.endswith((".b", "bq", "bk", "bv", "bo", "b1", "b2", ".g")) or n == "cls":
            v[...] = v + rng.normal(size=v.shape) * 0.3
    return m


def series(rng, nb, t, f, dtype):
    """Inputs far from standardised: per-series offsets and scales."""
    off = rng.normal(size=(nb, 1, f)) * 20
    scale = np.exp(rng.normal(size=(nb, 1, f)))
    return (off + scale * rng.normal(size=(nb, t, f))).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("use_mask", [False, True], ids=["full", "ragged"])
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_matches_torch_twin(torch, dtype, use_mask, case, rng):
    m = make(dtype, case, rng)
    nb, t = 4, 9
    x = series(rng, nb, t, m.n_features, dtype)
    kpm = ragged_mask(nb, t, rng) if use_mask else None
    assert_twin_matches(torch, m, x, kpm, rng, TOL[dtype])


@pytest.mark.parametrize("use_mask", [False, True], ids=["full", "ragged"])
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_finite_differences(case, use_mask, rng):
    m = make(np.float64, case, rng)
    nb, t = 3, 8
    x = series(rng, nb, t, m.n_features, np.float64)
    kpm = ragged_mask(nb, t, rng) if use_mask else None
    g = rng.normal(size=m.output_shape(nb, t))
    names = [n for n in m.params if n.startswith(("revin.", "head.", "embed.", "stem.0"))]
    fd_check(m, x, kpm, g, rng, n_probe=6, names=names)


def test_affine_gradient_without_input_grad(rng):
    """input_grad=False still runs the pass the affine map's gradient needs."""
    case = ("revin", True, "mean", None, 1, 2, 2)
    m = make(np.float64, case, rng)
    x = series(rng, 3, 6, 2, np.float64)
    g = rng.normal(size=(3, 2))
    m.forward(x)
    m.backward(g)
    want = m.grads.flat.copy()
    m.input_grad = False
    m.forward(x)
    assert m.backward(g) is None
    np.testing.assert_array_equal(m.grads.flat, want)
    assert np.abs(m.grads["revin.g"]).max() > 0


@pytest.mark.parametrize("mode", ["input", "revin"])
def test_invariance_to_series_offset_and_scale(mode, rng):
    """"input": Y ignores a per-series shift and scale of X (up to eps); "revin":
    Y moves with it (output j <- channel j)."""
    m = SequenceModel(2, 8, 2, 1, 2, pooling="mean", instance_norm=mode, dtype=np.float64,
                      random_state=1)
    x = series(rng, 3, 7, 2, np.float64)
    a, s = rng.normal(size=(3, 1, 2)) * 5, np.exp(rng.normal(size=(3, 1, 2)))
    y0 = m.forward(x, grad=False).copy()
    y1 = m.forward(a + s * x, grad=False)
    want = y0 if mode == "input" else a[:, 0] + s[:, 0] * y0
    np.testing.assert_allclose(y1, want, rtol=1e-6, atol=1e-6)


def test_default_is_unchanged_and_options_round_trip(rng):
    """instance_norm=None builds the model of before (same weights, same outputs);
    the options survive get_config and pickling."""
    base = SequenceModel(3, 8, 2, 1, 3, pooling="mean", dtype=np.float64, random_state=0)
    same = SequenceModel(3, 8, 2, 1, 3, pooling="mean", instance_norm=None,
                         dtype=np.float64, random_state=0)
    np.testing.assert_array_equal(base.params.flat, same.params.flat)
    m = SequenceModel(3, 8, 2, 1, 3, pooling="mean", instance_norm="revin",
                      instance_affine=True, dtype=np.float64, random_state=0)
    # the affine map draws nothing: the other weights are the base model's
    np.testing.assert_array_equal(m.params.flat[6:], base.params.flat)
    np.testing.assert_array_equal(m.params["revin.g"], 1)
    np.testing.assert_array_equal(m.params["revin.b"], 0)
    cfg = m.get_config()
    assert (cfg["instance_norm"], cfg["instance_affine"], cfg["instance_steps"]) == \
        ("revin", True, 1)
    assert "instance_norm='revin'" in repr(m)
    m.params["revin.g"][...] = 1.5
    x = series(rng, 2, 5, 3, np.float64)
    back = pickle.loads(pickle.dumps(m))
    np.testing.assert_array_equal(back.forward(x, grad=False), m.forward(x, grad=False))
    assert SequenceModel.config_n_params(cfg) == m.n_params == base.n_params + 6


def test_bad_options():
    with pytest.raises(ValueError, match="instance_norm must be one of"):
        SequenceModel(2, 8, 2, 1, 2, instance_norm="batch")
    with pytest.raises(ValueError, match="n_outputs=3 and 2 channels"):
        SequenceModel(2, 8, 2, 1, 3, instance_norm="revin")
    with pytest.raises(ValueError, match="instance_affine=True needs instance_norm"):
        SequenceModel(2, 8, 2, 1, 2, instance_affine=True)
    with pytest.raises(TypeError, match="instance_affine must be True or False"):
        SequenceModel(2, 8, 2, 1, 2, instance_norm="input", instance_affine="yes")
    with pytest.raises(ValueError, match="instance_steps=2 must divide n_features=3"):
        SequenceModel(3, 8, 2, 1, 2, instance_norm="input", instance_steps=2)
    with pytest.raises(ValueError, match="instance_steps"):
        SequenceModel(2, 8, 2, 1, 2, instance_norm="input", instance_steps=0)


@pytest.mark.parametrize("mode, affine, steps", [("revin", True, 1), ("input", True, 2),
                                                 ("revin", False, 2)])
def test_training_step_allocates_no_arrays(mode, affine, steps, rng):
    """At a fixed shape a forward/backward/AdamW step with instance normalisation
    reuses every buffer (statistics, normalised input, de-normalisation's scratch):
    the traced peak stays below half the size of the input series."""

    import attnx
    c = 8   # channels: the normalised input is at least 8 * 64 * 8 floats
    m = SequenceModel(c * steps, 32, 4, 2, c, pooling=None, positional="sinusoidal",
                      norm="pre", instance_norm=mode, instance_affine=affine,
                      instance_steps=steps, random_state=0)
    x = series(rng, 8, 64, c * steps, np.float32)
    kpm = ragged_mask(8, 64, rng)
    y = np.empty(m.output_shape(8, 64), np.float32)
    dy = np.empty_like(y)
    dx = np.empty_like(x)
    target = rng.normal(size=y.shape).astype(np.float32)
    opt = attnx.AdamW(m.params)

    def step():
        m.forward(x, kpm, out=y)
        attnx.mse_loss(y, target, out=dy)
        m.backward(dy, out=dx)
        opt.step(m.grads)

    peak = step_peak_bytes(step)
    series_bytes = 8 * 64 * c * 4   # one (B, T * p, C) array of the normalisation
    assert peak < series_bytes // 2, f"peak {peak} bytes during a step"
