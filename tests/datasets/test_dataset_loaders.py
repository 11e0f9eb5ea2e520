"""attnx.datasets' readers of data sets shipped inside other packages: read_ts on files
written here, and the three loaders (sktime and statsmodels come with the test extra:
statsmodels through statsforecast)."""
import numpy as np
import pytest

from attnx import datasets


def _write(tmp_path, text):
    path = tmp_path / "x.ts"
    path.write_text(text)
    return path


def test_read_ts_ragged_channels_and_labels(tmp_path):
    path = _write(tmp_path, "# comment\n@problemName x\n@classLabel true a b\n@data\n"
                            "1,2,3:4,5,6:a\n\n7,8:9,10:b\n")
    X, y = datasets.read_ts(path)
    assert [x.shape for x in X] == [(3, 2), (2, 2)]
    np.testing.assert_array_equal(X[0][:, 1], [4, 5, 6])
    np.testing.assert_array_equal(X[1][:, 0], [7, 8])
    assert X[0].dtype == np.float64
    assert list(y) == ["a", "b"]


@pytest.mark.parametrize("body, match", [
    ("1,?,3:a\n", r"line 2: a value is not a number"),
    ("1,2,3:4,5:a\n", r"line 2: the channels have different lengths \[3, 2\]"),
    ("", r"no cases after an @data line"),
])
def test_read_ts_names_file_and_line(tmp_path, body, match):
    path = _write(tmp_path, "@data\n" + body)
    with pytest.raises(ValueError, match=match):
        datasets.read_ts(path)


def test_load_japanese_vowels():
    X, y = datasets.load_japanese_vowels("TRAIN")
    Xt, yt = datasets.load_japanese_vowels("TEST")
    assert (len(X), len(Xt)) == (270, 370)
    lengths = [len(x) for x in X + Xt]
    assert {x.shape[1] for x in X + Xt} == {12}
    assert (min(lengths), max(lengths)) == (7, 29)
    assert sorted(set(y)) == sorted(set(yt)) == [str(i) for i in range(1, 10)]
    with pytest.raises(ValueError, match="split must be 'TRAIN' or 'TEST', got 'train'"):
        datasets.load_japanese_vowels("train")


def test_load_sunspots():
    years, values = datasets.load_sunspots()
    assert len(years) == len(values) == 309
    assert (years[0], years[-1]) == (1700, 2008)
    np.testing.assert_array_equal(np.diff(years), 1)
    assert values.dtype == np.float64 and (values >= 0).all()


def test_load_co2():
    co2 = datasets.load_co2()
    assert len(co2) == 526
    assert (f"{co2.index[0]:%Y-%m}", f"{co2.index[-1]:%Y-%m}") == ("1958-03", "2001-12")
    assert co2.index.freqstr == "MS"
    assert not co2.isna().any() and 300 < co2.min() < co2.max() < 400
