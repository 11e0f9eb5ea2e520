"""benchmarks/ceiling.py: its split of a step's FLOPs agrees with benchmarks/run.py's
count for every config, its product timing sums the step's list, and (on x86-64 with
gcc and AVX2) the bound it prints follows from what it measured. No timing thresholds."""
import importlib.util
import json
import platform
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name, file):
    spec = importlib.util.spec_from_file_location(name, BENCH / file)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


ceiling = _load("attnx_bench_ceiling", "ceiling.py")
bench_run = ceiling._run_module()


@pytest.mark.parametrize("train", [True, False])
def test_flop_split_matches_run_py(train):
    configs = [c for c in bench_run.FULL_CONFIGS + bench_run.QUICK_CONFIGS
               if c.kind in ("attention", "transformer")]
    assert len(configs) >= 8
    for c in configs:
        layers = 1 if c.kind == "attention" else c.layers
        dense = ceiling.dense_products(c.kind, c.B, c.T, c.d, c.hidden or 0, layers, train)
        f = sum(2 * m * n * k for _, _, m, n, k in dense)
        f += ceiling.attention_flops(c.B, c.T, c.d, layers, train)
        assert f == bench_run.step_flops(c, train), c.id


def test_dense_products_shapes():
    # one attention block, training, first block (no dX): Q|K|V and output projections,
    # dWo, dZ, dWqkv, with the operands' transposes
    assert ceiling.dense_products("attention", 2, 5, 8, 0, 1, True) == [
        (0, 0, 10, 24, 8), (0, 0, 10, 8, 8), (1, 0, 8, 8, 10), (0, 1, 10, 8, 8),
        (1, 0, 8, 24, 10)]
    # a second transformer block adds dX and the MLP's six products
    two = ceiling.dense_products("transformer", 2, 5, 8, 12, 2, True)
    assert len(two) == 2 * (5 + 6) + 1 and (0, 1, 10, 8, 24) in two
    assert ceiling.dense_products("transformer", 2, 5, 8, 12, 2, False) == 2 * [
        (0, 0, 10, 24, 8), (0, 0, 10, 8, 8), (0, 0, 10, 12, 8), (0, 0, 10, 8, 12)]


def test_time_products_sums_the_list():
    shapes = [(0, 0, 16, 8, 8), (1, 0, 8, 16, 12), (0, 0, 16, 8, 8)]
    total, best = ceiling.time_products(shapes, rounds=1)
    assert set(best) == set(shapes)
    assert all(t > 0 for t in best.values())
    assert total == pytest.approx(2 * best[shapes[0]] + best[shapes[1]], rel=1e-12)


def _needs_peak_loop():
    from attnx.kernels import _ops
    if platform.machine() not in ("x86_64", "AMD64") or shutil.which("gcc") is None:
        pytest.skip("needs gcc on x86-64")
    if _ops.simd_level() < 1:
        pytest.skip("needs AVX2")


def test_main_bound_from_its_measurements(tmp_path, capsys):
    _needs_peak_loop()
    c = bench_run.Config("attention", 2, 16, 16, 2)
    flops = bench_run.step_flops(c, True)
    run = {"attnx_commit": "test", "created": "now", "runs": [{
        "threads": 1, "gemm_limit": {"float32": {"scipy": 50.0}},
        "results": [{"config": c.id, "mode": "train", "dtype": "float32", "flops": flops,
                     "shape": {"kind": "attention", "B": 2, "T": 16, "d": 16, "H": 2,
                               "causal": False},
                     "impls": {"attnx": {"median_s": 2e-3}, "torch-sdpa": {"median_s": 3e-3}}},
                    {"config": c.id, "mode": "train", "dtype": "float64", "flops": flops,
                     "shape": {"kind": "attention", "B": 2, "T": 16, "d": 16, "H": 2,
                               "causal": False},
                     "impls": {"attnx": {"median_s": 2e-3}, "torch-sdpa": {"median_s": 3e-3}}}]}]}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    ceiling.main(["--run", str(path), "--rounds", "1", "--json", str(tmp_path / "c.json"),
                  "--txt", str(tmp_path / "c.txt")])
    out = json.loads((tmp_path / "c.json").read_text())
    assert len(out["rows"]) == 1                 # float32 only
    r = out["rows"][0]
    peak = r["fma_peak_gflops"] * 1e9
    assert np.isfinite(peak) and peak > 1e9
    assert r["bound_s"] == pytest.approx(r["dense_s"] + r["attention_flops"] / peak)
    assert r["peak_s"] == pytest.approx(flops / peak)
    assert r["target"] == "1.3x" and r["target_s"] == pytest.approx(3e-3 / 1.3)
    assert r["ratio_at_bound"] == pytest.approx(3e-3 / r["bound_s"])
    assert r["need"] == pytest.approx(r["bound_s"] / r["target_s"])
    assert r["attnx_efficiency"] == pytest.approx(r["bound_s"] / 2e-3)
    assert c.id in (tmp_path / "c.txt").read_text()
