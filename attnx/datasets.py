"""Synthetic sequence-to-sequence tasks (arrays X, Y of shape (n_samples, seq_len, d_model)),
sliding_windows, which turns a time series into a forecasting data set, and loaders of
three real data sets shipped inside other PyPI packages (the examples' data; install
them with ``pip install "attnx[examples]"``): load_japanese_vowels (sktime's copy),
load_sunspots and load_co2 (statsmodels' copies). Nothing is downloaded.

Values are drawn in float64 from numpy.random.default_rng(random_state) and cast
to `dtype` at the end, so one seed gives the same data (up to rounding) in
float32 and float64.
"""
from __future__ import annotations

import importlib.util
import os
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from .runtime._params import check_dtype, check_positive_int

if TYPE_CHECKING:
    import numpy.typing as npt

    from .runtime._typing import FloatArray, RandomStateLike


def max_position_task(n_samples: int, seq_len: int = 8, d_model: int = 8,
                      random_state: RandomStateLike = None,
                      dtype: npt.DTypeLike = np.float32) -> tuple[FloatArray, FloatArray]:
    """Find the position whose feature 0 is largest and copy its row to every position.

    X (n, T, d) is standard normal; for each sample i, with p = argmax_t X[i, t, 0],
    every output position gets that row: Y[i, t, :] = X[i, p, :] for all t.
    Returns (X, Y), both (n_samples, seq_len, d_model) of `dtype`.
    """
    n, t, d = _sizes(n_samples, seq_len, d_model)
    dt = check_dtype(dtype)
    rng = np.random.default_rng(random_state)
    x = rng.standard_normal((n, t, d))
    pos = np.argmax(x[:, :, 0], axis=1)
    rows = x[np.arange(n), pos]                      # (n, d)
    y = np.broadcast_to(rows[:, None, :], x.shape)
    return x.astype(dt), y.astype(dt)               # astype copies: Y owns its memory


@overload
def mixing_task(n_samples: int, seq_len: int = ..., d_model: int = ..., noise: float = ...,
                random_state: RandomStateLike = ..., dtype: npt.DTypeLike = ...,
                return_mixing: Literal[False] = ...) -> tuple[FloatArray, FloatArray]: ...
@overload
def mixing_task(n_samples: int, seq_len: int = ..., d_model: int = ..., noise: float = ...,
                random_state: RandomStateLike = ..., dtype: npt.DTypeLike = ..., *,
                return_mixing: Literal[True]
                ) -> tuple[FloatArray, FloatArray, npt.NDArray[np.float64]]: ...
@overload
def mixing_task(n_samples: int, seq_len: int = ..., d_model: int = ..., noise: float = ...,
                random_state: RandomStateLike = ..., dtype: npt.DTypeLike = ...,
                return_mixing: bool = ...) -> tuple[FloatArray, ...]: ...
def mixing_task(n_samples: int, seq_len: int = 8, d_model: int = 8, noise: float = 0.01,
                random_state: RandomStateLike = None, dtype: npt.DTypeLike = np.float32,
                return_mixing: bool = False) -> tuple[FloatArray, ...]:
    """A fixed attention pattern: Y[i] = A X[i] + noise * N(0, 1), one A for every sample.

    A (T, T) is a row-softmax of standard normal scores (each row sums to 1),
    drawn first from the seed; then X (n, T, d) standard normal, then the noise.
    Returns (X, Y), or (X, Y, A) with return_mixing=True (A in float64).
    """
    n, t, d = _sizes(n_samples, seq_len, d_model)
    dt = check_dtype(dtype)
    # a real number only: a string or a complex would fail in isfinite or `<` with a
    # message that does not name the argument
    if (isinstance(noise, (bool, np.bool_))
            or not isinstance(noise, (int, float, np.integer, np.floating))
            or not np.isfinite(noise) or noise < 0):
        raise ValueError(f"noise must be a finite number >= 0, got {noise!r}")
    rng = np.random.default_rng(random_state)
    scores = rng.standard_normal((t, t))
    a = np.exp(scores - scores.max(axis=1, keepdims=True))
    a /= a.sum(axis=1, keepdims=True)
    x = rng.standard_normal((n, t, d))
    y = np.einsum("ts,nsd->ntd", a, x)
    if noise:
        y += noise * rng.standard_normal(y.shape)
    out = (x.astype(dt), y.astype(dt))
    return out + (a,) if return_mixing else out


def _sizes(n_samples: int, seq_len: int, d_model: int) -> tuple[int, int, int]:
    return (check_positive_int("n_samples", n_samples), check_positive_int("seq_len", seq_len),
            check_positive_int("d_model", d_model))


