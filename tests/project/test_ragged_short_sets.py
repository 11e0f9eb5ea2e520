"""The synthetic ragged and short sets of benchmarks/accuracy.py (panel ragged_short):
fixed seeds give the same sets, lengths within their ranges, the classes the
generators' docstrings describe. No accuracy thresholds."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "accuracy.py"


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
    assert d.equal == (lo == hi) and (name in acc.RAGGED_SHORT) != (name in acc.SYNTHETIC_CHECK)
    for a, b in zip(d.Xtr + d.Xte, again.Xtr + again.Xte):
        np.testing.assert_array_equal(a, b)
    k = {acc._cbf: 3, acc._two_patterns: 4, acc._control: 6, acc._waveform: 3}[gen]
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


def _by_class(gen, seed, t, n, classes):
    """n series of t steps from gen, grouped by class, and each class's mean series."""
    rng = np.random.default_rng(seed)
    by = {k: [] for k in range(classes)}
    for _ in range(n):
        x, k = gen(rng, t)
        assert x.shape == (t,)
        by[k].append(x)
    return by, {k: np.mean(v, axis=0) for k, v in by.items()}


def test_control_charts_trend_shift_and_cycle():
    """Class means over many series: the trends rise and fall, the shifts end above and
    below the start, the cyclic and normal series stay level on average."""
    by, m = _by_class(acc._control, 2, 60, 1200, 6)
    rise = {k: m[k][-10:].mean() - m[k][:10].mean() for k in m}
    assert rise[2] > 10 and rise[3] < -10 and rise[4] > 7 and rise[5] < -7
    assert abs(rise[0]) < 2 and abs(rise[1]) < 4
    assert np.mean([np.std(x) for x in by[1]]) > 2 * np.mean([np.std(x) for x in by[0]])


def test_waveform_classes_mix_two_of_three_triangles():
    """Triangles 1, 2, 3 peak at steps 11, 7, 15 (half-width 6): at step 3 only the
    second is above 0 (2), at step 19 only the third (2), at step 11 the first is 6 and
    the others 2. So class 0 (1, 2) lacks step 19, class 1 (1, 3) step 3, class 2 (2, 3)
    has both ends but half the others' height at step 11."""
    _, m = _by_class(acc._waveform, 3, 21, 900, 3)
    assert abs(m[0][18]) < 0.3 and abs(m[1][2]) < 0.3
    assert m[0][2] > 0.7 and m[1][18] > 0.7 and m[2][2] > 0.7 and m[2][18] > 0.7
    assert m[2][10] < 2.5 < 3.5 < min(m[0][10], m[1][10])
