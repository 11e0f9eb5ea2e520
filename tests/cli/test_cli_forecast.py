"""`attnx forecast`: long-format CSV / Parquet in, forecasts with intervals out."""
import numpy as np
import pytest

import attnx
from attnx.__main__ import main

pd = pytest.importorskip("pandas")

FAST = ["--d-model", "8", "--epochs", "2", "--seed", "0", "--method", "network"]


def _long(n=(40, 52)):
    rows = []
    for k, length in zip("ab", n):
        rng = np.random.default_rng(len(rows))
        t = pd.date_range("2015-01-01", periods=length, freq="MS")
        v = 10 + np.sin(np.arange(length) / 2.0) + 0.1 * rng.normal(size=length)
        rows.append(pd.DataFrame({"store": k, "date": t.strftime("%Y-%m-%d"), "y": v}))
    return pd.concat(rows, ignore_index=True)


def _check_output(path, df, h):
    out = pd.read_csv(path)
    assert list(out.columns) == ["store", "date", "forecast", "lower", "upper"]
    assert len(out) == 2 * h
    for k, part in out.groupby("store"):
        last = pd.Timestamp(df.loc[df.store == k, "date"].max())
        want = pd.date_range(last, periods=h + 1, freq="MS")[1:]
        assert list(pd.to_datetime(part["date"])) == list(want)
    assert np.all(out["lower"] < out["forecast"]) and np.all(out["forecast"] < out["upper"])
    return out


@pytest.mark.parametrize("intervals", ["conformal", "quantile"])
def test_csv_round_trip_matches_the_api(tmp_path, capsys, intervals):
    df = _long()
    src = tmp_path / "data.csv"
    df.sample(frac=1.0, random_state=0).to_csv(src, index=False)   # rows in any order
    dst = tmp_path / "f.csv"
    rc = main(["forecast", str(src), "--horizon", "3", "--time-col", "date", "--target", "y",
               "--id-col", "store", "--out", str(dst), "--coverage", "0.8",
               "--intervals", intervals, "--float-format", "%.17g", *FAST])
    assert rc == 0 and "2 series x 3 steps" in capsys.readouterr().out
    out = _check_output(dst, df, 3)
    series = [df[df.store == k].set_index(pd.DatetimeIndex(df[df.store == k].date))["y"]
              for k in "ab"]
    f = attnx.TransformerForecaster(3, d_model=8, epochs=2, random_state=0, method="network",
                                    intervals=intervals).fit(series)
    want = np.concatenate([p.to_numpy() for p in f.predict()])
    np.testing.assert_allclose(out["forecast"].to_numpy(), want, rtol=1e-12)
    lo = np.concatenate([b["lower"].to_numpy() for b in f.predict_interval(coverage=0.8)])
    np.testing.assert_allclose(out["lower"].to_numpy(), lo, rtol=1e-12)


def test_parquet_and_one_series_with_integer_steps(tmp_path):
    pytest.importorskip("pyarrow")
    df = _long()
    src = tmp_path / "data.parquet"
    df.to_parquet(src)
    dst = tmp_path / "f.csv"
    assert main(["forecast", str(src), "--horizon", "2", "--time-col", "date", "--target",
                 "y", "--id-col", "store", "--out", str(dst), *FAST]) == 0
    _check_output(dst, df, 2)
    one = pd.DataFrame({"step": np.arange(5, 65, 1), "y": np.sin(np.arange(60) / 3.0)})
    one.to_csv(tmp_path / "one.csv", index=False)
    assert main(["forecast", str(tmp_path / "one.csv"), "--horizon", "4", "--time-col",
                 "step", "--target", "y", "--out", str(dst), *FAST]) == 0
    out = pd.read_csv(dst)
    assert list(out.columns) == ["step", "forecast", "lower", "upper"]
    assert list(out["step"]) == [65, 66, 67, 68]


