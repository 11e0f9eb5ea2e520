"""`attnx forecast`: forecasts for every series of a long-format CSV or Parquet file.

    attnx forecast data.csv --horizon 24 --time-col date --target y [--id-col series]
                   [--out forecasts.csv] [--coverage 0.9]

The file holds one row per series and time step (long format): a time column (dates,
or integer steps), a target column and, for several series, an id column. One
TransformerForecaster is trained on all the series (a global model) and the next
`horizon` steps of each are written as CSV: id, time, forecast, lower, upper (the
split-conformal interval of the given coverage). Reading needs pandas (and pyarrow
for Parquet): ``pip install attnx[pandas]``.

Every problem with the file is reported in the user's terms: the file, the line (CSV;
the row for Parquet), the column and its option, the series id and the dates, and what
to change in the file or on the command line.

Dates: with --date-format, the column is read in that strftime format (and the
forecasts' dates are written in it); with --dayfirst, 01/02/1949 is 1 February.
Without either, pandas reads the dates (month-first when ambiguous); when that reading
fails or leaves a series without a regular step but the day-first reading gives every
series a regular step, the day-first reading is used and a status line says so.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .forecaster import TransformerForecaster

__all__ = ["add_parser", "run", "read_table", "series_of"]


def add_parser(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    """Register the forecast command on the subparsers `sub`."""
    f = sub.add_parser("forecast", formatter_class=fmt,
                       help="forecast every series of a long-format CSV / Parquet file",
                       description="Train one TransformerForecaster on every series of a "
                                   "long-format CSV or Parquet file (one row per series and "
                                   "time step) and write the next HORIZON values of each, "
                                   "with conformal intervals, as CSV: id, time, forecast, "
                                   "lower, upper. Needs pandas (and pyarrow for Parquet).")
    f.add_argument("data", help="CSV or Parquet file (.parquet / .pq) in long format")
    f.add_argument("--horizon", type=int, required=True, help="steps to forecast")
    f.add_argument("--time-col", required=True,
                   help="column of the time stamps (dates with a regular frequency, or "
                        "integer steps)")
    f.add_argument("--target", required=True, help="column of the values to forecast")
    f.add_argument("--id-col", default=None,
                   help="column naming the series (several series in one file)")
    f.add_argument("--date-format", default=None, metavar="FORMAT",
                   help="strftime format of the dates in --time-col, e.g. %%d/%%m/%%Y; "
                        "the forecasts' dates are written in it too (default: read as "
                        "pandas does, month-first when ambiguous, day-first when only "
                        "that gives every series a regular step)")
    f.add_argument("--dayfirst", action="store_true",
                   help="read ambiguous dates day-first: 01/02/1949 is 1 February")
    f.add_argument("--out", default="forecasts.csv", help="CSV file to write")
    f.add_argument("--float-format", default="%.6g", metavar="FORMAT",
                   help="printf-style format of the values written (%%.6g: 6 significant "
                        "digits; %%.2f: two decimals)")
    f.add_argument("--coverage", type=float, default=0.9,
                   help="coverage of the prediction intervals, in (0, 1)")
    f.add_argument("--intervals", choices=("conformal", "quantile"), default="conformal",
                   help="conformal: calibrated errors of the point forecast; quantile: the "
                        "network learns quantile levels (pinball loss), calibrated")
    f.add_argument("--method", choices=("network", "auto"), default=None,
                   help="auto (default; the network with --intervals quantile): candidates "
                        "chosen per series on rolling origins (classical models and the "
                        "pretrained network; about a second per series); network: one "
                        "transformer trained on all the series (series too short for its "
                        "windows fall back to auto)")
    f.add_argument("--n-jobs", type=int, default=None,
                   help="worker processes for auto's candidates over many series (-1: one "
                        "per CPU; default: this process)")
    f.add_argument("--dask", default=None, metavar="ADDRESS",
                   help="choose the series on a Dask cluster (auto only; needs "
                        "attnx[dask]): its scheduler's address, e.g. tcp://host:8786, or "
                        "local to start one worker process per CPU here; the same "
                        "forecasts as without it")
    f.add_argument("--season", type=int, default=None,
                   help="seasonal period (12 for monthly data with a yearly cycle; "
                        "default: from the time column's frequency, else from the data)")
    f.add_argument("--window", type=int, default=None,
                   help="context length (default: chosen from the data)")
    f.add_argument("--d-model", type=int, default=64, help="transformer width")
    f.add_argument("--steps", type=int, default=500, help="optimizer steps to train for")
    f.add_argument("--epochs", type=int, default=None,
                   help="epochs to train for (overrides --steps)")
    f.add_argument("--seed", type=int, default=0, help="seed of the weights and shuffling")
    f.add_argument("-v", "--verbose", action="store_true",
                   help="a progress bar per training phase (held-out run, final fit)")
    f.set_defaults(run=run, command="forecast")


# ---- reading the file ------------------------------------------------------
def read_table(path: str) -> Any:
    """A CSV or Parquet file as a DataFrame (Parquet by its extension); a one-line
    ValueError / OSError naming the file when it cannot be read or holds no rows."""
    import pandas as pd

    parquet = os.path.splitext(path)[1].lower() in (".parquet", ".pq")
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path} is a folder, not a CSV or Parquet file")
    if not os.path.exists(path):
        raise FileNotFoundError(f"file {path} does not exist")
    try:
        df = pd.read_parquet(path) if parquet else pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise ValueError(f"file {path} is empty: it needs a header line naming the columns, "
                         f"then one row per series and time step") from None
    except pd.errors.ParserError as exc:
        m = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(exc))
        if m:
            raise ValueError(f"{path} line {m[2]}: {m[3]} fields, where the lines before "
                             f"it have {m[1]} (a value holding a comma needs quotes)") from None
        raise ValueError(f"cannot read {path} as CSV: {_one_line(exc)}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"cannot read {path}: it is not UTF-8 text (byte {exc.start} "
                         f"cannot be decoded); save it as UTF-8 CSV") from None
    except PermissionError:
        raise PermissionError(f"cannot read {path}: permission denied") from None
    except ImportError:
        raise
    except Exception as exc:   # pyarrow's errors for a file that is not Parquet
        if not parquet:
            raise
        raise ValueError(f"cannot read {path} as Parquet: {_one_line(exc)}") from None
    if len(df) == 0:
        raise ValueError(f"file {path} has a header ({', '.join(map(str, df.columns))}) "
                         f"but no rows")
    return df


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


@dataclass
class _Table:
    """The series of a file, as the command reads them."""
    path: str
    id_col: str | None
    parquet: bool
    ids: list[Any] = field(default_factory=list)
    series: list[Any] = field(default_factory=list)
    rows: list[np.ndarray] = field(default_factory=list)   # file row of each value
    notes: list[str] = field(default_factory=list)         # status lines (how dates read)

    def line(self, row: int) -> str:
        """'line 5' for the 0-based data row `row` of a CSV (the header is line 1), 'row 4'
        of a Parquet file."""
        return f"row {row + 1}" if self.parquet else f"line {row + 2}"

    def lines(self, a: int, b: int) -> str:
        """'lines 5 and 9' (rows of a Parquet file)."""
        word = "rows" if self.parquet else "lines"
        return f"{word} {self.line(a).split()[1]} and {self.line(b).split()[1]}"

    def at(self, row: int) -> str:
        """'data.csv line 5'."""
        return f"{self.path} {self.line(row)}"

    def name(self, key: Any) -> str:
        return f"series {key!r}" if self.id_col is not None else "the series"


def _when(t: Any) -> str:
    """A time stamp as a user reads it: 1950-03-01, or with its clock time."""
    import pandas as pd

    if isinstance(t, pd.Timestamp):
        if t == t.normalize():
            return str(t.strftime("%Y-%m-%d"))
        return str(t.isoformat(sep=" "))
    return str(t)


def _span(td: Any) -> str:
    """A time difference as '3 days' or '1 days 06:00:00' (its clock part when it has one)."""
    text = str(td)
    text = text[:-9] if text.endswith(" 00:00:00") else text
    return "1 day" + text[6:] if text.startswith("1 days") else text


_UNITS = (("YearBegin", "yearly"), ("YearEnd", "yearly"), ("QuarterBegin", "quarterly"),
          ("QuarterEnd", "quarterly"), ("MonthBegin", "monthly"), ("MonthEnd", "monthly"),
          ("BusinessMonthBegin", "monthly"), ("BusinessMonthEnd", "monthly"),
          ("Week", "weekly"), ("BusinessDay", "business-daily"), ("Day", "daily"),
          ("Hour", "hourly"), ("Minute", "minutely"), ("Second", "every second"))


def _freq_text(freq: str) -> str:
    """'monthly (MS)', 'hourly (h)', or 'steps of 30min (30min)'."""
    import pandas as pd

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        off = pd.tseries.frequencies.to_offset(freq)
    if abs(int(off.n)) == 1:
        for cls, word in _UNITS:
            kind = getattr(pd.offsets, cls, None)
            if kind is not None and type(off) is kind:
                return f"{word} ({freq})"
    return f"steps of {freq}"


def _read_numbers(df: Any, target: str, table: _Table) -> np.ndarray:
    import pandas as pd

    raw = df[target]
    values = pd.to_numeric(raw, errors="coerce")
    bad = values.isna().to_numpy() & raw.notna().to_numpy()
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{table.at(i)}: {raw.iloc[i]!r} in column {target!r} (--target) is "
                         f"not a number: write a number there")
    out: np.ndarray = values.to_numpy(dtype=np.float64)
    return out


_AMBIGUOUS = re.compile(r"^\s*\d{1,2}[/.\-]\d{1,2}[/.\-]\d{2,4}\b")


def _parse_dates(raw: Any, fmt: str | None, dayfirst: bool) -> Any:
    """raw parsed as datetimes (NaT where a value does not parse)."""
    import pandas as pd

    with warnings.catch_warnings():   # pandas' hints on formats name its own arguments
        warnings.simplefilter("ignore")
        if fmt is not None:
            return pd.to_datetime(raw.astype(str), format=fmt, errors="coerce")
        return pd.to_datetime(raw, dayfirst=dayfirst, errors="coerce")


def _read_times(df: Any, time_col: str, table: _Table, fmt: str | None,
                dayfirst: bool) -> tuple[Any, Any | None]:
    """(the time column as integer steps or datetimes, the day-first reading when that
    is an alternative worth trying, else None)."""
    import pandas as pd

    raw = df[time_col]
    missing = raw.isna().to_numpy()
    if missing.any():
        raise ValueError(f"{table.at(int(np.argmax(missing)))}: the time column {time_col!r} "
                         f"(--time-col) is empty there: every row needs its time stamp")
    if fmt is None:
        if pd.api.types.is_integer_dtype(raw.dtype):
            return raw, None
        if pd.api.types.is_datetime64_any_dtype(raw.dtype):
            return raw, None
        if pd.api.types.is_float_dtype(raw.dtype):
            frac = raw.to_numpy() != np.round(raw.to_numpy())
            if frac.any():
                i = int(np.argmax(frac))
                raise ValueError(f"{table.at(i)}: {raw.iloc[i]!r} in the time column "
                                 f"{time_col!r} (--time-col) is neither a date nor an "
                                 f"integer step")
            return raw.astype(np.int64), None
    try:
        times = _parse_dates(raw, fmt, dayfirst)
    except (ValueError, TypeError, OverflowError) as exc:
        hint = ("check --date-format" if fmt is not None
                else "give their format with --date-format")
        raise ValueError(f"{table.path}: cannot read the dates of column {time_col!r} "
                         f"(--time-col): {_one_line(exc)}; {hint}") from None
    alt = None
    if fmt is None and not dayfirst:
        first = str(raw.iloc[0])
        if _AMBIGUOUS.match(first):
            try:
                alt = _parse_dates(raw, None, True)
            except (ValueError, TypeError, OverflowError):
                alt = None
    return times, alt


def _bad_date(raw: Any, times: Any, time_col: str, table: _Table, fmt: str | None,
              dayfirst: bool = False, alt: Any = None) -> str | None:
    """The message for the first value that did not parse as a date, or None."""
    bad = times.isna().to_numpy()
    if not bad.any():
        return None
    i = int(np.argmax(bad))
    if fmt is not None:
        return (f"{table.at(i)}: {raw.iloc[i]!r} in the time column {time_col!r} "
                f"(--time-col) does not match --date-format {fmt}")
    if alt is not None and pd_isna(alt.iloc[i]):
        return (f"{table.at(i)}: cannot read {str(raw.iloc[i])!r} in the time column "
                f"{time_col!r} (--time-col) as a date, month-first or day-first: fix it, or "
                f"give the dates' format with --date-format (e.g. --date-format %d/%m/%Y)")
    first = str(raw[~bad].iloc[0]) if (~bad).any() else None
    guess = _guess_format(first, dayfirst) if first is not None else None
    like = f" in the format of the others ({guess})" if guess else ""
    example = guess or "%d/%m/%Y"
    return (f"{table.at(i)}: cannot read {str(raw.iloc[i])!r} in the time column "
            f"{time_col!r} (--time-col) as a date{like}: fix it, or give the dates' format "
            f"with --date-format (e.g. --date-format {example}), or --dayfirst for "
            f"day-first dates")


def pd_isna(v: Any) -> bool:
    import pandas as pd
    return bool(pd.isna(v))


def _guess_format(text: str, dayfirst: bool = False) -> str | None:
    """The strftime format pandas reads `text` in, when it can tell."""
    try:
        from pandas.tseries.api import guess_datetime_format
    except ImportError:   # pandas < 2.2
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            fmt: str | None = guess_datetime_format(text, dayfirst=dayfirst)
        except (TypeError, ValueError):
            return None
    return fmt


def _irregular(idx: Any, rows: np.ndarray, table: _Table, what: str) -> str:
    """What is wrong with the steps of the sorted, duplicate-free time stamps idx (a
    DatetimeIndex with no frequency, or integer steps), in the file's terms."""
    import pandas as pd

    n = len(idx)
    if isinstance(idx, pd.DatetimeIndex):
        starts = np.unique(np.linspace(0, n - 3, num=min(n - 2, 400)).astype(int))
        counts: collections.Counter[str] = collections.Counter()
        for i in starts:
            try:
                fq = pd.infer_freq(idx[i:i + 3])
            except (TypeError, ValueError):
                fq = None
            if fq is not None:
                counts[fq] += 1
        best, hits, nxt, best_off = None, -1, None, None
        for fq, _ in counts.most_common(5):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                off = pd.tseries.frequencies.to_offset(fq)
                after = idx[:-1] + off
            h = int(np.sum(after == idx[1:]))
            if h > hits:
                best, hits, nxt, best_off = fq, h, after, off
        if best is None or nxt is None or best_off is None or hits < (n - 1) / 2:
            steps = [_span(b - a) for a, b in zip(idx[:4], idx[1:4])]
            return (f"{table.path}: the dates of {what} have no regular step (the first "
                    f"steps: {', '.join(steps)}): the forecaster needs dates with a regular "
                    f"frequency (daily, monthly, ...) or integer steps in --time-col")
        unit = _freq_text(best)
        i = int(np.argmax(nxt != idx[1:]))
        a, b, want = idx[i], idx[i + 1], nxt[i]
        if b > want and best_off.is_on_offset(b):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                gap = len(pd.date_range(want, b, freq=best, inclusive="left"))
            return (f"{table.path}: {what} is {unit} but has no value between {_when(a)} and "
                    f"{_when(b)} ({table.lines(int(rows[i]), int(rows[i + 1]))}; {gap} "
                    f"{'date' if gap == 1 else 'dates'} missing, from {_when(want)}): add a "
                    f"row for each missing date (an empty value is filled in)")
        return (f"{table.path}: {what} is {unit} but {table.line(int(rows[i + 1]))} has "
                f"{_when(b)}, off its steps ({_when(a)} is followed by {_when(want)}): fix "
                f"or remove that row")
    vals = np.asarray(idx, dtype=np.int64)
    diffs = np.diff(vals)
    uniq, cnt = np.unique(diffs, return_counts=True)
    step = int(uniq[np.argmax(cnt)])
    i = int(np.argmax(diffs != step))
    a, b = int(vals[i]), int(vals[i + 1])
    if b - a > step and (b - a) % step == 0:
        return (f"{table.path}: {what} has integer steps of {step} but no value between {a} "
                f"and {b} ({(b - a) // step - 1} missing, from {a + step}): add a row for "
                f"each missing step (an empty value is filled in)")
    return (f"{table.path}: {what} has integer steps of {step} but "
            f"{table.line(int(rows[i + 1]))} has {b} after {a}: the time "
            f"column must advance by one step per row of a series")


