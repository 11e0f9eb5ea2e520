"""tokenizer="select" (attnx.estimators._select_tokens): the held-out split, the
candidates it fits, the choice and the final fit with it, persistence and bad input."""
import pickle

import numpy as np
import pytest

import attnx
from attnx import io as ax_io
from attnx.estimators import _select_tokens as S
from attnx.layers import _stem

TC = attnx.TransformerClassifier
SMALL = dict(n_heads=2, n_layers=1, d_model=16, batch_size=8, epochs=6, random_state=0)


def _data(n=40, t=24, c=1, seed=0):
    """A bump early (class 0) or late (class 1) over noise."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    X = rng.standard_normal((n, t, c)).astype(np.float32) * 0.3
    for i in range(n):
        at = int(rng.integers(0, t // 2 - 4)) + (t // 2 if y[i] else 0)
        X[i, at:at + 4] += 2.0
    return X, y


def test_split_holds_out_a_quarter_of_each_class_and_keeps_one():
    y = np.array([0] * 12 + [1] * 8 + [2] * 1)
    tr, te = S.split(y, 0)
    assert len(np.intersect1d(tr, te)) == 0 and len(tr) + len(te) == len(y)
    held = np.bincount(y[te], minlength=3)
    assert held.tolist() == [3, 2, 0]   # round(0.25 * n_c), the single series stays
    assert S.split(y, 0)[1].tolist() == te.tolist()   # seeded
    assert S.split(y, 1)[1].tolist() != te.tolist()
    assert S.split(np.arange(S.MIN_SAMPLES - 1) % 2, 0) is None   # too few
    assert S.split(np.arange(30), 0) is None   # no class with two series


def test_select_fits_the_distinct_candidates_and_keeps_the_best():
    X, y = _data()
    est = TC(**SMALL, tokenizer="select").fit(X, y)
    scores = est.tokenizer_scores_
    # univariate, 24 steps: "auto" is the short stem, "patch" and "ppv" differ from it
    assert set(scores) == {"auto", "patch", "ppv"}
    assert all(0.0 <= v <= 1.0 for v in scores.values())
    best = max(scores.values())
    assert est.selected_tokenizer_ == next(c for c in S.CANDIDATES if scores[c] == best)
    # the final model has the chosen tokens, fitted on every series
    same = TC(**SMALL, tokenizer=est.selected_tokenizer_).fit(X, y)
    np.testing.assert_array_equal(est.predict_proba(X), same.predict_proba(X))
    assert est.get_params()["tokenizer"] == "select"   # the parameter stays as given
    assert "_select_now" not in vars(est)


def test_candidates_with_the_same_tokens_as_auto_are_not_refitted():
    X, y = _data(c=2)   # two channels, under 64 steps: "auto" makes raw patches
    est = TC(**SMALL, tokenizer="select").fit(X, y)
    assert set(est.tokenizer_scores_) == {"auto", "ppv"}
    # a stem refuses PPV tokens: only "auto" (= "patch" with the stem) is fitted
    est = TC(**SMALL, tokenizer="select", stem=((3, 1), (4, 2))).fit(X, y)
    assert set(est.tokenizer_scores_) == {"auto"} and est.selected_tokenizer_ == "auto"
    assert est.model_.stem == ((3, 1), (4, 2))


def test_too_few_series_fit_auto_without_candidates():
    X, y = _data(n=S.MIN_SAMPLES - 2)
    est = TC(**SMALL, tokenizer="select").fit(X, y)
    assert est.selected_tokenizer_ == "auto" and est.tokenizer_scores_ == {}
    assert est.model_.stem == _stem.short(24, 24)


def test_choice_persists_and_warm_start_keeps_it(tmp_path):
    X, y = _data()
    est = TC(**SMALL, tokenizer="select").fit(X, y)
    ax_io.save(est, tmp_path / "m")
    back = ax_io.load(tmp_path / "m")
    np.testing.assert_array_equal(back.predict_proba(X), est.predict_proba(X))
    assert back.selected_tokenizer_ == est.selected_tokenizer_
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(again.predict_proba(X), est.predict_proba(X))
    est.set_params(warm_start=True, epochs=1)
    chosen, scores = est.selected_tokenizer_, dict(est.tokenizer_scores_)
    est.fit(X, y)
    assert est.selected_tokenizer_ == chosen and est.tokenizer_scores_ == scores


def test_select_is_for_classifiers_on_one_process():
    X, y = _data()
    with pytest.raises(ValueError, match="tokenizer='select'"):
        attnx.TransformerRegressor(**SMALL, tokenizer="select").fit(X, y.astype(float))
    with pytest.raises(ValueError, match="distributed"):
        TC(**SMALL, tokenizer="select").fit(X, y, comm=object())
    with pytest.raises(ValueError, match="tokenizer must be one of"):
        TC(**SMALL, tokenizer="best").fit(X, y)
