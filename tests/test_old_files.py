"""Files written by attnx before its modules moved into subpackages (commit 36d8184, the
flat layout) load and predict the same bits: model files through attnx.load, pickles
through the old module paths (attnx.estimators, attnx.forecaster, attnx.sequence, ...).
tests/data/flat_layout/make.py wrote them, and the predictions, with that commit."""
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest

import attnx

DATA = Path(__file__).parent / "data" / "flat_layout"
ESTIMATORS = ("clf", "reg", "bare", "fc", "fc_auto")


@pytest.fixture(scope="module")
def want():
    return dict(np.load(DATA / "predictions.npz"))


def _predict(key, est, want):
    if key == "clf":
        return est.predict_proba(want["X"])
    if key.startswith("fc"):
        return est.predict()
    return est.predict(want["X"])


@pytest.mark.parametrize("key", ESTIMATORS)
def test_a_model_file_of_the_flat_layout_loads_and_predicts_the_same(key, want):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = attnx.load(DATA / f"{key}.safetensors")
    np.testing.assert_array_equal(_predict(key, est, want), want[key])
    if key == "fc":
        lo, hi = est.predict_interval(coverage=0.9)
        np.testing.assert_array_equal(lo, want["fc_lo"])
        np.testing.assert_array_equal(hi, want["fc_hi"])


@pytest.mark.parametrize("key", ESTIMATORS)
def test_a_pickle_of_the_flat_layout_loads_and_predicts_the_same(key, want):
    with open(DATA / f"{key}.pkl", "rb") as f:
        est = pickle.load(f)
    assert type(est).__module__.startswith(("attnx.estimators.", "attnx.forecasting."))
    np.testing.assert_array_equal(_predict(key, est, want), want[key])


def test_pickled_layers_of_the_flat_layout_load_through_the_old_module_paths(want):
    for key, x in (("seq", want["x2"]), ("mha", want["x8"])):
        with open(DATA / f"{key}.pkl", "rb") as f:
            m = pickle.load(f)
        assert type(m).__module__.startswith("attnx.layers.")
        np.testing.assert_array_equal(m.forward(x.astype(m.dtype), grad=False), want[key])


def test_the_old_module_paths_are_the_modules_at_their_new_places():
    import importlib
    for old, new in attnx.MOVED.items():
        a = importlib.import_module(f"attnx.{old}")
        assert a is importlib.import_module(f"attnx.{new}") is getattr(attnx, old)
        assert a.__spec__.name == f"attnx.{new}"   # its own spec, not the old path's
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("attnx.no_such_module")