def _split(times: Any, values: np.ndarray, keys: Any, table: _Table, time_col: str,
           horizon: int, df: Any, target: str) -> list[tuple[Any, Any, np.ndarray, np.ndarray]]:
    """Per series (sorted by id): (id, sorted time stamps, values, file rows); raises on
    repeated time stamps and too-short series."""
    import pandas as pd

    frame = pd.DataFrame({"t": times.to_numpy(), "k": keys.to_numpy(),
                          "row": np.arange(len(values))})
    out = []
    for key, part in frame.groupby("k", sort=True):
        part = part.sort_values(["t", "row"], kind="stable")
        t = part["t"].to_numpy()
        rows = part["row"].to_numpy()
        dup = t[1:] == t[:-1]
        if dup.any():
            j = int(np.argmax(dup))
            first, second = int(rows[j]), int(rows[j + 1])
            when = _when(pd.Timestamp(t[j])) if np.issubdtype(t.dtype, np.datetime64) else t[j]
            lines = table.lines(first, second)
            if table.id_col is not None:
                raise ValueError(f"{table.path}: {table.name(key)} has two rows for {when} "
                                 f"({lines}): keep one of them")
            cands = _id_candidates(df, time_col, target, times)
            hint = (f"name the column that tells them apart with --id-col (candidates: "
                    f"{', '.join(map(repr, cands))})" if len(cands) > 1 else
                    f"name the column that tells them apart with --id-col {cands[0]}"
                    if cands else "pass --id-col with the column that tells them apart, "
                    "or remove the repeated rows")
            raise ValueError(f"{table.path}: the time column {time_col!r} repeats {when} "
                             f"({lines}): the file seems to hold several series; {hint}")
        if len(part) < horizon + 2:
            raise ValueError(f"{table.path}: {table.name(key)} has {len(part)} rows, fewer "
                             f"than horizon + 2 = {horizon + 2}: give a shorter --horizon "
                             f"or more rows")
        out.append((key, t, values[rows], rows))
    return out


