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
SRC = Path(__file__).resolve().parents[2] / "attnx"


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
    """Arguments a caller passes in a parameter list: its top-level commas
    (floating[:, ::1] x is one), a method's self aside."""
    return sum(p.split("=")[0].split()[-1:] != ["self"] for p in _split_args(text))


def test_arguments_are_counted_at_the_top_level():
    assert _count_args("floating[:, ::1] x, const double[:, :, ::1] y, int n") == 3
    assert _count_args("") == 0 and _count_args("a, b,") == 2
    assert _count_args("self, int n=max(1, 2), tuple t=(1, 2)") == 2


def _entries_of(text):
    """(kind, name, parameter list, body) of every function a .pyx source defines
    (kind: def, cpdef or cdef; a cdef class's __init__ is a def); the body is the
    indented block under the signature."""
    import re
    head = re.compile(r"^([ \t]*)(cpdef|cdef|def)[ \t]+(?:[\w\[\], *]+[ \t]+)?(\w+)[ \t]*\(",
                      re.M)
    for m in head.finditer(text):
        i, depth = m.end(), 1
        while depth and i < len(text):   # the matching parenthesis (defaults may hold some)
            depth += (text[i] == "(") - (text[i] == ")")
            i += 1
        params = text[m.end():i - 1]
        body, indent = [], len(m.group(1).expandtabs())
        for line in text[i:].splitlines()[1:]:
            if line.strip() and len(line) - len(line.lstrip()) <= indent:
                break
            body.append(line)
        yield m.group(2), m.group(3), params, "\n".join(body)


def _kernel_entries():
    for path in sorted(SRC.rglob("*.pyx")):
        for _, name, params, _ in _entries_of(path.read_text()):
            yield (path.name, name), _count_args(params)


def test_kernel_entries_take_few_arguments():
    """Every function of the .pyx sources, cdef ones too (each class's __init__ apart)."""
    entries = list(_kernel_entries())
    assert (("_mlp.pyx", "mlp_forward"), 5) in entries and len(entries) > 50   # it parses
    wide = [(k, n) for k, n in entries if n > MAX_KERNEL_ARGS and k not in BLAS_SHAPED]
    assert not wide, f"kernel entries over {MAX_KERNEL_ARGS} arguments: {wide}"


MAPPING_TYPES = {"dict", "Mapping", "MutableMapping"}


def _mapping_args(params, body):
    """The parameters that are mappings: typed dict / Mapping, **kwargs, or read by a
    string key in the body (an untyped dict: x["name"], x.get("name"), x.items())."""
    import re
    out = []
    for p in _split_args(params):
        p = p.split("=")[0].strip()
        words = re.findall(r"[\w.]+", p)
        if not words or words[-1] == "self":
            continue
        name = words[-1]
        if p.startswith("**") or MAPPING_TYPES & {w.split(".")[-1] for w in words[:-1]}:
            out.append(name)
        elif re.search(rf"\b{name}\s*\[\s*[rbfu]?['\"]|\b{name}\.(get|items|keys|values)\(",
                       body):
            out.append(name)
    return out


def _split_args(text):
    parts, depth, cur = [], 0, ""
    for ch in text + ",":
        depth += (ch in "([") - (ch in ")]")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [p for p in parts if p.strip()]


def _entry_problems(text):
    """What the kernel-argument rule refuses in a .pyx source: a Python-visible entry
    (def, cpdef, a cdef class's __init__) over MAX_KERNEL_ARGS arguments or taking a
    mapping."""
    out = []
    for kind, name, params, body in _entries_of(text):
        if kind == "cdef":
            continue
        if _count_args(params) > MAX_KERNEL_ARGS:
            out.append(f"{name}: {_count_args(params)} arguments")
        out += [f"{name}: {a} is a mapping" for a in _mapping_args(params, body)]
    return out


def test_python_visible_kernel_entries_take_typed_arguments():
    """No dict or string-keyed argument reaches a kernel: every def / cpdef entry and
    cdef class constructor of attnx/kernels takes explicit arguments, at most
    MAX_KERNEL_ARGS of them (BLAS-shaped entries aside)."""
    bad = []
    for path in sorted(SRC.rglob("*.pyx")):
        bad += [f"{path.name} {p}" for p in _entry_problems(path.read_text())
                if (path.name, p.split(":")[0]) not in BLAS_SHAPED]
    assert not bad, bad


