"""Random time shifts of the training batches (attnx.estimators._augment), tokenizer="auto"'s
short univariate path of the classifiers: the shift against a per-step reference, bad
input, the batch hook, where a fit shifts (and where not) and that it stays reproducible,
saved and training-only."""
import pickle

import numpy as np
import pytest

import attnx
from attnx.estimators import _augment as G
from attnx.estimators._batches import Batch
from attnx.layers import _stem

TC = attnx.TransformerClassifier
SMALL = dict(n_heads=2, n_layers=1, d_model=16, batch_size=8, epochs=3, random_state=0)


def _series(n=24, t=24, c=1, seed=0, ragged=False):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    X = []
    for i in range(n):
        ti = int(rng.integers(15, t + 1)) if ragged else t
        x = rng.standard_normal((ti, c)) * 0.3
        x[ti // 4:ti // 2] += (y[i] - 1) * 2.0
        X.append(x.astype(np.float32))
    return (X if ragged else np.stack(X)), y


def _reference(x, s):
    """out[i, j] = x[i, j - s_i], the steps outside 0..T-1 read the nearest end."""
    m, t, _ = x.shape
    out = np.empty_like(x)
    for i in range(m):
        for j in range(t):
            out[i, j] = x[i, min(max(j - int(s[i]), 0), t - 1)]
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_shift_rows_against_the_per_step_reference(dtype):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((7, 9, 2)).astype(dtype)
    s = np.array([0, 1, -1, 3, -4, 9, -12])   # |s| >= T: the row becomes one end value
    out = G.shift_rows(x, s)
    assert out.dtype == dtype and out.shape == x.shape
    np.testing.assert_array_equal(out, _reference(x, s))
    np.testing.assert_array_equal(out[0], x[0])
    np.testing.assert_array_equal(out[1, 1:], x[1, :-1])
    np.testing.assert_array_equal(out[1, 0], x[1, 0])
    np.testing.assert_array_equal(out[5], np.repeat(x[5, :1], 9, axis=0))
    np.testing.assert_array_equal(out[6], np.repeat(x[6, -1:], 9, axis=0))
    x0 = x.copy()
    G.shift_rows(x, s)
    np.testing.assert_array_equal(x, x0)   # a new array; x is left as it was


def test_bad_input_is_a_value_error_naming_the_argument():
    x = np.zeros((3, 5, 1), np.float32)
    with pytest.raises(ValueError, match="x must be an array"):
        G.shift_rows(np.zeros((3, 5)), np.zeros(3, int))
    with pytest.raises(ValueError, match=r"shifts must be \(m,\) = \(3,\)"):
        G.shift_rows(x, np.zeros(2, int))
    with pytest.raises(ValueError, match="shifts must be integers"):
        G.shift_rows(x, np.zeros(3))
    for k in (0, -1, True, 1.5, "2"):
        with pytest.raises(ValueError, match="largest shift k must be an int >= 1"):
            G.Shifts(k)


def _batch(bs=6, t=10, masked=False):
    b = Batch(bs, t, 1, (), np.int64, (3,), np.float32, masked, None)
    b.x[...] = np.random.default_rng(0).standard_normal(b.x.shape)
    return b


def test_the_batch_hook_draws_one_shift_per_sample_and_shifts_the_first_m_rows():
    b = _batch()
    x0 = b.x.copy()
    aug = G.Shifts(2)
    s = aug.draw(np.random.default_rng(5), 1000)
    assert s.shape == (1000,) and set(s.tolist()) == {-2, -1, 0, 1, 2}
    aug.apply(b, 4, s[:4])
    np.testing.assert_array_equal(b.x[4:], x0[4:])   # the padding rows stay
    np.testing.assert_array_equal(b.x[:4], _reference(x0[:4], s[:4]))
    aug.apply(b, 0, s[:0])   # an empty step: nothing
    np.testing.assert_array_equal(b.x[4:], x0[4:])
    padded = _batch(masked=True)
    padded.mask[1, 7] = True   # a padded or missing step: no shifting
    with pytest.raises(ValueError, match="equal-length batches"):
        G.Shifts(1).apply(padded, 3, np.zeros(3, int))
    full = _batch(masked=True)   # a mask with nothing masked (a list of one length)
    x1 = full.x.copy()
    G.Shifts(2).apply(full, 4, s[:4])
    np.testing.assert_array_equal(full.x[:4], _reference(x1[:4], s[:4]))
    assert G.hook(None) is None and G.hook(0) is None and G.hook(3).k == 3


def test_max_shift_is_the_last_stem_layers_stride():
    for t in (8, 16, 17, 24, 40, 63):
        stem = _stem.short(t, t)
        assert G.max_shift(stem) == stem[-1][1] == max(1, -(-t // 16))


def test_a_short_univariate_classifier_shifts_its_training_batches():
    X, y = _series()
    est = TC(**SMALL).fit(X, y)
    assert est.model_.stem == _stem.short(24, 24)
    assert est.augment_shift_ == G.max_shift(est.model_.stem) == 2
    pf = TC(**SMALL).partial_fit(X, y, classes=[0, 1, 2])   # partial_fit alike
    assert pf.augment_shift_ == 2 and pf.model_.stem == est.model_.stem
    Xr, yr = _series(ragged=True, t=40)   # ragged: resampled to 40 steps, then shifted
    est_r = TC(**SMALL).fit(Xr, yr)
    assert est_r.resample_length_ == max(len(x) for x in Xr)
    assert est_r.augment_shift_ == G.max_shift(est_r.model_.stem)


def test_a_list_of_series_of_one_length_fits_on_the_short_path():
    """A list of short univariate series all of one length (ragged input that is not
    ragged) fits with its shifts, as the array does; it raised ValueError ("time
    shifts need equal-length batches") because its batches carry a padding mask."""
    X, y = _series()
    est = TC(**SMALL).fit(list(X), y)
    assert est.augment_shift_ == 2 and est.model_.stem == _stem.short(24, 24)
    proba = est.predict_proba(list(X))
    assert proba.shape == (len(X), 3) and np.isfinite(proba).all()
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-5)


def test_no_shifts_where_the_short_path_does_not_apply():
    X, y = _series()
    for kw in ({"tokenizer": "patch"}, {"stem": ((3, 1),)}, {"patch_len": 2},
               {"instance_norm": "input"}, {"stem": "auto"}):
        assert not hasattr(TC(**SMALL, **kw).fit(X, y), "augment_shift_"), kw
    X2, _ = _series(c=2)   # two channels
    assert not hasattr(TC(**SMALL).fit(X2, y), "augment_shift_")
    Xl, _ = _series(t=80)   # 64+ steps: PPV tokens
    assert not hasattr(TC(**SMALL).fit(Xl, y), "augment_shift_")
    reg = attnx.TransformerRegressor(**SMALL).fit(X, y.astype(float))
    assert not hasattr(reg, "augment_shift_")


def test_the_shifts_change_the_fit_and_it_stays_reproducible(monkeypatch):
    X, y = _series()
    a = TC(**SMALL).fit(X, y).predict_proba(X)
    b = TC(**SMALL).fit(X, y).predict_proba(X)
    np.testing.assert_array_equal(a, b)   # the draws come from random_state
    monkeypatch.setattr(G, "hook", lambda shift: None)   # the same fit without shifts
    plain = TC(**SMALL).fit(X, y)
    assert plain.augment_shift_ == 2   # (the attribute stays; the trainer gets none)
    assert not np.allclose(plain.predict_proba(X), a)


def test_each_training_row_gets_its_samples_shift_and_validation_none(monkeypatch):
    """Every training step's rows get the epoch's shifts of their own samples (one
    draw per sample and epoch), validation batches and predict none."""
    draws, applied = [], []

    class Recorder(G.Shifts):
        def draw(self, rng, n):
            s = super().draw(rng, n)
            draws.append(s)
            return s

        def apply(self, batch, m, shifts):
            applied.append((len(draws), batch.x[:m].copy(), np.array(shifts)))
            super().apply(batch, m, shifts)
    monkeypatch.setattr(G, "hook", lambda shift: Recorder(shift) if shift else None)
    X, y = _series(n=30)
    est = TC(**{**SMALL, "options": {"validation_fraction": 0.2}}).fit(X, y)
    assert len(est.validation_loss_curve_) == SMALL["epochs"]
    n_train = 30 - 6   # ceil(0.2 * 30) held out
    assert len(draws) == SMALL["epochs"] and all(d.shape == (n_train,) for d in draws)
    per_epoch = -(-n_train // SMALL["batch_size"])
    assert len(applied) == SMALL["epochs"] * per_epoch
    for e in range(1, SMALL["epochs"] + 1):
        rows = [a for a in applied if a[0] == e]
        # each sample once per epoch: the shifts used are a permutation of the draws
        used = np.concatenate([s for _, _, s in rows])
        np.testing.assert_array_equal(np.sort(used), np.sort(draws[e - 1]))
    p1 = est.predict_proba(X)
    np.testing.assert_array_equal(p1, est.predict_proba(X))


def test_the_shift_is_kept_by_pickle_save_and_warm_start(tmp_path):
    X, y = _series()
    est = TC(**SMALL).fit(X, y)
    back = pickle.loads(pickle.dumps(est))
    assert back.augment_shift_ == est.augment_shift_
    path = tmp_path / "m.safetensors"
    est.save(path)
    loaded = attnx.load(path)
    assert loaded.augment_shift_ == est.augment_shift_
    np.testing.assert_array_equal(loaded.predict_proba(X), est.predict_proba(X))
    # a warm start keeps training with the fitted shifts, as the pickled copy does
    est.set_params(warm_start=True).fit(X, y)
    back.set_params(warm_start=True).fit(X, y)
    assert est.augment_shift_ == 2
    np.testing.assert_array_equal(est.predict_proba(X), back.predict_proba(X))
