"""`attnx forecast` on files a user gets wrong: every message is one line naming the file,
the line, the series id and the dates, and says what to change in CLI terms."""
import numpy as np
import pytest

from attnx.__main__ import main
from attnx.forecasting import _cli_forecast

pd = pytest.importorskip("pandas")

FAST = ["--d-model", "8", "--epochs", "1", "--seed", "0", "--method", "network"]


def _monthly(n=48, start="1949-01-01", fmt="%Y-%m-%d", ids=None):
    t = pd.date_range(start, periods=n, freq="MS")
    v = 100 + 10 * np.sin(np.arange(n) * np.pi / 6) + np.arange(n)
    one = pd.DataFrame({"date": t.strftime(fmt), "y": v})
    if ids is None:
        return one
    return pd.concat([one.assign(store=k) for k in ids], ignore_index=True)[
        ["store", "date", "y"]]


def _run(tmp_path, capsys, df, *extra, name="data.csv", horizon=6, ok=False):
    src = tmp_path / name
    if isinstance(df, str):
        src.write_text(df)
    else:
        df.to_csv(src, index=False)
    out = tmp_path / "out.csv"
    out.unlink(missing_ok=True)
    rc = main(["forecast", str(src), "--horizon", str(horizon), "--time-col", "date",
               "--target", "y", "--out", str(out), *FAST, *extra])
    err = capsys.readouterr().err
    if ok:
        assert rc == 0, err
        return err, pd.read_csv(out, dtype=str)
    assert rc == 1
    last = err.splitlines()[-1]
    assert last.startswith("attnx forecast: error: ") and err.count(": error: ") == 1, err
    assert "Traceback" not in err and not out.exists()
    return last, src


def test_gap_names_the_frequency_the_dates_and_the_fix(tmp_path, capsys):
    df = _monthly().drop(index=[14, 15, 16])       # 1950-03 .. 1950-05 missing
    msg, src = _run(tmp_path, capsys, df)
    assert (f"{src}: the series is monthly (MS) but has no value between 1950-02-01 and "
            f"1950-06-01 (lines 15 and 16; 3 dates missing, from 1950-03-01): add a row for "
            f"each missing date (an empty value is filled in)") in msg
    assert "asfreq" not in msg and "DatetimeIndex" not in msg


def test_gap_in_a_panel_names_the_series(tmp_path, capsys):
    df = _monthly(ids="ab")
    df = df.drop(index=df.index[(df.store == "b") & (df.date == "1951-07-01")])
    msg, src = _run(tmp_path, capsys, df, "--id-col", "store")
    assert (f"{src}: series 'b' is monthly (MS) but has no value between 1951-06-01 and "
            f"1951-08-01") in msg and "add a row for each missing date" in msg


def test_a_date_off_the_steps_names_its_line(tmp_path, capsys):
    df = _monthly()
    df.loc[20, "date"] = "1950-09-15"
    msg, src = _run(tmp_path, capsys, df)
    assert (f"{src}: the series is monthly (MS) but line 22 has 1950-09-15, off its steps "
            f"(1950-08-01 is followed by 1950-09-01): fix or remove that row") in msg


def test_integer_steps_with_a_gap(tmp_path, capsys):
    df = pd.DataFrame({"date": list(range(10)) + list(range(12, 40)), "y": np.arange(38.0)})
    msg, src = _run(tmp_path, capsys, df)
    assert (f"{src}: the series has integer steps of 1 but no value between 9 and 12 "
            f"(2 missing, from 10): add a row for each missing step (an empty value is filled "
            f"in)") in msg


def test_dates_without_a_regular_step(tmp_path, capsys):
    df = pd.DataFrame({"date": ["2020-01-01", "2020-01-03", "2020-01-08", "2020-01-09",
                                "2020-02-01", "2020-03-05"], "y": np.arange(6.0)})
    msg, _ = _run(tmp_path, capsys, df, horizon=1)
    assert "have no regular step (the first steps: 2 days, 5 days, 1 day)" in msg
    assert "integer steps in --time-col" in msg


def test_repeated_time_stamps_suggest_the_id_column(tmp_path, capsys):
    df = _monthly(ids="ab").assign(region=lambda d: d.store.map({"a": "n", "b": "s"}),
                                   price=1.5)
    msg, src = _run(tmp_path, capsys, df)
    # store and region tell the series apart; price (real numbers) and date do not
    assert (f"{src}: the time column 'date' repeats 1949-01-01 (lines 2 and 50): the file "
            f"seems to hold several series; name the column that tells them apart with "
            f"--id-col (candidates: 'store', 'region')") in msg
    msg, _ = _run(tmp_path, capsys, df.drop(columns="region"))
    assert msg.endswith("name the column that tells them apart with --id-col store")


