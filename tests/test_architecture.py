"""Module structure rules of the developers' guide, checked on the source."""
import ast
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

import attnx
from attnx import estimators, io
from attnx.forecasting import forecaster

PKG = Path(attnx.__file__).parent
#: the checkout's sources: an installed attnx ships no .pyx files
SRC = Path(__file__).resolve().parent.parent / "attnx"


def _modules():
    return sorted(PKG.rglob("*.py"))


def _modname(path):
    """attnx/layers/sequence.py -> attnx.layers.sequence; a package's __init__ -> the package
    (of the package under test, or of the checkout's sources for a .pyx)"""
    root = SRC.parent if path.is_relative_to(SRC) else PKG.parent
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


#: every module of the package, the compiled ones included (named by their .pyx)
MODULES = {_modname(p) for p in _modules()} | {_modname(p) for p in SRC.rglob("*.pyx")}


def _targets(path, node):
    """The attnx modules an import statement (ast.Import / ast.ImportFrom) names."""
    me = _modname(path)
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name.split(".")[0] == "attnx"}
    if node.level == 0:
        if (node.module or "").split(".")[0] != "attnx":
            return set()
        base = node.module
    else:
        here = me.split(".") if path.name == "__init__.py" else me.split(".")[:-1]
        base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else []))
    out = set()
    for a in node.names:
        out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base)
    return out


def test_no_import_runs_back_up_to_the_package_root():
    """No module of the package imports the package root (`import attnx`, `from attnx
    import`, `from .. import NAME` of a name the root __init__ defines), at module level
    or inside a function: the root only gathers the public names."""
    bad = []
    for path in _modules():
        if _modname(path) == "attnx":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and "attnx" in _targets(path, node):
                bad.append(f"{path.relative_to(PKG)}:{node.lineno}")
    assert not bad, bad


#: the layers, bottom first: a module imports from its own layer and the ones below only
#: (the root's modules, attnx/*.py, sit above them all)
LAYERS = ("kernels", "runtime", "layers", "distributed", "estimators", "forecasting", "io",
          "testing")


def _rank(mod):
    parts = mod.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else len(LAYERS)


def test_every_subpackage_is_a_layer():
    subpackages = {p.parent.name for p in PKG.glob("*/__init__.py")}
    assert subpackages == set(LAYERS)


def test_imports_run_down_the_layers():
    """Type-only imports (`if TYPE_CHECKING:`) and function-level ones count too."""
    up = [f"{a} -> {b}" for a, deps in _import_graph(True).items() for b in deps
          if _rank(b) > _rank(a)]
    assert not up, up


def test_the_rank_of_a_module_follows_its_folder():
    assert _rank("attnx.kernels._ops") < _rank("attnx.runtime._threads") < _rank("attnx.layers.sequence")
    assert _rank("attnx.estimators._training") < _rank("attnx.forecasting.forecaster") < _rank("attnx.io")
    assert _rank("attnx.plot") == _rank("attnx") == len(LAYERS)


