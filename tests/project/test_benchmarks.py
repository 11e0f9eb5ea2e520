"""The benchmark race is fair: the NumPy and PyTorch models of benchmarks/ compute
what attnx computes (outputs, gradients, parameters after AdamW steps, from the
same weights), and benchmarks/run.py runs end to end. No timing thresholds."""
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import attnx
from numeric_checks import rel_err

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
import numpy_model as nm  # noqa: E402


def _load_run_module():
    # benchmarks/run.py under a name of its own ("run" is too common to import by)
    spec = importlib.util.spec_from_file_location("attnx_bench_run", BENCH / "run.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod       # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


bench_run = _load_run_module()  # stdlib imports only at module level

B, T, D, H = 3, 7, 16, 4
CASES = {
    "attention": dict(kind="attention", causal=False),
    "attention-causal": dict(kind="attention", causal=True),
    "transformer": dict(kind="transformer", causal=False, layers=2, hidden=24),
    "transformer-causal": dict(kind="transformer", causal=True, layers=2, hidden=24),
}
HYPER = dict(lr=0.01, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.05)


def _attnx_model(case, dtype):
    kw = dict(causal=case["causal"], dtype=dtype, random_state=7, input_grad=False)
    if case["kind"] == "attention":
        return attnx.MultiHeadAttention(D, H, **kw)
    return attnx.Transformer(D, H, case["layers"], case["hidden"], **kw)


class _Attnx:
    """attnx driven as benchmarks/run.py drives it."""

    def __init__(self, case, dtype):
        self.m = _attnx_model(case, dtype)
        self.opt = attnx.AdamW(self.m.params, **HYPER)

    def predict(self, x):
        return self.m.forward(x, grad=False).copy()

    def train(self, x, t):
        y = self.m.forward(x)
        loss, dy = attnx.mse_loss(y, t)
        self.m.backward(dy)
        self.opt.step(self.m.grads)
        return loss

    def grads(self):
        return {k: np.array(v) for k, v in self.m.grads.items()}

    def params(self):
        return {k: np.array(v) for k, v in self.m.params.items()}


class _Numpy:
    def __init__(self, case, dtype, src):
        if case["kind"] == "attention":
            self.m = nm.NumpyAttention(D, H, causal=case["causal"], dtype=dtype)
        else:
            self.m = nm.NumpyTransformer(D, H, case["layers"], case["hidden"],
                                         causal=case["causal"], dtype=dtype)
        self.m.load_params(src)
        self.opt = nm.NumpyAdamW(self.m.buffers, **HYPER)

    def predict(self, x):
        return self.m.forward(x, grad=False)

    def train(self, x, t):
        return nm.train_step(self.m, self.opt, x, t)

    def grads(self):
        return {k: np.array(v) for k, v in self.m.grads.items()}

    def params(self):
        return {k: np.array(v) for k, v in self.m.params.items()}


class _Torch:
    def __init__(self, torch, case, dtype, src, sdpa):
        import torch_model as tm
        self.tm, self.torch = tm, torch
        if case["kind"] == "attention":
            self.m = tm.TorchAttention(D, H, causal=case["causal"], dtype=dtype, sdpa=sdpa)
        else:
            self.m = tm.TorchTransformer(D, H, case["layers"], case["hidden"],
                                         causal=case["causal"], dtype=dtype, sdpa=sdpa)
        self.m.load_params(src)
        self.opt = tm.make_optimizer(self.m, **HYPER)

    def predict(self, x):
        return self.tm.predict(self.m, self.torch.from_numpy(x)).numpy()

    def train(self, x, t):
        return self.tm.train_step(self.m, self.opt, self.torch.from_numpy(x),
                                  self.torch.from_numpy(t))

    def grads(self):
        return {k: v.numpy().copy() for k, v in self.m.grads.items()}

    def params(self):
        return {k: v.numpy().copy() for k, v in self.m.params.items()}


def _make(impl, case, dtype, src, request):
    if impl == "numpy":
        return _Numpy(case, dtype, src)
    torch = request.getfixturevalue("torch")
    return _Torch(torch, case, dtype, src, sdpa=impl == "torch-sdpa")


@pytest.mark.parametrize("impl", ["numpy", "torch", "torch-sdpa"])
@pytest.mark.parametrize("case", list(CASES), ids=str)
def test_same_computation_float64(impl, case, request, rng):
    """Two training steps from the same weights: predict outputs, losses, gradients
    and the parameters after each AdamW step agree with attnx to ~1e-10."""
    case = CASES[case]
    ref = _Attnx(case, np.float64)
    other = _make(impl, case, np.float64, ref.m.params, request)
    x = rng.normal(size=(B, T, D))
    t = rng.normal(size=(B, T, D))
    assert set(other.params()) == set(ref.params())
    for step in range(2):
        assert rel_err(other.predict(x), ref.predict(x)) < 1e-10, f"step {step} predict"
        l_other, l_ref = other.train(x, t), ref.train(x, t)
        assert l_other == pytest.approx(l_ref, rel=1e-10, abs=0), f"step {step} loss"
        g_ref, g_other = ref.grads(), other.grads()
        for k in g_ref:
            assert rel_err(g_other[k], g_ref[k]) < 1e-10, f"step {step} grad {k}"
        p_ref, p_other = ref.params(), other.params()
        for k in p_ref:
            assert rel_err(p_other[k], p_ref[k]) < 1e-10, f"step {step} param {k} after AdamW"


@pytest.mark.parametrize("impl", ["numpy", "torch", "torch-sdpa"])
@pytest.mark.parametrize("case", ["attention-causal", "transformer"], ids=str)
def test_same_computation_float32(impl, case, request, rng):
    """float32 (the dtype of the targets): predict, loss and first gradients agree."""
    case = CASES[case]
    ref = _Attnx(case, np.float32)
    other = _make(impl, case, np.float32, ref.m.params, request)
    x = rng.normal(size=(B, T, D)).astype(np.float32)
    t = rng.normal(size=(B, T, D)).astype(np.float32)
    assert rel_err(other.predict(x), ref.predict(x)) < 1e-5
    assert other.train(x, t) == pytest.approx(ref.train(x, t), rel=1e-5)
    g_ref, g_other = ref.grads(), other.grads()
    for k in g_ref:
        assert rel_err(g_other[k], g_ref[k]) < 1e-4, k


def test_numpy_model_has_no_python_loop_over_samples(rng):
    """The NumPy baseline handles any batch in the same few calls: its result for a
    batch equals the results sample by sample (a batched implementation)."""
    case = CASES["transformer-causal"]
    ref = _attnx_model(case, np.float64)
    m = nm.NumpyTransformer(D, H, 2, 24, causal=True, dtype=np.float64)
    m.load_params(ref.params)
    x = rng.normal(size=(5, T, D))
    whole = m.forward(x, grad=False)
    for b in range(5):
        np.testing.assert_allclose(m.forward(x[b:b + 1], grad=False)[0], whole[b],
                                   rtol=1e-12, atol=1e-12)


def test_step_flops_counts():
    """2mnk per GEMM: hand-computed totals for the seed attention shape."""
    c = bench_run.Config("attention", 32, 128, 64, 8)
    n, d, bt2d = 32 * 128, 64, 32 * 128 * 128 * 64
    fwd = 2 * n * d * 3 * d + 4 * bt2d + 2 * n * d * d
    assert bench_run.step_flops(c, train=False) == fwd
    # backward: dWo, dZ, four per-head products, dWqkv (no dX: input_grad=False)
    assert bench_run.step_flops(c, train=True) == fwd + 4 * n * d * d + 8 * bt2d + 6 * n * d * d
    tf = bench_run.Config("transformer", 32, 128, 64, 8, hidden=256, layers=2)
    mlp = 2 * 2 * n * d * 256
    assert bench_run.step_flops(tf, train=False) == 2 * (fwd + mlp)
    # layer 1's attention also back-propagates to its input: + 2 n (3d) d
    assert bench_run.step_flops(tf, train=True) == (
        2 * bench_run.step_flops(c, train=True) + 2 * 3 * mlp + 6 * n * d * d)


def _numbers(obj, path="$"):
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return
    if isinstance(obj, (int, float)):
        yield path, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _numbers(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _numbers(v, f"{path}[{i}]")


def test_run_quick_smoke(tmp_path):
    """benchmarks/run.py --quick with one thread: exits 0, writes JSON whose every
    number is finite and positive, and prints the table."""
    out = tmp_path / "bench.json"
    env = dict(os.environ)
    # the worker must import the attnx these tests import
    root = str(Path(attnx.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    r = subprocess.run([sys.executable, str(BENCH / "run.py"), "--quick", "--threads", "1",
                        "--pause", "0.002", "--json", str(out)],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert "Ratios other/attnx" in r.stdout
    (run,) = doc["runs"]
    assert run["threads"] == 1 and run["threads_ok"], run["thread_check"]
    expected_impls = ["attnx", "numpy"]
    if "torch" in run["impls"] or os.environ.get("ATTNX_REQUIRE_TORCH") == "1":
        expected_impls += ["torch", "torch-sdpa"]
    assert run["impls"] == expected_impls
    assert len(run["results"]) == len(bench_run.QUICK_CONFIGS) * 2 * 2
    for res in run["results"]:
        assert list(res["impls"]) == expected_impls
        assert res["impls"]["attnx"]["ratio"] == 1.0
        for m in res["impls"].values():
            assert {"median_s", "min_s", "max_s", "ratio", "gflops", "peak_bytes"} <= set(m)
            assert m["min_s"] <= m["median_s"] <= m["max_s"]
        if res["mode"] == "train":
            assert res["loss_check"] == "", res["loss_check"]
    nums = list(_numbers(doc))
    assert len(nums) > 100
    # foreign_cpu (CPU used by other processes during a race) is legitimately 0
    bad = [(p, v) for p, v in nums if not (math.isfinite(v) and v > 0)
           and not p.endswith(".foreign_cpu")]
    assert not bad, bad[:10]


def test_profile_step_smoke():
    """benchmarks/profile_step.py: every phase printed with a positive time, and the
    path the layer took (fused at the seed shape's d_head 8)."""
    env = dict(os.environ)
    root = str(Path(attnx.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    r = subprocess.run([sys.executable, str(BENCH / "profile_step.py"), "--steps", "2",
                        "--shape", "2,16,16,2"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "path fused" in r.stdout
    times = {}
    for line in r.stdout.splitlines()[1:]:
        name, rest = line.split(None, 1)
        times[name] = float(rest.split()[0])
    assert list(times) == ["forward", "loss", "backward", "adamw", "step"]
    assert all(v > 0 for v in times.values()), times
    assert abs(times["step"] - sum(v for k, v in times.items() if k != "step")) < 1e-2
