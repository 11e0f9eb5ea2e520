"""Module structure rules of the developers' guide, checked on the source."""
import ast
import pickle
from pathlib import Path

import numpy as np

import attnx
from attnx import estimators, forecaster, io

PKG = Path(attnx.__file__).parent
#: the checkout's sources: an installed attnx ships no .pyx files
SRC = Path(__file__).resolve().parent.parent / "attnx"


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
    assert io._classes() == {**estimators.ESTIMATORS, **forecaster.FORECASTERS}
    assert set(estimators.ESTIMATORS) == {"AttentionRegressor", "TransformerRegressor",
                                          "AttentionClassifier", "TransformerClassifier"}
    assert forecaster.FORECASTERS == {"TransformerForecaster": attnx.TransformerForecaster}
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
    names = {p.stem for p in _modules()} | {p.name.split(".")[0] for p in SRC.glob("*.pyx")}
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
            if id(node) in skip or not isinstance(node, ast.ImportFrom) or node.level != 1:
                continue
            if node.module is None:
                out |= {a.name for a in node.names if a.name in names}
            else:
                out.add(node.module.split(".")[0])
        graph[path.stem] = out - {path.stem}
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


#: circles closed only by `if TYPE_CHECKING:` imports: helper modules typed with the model
#: they serve (to become its methods, or objects that own their state). None may grow
#: and no new one may appear.
TYPE_ONLY_CYCLES = [
    {"_attention_stack", "attention"},
    {"_instance_norm", "_pooling", "_sequence_blocks", "_sequence_buffers",
     "_sequence_params", "_stem", "sequence"},
    {"_training", "distributed", "losses"},
    {"_estimator", "_scaling"},
]


def test_type_only_cycles_do_not_grow():
    for comp in _cycles(_import_graph(True)):
        assert any(comp <= known for known in TYPE_ONLY_CYCLES), sorted(comp)


MAX_MODULE_LINES = 600
#: modules over the limit today, with the most lines each may keep until it is split
OVERSIZE = {"forecaster.py": 860, "_estimator.py": 818,
            "_training.py": 640, "sequence.py": 650, "estimators.py": 618}


def test_modules_stay_under_the_size_limit():
    sizes = {p.name: len(p.read_text().splitlines())
             for p in list(_modules()) + sorted(SRC.glob("*.pyx"))}
    over = {n: k for n, k in sizes.items() if k > OVERSIZE.get(n, MAX_MODULE_LINES)}
    assert not over, f"over {MAX_MODULE_LINES} lines (or past their listed size): {over}"
    assert set(OVERSIZE) <= set(sizes), "a listed module is gone: drop it from OVERSIZE"


MAX_KERNEL_ARGS = 12
#: BLAS-shaped entries keep BLAS's own argument list
BLAS_SHAPED = {("_blas.pyx", "gemm"), ("_ops.pyx", "pgemm"), ("_seq.pyx", "gemm"),
               ("_testing.pyx", "gemm_into")}
#: entries over the limit today (to take a struct of shapes and one of buffers), with
#: the arguments each may keep until then
WIDE_KERNELS = {
    ("_attention.pyx", "block_scores"): 13, ("_attnargs.pyx", "run_backward"): 13,
    ("_mlp.pyx", "mlp_forward"): 17, ("_mlp.pyx", "mlp_backward"): 20,
    ("_ppv.pyx", "_ppv_series"): 22, ("_ppv.pyx", "_ppv"): 24,
    ("_revin.pyx", "_rv_fwd"): 15, ("_revin.pyx", "_rv_bwd"): 23,
    ("_revin.pyx", "_rv_den"): 13, ("_revin.pyx", "_rv_den_bwd"): 22,
    ("_seq.pyx", "layernorm_backward"): 16,
}


def _kernel_entries():
    import re
    sig = re.compile(r"^\s*(?:cp?def|def)\s+(?:[\w\[\], *]+\s+)?(\w+)\s*\(([^)]*)\)", re.M)
    for path in sorted(SRC.glob("*.pyx")):
        for m in sig.finditer(path.read_text()):
            args = [a for a in m.group(2).split(",") if a.strip()]
            yield (path.name, m.group(1)), len(args)


def test_kernel_entries_take_few_arguments():
    entries = dict(_kernel_entries())
    assert ("_mlp.pyx", "mlp_forward") in entries and len(entries) > 50   # the parser works
    wide = {k: n for k, n in entries.items() if n > MAX_KERNEL_ARGS and k not in BLAS_SHAPED
            and n > WIDE_KERNELS.get(k, MAX_KERNEL_ARGS)}
    assert not wide, f"kernel entries over {MAX_KERNEL_ARGS} arguments: {wide}"