def _id_candidates(df: Any, time_col: str, target: str, times: Any) -> list[str]:
    """Columns that could name the series: values repeated over the time stamps, never
    twice at one time stamp, not real numbers (a measured column would qualify too)."""
    import pandas as pd

    out = []
    for c in df.columns:
        if c in (time_col, target) or pd.api.types.is_float_dtype(df[c].dtype):
            continue
        col = df[c]
        n = col.nunique()
        if n < 2 or n > len(df) / 2 or col.isna().any():
            continue
        if not pd.DataFrame({"t": times.to_numpy(), "c": col.to_numpy()}).duplicated().any():
            out.append(str(c))
    return out


def _regular(parts: list[tuple[Any, Any, np.ndarray, np.ndarray]], table: _Table) -> str | None:
    """None when every series has a regular step, else the problem of the first."""
    import pandas as pd

    for key, t, _, rows in parts:
        if np.issubdtype(t.dtype, np.datetime64) or isinstance(t, pd.DatetimeIndex):
            idx = pd.DatetimeIndex(t)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                freq = pd.infer_freq(idx) if len(idx) >= 3 else None
            if freq is None:
                return _irregular(idx, rows, table, table.name(key))
        else:
            d = np.diff(np.asarray(t, dtype=np.int64))
            if d.size and not np.all(d == d[0]):
                return _irregular(np.asarray(t), rows, table, table.name(key))
    return None