def test_repeated_time_stamp_within_a_series(tmp_path, capsys):
    df = _monthly(ids="ab")
    df = pd.concat([df, df.iloc[[60]]], ignore_index=True)
    msg, src = _run(tmp_path, capsys, df, "--id-col", "store")
    assert (f"{src}: series 'b' has two rows for 1950-01-01 (lines 62 and 98): keep one of "
            f"them") in msg


@pytest.mark.parametrize("value", ["1949-13-01", "not a date"])
def test_a_bad_date_names_line_column_value_and_the_options(tmp_path, capsys, value):
    df = _monthly()
    df.loc[7, "date"] = value
    msg, src = _run(tmp_path, capsys, df)
    assert (f"{src} line 9: cannot read {value!r} in the time column 'date' (--time-col) "
            f"as a date in the format of the others (%Y-%m-%d): fix it, or give the dates' "
            f"format with --date-format (e.g. --date-format %Y-%m-%d), or --dayfirst") in msg
    assert "ISO8601" not in msg and "format=" not in msg and "dayfirst=" not in msg


def test_a_date_neither_reading_accepts(tmp_path, capsys):
    df = _monthly(fmt="%d/%m/%Y")
    df.loc[3, "date"] = "31/02/1949"
    msg, src = _run(tmp_path, capsys, df)
    assert (f"{src} line 5: cannot read '31/02/1949' in the time column 'date' "
            f"(--time-col) as a date, month-first or day-first") in msg
    assert "--date-format" in msg


def test_date_format_mismatch(tmp_path, capsys):
    msg, src = _run(tmp_path, capsys, _monthly(fmt="%d/%m/%Y"), "--date-format", "%Y-%m-%d")
    assert (f"{src} line 2: '01/01/1949' in the time column 'date' (--time-col) does not "
            f"match --date-format %Y-%m-%d") in msg


def test_day_first_dates_are_read_day_first_and_said_so(tmp_path, capsys):
    """01/02/1949 month-first is 2 January: irregular steps; day-first gives a monthly
    series, which the command then uses and says so."""
    err, out = _run(tmp_path, capsys, _monthly(fmt="%d/%m/%Y"), ok=True)
    assert ("attnx forecast: dates read day-first (01/02/1949 is 1949-02-01): month-first "
            "leaves irregular steps; --dayfirst or --date-format says so") in err
    assert list(out["date"]) == list(pd.date_range("1953-01-01", periods=6, freq="MS")
                                     .strftime("%Y-%m-%d"))
    for opt in (["--dayfirst"], ["--date-format", "%d/%m/%Y"]):
        err, out2 = _run(tmp_path, capsys, _monthly(fmt="%d/%m/%Y"), *opt, ok=True)
        assert "day-first" not in err
        want = "%d/%m/%Y" if opt[0] == "--date-format" else "%Y-%m-%d"
        # --date-format writes the forecasts' dates in it too
        assert list(out2["date"]) == list(pd.date_range("1953-01-01", periods=6, freq="MS")
                                          .strftime(want))


def test_ambiguous_dates_read_month_first_say_so(tmp_path, capsys):
    """Twelve dates 01/01/2020 .. 12/01/2020 are months month-first and days day-first:
    both regular; the command reads month-first and says how to switch."""
    d = pd.date_range("2020-01-01", periods=12, freq="D")
    df = pd.DataFrame({"date": d.strftime("%d/%m/%Y"), "y": np.arange(12.0)})
    err, out = _run(tmp_path, capsys, df, horizon=2, ok=True)
    assert ("dates read month-first (02/01/2020 is 2020-02-01), though day-first gives "
            "regular steps too: pass --dayfirst if they are day-first") in err
    assert list(out["date"]) == ["2021-01-01", "2021-02-01"]
    err, out = _run(tmp_path, capsys, df, "--dayfirst", horizon=2, ok=True)
    assert list(out["date"]) == ["2020-01-13", "2020-01-14"]


@pytest.mark.parametrize("text,want", [
    ("", "file {src} is empty: it needs a header line naming the columns, then one row "
         "per series and time step"),
    ("date,y\n", "file {src} has a header (date, y) but no rows"),
    ("date,y\n1949-01-01,1\n1949-02-01,2,3\n",
     "{src} line 3: 3 fields, where the lines before it have 2 (a value holding a comma "
     "needs quotes)"),
])
def test_empty_and_malformed_files(tmp_path, capsys, text, want):
    msg, src = _run(tmp_path, capsys, text)
    assert want.format(src=src) in msg and "No columns to parse" not in msg


def test_missing_file_and_column(tmp_path, capsys):
    assert main(["forecast", str(tmp_path / "nothere.csv"), "--horizon", "2", "--time-col",
                 "date", "--target", "y"]) == 1
    assert f"file {tmp_path / 'nothere.csv'} does not exist" in capsys.readouterr().err
    msg, src = _run(tmp_path, capsys, _monthly(), "--id-col", "shop")
    assert (f"{src}: column 'shop' (--id-col) is not in the file; its columns are 'date', "
            f"'y'") in msg