def test_the_kernel_argument_rule_catches_a_bad_entry():
    bad = """
cdef class Stack:
    def __init__(self, list layers, dict shared, bint pre):
        self.n = len(layers)

    def forward(self, ends, int n=max(1, 2)):
        x = ends["x"]

def wide(a, b, c, d, e, f, g, h, i, j, k, l, m):
    pass

def twelve(self, a, b, c, d, e, f, g, h, i, j, k, l):
    pass

cpdef int sized(str what, **sizes):
    return 0

cdef int inner(dict lay, a, b, c, d, e, f, g, h, i, j, k, l) except -1:
    return 0

def fine(const floating[:, ::1] x, AttnShape shape, Py_ssize_t n, tuple pair, state):
    y = pair[0]
    return getattr(state, "capsule", None)
"""
    assert sorted(_entry_problems(bad)) == sorted(
        ["__init__: shared is a mapping", "forward: ends is a mapping",
         "wide: 13 arguments", "sized: sizes is a mapping"])


# ---- no compatibility code for unreleased formats; tests/ stays the tests' own -----------
REPO = SRC.parent
TESTS = Path(__file__).resolve().parents[1]


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
SEQUENCE_MODULES = ("sequence.py", "stages.py", "_sequence_blocks.py", "_sequence_buffers.py",
                    "_stem.py", "_instance_norm.py", "_positions.py")
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


# ---- the sequence model is a list of stage classes --------------------------------------
#: words a description of the stages by a kind string would compare against
STAGE_WORDS = {"instance_norm", "stem", "embed", "embedding", "positions", "cls", "block",
               "final_norm", "pool", "pooling", "head", "denorm"}
#: the prefixes of SequenceModel's parameter names (the stages' `prefix`)
PARAM_PREFIX = re.compile(r"^(embed|head|norm|pos|revin|stem|layers)\.")


def _kind_dispatch(tree):
    """(line, text) of each comparison of a `.kind` attribute with a stage word (or a
    tuple of them): a stage told apart by a kind string instead of its class."""
    out = []
    for n in ast.walk(tree):
        if not isinstance(n, ast.Compare):
            continue
        sides = [n.left, *n.comparators]
        words = {e.value for side in sides
                 for e in (side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set))
                           else [side])
                 if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        if words & STAGE_WORDS and any(isinstance(e, ast.Attribute) and e.attr == "kind"
                                       for e in sides):
            out.append((n.lineno, ast.unparse(n)))
    return out


def _param_names_written(tree):
    """(line, text) of each string (or f-string head) in code, docstrings aside, that
    spells a SequenceModel parameter name ("embed.W", f"stem.{i}.W", ...)."""
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef,
                              ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)}
    docs |= {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.JoinedStr):
            head = n.values[0] if n.values else None
            text = head.value if isinstance(head, ast.Constant) else ""
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            text = n.value
        else:
            continue
        if PARAM_PREFIX.match(text):
            out.append((n.lineno, text))
    return out


def test_the_stage_rule_finders_find_what_they_should():
    planted = ('"""embed.W in a docstring is fine."""\n'
               'if st.kind == "block":\n    pass\n'
               'ok = [s for s in plan if s.kind in ("pool", "head")]\n'
               'fine = x.dtype.kind in "fiu"\n'
               'w = params["embed.W"]\n'
               'v = params[f"stem.{i}.W"]\n'
               'u = params[prefix + "W"]\n')
    tree = ast.parse(planted)
    assert [line for line, _ in _kind_dispatch(tree)] == [2, 4]
    assert sorted(_param_names_written(tree)) == [(6, "embed.W"), (7, "stem.")]


