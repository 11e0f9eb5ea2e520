"""The estimators' one table of hyper-parameters (attnx.estimators._hyper.PARAMETERS):
the constructors, their validation and their documentation come from it."""
import inspect
import json
import re
from pathlib import Path

import numpy as np
import pytest

import attnx
from attnx.estimators import _hyper

CLASSES = [attnx.AttentionRegressor, attnx.TransformerRegressor, attnx.AttentionClassifier,
           attnx.TransformerClassifier]


#: hyper-parameters added since that commit, with their defaults (keyword-only)
ADDED = {"pretrain": ["None", False], "pretrain_epochs": ["None", False]}


def test_the_signatures_are_those_of_the_release_before_the_table():
    """Names, defaults and which take a position, as the hand-written constructors of
    commit 36d8184 had them (tests/data/flat_layout/signatures.json, written by it)."""
    old = json.loads((Path(__file__).parents[1] / "data" / "flat_layout" /
                      "signatures.json").read_text())
    for cls in CLASSES:
        now = {n: [repr(p.default), p.kind == p.POSITIONAL_OR_KEYWORD]
               for n, p in inspect.signature(cls).parameters.items()}
        assert {n: v for n, v in now.items() if n not in ADDED} == old[cls.__name__]
        assert {n: now[n] for n in ADDED} == ADDED, cls.__name__


@pytest.mark.parametrize("cls", CLASSES)
def test_the_constructor_validation_and_table_agree(cls):
    names = list(inspect.signature(cls).parameters)
    assert list(cls._parameter_constraints) == names
    assert set(names) <= set(_hyper.PARAMETERS)
    assert list(_hyper.HyperParameters.__annotations__) == list(_hyper.PARAMETERS)  # typed
    assert set(names) <= set(_hyper.Config.__annotations__)   # the validated copy has a slot
    est = cls(**{n: v.default for n, v in inspect.signature(cls).parameters.items()})
    assert est.get_params() == cls().get_params()


@pytest.mark.parametrize("cls", CLASSES)
def test_every_parameter_is_documented_in_the_class_docstring(cls):
    doc = cls.__doc__
    section = doc[doc.index("Parameters"):]
    documented = set()
    for m in re.finditer(r"^\s{4}([\w, ()]+?) :", section, re.M):   # "a, b (alias c) :"
        documented |= set(re.findall(r"\w+", m.group(1))) - {"alias"}
    missing = [n for n in inspect.signature(cls).parameters if n not in documented]
    assert not missing, f"{cls.__name__}: parameters without an entry in the docstring: {missing}"


def test_a_new_row_reaches_the_constructor_and_the_checks(monkeypatch):
    """One row added to the table: the classes built from it take the parameter, with
    its default, and validate it."""
    row = _hyper.Param(_hyper.PositiveInt(), 3, 5, only="classifiers")
    monkeypatch.setitem(_hyper.PARAMETERS, "new_knob", row)
    monkeypatch.setitem(_hyper.HyperParameters.__annotations__, "new_knob", "int")
    sig = dict((n, d) for n, d, _ in _hyper.signature_of("TransformerClassifier"))
    assert sig["new_knob"] == 5
    assert "new_knob" not in dict((n, d) for n, d, _ in _hyper.signature_of("AttentionRegressor"))
    init = _hyper.make_init("AttentionClassifier")
    assert inspect.signature(init).parameters["new_knob"].default == 3

    class Probe:
        pass
    p = Probe()
    init(p, 2, new_knob=7)
    assert p.new_knob == 7 and p.n_heads == 2
    rules = _hyper.parameters_of("AttentionClassifier")
    with pytest.raises(ValueError, match="new_knob"):
        rules["new_knob"].check("new_knob", 0)


def test_validation_checks_the_dependent_settings_after_the_single_ones():
    X = np.zeros((4, 3, 2))
    with pytest.raises(ValueError, match="rope=True is positional='rope'"):
        attnx.TransformerRegressor(rope=True, positional="learned", max_len=3).fit(X, X)
    with pytest.raises(ValueError, match="instance_affine=True needs instance_norm"):
        attnx.TransformerClassifier(instance_affine=True).fit(X, [0, 1, 0, 1])
    with pytest.raises(ValueError, match="go with loss='pinball'"):
        attnx.TransformerRegressor(quantiles=[0.5]).fit(X, X[:, 0, :1])
    with pytest.raises(ValueError, match="no hyper-parameter table"):
        _hyper.signature_of("TransformerForecaster")


def test_the_forecaster_is_made_from_its_table_as_before():
    from attnx.forecasting import _forecaster_params as fp
    old = json.loads((Path(__file__).parents[1] / "data" / "flat_layout" /
                      "signatures.json").read_text())["TransformerForecaster"]
    sig = inspect.signature(attnx.TransformerForecaster).parameters
    assert {n: [repr(p.default), p.kind == p.POSITIONAL_OR_KEYWORD]
            for n, p in sig.items()} == old
    assert list(sig) == list(fp.PARAMETERS) == list(fp.ForecasterParameters.__annotations__)
    doc = attnx.TransformerForecaster.__doc__
    documented = set()
    for m in re.finditer(r"^\s{4}([\w, ()]+?) :", doc[doc.index("Parameters"):], re.M):
        documented |= set(re.findall(r"\w+", m.group(1)))
    assert not [n for n in sig if n not in documented]


@pytest.mark.parametrize("kw,msg", [
    (dict(channel_independent="yes"), "channel_independent must be"),
    (dict(n_heads=0), "n_heads must be >= 1"),
    (dict(steps=0), "steps must be >= 1"),
    (dict(window=2.5), "window must be an int"),
    (dict(method="magic"), "method must be None, one of"),
])
def test_the_forecaster_checks_every_parameter_of_its_table(kw, msg):
    with pytest.raises((ValueError, TypeError), match=msg):
        attnx.TransformerForecaster(3, **kw).fit(np.sin(np.arange(60.0)))


def test_the_sktime_adapter_takes_the_forecasters_parameters():
    """AttnxForecaster (sktime needs a hand-written constructor) keeps the forecaster's
    parameters and defaults, less those sktime gives otherwise (the horizon is fh)."""
    pytest.importorskip("sktime")
    from attnx.forecasting import _forecaster_params as fp
    from attnx.forecasting.sktime import AttnxForecaster
    adapter = {n: p.default for n, p in inspect.signature(AttnxForecaster).parameters.items()}
    own = {n: d for n, (d, _) in fp.PARAMETERS.items()
           if n not in ("horizon", "verbose", "dtype")}
    assert {n: d for n, d in adapter.items() if n != "past_covariates"} == own
