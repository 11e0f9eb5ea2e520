"""The fit plan (attnx.estimators._plan): one frozen object of a fit's data-dependent
choices, kept as plan_; after fit an estimator holds only its hyper-parameters and
fitted attributes; tokenizer="select" compares candidate plans without re-entering fit;
saved, pickled and older files carry the plan."""
import dataclasses
import pickle
from pathlib import Path

import numpy as np
import pytest

import attnx
from attnx.estimators import _plan, _state
from attnx.estimators import _model_file
from attnx.estimators._plan import FitPlan
from attnx.layers import _stem

TC, TR = attnx.TransformerClassifier, attnx.TransformerRegressor
AC, AR = attnx.AttentionClassifier, attnx.AttentionRegressor
TINY = dict(n_heads=2, d_model=8, batch_size=8, epochs=2, random_state=0)


def _data(n=24, t=24, c=1, seed=0, ragged=False):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, t, c))
    y = np.arange(n) % 2
    x[y == 1, t // 3:t // 3 + 4] += 2.0
    if ragged:
        return [x[i, :t // 2 + i % (t // 2)] for i in range(n)], y
    return x, y


def _only_parameters_and_fitted(est):
    """The names in vars(est) that are neither a hyper-parameter nor a fitted attribute
    (a public name ending in one "_")."""
    params = set(est.get_params())
    return sorted(k for k in vars(est) if k not in params and not (
        k.endswith("_") and not k.startswith("_") and not k.endswith("__")))


def _fit_warm(est, X, y):
    est.fit(X, y)
    return est.set_params(warm_start=True).fit(X, y)


# (name, estimator, data, how it is fitted)
X1, Y1 = _data()
XL, YL = _data(t=72)
XR, YR = _data(ragged=True)
XM, YM = _data(c=3)
XS, YS = _data(n=40)
CASES = {
    "auto_short_stem": (TC(**TINY), X1, Y1),
    "auto_ppv": (TC(**TINY), XL, YL),
    "auto_resampled": (TC(**TINY), XR, YR),
    "ppv": (TC(**TINY, tokenizer="ppv"), XM, YM),
    "patch": (TC(**TINY, tokenizer="patch", patch_len=None), XM, YM),
    "select": (TC(**TINY, tokenizer="select"), XS, YS),
    "stem_auto": (TC(**TINY, stem="auto"), XL, YL),
    "instance_norm": (TC(**TINY, instance_norm="input"), XM, YM),
    "pretrain": (TC(**TINY, pretrain="masked", options={"pretrain_epochs": 1}), XM, YM),
    "early_stopping": (TC(**TINY, options={"early_stopping": True, "validation_fraction": 0.25}), XM, YM),
    "attention_classifier": (AC(**TINY), XM, YM),
    "per_position_labels": (AC(**TINY), XM, (XM[:, :, 0] > 0).astype(int)),
    "regressor": (TR(**TINY), XM, XM[:, -1, :]),
    "regressor_epochs_none": (TR(**{**TINY, "epochs": None}), XS[:, :8], XS[:, -1, 0]),
    "regressor_per_position": (TR(**TINY), XM, np.cumsum(XM[:, :, :1], axis=1)),
    "bare_regressor": (AR(n_heads=1, epochs=2, random_state=0), XM, np.roll(XM, 1, axis=1)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_after_fit_an_estimator_holds_only_parameters_and_fitted_attributes(name):
    est, X, y = CASES[name]
    est = type(est)(**est.get_params())   # a fresh one: each run fits anew
    est.fit(X, y)
    assert _only_parameters_and_fitted(est) == [], name
    assert isinstance(est.plan_, FitPlan)
    est.predict(X)
    assert _only_parameters_and_fitted(est) == [], name   # predict leaves nothing either


@pytest.mark.parametrize("how", ["warm_start", "partial_fit", "pickle", "load"])
def test_refits_and_restored_estimators_hold_nothing_else(how, tmp_path):
    est = TC(**TINY)
    if how == "warm_start":
        _fit_warm(est, X1, Y1)
    elif how == "partial_fit":
        est.partial_fit(X1, Y1, classes=[0, 1]).partial_fit(X1, Y1)
    elif how == "pickle":
        est = pickle.loads(pickle.dumps(est.fit(X1, Y1)))
    else:
        est.fit(X1, Y1).save(tmp_path / "m.safetensors")
        est = attnx.load(tmp_path / "m.safetensors")
    assert _only_parameters_and_fitted(est) == []
    est.predict(X1)
    assert _only_parameters_and_fitted(est) == []


def test_the_plan_is_frozen_printable_and_holds_the_choices():
    est = TC(**TINY).fit(XR, YR)   # ragged univariate: resampled, short stem, shifts
    plan = est.plan_
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.patch_len = 3
    text = repr(plan)
    for field in dataclasses.fields(FitPlan):
        assert f"{field.name}=" in text
    t_max = max(len(x) for x in XR)
    assert plan.resample_length == t_max == est.resample_length_
    assert plan.stem == _stem.short(t_max, t_max) == est.model_.stem
    assert plan.augment_shift == est.augment_shift_ == 2 and plan.channels == 1
    assert plan.epochs == TINY["epochs"] and plan.network == est._model_spec()
    ppv = TC(**TINY).fit(XL, YL).plan_
    assert ppv.tokenizer == "ppv" and "PPVTokens(channels=1" in repr(ppv)


def test_predict_reads_the_plan():
    est = TC(**TINY, tokenizer="patch", patch_len=5).fit(X1, Y1)   # 24 steps: a partial patch
    before = est.predict_proba(X1)
    est.plan_ = dataclasses.replace(est.plan_, patch_fill="zero")
    assert not np.array_equal(est.predict_proba(X1), before)


def test_a_warm_start_keeps_the_plan_but_its_epochs():
    est = TC(**TINY).fit(XM, YM)
    first = est.plan_
    est.set_params(warm_start=True, epochs=3).fit(XM, YM)
    assert est.plan_ == dataclasses.replace(first, epochs=3) and est.n_iter_ == 5


def test_select_compares_candidate_plans_without_reentering_fit(monkeypatch):
    fits, trained = [], []
    real_fit, real_train = TC.fit, TC._train_planned

    def fit(self, *a, **k):
        fits.append(self)
        return real_fit(self, *a, **k)

    def train(self, planned, *a, **k):
        trained.append(planned.plan)
        return real_train(self, planned, *a, **k)
    monkeypatch.setattr(TC, "fit", fit)
    monkeypatch.setattr(TC, "_train_planned", train)
    est = TC(**TINY, tokenizer="select").fit(XS, YS)
    assert fits == [est]   # the candidates are not fitted through fit
    # each candidate trained once (plans making "auto"'s tokens are not), then the fit
    assert len(trained) == len(est.tokenizer_scores_) + 1
    assert all(not p.same_tokens(trained[0]) for p in trained[1:-1])
    assert trained[-1] is not trained[0] and est.plan_.same_tokens(
        trained[list(est.tokenizer_scores_).index(est.selected_tokenizer_)])


def test_saved_and_pickled_estimators_carry_the_plan(tmp_path):
    for est, X, y in (CASES["ppv"], CASES["auto_resampled"], CASES["bare_regressor"]):
        est = type(est)(**est.get_params()).fit(X, y)
        est.save(tmp_path / "m.safetensors")
        _, config = _model_file.read(tmp_path / "m.safetensors")
        assert config["attributes"]["plan_"]["kind"] == "plan"
        for back in (attnx.load(tmp_path / "m.safetensors"), pickle.loads(pickle.dumps(est))):
            assert back.plan_ == est.plan_
            np.testing.assert_array_equal(np.asarray(back.predict(X), dtype=float),
                                          np.asarray(est.predict(X), dtype=float))


def test_a_stored_plan_that_does_not_fit_is_refused():
    est = TC(**TINY, tokenizer="patch").fit(XM, YM)
    arrays, config = _state.get_state(est, portable=True)
    bad = dict(config, attributes=dict(config["attributes"]))
    rec = dict(bad["attributes"]["plan_"]["value"])
    bad["attributes"]["plan_"] = {"kind": "plan", "value": {**rec, "patch_len": 0}}
    with pytest.raises(_state.StateError, match="patch_len"):
        _state.new_from_state(arrays, bad, {"TransformerClassifier": TC})
    other = {**rec, "network": {**rec["network"], "d_model": 16}}
    bad["attributes"]["plan_"] = {"kind": "plan", "value": other}
    with pytest.raises(_state.StateError, match="no fit plan that describes the stored model"):
        _state.new_from_state(arrays, bad, {"TransformerClassifier": TC})
    rec.pop("epochs")
    bad["attributes"]["plan_"] = {"kind": "plan", "value": rec}
    with pytest.raises(_state.StateError, match="plan"):
        _state.new_from_state(arrays, bad, {"TransformerClassifier": TC})


def test_the_choices_are_plain_functions_of_settings_and_data():
    """The rules read (settings, data) and return a plan part: no estimator involved."""
    from attnx import distributed
    from attnx.estimators import _sequences as seqs
    x, y = _data(t=30)
    data = seqs.Data(x.astype(np.float32), None, y, None, False)
    local = distributed.Local()
    assert _plan.auto_stem(data, False, True, local) == _stem.auto(30, 30)
    assert _plan.auto_stem(data, True, True, local) is None   # per position: none
    assert _plan.short_stem(data, local) == _stem.short(30, 30)
    assert _plan.resample_length(data, local) is None   # equal lengths
    est = TC(**TINY)
    cfg = est._config()
    cfg.patch_len = 1
    assert _plan.patch_length(cfg, None, data, False, True, False, False, local) == 1
    cfg.patch_len = None
    assert _plan.patch_length(cfg, None, data, False, True, False, False, local) == 2
