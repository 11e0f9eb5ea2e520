"""`attnx forecast`: forecasts for every series of a long-format CSV or Parquet file.

    attnx forecast data.csv --horizon 24 --time-col date --target y [--id-col series]
                   [--out forecasts.csv] [--coverage 0.9]

The file holds one row per series and time step (long format): a time column (dates,
or integer steps), a target column and, for several series, an id column. One
TransformerForecaster is trained on all the series (a global model) and the next
`horizon` steps of each are written as CSV: id, time, forecast, lower, upper (the
split-conformal interval of the given coverage). Reading needs pandas (and pyarrow
for Parquet): ``pip install attnx[pandas]``.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import numpy as np

from . import _pandas
from .forecaster import TransformerForecaster

__all__ = ["add_parser", "run"]


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
    f.add_argument("--out", default="forecasts.csv", help="CSV file to write")
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


def read_table(path: str) -> Any:
    """A CSV or Parquet file as a DataFrame (Parquet by its extension)."""
    import pandas as pd

    if os.path.splitext(path)[1].lower() in (".parquet", ".pq"):
        return pd.read_parquet(path)
    return pd.read_csv(path)


def series_of(df: Any, time_col: str, target: str, id_col: str | None,
              horizon: int) -> tuple[list[Any], list[Any]]:
    """(ids, one pandas Series per id on its time index), checked: the columns exist,
    the times parse, no series has duplicate time stamps or fewer than horizon + 2
    rows, the targets are numbers."""
    import pandas as pd

    for opt, col in (("--time-col", time_col), ("--target", target), ("--id-col", id_col)):
        if col is not None and col not in df.columns:
            raise ValueError(f"column {col!r} ({opt}) is not in the data; its columns are "
                             f"{[str(c) for c in df.columns]}")
    times = df[time_col]
    if not pd.api.types.is_integer_dtype(times.dtype):
        try:
            times = pd.to_datetime(times)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"column {time_col!r} (--time-col) must hold dates or integer "
                             f"steps: {exc}") from None
    try:
        values = pd.to_numeric(df[target]).astype(np.float64)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"column {target!r} (--target) must hold numbers: {exc}") from None
    keys = df[id_col] if id_col is not None else pd.Series(0, index=df.index)
    ids, out = [], []
    for key, rows in pd.DataFrame({"t": times, "v": values, "k": keys}).groupby(
            "k", sort=True):
        what = f"series {key!r}" if id_col is not None else "the series"
        dup = rows["t"].duplicated()
        if dup.any():
            raise ValueError(f"{what} has duplicate time stamps in column {time_col!r} "
                             f"(first: {rows['t'][dup].iloc[0]})")
        if len(rows) < horizon + 2:
            raise ValueError(f"{what} is too short: {len(rows)} rows, at least horizon + 2 "
                             f"= {horizon + 2} are needed")
        s = pd.Series(rows["v"].to_numpy(), index=pd.Index(rows["t"].to_numpy()),
                      name=target).sort_index()
        _pandas.unwrap(what, s)   # the index's frequency, checked with the series' name
        ids.append(key)
        out.append(s)
    if not out:
        raise ValueError("the data has no rows")
    return ids, out


def _say(text: str) -> None:
    """One status line on stderr (the CSV goes to a file, the summary to stdout)."""
    print(f"attnx forecast: {text}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    _say(f"reading {args.data}")
    df = read_table(args.data)
    ids, series = series_of(df, args.time_col, args.target, args.id_col, args.horizon)
    f = TransformerForecaster(args.horizon, season=args.season, window=args.window,
                              d_model=args.d_model, steps=args.steps, epochs=args.epochs,
                              random_state=args.seed, intervals=args.intervals,
                              verbose=int(args.verbose), method=args.method,
                              n_jobs=args.n_jobs)
    lengths = [len(s) for s in series]
    span = f"{min(lengths)}" + (f"-{max(lengths)}" if max(lengths) != min(lengths) else "")
    _say(f"training one forecaster on {len(series)} series of {span} steps, horizon "
         f"{args.horizon}" + ("" if args.verbose else " (--verbose shows its progress)"))
    f.fit(series)
    _say(f"forecasting with {f.method_}")
    points = f.predict()
    bounds = f.predict_interval(coverage=args.coverage)
    parts = []
    for key, p, b in zip(ids, points, bounds):
        part = pd.DataFrame({args.time_col: p.index, "forecast": p.to_numpy(),
                             "lower": b["lower"].to_numpy(), "upper": b["upper"].to_numpy()})
        if args.id_col is not None:
            part.insert(0, args.id_col, key)
        parts.append(part)
    table = pd.concat(parts, ignore_index=True)
    table.to_csv(args.out, index=False)
    print(f"wrote {args.out}: {len(ids)} series x {args.horizon} steps, "
          f"{args.coverage:g} intervals")
    return 0
