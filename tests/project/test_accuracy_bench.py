"""benchmarks/accuracy.py runs end to end (--quick, one tiny bundled set) and writes a
sane table; its harness-side preprocessing (patching, summary features, the epoch
rule) computes what its docstring says. No accuracy or timing thresholds."""
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "accuracy.py"


def _load_module():
    spec = importlib.util.spec_from_file_location("attnx_bench_accuracy", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


acc = _load_module()  # stdlib imports only at module level


def test_patch_is_a_reshape_of_consecutive_steps():
    x = np.arange(14.0).reshape(7, 2)          # T=7, f=2
    (p,) = acc.patch([x], 3)                   # ceil(7/3) = 3 patches of 3 steps
    assert p.shape == (3, 6)
    np.testing.assert_array_equal(p[0], x[0:3].ravel())
    np.testing.assert_array_equal(p[1], x[3:6].ravel())
    # the tail is padded with the last step
    np.testing.assert_array_equal(p[2], np.concatenate([x[6], x[6], x[6]]))


def test_overlapping_patches_and_differences():
    x = np.arange(5.0)[:, None]                # T=5, f=1
    (p,) = acc.patch([x], 2, 4)                # every 2 steps, 4 steps long
    np.testing.assert_array_equal(p, [[0, 1, 2, 3], [2, 3, 4, 4], [4, 4, 4, 4]])
    (d,) = acc.with_differences([np.array([[1.0], [4.0], [2.0]])])
    np.testing.assert_array_equal(d, [[1, 0], [4, 3], [2, -2]])


def test_summary_features_of_a_line():
    t = np.linspace(0.0, 1.0, 11)
    x = np.stack([3.0 * t + 1.0, -2.0 * t], axis=1)    # two channels, slopes 3 and -2
    (f,) = acc.summary_features([x])
    mean, std, lo, hi, slope = f.reshape(5, 2)
    np.testing.assert_allclose(mean, [2.5, -1.0])
    np.testing.assert_allclose(std, x.std(axis=0))
    np.testing.assert_allclose(lo, [1.0, -2.0])
    np.testing.assert_allclose(hi, [4.0, 0.0])
    np.testing.assert_allclose(slope, [3.0, -2.0])


def test_schedule_keeps_the_step_budget_within_bounds():
    cfg = dict(batch_size=16, steps=1600, min_epochs=30, max_epochs=300)
    assert acc.schedule(cfg, 160) == (160, 16)        # 10 batches an epoch
    assert acc.schedule(cfg, 20) == (300, 16)         # capped by max_epochs
    assert acc.schedule(cfg, 16000) == (30, 16)       # raised to min_epochs
    assert acc.schedule(cfg, 5)[1] == 5               # a batch is at most the set


def test_preprocess_standardises_with_training_statistics_and_keeps_the_data():
    rng = np.random.default_rng(0)
    Xtr = [rng.normal(5.0, 3.0, (20, 2)) for _ in range(4)]
    Xte = [rng.normal(5.0, 3.0, (20, 2)) for _ in range(3)]
    ytr = rng.normal(10.0, 2.0, 4)
    d = acc.Data("toy", "regress", "test", Xtr, ytr, Xte, rng.normal(size=3))
    before = [x.copy() for x in Xtr]
    xtr, xte, y, (ym, ys) = acc.preprocess(d, dict(standardize=True, max_tokens=None))
    frames = np.concatenate(xtr)
    np.testing.assert_allclose(frames.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(frames.std(axis=0), 1.0)
    np.testing.assert_allclose(y * ys + ym, ytr)
    for a, b in zip(Xtr, before):
        np.testing.assert_array_equal(a, b)


def test_quick_run_writes_a_sane_table(tmp_path):
    pytest.importorskip("aeon")
    pytest.importorskip("sklearn")
    out = tmp_path / "acc"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--sets", "UnitTest", "--seeds", "2",
                           "--quick", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(Path(f"{out}.json").read_text())
    assert result["machine"]["threads"] == 1 and result["machine"]["cpu"]
    rows = result["rows"]
    assert [r["model"] for r in rows] == acc.MODELS
    for r in rows:
        assert r["set"] == "UnitTest" and r["metric"] == "accuracy"
        if r["model"] == "torch twin" and not r["scores"]:
            assert "torch not installed" in r["note"]
            continue
        assert not r["note"].startswith("failed"), r
        n = 2 if r["model"] in acc.STOCHASTIC else 1
        assert r["seeds"] == list(range(n))
        assert len(r["scores"]) == n
        assert all(0.0 <= s <= 1.0 for s in r["scores"])
        assert math.isclose(r["score"], float(np.mean(r["scores"])))
        assert r["fit_s"] >= 0 and r["predict_s"] >= 0
    md = Path(f"{out}.md").read_text()
    assert "| set | metric | " + " | ".join(acc.MODELS) + " |" in md
    assert "| UnitTest | accuracy |" in md


@pytest.mark.parametrize("example, needs", [("classify_japanese_vowels.py", "sktime"),
                                            ("forecast_sunspots.py", "statsmodels")])
def test_examples_run_without_torch(tmp_path, example, needs):
    """pip install "attnx[examples]" brings no torch: each example prints attnx's result and
    skips the PyTorch twin with a note (it used to stop with ModuleNotFoundError)."""
    pytest.importorskip(needs)
    pytest.importorskip("sklearn")
    blocker = tmp_path / "torch"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\")\n")
    # the attnx under test (an in-place build, or the installed package when the checkout
    # is unbuilt source, as in CI), never the checkout's source folder as such
    import attnx
    home = str(Path(attnx.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tmp_path), home] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                 if p])}
    proc = subprocess.run([sys.executable, example], cwd=ROOT / "examples", capture_output=True,
                          text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "attnx Transformer" in proc.stdout
    assert "PyTorch twin skipped: torch is not installed" in proc.stdout
    assert "PyTorch, same network" not in proc.stdout
