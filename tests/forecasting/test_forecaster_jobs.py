"""TransformerForecaster(n_jobs=...): the classical path's series chosen in worker
processes give the forecasts and intervals of one process; bad values are refused;
workers that cannot start fall back to this process with a warning."""
import warnings

import numpy as np
import pytest

import attnx
from attnx.forecasting import _series_pool as pool


def _panel(n, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        m = int(rng.integers(20, 60))
        t = np.arange(m)
        y = 10 + np.cumsum(rng.normal(0, 0.5, m))
        if i % 2:
            y += 2 * np.sin(2 * np.pi * t / 4)
        out.append(y)
    return out


def test_workers_follow_n_jobs_and_the_panel_size(monkeypatch):
    monkeypatch.setattr(pool._cpus, "usable", lambda: 8)
    per = pool.MIN_TASKS_PER_WORKER
    assert pool.workers(None, 10_000) == 1
    assert pool.workers(1, 10_000) == 1
    assert pool.workers(-1, 10_000) == 8
    assert pool.workers(3, 10_000) == 3
    assert pool.workers(4, 2 * per) == 2          # at least `per` series a worker
    assert pool.workers(4, per - 1) == 1          # too few: this process


def test_worker_processes_give_the_forecasts_of_one_process(monkeypatch):
    monkeypatch.setattr(pool, "MIN_TASKS_PER_WORKER", 4)
    series = _panel(12)
    one = attnx.TransformerForecaster(4).fit(series)
    with warnings.catch_warnings():   # the fallback to one process would warn
        warnings.simplefilter("error", UserWarning)
        two = attnx.TransformerForecaster(4, n_jobs=2).fit(series)
    assert one.methods_ == two.methods_
    for a, b in zip(one.predict(), two.predict()):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    for (lo1, hi1), (lo2, hi2) in zip(one.predict_interval(), two.predict_interval()):
        np.testing.assert_allclose(lo1, lo2, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(hi1, hi2, rtol=1e-12, atol=1e-12)
    assert [c["spec"] for c in one.choices_] == [c["spec"] for c in two.choices_]


def test_workers_start_from_this_attnx_with_an_unbuilt_checkout_first_on_the_path(
        monkeypatch, tmp_path):
    # a folder with an attnx package that cannot be imported, first on sys.path (as a
    # benchmark script run from a source checkout puts it): the workers still run
    fake = tmp_path / "attnx"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('the unbuilt checkout')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(pool, "MIN_TASKS_PER_WORKER", 4)
    series = _panel(8, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        two = attnx.TransformerForecaster(4, n_jobs=2).fit(series)
    one = attnx.TransformerForecaster(4).fit(series)
    for a, b in zip(one.predict(), two.predict()):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_a_pool_that_cannot_start_falls_back_with_a_warning(monkeypatch):
    monkeypatch.setattr(pool, "MIN_TASKS_PER_WORKER", 2)

    class Broken:
        def __init__(self, *a, **k):
            raise OSError("no processes here")
    monkeypatch.setattr(pool, "ProcessPoolExecutor", Broken)
    series = _panel(6, seed=1)
    with pytest.warns(UserWarning, match="n_jobs=2: the worker processes failed"):
        f = attnx.TransformerForecaster(4, n_jobs=2).fit(series)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = attnx.TransformerForecaster(4).fit(series)
    for a, b in zip(f.predict(), g.predict()):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("bad,err,msg", [
    (0, ValueError, "n_jobs must be >= 1"),
    (-2, ValueError, "n_jobs must be >= 1"),
    (1.5, TypeError, "n_jobs must be an int"),
    ("2", TypeError, "n_jobs must be an int"),
    (True, TypeError, "n_jobs must be an int"),
])
def test_bad_n_jobs_is_refused_naming_it(bad, err, msg):
    with pytest.raises(err, match=msg):
        attnx.TransformerForecaster(4, n_jobs=bad).fit(_panel(2))
