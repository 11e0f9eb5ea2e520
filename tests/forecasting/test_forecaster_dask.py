"""Many series on Dask (attnx.forecasting.dask): the forecasts of a panel spread over a
LocalCluster of two worker processes are those of one TransformerForecaster fitted on
the whole panel in this process, bit for bit.

Skipped without dask.distributed, unless ATTNX_REQUIRE_DASK=1 (CI), where that fails.
"""
import logging
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import attnx
from attnx.forecasting import _selection as sel

ROOT = Path(attnx.__file__).resolve().parent.parent
from dask_checks import ONE_THREAD
from dask_checks import require_dask as _require


pd = pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def client():
    dist = _require("distributed")
    _require("dask.dataframe")
    env = dict(ONE_THREAD, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    with dist.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, env=env,
                           dashboard_address=":0", silence_logs=logging.ERROR) as cluster, \
            dist.Client(cluster) as c:
        yield c


def _mixed(n, h, seed):
    """Short and long series, seasonal (period 4) or not, some with gaps: leading,
    interior and trailing NaNs."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        length = int(rng.integers(h + 3, 20)) if i % 3 == 0 else int(rng.integers(40, 70))
        t = np.arange(length)
        y = 10 + 0.03 * t * (i % 2) + rng.normal(0, 1, length)
        if i % 2:
            y += 3 * np.sin(2 * np.pi * t / 4)
        if i % 4 == 1:
            y[length // 2] = np.nan
        if i % 7 == 3:
            y[0] = np.nan
        if i % 9 == 5:
            y[-1] = np.nan
        out.append(y)
    return out


def _intervals(pairs):
    return np.concatenate([a for a, _ in pairs]), np.concatenate([b for _, b in pairs])


def test_a_list_of_series_gets_the_forecasts_of_one_process(client):
    """The default method (every candidate chosen per series), the season found from
    the data, and short series that borrow the pooled scores (selected exactly on
    the workers) next to long ones with their own."""
    from attnx.forecasting import dask as adask

    h = 8
    series = _mixed(27, h, seed=0)
    ref = attnx.TransformerForecaster(h).fit(series)
    shared = {id(s) for s in ref.scores_}
    assert 1 < len(shared) < len(series)   # some series borrow, others have their own
    out = adask.forecast(series, h, client=client, coverage=[0.8, 0.95],
                         quantiles=(0.1, 0.5, 0.8), partitions=5)
    assert list(out.columns) == ["unique_id", "ds", "forecast", "lower_0.8", "upper_0.8",
                                 "lower_0.95", "upper_0.95", "q_0.1", "q_0.5", "q_0.8"]
    np.testing.assert_array_equal(out["unique_id"], np.repeat(np.arange(len(series)), h))
    want_ds = np.concatenate([np.arange(len(s), len(s) + h) for s in series])
    np.testing.assert_array_equal(out["ds"], want_ds)
    np.testing.assert_array_equal(out["forecast"], np.concatenate(ref.predict()))
    for c in (0.8, 0.95):
        lo, hi = _intervals(ref.predict_interval(coverage=c))
        np.testing.assert_array_equal(out[f"lower_{c:g}"], lo)
        np.testing.assert_array_equal(out[f"upper_{c:g}"], hi)
    q = np.concatenate(ref.predict_quantiles(quantiles=(0.1, 0.5, 0.8)))
    np.testing.assert_array_equal(out[["q_0.1", "q_0.5", "q_0.8"]].to_numpy(), q)


def _monthly(n, seed):
    """Monthly pandas series (the season from the index: 12), some with NaN values."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        length = int(rng.integers(30, 50))
        t = np.arange(length)
        y = 50 + (5 * np.sin(2 * np.pi * t / 12) if i % 2 else 0.2 * t) \
            + rng.normal(0, 1, length)
        if i % 3 == 0:
            y[length // 3] = np.nan
        start = pd.Timestamp("2010-01-01") + pd.DateOffset(months=int(rng.integers(0, 6)))
        out.append(pd.Series(y, index=pd.date_range(start, periods=length, freq="MS"),
                             name="y"))
    return out


def _long(series, drop_nan):
    rows = []
    for i, s in enumerate(series):
        part = pd.DataFrame({"unique_id": f"s{i:02d}", "ds": s.index, "y": s.to_numpy()})
        rows.append(part.dropna() if drop_nan else part)
    return pd.concat(rows, ignore_index=True).sample(frac=1.0, random_state=1)


def test_pandas_and_dask_frames_get_the_forecasts_of_one_process(client):
    dd = _require("dask.dataframe")
    from attnx.forecasting import dask as adask

    h = 6
    series = _monthly(14, seed=3)
    ref = attnx.TransformerForecaster(h, method="theta").fit(series)
    assert ref.season_ == 12
    point = np.concatenate([p.to_numpy() for p in ref.predict()])
    bounds = ref.predict_interval(coverage=0.9)
    lower = np.concatenate([b["lower"].to_numpy() for b in bounds])
    stamps = np.concatenate([p.index.to_numpy() for p in ref.predict()])
    ids = np.repeat([f"s{i:02d}" for i in range(len(series))], h)

    # NaN rows left out: freq places them back on the calendar as gaps
    frame = _long(series, drop_nan=True)
    out = adask.forecast(frame, h, client=client, method="theta", freq="MS")
    assert isinstance(out, pd.DataFrame)
    np.testing.assert_array_equal(out["unique_id"], ids)
    np.testing.assert_array_equal(out["ds"].to_numpy(), stamps)
    np.testing.assert_array_equal(out["forecast"], point)
    np.testing.assert_array_equal(out["lower"], lower)

    full = _long(series, drop_nan=False)
    shuffled = dd.from_pandas(full, npartitions=3)                # series across partitions
    indexed = dd.from_pandas(full.set_index("unique_id").sort_index(), npartitions=3)
    for ddf in (shuffled, indexed):
        lazy = adask.forecast(ddf, h, client=client, method="theta")
        assert isinstance(lazy, dd.DataFrame)
        got = lazy.compute().sort_values(["unique_id", "ds"], kind="stable")
        np.testing.assert_array_equal(got["unique_id"], ids)
        np.testing.assert_array_equal(got["forecast"], point)
        np.testing.assert_array_equal(got["lower"], lower)


def test_bad_input_is_named(client):
    from attnx.forecasting import dask as adask

    frame = _long(_monthly(3, seed=1), drop_nan=False)
    with pytest.raises(ValueError, match=r"no column 'value' \(target\)"):
        adask.forecast(frame, 3, client=client, target="value")
    short = pd.DataFrame({"unique_id": "tiny", "ds": pd.date_range("2020-01-01", periods=4,
                                                                   freq="MS"), "y": 1.0})
    with pytest.raises(ValueError, match=r"series 'tiny' has 4 observed value\(s\) "
                                         r"\(from 2020-01-01 to 2020-04-01\); at least "
                                         r"horizon \+ 2 = 5"):
        adask.forecast(pd.concat([frame, short]), 3, client=client, method="theta")
    gap = frame[frame.ds != frame.ds.iloc[5]]
    with pytest.raises(ValueError, match=r"no regular frequency.*pass freq"):
        adask.forecast(gap, 3, client=client, method="theta")
    with pytest.raises(ValueError, match="network path"):
        adask.forecast(frame, 3, client=client, method="network")
    with pytest.raises(ValueError, match="n_jobs does not apply"):
        adask.forecast(frame, 3, client=client, n_jobs=2)
    with pytest.raises(ValueError, match="coverage must be in"):
        adask.forecast(frame, 3, client=client, coverage=1.5)
    with pytest.raises(TypeError, match="data must be"):
        adask.forecast(np.zeros(30), 3, client=client)


def test_without_dask_the_error_says_what_to_install(monkeypatch):
    from attnx.forecasting import dask as adask

    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(ImportError, match=r'pip install "attnx\[dask\]"'):
        adask.forecast([np.arange(20.0)], 2)


def test_the_cli_on_a_local_cluster_writes_the_forecasts_without_it(tmp_path):
    _require("distributed")
    from attnx.__main__ import main

    frame = _long(_monthly(4, seed=2), drop_nan=False)
    src = tmp_path / "data.csv"
    frame.to_csv(src, index=False)
    common = ["forecast", str(src), "--horizon", "3", "--time-col", "ds", "--target", "y",
              "--id-col", "unique_id", "--float-format", "%.17g"]
    assert main([*common, "--out", str(tmp_path / "one.csv")]) == 0
    assert main([*common, "--out", str(tmp_path / "dask.csv"), "--dask", "local"]) == 0
    one, on_dask = pd.read_csv(tmp_path / "one.csv"), pd.read_csv(tmp_path / "dask.csv")
    pd.testing.assert_frame_equal(one, on_dask)
    assert list(one.columns) == ["unique_id", "ds", "forecast", "lower", "upper"]


def test_the_pooled_scores_quantiles_are_the_order_statistics_of_one_array():
    """step_quantiles_from with counts and ranks (the selection's interface) gives
    step_quantiles of the stacked scores."""
    rng = np.random.default_rng(0)
    scores = rng.exponential(size=(37, 5))
    scores[rng.random(scores.shape) < 0.2] = np.nan
    cols = [scores[:, j][~np.isnan(scores[:, j])] for j in range(5)]
    flat = scores[~np.isnan(scores)]

    def count(col):
        return flat.size if col is None else cols[col].size

    def kth(col, rank):
        return float(np.sort(flat if col is None else cols[col])[rank - 1])
    for level in (0.5, 0.94, 0.99):
        np.testing.assert_array_equal(sel.step_quantiles_from(5, level, count, kth),
                                      sel.step_quantiles(scores, 5, level))