def test_version_lives_in_a_leaf_module():
    from attnx.runtime import _version
    assert attnx.__version__ == _version.__version__
    tree = ast.parse((PKG / "runtime" / "_version.py").read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def test_loading_looks_estimators_up_in_an_explicit_registry():
    assert io._classes() == {**estimators.ESTIMATORS, **forecaster.FORECASTERS}
    assert set(estimators.ESTIMATORS) == {"AttentionRegressor", "TransformerRegressor",
                                          "AttentionClassifier", "TransformerClassifier"}
    assert forecaster.FORECASTERS == {"TransformerForecaster": attnx.TransformerForecaster}
    assert "import attnx" not in (PKG / "io" / "__init__.py").read_text()  # no scan of the exports


def test_onnx_and_distributed_use_no_private_estimator_state():
    assert "_target" not in (PKG / "io" / "onnx.py").read_text()
    assert "_sequences" not in (PKG / "distributed" / "__init__.py").read_text()


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


def _same_forward(a, b, rng, f):
    x = rng.standard_normal((2, 5, f)).astype(a.dtype)
    np.testing.assert_array_equal(a.forward(x, grad=False), b.forward(x, grad=False))


def test_every_model_pickles_with_its_configuration_and_weights(rng):
    models = [attnx.MultiHeadAttention(8, 2),
              attnx.MultiHeadAttention(8, 2, causal=True, bias=True, rope=True,
                                       dtype=np.float64, random_state=1, input_grad=False),
              attnx.Transformer(8, 2),
              attnx.Transformer(8, 4, 3, 16, bias=True, dtype=np.float64, random_state=2,
                                attention="dense"),
              attnx.SequenceModel(3, 8, 2, 2, 4, pooling="mean", norm="pre", random_state=3)]
    for m in models:
        back = pickle.loads(pickle.dumps(m))
        assert type(back) is type(m) and back.get_config() == m.get_config()
        assert back.input_grad == m.input_grad
        np.testing.assert_array_equal(back.params.flat, m.params.flat)
        _same_forward(m, back, rng, getattr(m, "n_features", m.d_model))


def test_a_layer_of_a_stack_pickles_as_a_layer_of_its_own(rng):
    t = attnx.Transformer(8, 2, 2, bias=True, random_state=0)
    layer = pickle.loads(pickle.dumps(t.attn[1]))
    assert layer.params.flat.size == attnx.MultiHeadAttention.n_params(8, True)
    for name, w in t.attn[1].params.items():
        np.testing.assert_array_equal(layer.params[name], w)
    _same_forward(t.attn[1], layer, rng, 8)


def test_one_size_table_per_model_agrees_with_the_built_model():
    cases = [attnx.MultiHeadAttention(12, 3, bias=b) for b in (False, True)]
    cases += [attnx.Transformer(8, 2, n, dh, bias=b) for n, dh, b in ((1, 8, False),
                                                                        (3, 5, True))]
    cases += [attnx.SequenceModel(3, 8, 2, n, k, d_hidden=dh, norm=norm, bias=b,
                                  positional=pos, max_len=7)
              for n, k, dh, norm, b, pos in ((1, 1, None, None, True, "none"),
                                             (2, 3, 5, "pre", False, "learned"),
                                             (3, 2, 16, "pre", True, "sinusoidal"))]
    for m in cases:
        assert type(m).config_n_params(m.get_config()) == m.params.flat.size
    sm = cases[-1]
    sizes = {name: int(np.prod(shape)) for name, shape in sm.param_layout(sm.get_config())}
    for name, w in sm.params.items():
        if "layers" not in name or name.split(".")[2] not in ("Wq", "Wk", "Wv", "Wo",
                                                              "bq", "bk", "bv", "bo"):
            assert sizes[name] == w.size, name


# ---- the import graph, module sizes and kernel entries ---------------------------------
def _is_type_checking(test):
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _import_graph(type_only_too):
    """module -> the attnx modules it imports (module level and inside functions;
    `if TYPE_CHECKING:` blocks only when type_only_too)."""
    graph = {}
    for path in _modules():
        tree = ast.parse(path.read_text())
        skip = set()
        if not type_only_too:
            for node in ast.walk(tree):
                if isinstance(node, ast.If) and _is_type_checking(node.test):
                    skip |= {id(n) for child in node.body for n in ast.walk(child)}
        out = set()
        for node in ast.walk(tree):
            if id(node) not in skip and isinstance(node, (ast.Import, ast.ImportFrom)):
                out |= _targets(path, node)
        me = _modname(path)
        # a module imports its package's __init__ whenever it is imported: not an arrow
        graph[me] = {t for t in out if t != me and not me.startswith(t + ".")}
    return graph


def _cycles(graph):
    """The strongly connected sets of more than one module (Tarjan, iteratively)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(root):
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next((w for w in it if w in graph), None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_cycles():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"f"}, "f": {"e"}, "g": set()}
    assert sorted(map(sorted, _cycles(g))) == [["a", "b", "c"], ["e", "f"]]


def test_no_runtime_import_cycle():
    """No module imports one that imports it back, at module level or inside a function
    (a function-level import that closes a circle is a cycle too)."""
    assert _cycles(_import_graph(False)) == []


def test_no_type_only_import_cycle():
    """No circle closed by `if TYPE_CHECKING:` imports either: a helper of a model takes
    what it needs of the model explicitly instead of importing the model for its type."""
    assert _cycles(_import_graph(True)) == []


#: a guard against a module holding several things, not a reason to split one that holds
#: one (the model-layer redesign joins files that were split only to stay under 600)
MAX_MODULE_LINES = 1200


def test_modules_stay_under_the_size_limit():
    sizes = {str(p.relative_to(PKG)): len(p.read_text().splitlines()) for p in _modules()}
    sizes.update({str(p.relative_to(SRC)): len(p.read_text().splitlines())
                  for p in sorted(SRC.rglob("*.pyx"))})
    assert len(sizes) > 80 and "layers/sequence.py" in sizes   # every module is measured
    over = {n: k for n, k in sizes.items() if k > MAX_MODULE_LINES}
    assert not over, f"over {MAX_MODULE_LINES} lines: {over}"


MAX_KERNEL_ARGS = 12
#: BLAS-shaped entries keep BLAS's own argument list
BLAS_SHAPED = {("_blas.pyx", "gemm"), ("_ops.pyx", "pgemm"), ("_seq.pyx", "gemm"),
               ("_testing.pyx", "gemm_into")}
def _count_args(text):
    """Arguments of a parameter list: its top-level commas (floating[:, ::1] x is one)."""
    n, depth, cur = 0, 0, ""
    for ch in text + ",":
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            n += bool(cur.strip())
            cur = ""
        else:
            cur += ch
    return n


def test_arguments_are_counted_at_the_top_level():
    assert _count_args("floating[:, ::1] x, const double[:, :, ::1] y, int n") == 3
    assert _count_args("") == 0 and _count_args("a, b,") == 2


def _kernel_entries():
    import re
    sig = re.compile(r"^\s*(?:cp?def|def)\s+(?:[\w\[\], *]+\s+)?(\w+)\s*\(([^)]*)\)", re.M)
    for path in sorted(SRC.rglob("*.pyx")):
        for m in sig.finditer(path.read_text()):
            yield (path.name, m.group(1)), _count_args(m.group(2))


def test_kernel_entries_take_few_arguments():
    entries = dict(_kernel_entries())
    assert ("_mlp.pyx", "mlp_forward") in entries and len(entries) > 50   # the parser works
    wide = {k: n for k, n in entries.items() if n > MAX_KERNEL_ARGS and k not in BLAS_SHAPED}
    assert not wide, f"kernel entries over {MAX_KERNEL_ARGS} arguments: {wide}"


# ---- no compatibility code for unreleased formats; tests/ stays the tests' own -----------
REPO = SRC.parent
TESTS = Path(__file__).resolve().parent


def _docstrings(tree):
    return {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)}


def _identifiers(tree):
    """(name, line) of every name a module defines, assigns, imports or reads."""
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            yield n.id, n.lineno
        elif isinstance(n, ast.Attribute):
            yield n.attr, n.lineno
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield n.name, n.lineno
        elif isinstance(n, ast.arg):
            yield n.arg, n.lineno
        elif isinstance(n, ast.alias):
            yield (n.asname or n.name).split(".")[-1], getattr(n, "lineno", 0)


def test_no_name_in_the_package_starts_with_legacy():
    bad = [f"{p.relative_to(PKG)}:{line} {name}" for p in _modules()
           for name, line in _identifiers(ast.parse(p.read_text()))
           if name.lstrip("_").upper().startswith("LEGACY")]
    for p in list(SRC.rglob("*.pyx")) + list(SRC.rglob("*.pxd")):
        bad += [f"{p.relative_to(SRC)}: {m}" for m in re.findall(r"\b_*LEGACY\w*", p.read_text(),
                                                                   re.I)]
    assert not bad, bad


def _python(code):
    env = dict(os.environ, PYTHONPATH=str(PKG.parent))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=str(TESTS), timeout=300)


def test_importing_attnx_installs_no_import_hook_and_imports_no_torch():
    """sys.meta_path and sys.path_hooks are as before `import attnx`; the old module paths
    of the flat layout (attnx.sequence, ...) are gone; torch is imported by neither attnx
    nor attnx.testing's modules (the twin, the reference pass, the NumPy kernels) until
    the twin is used."""
    r = _python("import sys, importlib\n"
                "before = (list(sys.meta_path), list(sys.path_hooks))\n"
                "import attnx, attnx.testing.torch_twin, attnx.testing.reference_pass\n"
                "import attnx.testing.numpy_kernels\n"
                "assert (list(sys.meta_path), list(sys.path_hooks)) == before, "
                "(before, sys.meta_path, sys.path_hooks)\n"
                "assert 'torch' not in sys.modules, 'torch imported'\n"
                "for old in ('sequence', 'attention', 'forecaster', 'onnx', 'losses'):\n"
                "    try:\n"
                "        importlib.import_module('attnx.' + old)\n"
                "    except ModuleNotFoundError:\n"
                "        continue\n"
                "    raise AssertionError('attnx.' + old + ' still imports')\n"
                "print('OK')\n")
    assert r.returncode == 0 and r.stdout.strip() == "OK", r.stdout + r.stderr


def _test_helper_modules():
    """The module names a script would import from tests/ (its helpers and test files)."""
    return {p.stem for p in TESTS.rglob("*.py")} - {"__init__"}


def _reaches_into_tests(path):
    """Lines of a script that import a module of tests/ or name the tests/ folder (to put
    it on sys.path): every string but docstrings that is the path component "tests"."""
    tree = ast.parse(path.read_text())
    helpers, docs, bad = _test_helper_modules(), _docstrings(tree), []
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            bad += [f"{n.lineno}: import {a.name}" for a in n.names
                    if a.name.split(".")[0] in helpers | {"tests"}]
        elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module \
                and n.module.split(".")[0] in helpers | {"tests"}:
            bad.append(f"{n.lineno}: from {n.module} import ...")
        elif (isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
              and re.search(r"(^|[/\\])tests([/\\]|$)", n.value)):
            bad.append(f"{n.lineno}: {n.value!r}")
    return bad


def test_examples_and_benchmarks_do_not_reach_into_tests():
    """What they share with the tests (the PyTorch twin) lives in attnx.testing."""
    scripts = [p for d in ("examples", "benchmarks") for p in sorted((REPO / d).rglob("*.py"))]
    assert len(scripts) > 10, "no examples/ or benchmarks/ beside this tests/ folder"
    bad = {str(p.relative_to(REPO)): b for p in scripts if (b := _reaches_into_tests(p))}
    assert not bad, bad


def test_the_tests_folder_finder_finds_what_it_should(tmp_path):
    p = tmp_path / "script.py"
    p.write_text('"""Uses tests/ helpers."""\nimport os, sys\n'
                 'sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))\n'
                 "from gradcheck import x\nimport reference\nfrom attnx import testing\n")
    assert sorted(b.split(":")[0] for b in _reaches_into_tests(p)) == ["3", "4", "5"]


# ---- one production path per model ---------------------------------------------------
#: the modules SequenceModel runs on (its stages' helpers); the attention layer's own
#: modules and Transformer's are not among them
SEQUENCE_MODULES = ("sequence.py", "_sequence_blocks.py", "_sequence_buffers.py",
                    "_sequence_params.py", "_stem.py", "_instance_norm.py", "_model_plan.py",
                    "_positions.py")
#: the calls of a layer-by-layer pass: the row, MLP, embedding and pooling kernels one
#: stage at a time, and the attention layer's buffer-level entries
#: (attnx.testing.reference_pass makes them; the compiled pass makes them in C)
PER_LAYER_CALLS = {"linear_forward", "linear_backward", "layernorm_forward",
                   "layernorm_backward", "positions_backward", "pool_forward", "pool_backward",
                   "max_pool_forward", "max_pool_backward", "cls_pool_forward",
                   "cls_pool_backward", "cls_forward", "cls_backward", "mlp_forward",
                   "mlp_backward", "silu_forward", "silu_backward", "masked_add", "add_sub",
                   "dropout_mask", "_forward_buffers", "_backward_buffers"}


def _second_paths(tree, per_layer_calls=True):
    """(line, what) of a module's code that could run a model beside its compiled pass: a
    `_k` kernel attribute (kernels swapped per model), a function `applies` (a test of
    whether the compiled pass may run), a per-layer kernel call, or a build of the
    compiled pass (stack_for) under a condition."""
    parents = {id(c): n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and n.attr == "_k":
            out.append((n.lineno, "_k"))
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "applies":
            out.append((n.lineno, "applies"))
        elif isinstance(n, ast.Call):
            f = n.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if per_layer_calls and name in PER_LAYER_CALLS:
                out.append((n.lineno, name))
            elif name == "stack_for":
                up = parents.get(id(n))
                while up is not None and not isinstance(up, (ast.FunctionDef, ast.Module)):
                    if isinstance(up, (ast.If, ast.IfExp, ast.Try, ast.While, ast.For)):
                        out.append((n.lineno, "conditional stack_for"))
                        break
                    up = parents.get(id(up))
    return sorted(out)


def test_second_path_finder_finds_what_it_should():
    planted = ("self._k = kernels\n"
               "def applies(m, b):\n    return True\n"
               "def forward(m):\n"
               "    k.linear_forward(x, w, b, y)\n"
               "    if fast:\n        comp = _sequence_blocks.stack_for(m, b)\n"
               "    comp = stack_for(m, b)\n")
    assert [w for _, w in _second_paths(ast.parse(planted))] == [
        "_k", "applies", "linear_forward", "conditional stack_for"]
    assert _second_paths(ast.parse("def f(m):\n    stack_for(m)\n")) == []


def test_sequence_model_has_one_path():
    """The compiled whole pass is SequenceModel's only path: its modules swap no kernels
    (`_k`), test no `applies`, call no per-layer kernel and build the pass
    unconditionally; the layer-by-layer reference lives in attnx.testing.reference_pass.
    No module of attnx/layers swaps kernels or has an `applies` either."""
    layers = PKG / "layers"
    missing = [n for n in SEQUENCE_MODULES if not (layers / n).exists()]
    assert not missing, f"SEQUENCE_MODULES names modules that are gone: {missing}"
    found = {}
    for path in sorted(layers.glob("*.py")):
        hits = _second_paths(ast.parse(path.read_text()),
                             per_layer_calls=path.name in SEQUENCE_MODULES)
        if hits:
            found[path.name] = hits
    assert not found, found
    calls = [n for n in ast.walk(ast.parse((layers / "sequence.py").read_text()))
             if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "stack_for"]
    assert len(calls) == 2, "forward and backward each build the compiled pass"


def test_the_panel_season_is_chosen_in_one_place():
    """TransformerForecaster and attnx.forecasting.dask choose a panel's season and
    periods through attnx.forecasting._panel_season (statistics that merge exactly),
    never by calling the season detection on the series themselves: one process and a
    cluster then cannot drift apart."""
    direct = {"detect", "longer_periods", "_mean_acf", "season_from", "longer_from"}
    bad = []
    for path in sorted((PKG / "forecasting").glob("*.py")):
        if not (path.name in ("forecaster.py", "dask.py", "_panel_parts.py")
                or path.name.startswith("_forecaster_")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr in direct
                    and isinstance(node.value, ast.Name) and node.value.id == "_season"):
                bad.append(f"{path.name}:{node.lineno} _season.{node.attr}")
    assert not bad, bad
