"""TransformerForecaster with pandas: forecasts on the future time index."""
import numpy as np
import pytest

import attnx

pd = pytest.importorskip("pandas")

TINY = dict(d_model=8, n_heads=2, n_layers=1, steps=40, random_state=0, method="network")


def _values(n, seed=0, level=10.0):
    rng = np.random.default_rng(seed)
    return level + np.sin(np.arange(n) / 2.0) + 0.1 * rng.normal(size=n)


@pytest.mark.parametrize("index,expected", [
    (pd.date_range("2020-01-31", periods=60, freq="ME"),
     pd.date_range("2025-01-31", periods=4, freq="ME")),
    (pd.period_range("2001Q1", periods=60, freq="Q"),
     pd.period_range("2016Q1", periods=4, freq="Q")),
    (pd.RangeIndex(10, 130, 2), pd.RangeIndex(130, 138, 2)),
    # no freq set (inferred), a time zone
    (pd.DatetimeIndex(list(pd.date_range("2024-03-01", periods=60, freq="h",
                                         tz="Europe/Paris"))),
     pd.date_range("2024-03-03 12:00", periods=4, freq="h", tz="Europe/Paris")),
])
def test_series_gives_series_on_the_future_index(index, expected, tmp_path):
    y = pd.Series(_values(60), index=index, name="sales")
    f = attnx.TransformerForecaster(4, **TINY).fit(y)
    p = f.predict()
    assert isinstance(p, pd.Series) and p.name == "sales"
    pd.testing.assert_index_equal(p.index, expected, check_names=False)
    # the same numbers as the arrays give (with the season the index implied: arrays
    # have no frequency, so season=None would look for one in the values instead)
    ref = attnx.TransformerForecaster(4, season=f.season_, **TINY).fit(y.to_numpy()).predict()
    np.testing.assert_array_equal(p.to_numpy(), ref)
    iv = f.predict_interval(coverage=0.8)
    assert list(iv.columns) == ["lower", "upper"] and iv.index.equals(p.index)
    assert np.all(iv["lower"] < p) and np.all(p < iv["upper"])
    q = f.predict_quantiles(quantiles=(0.9, 0.1, 0.5))
    assert list(q.columns) == [0.1, 0.5, 0.9] and q.columns.name == "quantile"
    np.testing.assert_array_equal(q[0.5].to_numpy(), p.to_numpy())
    # the index record is saved with the model
    f.save(tmp_path / "f.safetensors")
    pd.testing.assert_series_equal(attnx.load(tmp_path / "f.safetensors").predict(), p)


def test_dataframe_channels_and_list_of_series():
    idx = pd.date_range("2021-01-04", periods=70, freq="W-MON")
    df = pd.DataFrame({"a": _values(70), "b": _values(70, 1, level=3.0)}, index=idx)
    f = attnx.TransformerForecaster(3, **TINY).fit(df)
    p = f.predict()
    assert isinstance(p, pd.DataFrame) and list(p.columns) == ["a", "b"]
    assert list(p.index) == list(pd.date_range(idx[-1], periods=4, freq="W-MON")[1:])
    iv = f.predict_interval()
    assert list(iv.columns) == [("a", "lower"), ("a", "upper"), ("b", "lower"), ("b", "upper")]
    q = f.predict_quantiles(quantiles=(0.25, 0.75))
    assert list(q.columns) == [("a", 0.25), ("a", 0.75), ("b", 0.25), ("b", 0.75)]
    # predict(y=...) forecasts after the index of the series given
    later = df.iloc[:50]
    assert f.predict(later).index[0] == idx[50]

    ys = [pd.Series(_values(60 + 7 * i, i), index=pd.RangeIndex(60 + 7 * i)) for i in range(3)]
    g = attnx.TransformerForecaster(2, **TINY).fit(ys)
    out = g.predict()
    assert [list(o.index) for o in out] == [[60, 61], [67, 68], [74, 75]]
    assert len(g.predict_interval()) == 3 and isinstance(g.predict_quantiles()[2], pd.DataFrame)


def test_bad_pandas_input():
    f = attnx.TransformerForecaster(3, **TINY)
    irregular = pd.DatetimeIndex(["2020-01-01", "2020-01-02", "2020-01-05", "2020-01-06"]
                                 + [f"2020-02-{d:02d}" for d in range(1, 27)])
    with pytest.raises(ValueError, match="y has a DatetimeIndex without an inferable freq"):
        f.fit(pd.Series(_values(30), index=irregular))
    dup = pd.DatetimeIndex(["2020-01-01"] * 2 + [f"2020-01-{d:02d}" for d in range(2, 30)])
    with pytest.raises(ValueError, match="duplicate time stamps"):
        f.fit(pd.Series(_values(30), index=dup))
    with pytest.raises(TypeError, match="y must have a DatetimeIndex, a PeriodIndex"):
        f.fit(pd.Series(_values(30), index=[f"s{i}" for i in range(30)]))
    with pytest.raises(TypeError, match=r"not a mix \(item 1 is a ndarray\)"):
        f.fit([pd.Series(_values(30)), _values(30)])
    with pytest.raises(ValueError, match="constant step"):
        f.fit(pd.Series(_values(30), index=np.r_[np.arange(29), 40]))
