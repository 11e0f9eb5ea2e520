"""layout="nct": aeon's / sktime's (n_cases, n_channels, n_timepoints) input."""
import numpy as np
import pytest

import attnx

SMALL = dict(d_model=8, n_heads=2, n_layers=1, epochs=3, batch_size=8, random_state=0)


def _data(n=20, t=9, c=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, t, c)).astype(np.float32)
    y = (X[:, :, 0].sum(axis=1) > 0).astype(int)
    return X, y


@pytest.mark.parametrize("cls", [attnx.TransformerClassifier, attnx.AttentionClassifier])
def test_nct_dense_is_the_transposed_ntc_fit(cls):
    X, y = _data()
    Xc = np.ascontiguousarray(X.transpose(0, 2, 1))
    kw = {k: v for k, v in SMALL.items() if k != "n_layers" or cls is attnx.TransformerClassifier}
    a = cls(**kw).fit(X, y)
    b = cls(**kw, layout="nct").fit(Xc, y)
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(Xc))
    assert a.n_features_in_ == b.n_features_in_ == 3
    assert b.score(Xc, y) == a.score(X, y)
    wa, wb = a.attention_weights(X), b.attention_weights(Xc)
    for u, v in zip(wa, wb):
        np.testing.assert_array_equal(u, v)


def test_nct_ragged_list_of_channel_major_arrays():
    rng = np.random.default_rng(1)
    Xs = [rng.standard_normal((t, 2)) for t in (5, 8, 6, 7, 5, 8)]
    y = np.array([0.5, 1.0, -1.0, 0.0, 2.0, 1.5])
    a = attnx.TransformerRegressor(**SMALL).fit(Xs, y)
    b = attnx.TransformerRegressor(**SMALL, layout="nct").fit([x.T for x in Xs], y)
    np.testing.assert_array_equal(a.predict(Xs), b.predict([x.T for x in Xs]))


def test_nct_does_not_touch_the_callers_array_and_survives_save(tmp_path):
    X, y = _data()
    Xc = np.ascontiguousarray(X.transpose(0, 2, 1))
    keep = Xc.copy()
    est = attnx.TransformerClassifier(**SMALL, layout="nct").fit(Xc, y)
    np.testing.assert_array_equal(Xc, keep)
    est.save(tmp_path / "m.attnx")
    again = attnx.load(tmp_path / "m.attnx")
    assert again.get_params()["layout"] == "nct"
    np.testing.assert_array_equal(again.predict_proba(Xc), est.predict_proba(Xc))


def test_layout_errors_name_the_argument():
    X, y = _data()
    with pytest.raises(ValueError, match="layout must be one of"):
        attnx.TransformerClassifier(layout="NCT").fit(X, y)
    with pytest.raises(ValueError, match=r"\(n_cases, n_channels, n_timepoints\)"):
        attnx.TransformerClassifier(**SMALL, layout="nct").fit(X[:, :, 0], y)
    est = attnx.TransformerClassifier(**SMALL, layout="nct").fit(X.transpose(0, 2, 1), y)
    with pytest.raises(ValueError, match="must have 3 channels"):
        est.predict(X[:, :, :2])       # (n, 9, 2) in nct: 9 channels
    with pytest.raises(ValueError, match=r"2-D array \(n_channels, n_timepoints\)"):
        attnx.TransformerClassifier(**SMALL, layout="nct").fit([np.ones(4), np.ones(5)], [0, 1])