def _load(df: Any, path: str, time_col: str, target: str, id_col: str | None, horizon: int,
          date_format: str | None = None, dayfirst: bool = False) -> _Table:
    import pandas as pd

    table = _Table(path, id_col, os.path.splitext(path)[1].lower() in (".parquet", ".pq"))
    for opt, col in (("--time-col", time_col), ("--target", target), ("--id-col", id_col)):
        if col is not None and col not in df.columns:
            raise ValueError(f"{path}: column {col!r} ({opt}) is not in the file; its columns "
                             f"are {', '.join(map(repr, map(str, df.columns)))}")
    df = df.reset_index(drop=True)
    values = _read_numbers(df, target, table)
    if id_col is not None:
        empty = df[id_col].isna().to_numpy()
        if empty.any():
            raise ValueError(f"{table.at(int(np.argmax(empty)))}: the id column {id_col!r} "
                             f"(--id-col) is empty there: every row needs its series id")
        keys = df[id_col]
    else:
        keys = pd.Series(0, index=df.index)
    times, alt = _read_times(df, time_col, table, date_format, dayfirst)
    raw = df[time_col]
    is_dates = pd.api.types.is_datetime64_any_dtype(times.dtype)
    problem = None
    if is_dates:
        problem = _bad_date(raw, times, time_col, table, date_format, alt=alt)
        if problem is not None and alt is not None and alt.isna().sum() < times.isna().sum():
            problem = _bad_date(raw, alt, time_col, table, None, dayfirst=True)
    parts = None
    if problem is None:
        parts = _split(times, values, keys, table, time_col, horizon, df, target)
        problem = _regular(parts, table)
    if problem is not None and alt is not None and not alt.isna().any():
        # month-first failed: the day-first reading, when it gives regular series
        try:
            alt_parts = _split(alt, values, keys, table, time_col, horizon, df, target)
        except ValueError:
            alt_parts = None
        if alt_parts is not None and _regular(alt_parts, table) is None:
            why = ("some dates are not month-first" if parts is None
                   else "month-first leaves irregular steps")
            j = int(np.argmax((alt != times).to_numpy()))
            table.notes.append(f"dates read day-first ({str(raw.iloc[j])} is "
                               f"{_when(alt.iloc[j])}): {why}; --dayfirst or "
                               f"--date-format says so")
            parts, problem = alt_parts, None
    elif problem is None and alt is not None and not alt.isna().any():
        if not (alt == times).all():
            try:
                alt_ok = _regular(_split(alt, values, keys, table, time_col, horizon, df,
                                         target), table) is None
            except ValueError:
                alt_ok = False
            if alt_ok:
                j = int(np.argmax((alt != times).to_numpy()))
                table.notes.append(f"dates read month-first ({str(raw.iloc[j])} is "
                                   f"{_when(times.iloc[j])}), though day-first gives regular "
                                   f"steps too: pass --dayfirst if they are day-first")
    if problem is not None:
        raise ValueError(problem)
    assert parts is not None
    for key, t, v, rows in parts:
        bad = np.isinf(v)
        if bad.any():
            j = int(np.argmax(bad))
            when = _when(pd.Timestamp(t[j])) if is_dates else t[j]
            raise ValueError(f"{table.at(int(rows[j]))}: {table.name(key)} has the value "
                             f"{v[j]} on {when} (column {target!r}): write a finite number "
                             f"there")
        s = pd.Series(v, index=pd.DatetimeIndex(t) if is_dates else pd.Index(t), name=target)
        table.ids.append(key)
        table.series.append(s)
        table.rows.append(rows)
    return table