def test_stages_are_told_apart_by_class_and_name_their_parameters_once():
    """The sequence model is a list of stage classes (attnx.layers.stages): no module of
    attnx dispatches on a stage's kind string, the stage classes have no `kind`, and
    SequenceModel's other modules spell none of its parameter names: each stage
    declares its own, once (its `params`, named by its prefix)."""
    from attnx.layers import stages

    kinds = {str(p.relative_to(PKG)): h for p in _modules()
             if (h := _kind_dispatch(ast.parse(p.read_text())))}
    assert not kinds, kinds
    classes = [c for c in vars(stages).values()
               if isinstance(c, type) and issubclass(c, stages.Stage)]
    assert len(classes) >= 10 and not [c for c in classes if hasattr(c, "kind")]
    layers = PKG / "layers"
    spelled = {n: h for n in SEQUENCE_MODULES if n != "stages.py"
               if (h := _param_names_written(ast.parse((layers / n).read_text())))}
    assert not spelled, spelled
    for n in ("_model_plan.py", "_sequence_params.py"):   # the old tables are gone
        assert not (layers / n).exists(), n
    # within a stage class, each literal parameter name is declared by one Param
    tree = ast.parse((layers / "stages.py").read_text())
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        names = [c.args[0].value for c in ast.walk(cls)
                 if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "Param"
                 and c.args and isinstance(c.args[0], ast.Constant)]
        assert len(names) == len(set(names)), (cls.name, names)


# ---- tests/ mirrors the package --------------------------------------------------------
#: the folders of tests/ that name no part of attnx: the command line, the documentation's
#: code, and the project around the package (structure rules, build, typing, benchmarks)
PROJECT_TEST_FOLDERS = {"cli", "docs", "project"}
HELPERS = TESTS / "helpers"


def _test_folders():
    """The folders a test file may live in: one per subpackage and per top-level module of
    attnx (datasets, plot), and the project folders."""
    subpackages = {p.parent.name for p in SRC.glob("*/__init__.py")}
    modules = {p.stem for p in SRC.glob("*.py")} - {"__init__", "__main__"}
    return subpackages | modules | PROJECT_TEST_FOLDERS


def test_every_test_file_lives_in_a_folder_named_for_what_it_tests():
    files = sorted(TESTS.rglob("test_*.py"))
    assert len(files) > 50, "the test files are not found"
    folders = _test_folders()
    assert {"kernels", "estimators", "io", "plot"} <= folders   # the finder works
    bad = [str(p.relative_to(TESTS)) for p in files
           if len(p.relative_to(TESTS).parts) != 2 or p.parent.name not in folders]
    assert not bad, f"test files outside tests/<{'|'.join(sorted(folders))}>/: {bad}"


def test_each_test_folder_is_a_package_and_the_top_holds_no_module():
    """tests/<folder>/__init__.py names a test module tests.<folder>.<file> (two folders may
    hold files of one name); a helper module belongs in tests/helpers/, the top has only
    the package's __init__ and the fixtures' conftest."""
    folders = {p.parent for p in TESTS.rglob("test_*.py")}
    assert not [str(f) for f in folders if not (f / "__init__.py").is_file()]
    assert (TESTS / "__init__.py").is_file()
    assert sorted(p.name for p in TESTS.glob("*.py")) == ["__init__.py", "conftest.py"]


def test_pytest_imports_test_files_by_path_and_only_the_helpers_by_name():
    import tomllib
    ini = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--import-mode=importlib" in ini["addopts"], ini
    assert ini["pythonpath"] == [str(HELPERS.relative_to(REPO))], ini


def test_no_helper_module_shadows_another_module():
    """A module of tests/helpers/ is imported by its bare name: no other module on sys.path
    (or built into Python, or of the standard library) may have it, and none is a test file."""
    names = sorted(p.stem for p in HELPERS.glob("*.py"))
    assert {"gradcheck", "reference"} <= set(names)
    others = [p for p in sys.path if not (p and Path(p).resolve() == HELPERS.resolve())]
    import importlib.machinery
    bad = [n for n in names if n.startswith("test_") or n in sys.builtin_module_names
           or n in sys.stdlib_module_names
           or importlib.machinery.PathFinder.find_spec(n, others) is not None]
    assert not bad, bad


