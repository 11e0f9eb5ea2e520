"""Module structure rules of the developers' guide, checked on the source."""
import ast
import pickle
from pathlib import Path

import numpy as np

import attnx
from attnx import estimators, io

PKG = Path(attnx.__file__).parent


def _modules():
    return sorted(p for p in PKG.glob("*.py"))


def test_no_import_runs_back_up_to_the_package_root():
    """No `from . import NAME` of a name the root __init__ defines (only submodules),
    and no `import attnx` / `from attnx import` inside the package."""
    submodules = {p.stem for p in PKG.glob("*.py")} | {p.name.split(".")[0] for p in PKG.glob("*.so")}
    bad = []
    for path in _modules():
        if path.name == "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1 and node.module is None:
                    bad += [f"{path.name}: from . import {a.name}" for a in node.names
                            if a.name not in submodules]
                if node.level == 0 and (node.module or "").split(".")[0] == "attnx":
                    bad.append(f"{path.name}: from {node.module} import ...")
            elif isinstance(node, ast.Import):
                bad += [f"{path.name}: import {a.name}" for a in node.names
                        if a.name.split(".")[0] == "attnx"]
    assert not bad, bad


def test_version_lives_in_a_leaf_module():
    from attnx import _version
    assert attnx.__version__ == _version.__version__
    tree = ast.parse((PKG / "_version.py").read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def test_loading_looks_estimators_up_in_an_explicit_registry():
    assert io._classes() == estimators.ESTIMATORS
    assert set(estimators.ESTIMATORS) == {"AttentionRegressor", "TransformerRegressor",
                                          "AttentionClassifier", "TransformerClassifier"}
    assert "import attnx" not in (PKG / "io.py").read_text()  # no scan of the exports


def test_onnx_and_distributed_use_no_private_estimator_state():
    assert "_target" not in (PKG / "onnx.py").read_text()
    assert "_sequences" not in (PKG / "distributed.py").read_text()


def test_export_spec_names_the_network_and_its_output(rng):
    X = rng.standard_normal((12, 4, 3))
    reg = attnx.AttentionRegressor(epochs=1, d_model=4, random_state=0).fit(X, X.sum(axis=(1, 2)))
    spec = reg.export_spec()
    assert spec.model is reg.model_ and spec.output == "squeeze" and spec.classes is None
    bare = attnx.AttentionRegressor(epochs=1, random_state=0).fit(X, X)
    assert bare.export_spec().output == "y"
    clf = attnx.AttentionClassifier(epochs=1, random_state=0).fit(X, np.arange(12) % 3)
    spec = clf.export_spec()
    assert spec.output == "probabilities" and list(spec.classes) == [0, 1, 2]