def test_empty_id_and_time_cells_name_their_line(tmp_path, capsys):
    df = _monthly(ids="ab")
    df.loc[50, "store"] = np.nan
    msg, src = _run(tmp_path, capsys, df, "--id-col", "store")
    assert (f"{src} line 52: the id column 'store' (--id-col) is empty there: every row "
            f"needs its series id") in msg
    df = _monthly()
    df.loc[4, "date"] = np.nan
    msg, src = _run(tmp_path, capsys, df)
    assert f"{src} line 6: the time column 'date' (--time-col) is empty there" in msg


def test_text_and_infinite_values_name_series_date_and_line(tmp_path, capsys):
    df = _monthly(ids="ab")
    df["y"] = df["y"].astype(str)
    df.loc[55, "y"] = "12,5"
    msg, src = _run(tmp_path, capsys, df, "--id-col", "store")
    assert f"{src} line 57: '12,5' in column 'y' (--target) is not a number" in msg
    df = _monthly(ids="ab")
    df.loc[55, "y"] = np.inf
    msg, src = _run(tmp_path, capsys, df, "--id-col", "store")
    assert (f"{src} line 57: series 'b' has the value inf on 1949-08-01 (column 'y'): "
            f"write a finite number there") in msg


def test_the_forecasters_errors_are_told_by_series_id_and_date(tmp_path, capsys,
                                                               monkeypatch):
    """A message about y[i] at time step j (the forecaster's own terms) reaches the
    user as the series id, the date and the file line."""
    def fit(self, y, *a, **k):
        raise ValueError("y[1] contains NaN or infinity (first at time step 3)")
    monkeypatch.setattr(_cli_forecast.TransformerForecaster, "fit", fit)
    df = _monthly(ids="ab").sample(frac=1.0, random_state=0)   # rows in any order
    msg, src = _run(tmp_path, capsys, df, "--id-col", "store")
    line = 2 + int(np.flatnonzero((df.store.to_numpy() == "b")
                                  & (df.date.to_numpy() == "1949-04-01"))[0])
    assert msg == (f"attnx forecast: error: {src}: series 'b' has no value on 1949-04-01 "
                   f"(line {line}): write a number in column 'y' there")

    def fit2(self, y, *a, **k):
        raise ValueError("y[0] ('y') has no observed value: all its 48 values are NaN")
    monkeypatch.setattr(_cli_forecast.TransformerForecaster, "fit", fit2)
    msg, src = _run(tmp_path, capsys, df, "--id-col", "store")
    assert msg == (f"attnx forecast: error: {src}: series 'a' has no observed value: all its "
                   f"48 values are empty: write its values in column 'y', or remove its rows")


def test_empty_values_are_missing_values(tmp_path, capsys):
    """The gap messages' advice works: rows for the missing dates with an empty value
    forecast (the forecaster fills missing values)."""
    df = _monthly()
    df.loc[14:16, "y"] = np.nan
    err, out = _run(tmp_path, capsys, df, ok=True)
    assert len(out) == 6 and np.all(np.isfinite(out["forecast"].astype(float)))


def test_float_format(tmp_path, capsys):
    _, out = _run(tmp_path, capsys, _monthly(), ok=True)
    for v in out["forecast"]:
        assert len(v.replace(".", "").replace("-", "").lstrip("0")) <= 6, v   # %.6g
    _, out = _run(tmp_path, capsys, _monthly(), "--float-format", "%.2f", ok=True)
    assert all(len(v.split(".")[1]) == 2 for v in out["lower"])
    msg, _ = _run(tmp_path, capsys, _monthly(), "--float-format", "x")
    assert "--float-format must be a printf-style format of one number" in msg


@pytest.mark.parametrize("args,want", [
    (["--coverage", "1.5"], "--coverage must be in (0, 1), e.g. 0.9, got 1.5"),
    (["--horizon", "0"], "--horizon must be a positive number of steps, got 0"),
    (["--dayfirst", "--date-format", "%d/%m/%Y"], "give --date-format or --dayfirst, not both"),
])
def test_bad_options(tmp_path, capsys, args, want):
    msg, _ = _run(tmp_path, capsys, _monthly(), *args)
    assert want in msg


def test_usage_errors_are_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        main(["forecast", "x.csv", "--horizon", "3"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "the following arguments are required: --time-col, --target" in err
    assert "--help` lists the options" in err


@pytest.mark.parametrize("command", ["", "train", "predict", "forecast"])
def test_help_shows_only_true_defaults(capsys, command):
    from attnx.__main__ import _parser

    parser = _parser()
    sub = parser if not command else parser._subparsers._group_actions[0].choices[command]
    text = sub.format_help()
    assert "(default: None)" not in text
    assert "(default: True)" not in text and "(default: False)" not in text
    for action in sub._actions:
        if action.required or action.nargs == 0 or action.default is None:
            continue
        if action.option_strings and action.help:
            assert f"(default: {action.default}" in " ".join(text.split()) or \
                "default" in action.help, action.option_strings