def test_no_test_imports_conftest():
    """conftest.py is pytest's plugin (loaded as tests.conftest): `import conftest` would run a
    second copy; what tests share is in tests/helpers/."""
    bad = []
    for p in sorted(TESTS.rglob("*.py")):
        for n in ast.walk(ast.parse(p.read_text())):
            names = ([a.name for a in n.names] if isinstance(n, ast.Import)
                     else [n.module] if isinstance(n, ast.ImportFrom) and n.level == 0 else [])
            bad += [f"{p.relative_to(TESTS)}:{n.lineno}" for m in names
                    if (m or "").split(".")[0] == "conftest"]
    assert not bad, bad


def _ci_test_paths(text):
    """The test files a CI script names: $T/<path>, "$ROOT"/tests/<path> (brace lists
    expanded) and the bare <folder>/test_*.py items of its loops, relative to tests/."""
    out = set()
    for m in re.finditer(r"(?:\$T/|tests/)?((?:[a-z_]+/)?test_(?:\w+|\{[\w,]+\})\.py)", text):
        path = m.group(1)
        brace = re.search(r"\{([\w,]+)\}", path)
        names = brace.group(1).split(",") if brace else [None]
        out |= {path.replace(brace.group(0), n) if brace else path for n in names}
    return out


def test_every_test_file_a_ci_script_names_exists():
    named = {f"{s.name}: {p}" for s in sorted((REPO / ".ci").iterdir()) if s.is_file()
             for p in _ci_test_paths(s.read_text(errors="replace"))
             if not (TESTS / p).is_file()}
    assert not named, f"missing test files named in .ci/: {sorted(named)}"
    assert len(_ci_test_paths((REPO / ".ci" / "simd_levels.sh").read_text())) > 10


def test_the_ci_path_finder_finds_what_it_should():
    text = ('T="$ROOT/tests"\nFILES="$T/kernels/test_blas.py"\nfor f in layers/test_x.py; do\n'
            'pytest "$ROOT"/tests/io/test_{onnx,io}.py tests/test_top.py\n')
    assert _ci_test_paths(text) == {"kernels/test_blas.py", "layers/test_x.py", "io/test_onnx.py",
                                    "io/test_io.py", "test_top.py"}


def test_every_test_file_a_page_or_comment_names_exists():
    """README, docs/, .ci/, benchmarks/, examples/, csrc/ and the package's sources name test
    files by their path in the checkout (the changelog keeps the paths of its time)."""
    texts = [REPO / "README.md", REPO / "pyproject.toml", REPO / "setup.py"]
    for d in ("docs", ".ci", "benchmarks", "examples", "csrc", "attnx"):
        texts += [p for p in (REPO / d).rglob("*") if p.is_file()
                  and (p.suffix in {".py", ".pyx", ".pxd", ".pyi", ".rst", ".md", ".h"}
                       or d == ".ci")
                  and not {"_build", "build", "__pycache__"} & set(p.relative_to(REPO).parts)]
    bad = [f"{p.relative_to(REPO)}: {m}" for p in texts if p.is_file()
           for m in re.findall(r"tests/[\w/]+\.py", p.read_text(errors="replace"))
           if not (REPO / m).is_file()]
    assert len(texts) > 100 and not bad, bad


