"""The estimators' parameters are declared once (attnx.estimators._hyper.PARAMETERS,
attnx.forecasting._forecaster_params.PARAMETERS): the written-out constructors, the
validation (options key by key), the docstrings and the defaults all agree with it."""
import ast
import inspect
import json
import re
from pathlib import Path

import numpy as np
import pytest

import attnx
from attnx.estimators import _hyper

ROOT = Path(__file__).resolve().parents[2]
CLASSES = [attnx.AttentionRegressor, attnx.TransformerRegressor, attnx.AttentionClassifier,
           attnx.TransformerClassifier]
#: the parameters of 0.1.0 that are gone, with their one spelling now
REMOVED = {"max_iter": "epochs", "learning_rate_init": "lr", "rope": "positional='rope'"}
#: added since 0.1.0 (tests/data/flat_layout/signatures.json), with their defaults
ADDED = {"pretrain": None, "pretrain_epochs": None, "options": None}


def _old_signatures():
    return json.loads((ROOT / "tests" / "data" / "flat_layout" / "signatures.json").read_text())


@pytest.mark.parametrize("cls", CLASSES + [attnx.TransformerForecaster])
def test_each_estimator_takes_at_most_25_parameters(cls):
    assert len(inspect.signature(cls).parameters) <= 25


@pytest.mark.parametrize("cls", CLASSES)
def test_the_constructor_is_the_tables_signature(cls):
    """Names, order, defaults and which take a position, as the table declares them."""
    sig = inspect.signature(cls.__init__).parameters
    got = [(n, p.default, p.kind == p.POSITIONAL_OR_KEYWORD)
           for n, p in sig.items() if n != "self"]
    assert got == _hyper.signature_of(cls.__name__)
    assert list(cls._parameter_constraints) == [n for n, _, _ in got]
    assert set(_hyper.PARAMETERS) <= set(_hyper.Config.__annotations__)   # a validated slot


@pytest.mark.parametrize("cls", CLASSES + [attnx.TransformerForecaster])
def test_the_constructor_is_plain_and_stores_every_argument_unchanged(cls):
    """A def written out in the class's module (no exec, no generated function), whose
    body is one `self.name = name` per parameter, in the signature's order."""
    init = cls.__init__
    source = inspect.getsource(init)
    assert inspect.getsourcefile(init) == inspect.getsourcefile(cls)
    tree = ast.parse(source.strip().replace("\n    ", "\n"))
    fn = tree.body[0]
    assert isinstance(fn, ast.FunctionDef) and fn.name == "__init__"
    names = [n for n in inspect.signature(cls).parameters]
    stored = [(s.targets[0].attr, s.value.id) for s in fn.body]
    assert stored == [(n, n) for n in names]
    marker = object()
    est = cls(**{n: marker for n in names})
    assert all(getattr(est, n) is marker for n in names)


def _table_rows(path, table):
    """How many times each name is declared as a row of `table` in the file at path."""
    tree = ast.parse((ROOT / path).read_text())
    for node in ast.walk(tree):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and node.target.id == table):
            return [k.value for k in node.value.keys]
    raise AssertionError(f"no table {table} in {path}")


def test_each_parameter_and_option_is_declared_exactly_once():
    """One row of the table per name; no other table, TypedDict, docstring entry or
    annotation list of the parameters in the estimators' or forecasters' sources."""
    rows = _table_rows("attnx/estimators/_hyper.py", "PARAMETERS")
    assert len(rows) == len(set(rows)) == len(_hyper.PARAMETERS)
    frows = _table_rows("attnx/forecasting/_forecaster_params.py", "PARAMETERS")
    assert len(frows) == len(set(frows))
    # the modules of the estimators the tables describe (the ensembles have their own)
    sources = {p: (ROOT / "attnx" / p).read_text() for p in (
        "estimators/_hyper.py", "estimators/_docs.py", "estimators/_estimator.py",
        "estimators/classifiers.py", "estimators/regressors.py",
        "forecasting/_forecaster_params.py", "forecasting/forecaster.py")}
    for path, text in sources.items():
        assert "TypedDict" not in text and "exec(" not in text, path
        for name in rows + frows:
            if not path.endswith("_params.py") and not path.endswith("_hyper.py"):
                assert not re.search(rf'"{name}": (Param|_option|Row)\(', text), (name, path)
            # a hand-written numpydoc entry ("    name : ...") would be a second declaration
            assert not re.search(rf"^\s+{name} : ", text, re.M), (name, path)