def series_of(df: Any, time_col: str, target: str, id_col: str | None, horizon: int, *,
              path: str = "the data", date_format: str | None = None,
              dayfirst: bool = False) -> tuple[list[Any], list[Any]]:
    """(ids, one pandas Series per id on its time index), checked: the columns exist,
    the times parse, no series has duplicate time stamps, gaps or fewer than
    horizon + 2 rows, the targets are numbers."""
    table = _load(df, path, time_col, target, id_col, horizon, date_format, dayfirst)
    return table.ids, table.series


# ---- the forecaster's errors in the file's terms ------------------------------
_OPTIONS = ("horizon", "coverage", "season", "window", "d_model", "steps", "epochs",
            "n_jobs")


def _translate(msg: str, table: _Table) -> str:
    """A forecaster's message about y[i] at time step j, as the series id and the date
    (with the file line); its parameter names as the command's options."""
    def series(m: re.Match[str]) -> str:
        i = int(m[1])
        return table.name(table.ids[i]) if i < len(table.ids) else m[0]

    m = re.search(r"\by\[(\d+)\]", msg)
    i = int(m[1]) if m else (0 if re.match(r"y\b", msg) and len(table.ids) == 1 else None)
    if i is not None and i < len(table.series):
        s, rows = table.series[i], table.rows[i]

        def step(m: re.Match[str]) -> str:
            j = int(m[1])
            if j >= len(s):
                return m[0]
            return f"{_when(s.index[j])} ({table.line(int(rows[j]))})"
        nan = re.search(r"contains NaN or infinity \(first at time step (\d+)\)", msg)
        if nan:
            return (f"{table.path}: {table.name(table.ids[i])} has no value on "
                    f"{step(nan)}: write a number in column {str(s.name)!r} there")
        msg = re.sub(r"\btime step (\d+)", step, msg)
    msg = re.sub(r"\by\[(\d+)\]", series, msg)
    msg = re.sub(r"(series '[^']*'|the series) \('[^']*'\)", r"\1", msg)
    if m or i is not None:   # a CSV holds empty cells, not NaN
        msg = msg.replace("are NaN", "are empty").replace("is NaN", "is empty")
        if "no observed value" in msg:
            msg += (f": write its values in column {str(table.series[0].name)!r}, or "
                    f"remove its rows")
    for name in _OPTIONS:
        msg = re.sub(rf"(?<![\w-]){name}\b(?==| must| is)", "--" + name.replace("_", "-"), msg)
    return f"{table.path}: {msg}" if m or i is not None else msg


