"""The synthetic ragged and short sets of benchmarks/accuracy.py (panel ragged_short):
fixed seeds give the same sets, lengths within their ranges, the classes the
generators' docstrings describe. No accuracy thresholds."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "accuracy.py"


def _load_module():
    spec = importlib.util.spec_from_file_location("attnx_bench_accuracy_rs", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


acc = _load_module()


@pytest.mark.parametrize("name", sorted(acc.SYNTHETIC))
def test_sets_are_fixed_and_within_their_lengths(name):
    gen, lo, hi, _ = acc.SYNTHETIC[name]
    d, again = acc.LOADERS[name](), acc.LOADERS[name]()
    assert (len(d.Xtr), len(d.Xte)) == (100, 300) and d.task == "classify"
    assert all(x.shape[1] == 1 and lo <= len(x) <= hi for x in d.Xtr + d.Xte)
    assert d.equal == (lo == hi) and name in acc.RAGGED_SHORT
    for a, b in zip(d.Xtr + d.Xte, again.Xtr + again.Xte):
        np.testing.assert_array_equal(a, b)
    k = 3 if gen is acc._cbf else 4
    assert set(d.ytr) == set(d.yte) == set(range(k))


def test_cbf_events_rise_fall_or_stay():
    """Over many series of one length, the mean shape of each class: the cylinder
    flat on its event, the bell rising across it, the funnel falling."""
    rng = np.random.default_rng(0)
    t = 64
    by = {0: [], 1: [], 2: []}
    for _ in range(1500):
        x, k = acc._cbf(rng, t)
        assert x.shape == (t,)
        by[k].append(x)
    m = {k: np.mean(v, axis=0) for k, v in by.items()}
    core = slice(t // 4, 3 * t // 8)   # inside every event (T/8 <= a <= T/4, b - a >= T/4)
    slope = {k: np.polyfit(np.arange(t)[core], m[k][core], 1)[0] for k in m}
    assert slope[1] > 0.05 and slope[2] < -0.05 and abs(slope[0]) < 0.05
    assert m[0][core].mean() > 3


def test_two_patterns_order_gives_the_class():
    rng = np.random.default_rng(1)
    t = 40
    for _ in range(200):
        x, k = acc._two_patterns(rng, t)
        w = max(4, t // 8)
        for half, bit in ((slice(0, t // 2), (k >> 1) & 1), (slice(t // 2, t), k & 1)):
            h = x[half]
            # the step's lowest and highest run: up (first low, then high) or down
            lo_at, hi_at = np.argmin(np.convolve(h, np.ones(w // 2), "valid")), \
                np.argmax(np.convolve(h, np.ones(w // 2), "valid"))
            assert (lo_at < hi_at) == bool(bit)