@pytest.mark.parametrize("cls", CLASSES)
def test_the_defaults_are_those_of_the_release(cls):
    """Every parameter of 0.1.0 (tests/data/flat_layout/signatures.json) keeps its default,
    as a constructor keyword or as a key of options, unless it was a duplicate spelling."""
    old = _old_signatures()[cls.__name__]
    sig = dict((n, d) for n, d, _ in _hyper.signature_of(cls.__name__))
    opts = {n: d for n, (_, d) in _hyper.options_of(cls.__name__).items()}
    assert set(opts).isdisjoint(sig)
    for name, (default, positional) in old.items():
        if name in REMOVED:
            assert name not in sig and name not in opts
            continue
        now = sig[name] if name in sig else opts[name]
        assert repr(now) == default, name
    new = {n: d for n, d in {**sig, **opts}.items() if n not in old}
    assert new == ADDED


@pytest.mark.parametrize("cls", CLASSES)
def test_the_docstring_documents_every_parameter_and_option_from_the_table(cls):
    doc = inspect.getdoc(cls)
    section = doc[doc.index("Parameters\n----------"):doc.index("Notes\n-----")]
    for name, default, _ in _hyper.signature_of(cls.__name__):
        if name == "options":
            continue
        row = _hyper.PARAMETERS[name]
        assert f"\n{name} : {row.rule.describe()}, default=" in section, name
        assert " ".join(row.doc.split()[:4]) in " ".join(section.split()), name
    for name, (row, _) in _hyper.options_of(cls.__name__).items():
        assert f"- {name} ({row.rule.describe()}, default " in section, name


@pytest.mark.parametrize("options,match", [
    ({"betas": (0.9, 1.5)}, r"options\['betas'\]\[1\] must be in \[0, 1\), got 1.5"),
    ({"betas": 0.9}, r"options\['betas'\] must be a pair .* got 0.9"),
    ({"eps": 0}, r"options\['eps'\] must be a finite real number > 0, got 0"),
    ({"lr_schedule": "cosine"}, r"options\['lr_schedule'\] must be one of .*got 'cosine'"),
    ({"shuffle": "yes"}, r"options\['shuffle'\] must be True or False, got 'yes'"),
    ({"label_smoothing": 0.1}, r"options\['label_smoothing'\] is not an option of "
                               r"TransformerRegressor"),
    ({"max_iter": 3}, r"options\['max_iter'\] is not an option"),
    ([("betas", (0.9, 0.99))], r"options must be None or a dict"),
])
def test_options_are_checked_key_by_key_naming_the_key(options, match):
    X = np.random.default_rng(0).normal(size=(8, 4, 2))
    with pytest.raises((ValueError, TypeError), match=match):
        attnx.TransformerRegressor(epochs=1, options=options).fit(X, X[:, 0, 0])


def test_options_reach_the_fit_as_the_keywords_did():
    """An option given is the setting the fit uses; the others keep their defaults."""
    est = attnx.TransformerRegressor(options={"betas": (0.8, 0.95), "max_grad_norm": None})
    cfg = est._config()
    assert cfg.betas == (0.8, 0.95) and cfg.max_grad_norm is None
    assert cfg.lr_schedule == "warmup_cosine" and cfg.decay == "matrices"
    assert est.options == {"betas": (0.8, 0.95), "max_grad_norm": None}   # unchanged
    assert attnx.AttentionRegressor()._config().decay == "all"