# ---- an estimator holds its hyper-parameters and fitted attributes only ----------------
def _is_private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_writes(tree, owners):
    """(line, name) of every private attribute written on an estimator in a module's
    tree: in the methods of the classes named in `owners` (on self) and in functions
    taking `est` (on est): `self._x = ...` (plain, augmented, annotated),
    setattr(self, "_x", ...), self.__dict__["_x"] = ..., and __dict__.setdefault("_x",
    ...) or .update(_x=...)."""
    out = []

    def scan(fn, who):
        def owner(e):
            return isinstance(e, ast.Name) and e.id == who

        def holds(e):   # self.__dict__ or vars(self)
            return ((isinstance(e, ast.Attribute) and e.attr == "__dict__" and owner(e.value))
                    or (isinstance(e, ast.Call) and isinstance(e.func, ast.Name)
                        and e.func.id == "vars" and e.args and owner(e.args[0])))
        for n in ast.walk(fn):
            targets = (n.targets if isinstance(n, ast.Assign) else
                       [n.target] if isinstance(n, (ast.AugAssign, ast.AnnAssign)) else [])
            for t in targets:
                for e in ast.walk(t):
                    if isinstance(e, ast.Attribute) and owner(e.value) and _is_private(e.attr):
                        out.append((e.lineno, e.attr))
                    if (isinstance(e, ast.Subscript) and holds(e.value)
                            and isinstance(e.slice, ast.Constant)
                            and isinstance(e.slice.value, str) and _is_private(e.slice.value)):
                        out.append((e.lineno, e.slice.value))
            if not isinstance(n, ast.Call):
                continue
            f = n.func
            if (isinstance(f, ast.Name) and f.id == "setattr" and len(n.args) > 1
                    and owner(n.args[0]) and isinstance(n.args[1], ast.Constant)
                    and _is_private(str(n.args[1].value))):
                out.append((n.lineno, n.args[1].value))
            if isinstance(f, ast.Attribute) and holds(f.value):
                if (f.attr == "setdefault" and n.args and isinstance(n.args[0], ast.Constant)
                        and _is_private(str(n.args[0].value))):
                    out.append((n.lineno, n.args[0].value))
                if f.attr == "update":
                    out.extend((n.lineno, k.arg) for k in n.keywords
                               if k.arg and _is_private(k.arg))

    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name in owners:
            for fn in node.body:
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.args.args \
                        and not fn.name.startswith("__init_subclass__"):
                    scan(fn, fn.args.args[0].arg)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                a.arg == "est" for a in node.args.args + node.args.kwonlyargs):
            scan(node, "est")
    return sorted(set(out))


def test_fit_sets_no_attribute_but_parameters_and_fitted_ones():
    """An estimator's fit, partial_fit and predict set nothing on it but its
    hyper-parameters and fitted attributes (public names ending in "_"): the fit's
    choices are its plan (plan_), running state goes by argument, buffers live beside
    the network. No private attribute is written on an estimator anywhere in
    attnx.estimators (its own class's or a helper's taking `est`)."""
    from attnx.estimators._estimator import SequenceEstimator

    family = {c for c in SequenceEstimator.__mro__ if c.__module__.startswith("attnx.")}
    todo = list(SequenceEstimator.__subclasses__())
    while todo:
        c = todo.pop()
        family.add(c)
        todo += c.__subclasses__()
    owners = {c.__name__ for c in family}
    assert {"SequenceEstimator", "Inference", "TransformerClassifier"} <= owners
    bad = {}
    for path in sorted((PKG / "estimators").glob("*.py")):
        found = _private_writes(ast.parse(path.read_text()), owners)
        if found:
            bad[path.name] = found
    assert not bad, bad


def test_the_private_write_finder_finds_what_it_should():
    src = ("class E:\n"
           "    def fit(self, X):\n"
           "        self._now = 1\n"
           "        self.plan_ = 2\n"
           "        setattr(self, '_later', 3)\n"
           "        self.__dict__['_cache'] = {}\n"
           "        self.__dict__.setdefault('_batches', {})\n"
           "        vars(self).update(_x=1, ok_=2)\n"
           "class Other:\n"
           "    def __init__(self):\n"
           "        self._fine = 1\n"
           "def helper(est, data):\n"
           "    est._scratch = data\n")
    names = [n for _, n in _private_writes(ast.parse(src), {"E"})]
    assert names == ["_now", "_later", "_cache", "_batches", "_x", "_scratch"]


def test_no_mixin_declares_stubs_of_another_classes_methods():
    """A mixin that needs another part's methods declares them as stubs under
    TYPE_CHECKING; the parts are composed by inheritance or arguments instead."""
    import ast
    bad = []
    for path in sorted((SRC).rglob("*.py")):
        for cls in ast.walk(ast.parse(path.read_text())):
            if not isinstance(cls, ast.ClassDef):
                continue
            for node in cls.body:
                if (isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                        and any(isinstance(n, ast.FunctionDef) for n in node.body)):
                    bad.append(f"{path.relative_to(SRC)}:{cls.name}")


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