def sliding_windows(series: npt.ArrayLike, window: int,
                    horizon: int = 1) -> tuple[FloatArray, FloatArray]:
    """Turn a series into a forecasting data set: windows of the past and the future.

    series: (T,) or (T, f) real values in time order. For every start s in
    0 .. T - window - horizon, X[s] = series[s : s + window] and y[s] holds the
    next `horizon` values series[s + window : s + window + horizon].

    Returns (X, y): X (n, window, f) (f = 1 for a 1-D series) and y of shape
    (n,) when horizon == 1 and the series is 1-D, (n, horizon) for a 1-D series,
    (n, f) when horizon == 1, else (n, horizon, f); n = T - window - horizon + 1.
    Both are new arrays of the series' float dtype (float64 for ints); the series is
    not modified.
    """
    window = check_positive_int("window", window)
    horizon = check_positive_int("horizon", horizon)
    s = np.asarray(series)
    if s.dtype.kind not in "fiu":
        raise TypeError(f"series must hold real numbers, got dtype {s.dtype}")
    if s.ndim not in (1, 2):
        raise ValueError(f"series must have shape (T,) or (T, n_features), got {s.shape}")
    if s.dtype.kind == "f" and not np.isfinite(s).all():
        raise ValueError("series contains NaN or infinity")
    flat = s.ndim == 1
    s2 = s.reshape(len(s), -1)
    dtype = s.dtype if s.dtype.kind == "f" else np.float64
    n = s2.shape[0] - window - horizon + 1
    if n < 1:
        raise ValueError(f"series of length {s2.shape[0]} is too short for window={window} "
                         f"and horizon={horizon} (needs at least {window + horizon})")
    idx = np.arange(n)[:, None]
    X = s2[idx + np.arange(window)].astype(dtype)               # (n, window, f)
    y = s2[idx + window + np.arange(horizon)].astype(dtype)     # (n, horizon, f)
    if flat:
        y = y[:, :, 0]
    return X, (y[:, 0] if horizon == 1 else y)


def _missing(package: str, what: str) -> ImportError:
    return ImportError(f"{what} reads the copy shipped inside the {package} package, which is "
                       f'not installed: pip install {package} (or "attnx[examples]")')


def read_ts(path: str | os.PathLike[str]) -> tuple[list[FloatArray], npt.NDArray[np.str_]]:
    """Read a classification file in the time series archive's .ts format.

    Each line after ``@data`` is one case: its channels separated by ':', each a
    comma-separated series, then the label. Returns (X, y): a list with one
    (T_i, n_channels) float64 array per case (T_i may differ between cases) and the
    labels as strings. Missing values ('?') and timestamped series are not supported.
    """
    X: list[FloatArray] = []
    y: list[str] = []
    data = False
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.lower().startswith("@data"):
                data = True
                continue
            if not data:
                continue
            *dims, label = line.split(":")
            if not dims:
                raise ValueError(f"{path}, line {number}: expected channels and a label "
                                 f"separated by ':', got {line[:60]!r}")
            try:
                channels = [[float(v) for v in d.split(",")] for d in dims]
            except ValueError:
                raise ValueError(f"{path}, line {number}: a value is not a number (missing "
                                 "values '?' are not supported)") from None
            if len({len(c) for c in channels}) != 1:
                raise ValueError(f"{path}, line {number}: the channels have different "
                                 f"lengths {[len(c) for c in channels]}")
            X.append(np.array(channels, dtype=np.float64).T)
            y.append(label.strip())
    if not X:
        raise ValueError(f"{path}: no cases after an @data line")
    return X, np.array(y)


def load_japanese_vowels(split: Literal["TRAIN", "TEST"] = "TRAIN"
                         ) -> tuple[list[FloatArray], npt.NDArray[np.str_]]:
    """The JapaneseVowels classification set (UCI): nine speakers saying "ae".

    Each case is one utterance, 12 LPC cepstrum coefficients per frame over 7 to 29
    frames; split "TRAIN" has 270 cases, "TEST" 370. Read from the copy inside the
    sktime package (without importing sktime). Returns (X, y): a list of
    (T_i, 12) float64 arrays and the speakers' labels "1" .. "9".
    """
    if split not in ("TRAIN", "TEST"):
        raise ValueError(f"split must be 'TRAIN' or 'TEST', got {split!r}")
    spec = importlib.util.find_spec("sktime")
    if spec is None or not spec.submodule_search_locations:
        raise _missing("sktime", "load_japanese_vowels")
    folder = os.path.join(list(spec.submodule_search_locations)[0], "datasets", "data",
                          "JapaneseVowels")
    return read_ts(os.path.join(folder, f"JapaneseVowels_{split}.ts"))


def load_sunspots() -> tuple[npt.NDArray[np.int64], FloatArray]:
    """Yearly mean sunspot numbers 1700-2008 (309 values), from the copy inside statsmodels.

    Returns (years, values): int64 years and float64 sunspot numbers.
    """
    try:
        from statsmodels.datasets import sunspots
    except ImportError:
        raise _missing("statsmodels", "load_sunspots") from None
    df = sunspots.load_pandas().data
    return (df["YEAR"].to_numpy().astype(np.int64),
            df["SUNACTIVITY"].to_numpy(dtype=np.float64))


def load_co2() -> Any:
    """Monthly mean atmospheric CO2 at Mauna Loa, March 1958 - December 2001 (ppm).

    The weekly values inside statsmodels averaged per calendar month, the few months
    without a value filled with the month before. Returns a pandas Series of 526
    float64 values with a monthly (month-start) DatetimeIndex.
    """
    try:
        from statsmodels.datasets import co2
    except ImportError:
        raise _missing("statsmodels", "load_co2") from None
    weekly = co2.load_pandas().data["co2"]
    return weekly.resample("MS").mean().ffill()