# ---- the command -----------------------------------------------------------
def _say(text: str) -> None:
    """One status line on stderr (the CSV goes to a file, the summary to stdout)."""
    print(f"attnx forecast: {text}", file=sys.stderr, flush=True)


def _check_options(args: argparse.Namespace) -> None:
    if args.horizon < 1:
        raise ValueError(f"--horizon must be a positive number of steps, got {args.horizon}")
    if not 0.0 < args.coverage < 1.0:
        raise ValueError(f"--coverage must be in (0, 1), e.g. 0.9, got {args.coverage:g}")
    if args.date_format is not None and args.dayfirst:
        raise ValueError("give --date-format or --dayfirst, not both (a format says where "
                         "the day is)")
    if args.date_format is not None and "%" not in args.date_format:
        raise ValueError(f"--date-format must be a strftime format such as %Y-%m-%d or "
                         f"%d/%m/%Y, got {args.date_format!r}")
    try:
        args.float_format % 1.5
    except (TypeError, ValueError):
        raise ValueError(f"--float-format must be a printf-style format of one number, such "
                         f"as %.6g or %.2f, got {args.float_format!r}") from None


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    _check_options(args)
    _say(f"reading {args.data}")
    df = read_table(args.data)
    table = _load(df, args.data, args.time_col, args.target, args.id_col, args.horizon,
                  args.date_format, args.dayfirst)
    for note in table.notes:
        _say(note)
    series = table.series
    try:
        f = TransformerForecaster(args.horizon, season=args.season, window=args.window,
                                  d_model=args.d_model, steps=args.steps, epochs=args.epochs,
                                  random_state=args.seed, intervals=args.intervals,
                                  verbose=int(args.verbose), method=args.method,
                                  n_jobs=args.n_jobs)
        lengths = [len(s) for s in series]
        span = f"{min(lengths)}" + (f"-{max(lengths)}" if max(lengths) != min(lengths) else "")
        _say(f"training one forecaster on {len(series)} series of {span} steps, horizon "
             f"{args.horizon}" + ("" if args.verbose else " (--verbose shows its progress)"))
        if args.dask is not None:   # the same forecasts, the series spread over a cluster
            from .dask import forecast_series
            _say(f"on the Dask cluster {args.dask}")
            points, bounds = forecast_series(args.dask, series, f, args.coverage)
        else:
            f.fit(series)
            _say(f"forecasting with {f.method_}")
            points = f.predict()
            bounds = f.predict_interval(coverage=args.coverage)
    except (ValueError, TypeError) as exc:
        raise type(exc)(_translate(_one_line(exc), table)) from None
    parts = []
    for key, p, b in zip(table.ids, points, bounds):
        part = pd.DataFrame({args.time_col: p.index, "forecast": p.to_numpy(),
                             "lower": b["lower"].to_numpy(), "upper": b["upper"].to_numpy()})
        if args.id_col is not None:
            part.insert(0, args.id_col, key)
        parts.append(part)
    out = pd.concat(parts, ignore_index=True)
    out.to_csv(args.out, index=False, float_format=args.float_format,
               date_format=args.date_format)
    print(f"wrote {args.out}: {len(table.ids)} series x {args.horizon} steps, "
          f"{args.coverage:g} intervals")
    return 0