def test_options_work_with_clone_and_grid_search():
    sklearn = pytest.importorskip("sklearn")
    from sklearn.base import clone
    from sklearn.model_selection import GridSearchCV
    est = attnx.TransformerRegressor(d_model=8, n_heads=2, n_layers=1, epochs=2,
                                     options={"lr_schedule": "constant"}, random_state=0)
    twin = clone(est)
    assert twin.get_params()["options"] == {"lr_schedule": "constant"}
    assert twin.set_params(options={"tol": 0.1}).options == {"tol": 0.1}
    rng = np.random.default_rng(0)
    X = rng.normal(size=(24, 5, 2))
    y = X[:, :, 0].mean(1)
    grid = [{"lr_schedule": "constant"}, {"lr_schedule": "warmup_cosine", "warmup": 0.2}]
    search = GridSearchCV(est, {"options": grid}, cv=2).fit(X, y)
    assert search.best_params_["options"] in grid
    assert sklearn   # imported for GridSearchCV and clone


def test_validation_checks_the_dependent_settings_after_the_single_ones():
    X = np.zeros((4, 3, 2))
    with pytest.raises(ValueError, match=r"options\['instance_affine'\]=True needs "
                                         r"instance_norm"):
        attnx.TransformerClassifier(options={"instance_affine": True}).fit(X, [0, 1, 0, 1])
    with pytest.raises(ValueError, match="go with loss='pinball'"):
        attnx.TransformerRegressor(options={"quantiles": [0.5]}).fit(X, X[:, 0, :1])
    with pytest.raises(ValueError, match="no parameter table"):
        _hyper.signature_of("TransformerForecaster")


def test_positional_rope_is_the_bare_networks_rotary_flag():
    """rope=True is gone: positional="rope" gives the bare X -> Y network rotary
    positions (the command line's --rope) and a SequenceModel its rotary attention."""
    X = np.random.default_rng(0).normal(size=(6, 5, 4))
    bare = attnx.AttentionRegressor(2, positional="rope", epochs=1, random_state=0).fit(X, X)
    assert isinstance(bare.model_, attnx.MultiHeadAttention) and bare.model_.rope
    assert "rope" not in inspect.signature(attnx.AttentionRegressor).parameters


def test_the_forecaster_is_made_from_its_table_as_before():
    from attnx.forecasting import _forecaster_params as fp
    old = _old_signatures()["TransformerForecaster"]
    sig = inspect.signature(attnx.TransformerForecaster).parameters
    assert {n: [repr(p.default), p.kind == p.POSITIONAL_OR_KEYWORD]
            for n, p in sig.items()} == old
    assert [(n, p.default) for n, p in sig.items()] == [(n, r.default)
                                                         for n, r in fp.PARAMETERS.items()]
    doc = inspect.getdoc(attnx.TransformerForecaster)
    for name, row in fp.PARAMETERS.items():
        assert f"\n{name} : {row.rule.describe()}, default=" in doc, name


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
    own = {n: r.default for n, r in fp.PARAMETERS.items()
           if n not in ("horizon", "verbose", "dtype")}
    assert {n: d for n, d in adapter.items() if n != "past_covariates"} == own


def test_set_params_sets_one_key_of_options_without_touching_the_users_dict():
    given = {"causal": False, "tol": 0.5}
    est = attnx.AttentionRegressor(options=given)
    assert est.set_params(options__causal=True, lr=0.01) is est
    assert est.options == {"causal": True, "tol": 0.5} and est.lr == 0.01
    assert given == {"causal": False, "tol": 0.5}   # the caller's dict is left alone
    assert attnx.AttentionRegressor().set_params(options__tol=0.2).options == {"tol": 0.2}
    with pytest.raises(ValueError, match=r"options\['nonsense'\]"):
        attnx.AttentionRegressor(epochs=1).set_params(options__nonsense=1).fit(
            np.zeros((4, 3, 2)), np.zeros((4, 3, 2)))
    with pytest.raises(ValueError, match="invalid parameter 'causal'.*options__<key>"):
        attnx.AttentionRegressor().set_params(causal=True)


def test_a_search_grid_can_name_a_single_option():
    from sklearn.model_selection import GridSearchCV
    X, Y = attnx.datasets.max_position_task(24, 4, 2, random_state=0)
    search = GridSearchCV(attnx.AttentionRegressor(epochs=2, random_state=0),
                          {"options__causal": [False, True]}, cv=2).fit(X, Y)
    assert [p["options__causal"] for p in search.cv_results_["params"]] == [False, True]
    assert search.best_estimator_.options["causal"] == search.best_params_["options__causal"]