@pytest.mark.parametrize("edit,args,msg", [
    (None, ["--target", "sales"], "column 'sales' (--target) is not in the file"),
    (None, ["--id-col", "shop"], "column 'shop' (--id-col) is not in the file"),
    ("dup", [], "series 'a' has two rows for 2015-01-01 (lines 2 and 3): keep one"),
    ("short", [], "series 'b' has 4 rows, fewer than horizon + 2 = 5: give a shorter "
                  "--horizon or more rows"),
    ("gap", [], "series 'a' is monthly (MS) but has no value between 2015-05-01 and "
                "2015-07-01 (lines 6 and 7; 1 date missing, from 2015-06-01): add a row"),
    ("text", [], "line 5: 'n/a?' in column 'y' (--target) is not a number"),
])
def test_bad_files(tmp_path, capsys, edit, args, msg):
    df = _long()
    if edit == "dup":
        df = pd.concat([df.iloc[:1], df], ignore_index=True)
    elif edit == "short":
        df = pd.concat([df[df.store == "a"], df[df.store == "b"].iloc[:4]])
    elif edit == "gap":
        df = df.drop(index=[5, 9])
    elif edit == "text":
        df["y"] = df["y"].astype(str)
        df.loc[3, "y"] = "n/a?"
    src = tmp_path / "data.csv"
    df.to_csv(src, index=False)
    base = {"--time-col": "date", "--target": "y", "--id-col": "store"}
    base.update(dict(zip(args[::2], args[1::2])))
    argv = ["forecast", str(src), "--horizon", "3", "--out", str(tmp_path / "o.csv"), *FAST]
    for k, v in base.items():
        argv += [k, v]
    assert main(argv) == 1
    err = capsys.readouterr().err
    # status lines first ("reading ..."), the error last
    assert err.splitlines()[-1].startswith("attnx forecast: error:") and msg in err, err
    assert not (tmp_path / "o.csv").exists()


def test_status_lines_say_what_runs(tmp_path, capsys):
    """The command says what it does on stderr before training (reading, then what it
    trains on); --verbose adds the training's progress bars, named for their phase."""
    df = _long()
    src = tmp_path / "data.csv"
    df.to_csv(src, index=False)
    args = ["forecast", str(src), "--horizon", "3", "--time-col", "date", "--target", "y",
            "--id-col", "store", "--out", str(tmp_path / "f.csv"), *FAST]
    assert main(args) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == f"attnx forecast: reading {src}"
    assert lines[1].startswith("attnx forecast: training one forecaster on 2 series of "
                               "40-52 steps, horizon 3")
    assert "fit" not in " ".join(lines[2:])        # no bars without --verbose
    assert main(args + ["--verbose"]) == 0
    err = capsys.readouterr().err
    assert "--verbose" not in err.splitlines()[1]
    # one bar per training phase, each over its optimizer steps, left on screen
    bars = [line.split("\r")[-1] for line in err.split("\n")[2:] if "step" in line]
    assert [b.split(":")[0] for b in bars] == ["held-out run", "final fit"], bars


def test_method_auto_matches_the_api(tmp_path, capsys):
    """--method auto: the classical candidates, as TransformerForecaster(method="auto")."""
    df = _long()
    src = tmp_path / "data.csv"
    df.to_csv(src, index=False)
    dst = tmp_path / "f.csv"
    assert main(["forecast", str(src), "--horizon", "3", "--time-col", "date", "--target",
                 "y", "--id-col", "store", "--out", str(dst), "--method", "auto",
                 "--seed", "0", "--float-format", "%.17g"]) == 0
    out = _check_output(dst, df, 3)
    # the series as the command reads them back from the file (a choice among near-tied
    # candidates may follow the CSV's last digits)
    from attnx.forecasting._cli_forecast import series_of
    _, series = series_of(pd.read_csv(src), "date", "y", "store", 3)
    f = attnx.TransformerForecaster(3, method="auto", random_state=0).fit(series)
    assert f.method_ != "network"
    assert f"forecasting with {f.method_}" in capsys.readouterr().err
    want = np.concatenate([p.to_numpy() for p in f.predict()])
    np.testing.assert_allclose(out["forecast"].to_numpy(), want, rtol=1e-12)
