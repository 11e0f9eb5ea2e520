"""Forecasting data: series checked into one form, training windows cut from them,
each window scaled by its own history and cut into patches.

A series is (T, k): T time steps of k target channels. A forecaster sees, for each
forecast origin t, the window of the last W values before t (the context) and learns
the next H values (the horizon). Windows are scaled by the mean and standard
deviation of their own context (instance normalisation), so one model serves series
of any level and scale; the forecast is scaled back. A context shorter than W (a
short series) is padded on the left with its first value and the padded patches are
masked out of attention.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..runtime._params import check_int as check_int

if TYPE_CHECKING:
    import numpy.typing as npt

    F64 = npt.NDArray[np.float64]

#: a context's standard deviation is floored at this fraction of its mean absolute
#: level (plus a tiny absolute floor), so that a flat context does not blow up
STD_FLOOR = 1e-3


def series_list(name: str, y: object, *, min_len: int = 1, missing: bool = False
                ) -> tuple[list[F64], bool]:
    """(list of float64 (T_i, k) arrays, was_list) from one series (T,) / (T, k) or a
    list of them (every series the same k). Infinity is a ValueError, and so is NaN
    unless `missing` (then NaN marks a missing value: attnx.forecasting._gaps)."""
    was_list = isinstance(y, (list, tuple))
    items = list(y) if was_list else [y]   # type: ignore[call-overload]
    if not items:
        raise ValueError(f"{name} must be a series or a non-empty list of series, got []")
    out: list[F64] = []
    k = None
    for i, s in enumerate(items):
        where = f"{name}[{i}]" if was_list else name
        try:
            a = np.asarray(s, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{where} must hold real numbers: {exc}") from exc
        if a.ndim == 1:
            a = a[:, None]
        if a.ndim != 2:
            raise ValueError(f"{where} must be (T,) or (T, k), got shape {np.shape(s)}")
        if a.shape[0] < min_len:
            raise ValueError(f"{where} has {a.shape[0]} time steps; at least {min_len} "
                             f"are needed")
        if missing and np.isinf(a).any():
            bad = int(np.argmax(np.isinf(a).any(axis=1)))
            raise ValueError(f"{where} contains infinity (first at time step {bad}): only "
                             f"finite values and NaN (missing) are accepted")
        if not missing and not np.all(np.isfinite(a)):
            bad = int(np.argmax(~np.isfinite(a).all(axis=1)))
            raise ValueError(f"{where} contains NaN or infinity (first at time step {bad})")
        if k is None:
            k = a.shape[1]
        elif a.shape[1] != k:
            raise ValueError(f"every series must have the same number of channels: "
                             f"{name}[0] has {k}, {where} has {a.shape[1]}")
        out.append(a)
    return out, was_list


def default_window(lengths: list[int], horizon: int, season: int) -> int:
    """The context length when none is given: a long context (the level of a noisy
    series needs many steps), room for several seasons and horizons, at most what the
    typical (median) series leaves before its last horizon, never under 2 * horizon or
    8 steps.

        W = min(max(3 * horizon, 4 * season, 64), median(T_i) - horizon)
        W = max(W, 2 * horizon, 8)
    """
    med = int(np.median(lengths))
    w = min(max(3 * horizon, 4 * season, 64), med - horizon)
    return int(max(w, 2 * horizon, 8))


def default_patch(window: int) -> tuple[int, int]:
    """(patch_len, stride) when none is given: about 16 tokens of half-overlapping
    patches, patch_len = clip(window // 8, 1, 16), stride = max(1, patch_len // 2)."""
    p = int(min(16, max(1, window // 8)))
    return p, max(1, p // 2)


def n_patches(window: int, patch_len: int, stride: int) -> int:
    if patch_len > window:
        raise ValueError(f"patch_len ({patch_len}) must not exceed the window ({window})")
    return (window - patch_len) // stride + 1


@dataclass
class Windows:
    """Training windows: context (n, W, c), mask (n, W) True = padding, target (n, H, k),
    and which series / origin each came from."""

    context: F64
    mask: npt.NDArray[np.bool_]
    target: F64
    series: npt.NDArray[np.intp]
    origin: npt.NDArray[np.intp]


def cut(series: list[F64], window: int, horizon: int, *, min_context: int = 1,
        covariates: list[F64] | None = None, last: int | None = None) -> Windows:
    """Every window of each series whose horizon lies inside it and whose context has at
    least min_context real steps (left-padded with the first value, masked, below W).
    covariates: per series (T_i, c) values aligned with the series, appended to the
    context's channels. last: keep only the last `last` origins of each series."""
    ctx, msk, tgt, sid, org = [], [], [], [], []
    for i, s in enumerate(series):
        t_len = s.shape[0]
        feats = s if covariates is None else np.concatenate([s, covariates[i]], axis=1)
        starts = range(max(min_context, 1), t_len - horizon + 1)
        if last is not None:
            starts = starts[-last:] if last > 0 else range(0)
        for t in starts:
            a = max(0, t - window)
            c = feats[a:t]
            pad = window - c.shape[0]
            if pad:
                c = np.concatenate([np.repeat(c[:1], pad, axis=0), c], axis=0)
            m = np.zeros(window, bool)
            m[:pad] = True
            ctx.append(c)
            msk.append(m)
            tgt.append(s[t:t + horizon])
            sid.append(i)
            org.append(t)
    if not ctx:
        raise ValueError(f"no training window: every series needs at least "
                         f"{min_context + horizon} time steps for horizon {horizon}")
    return Windows(np.stack(ctx), np.stack(msk), np.stack(tgt),
                   np.asarray(sid, np.intp), np.asarray(org, np.intp))


def scale_stats(context: F64, mask: npt.NDArray[np.bool_], k: int) -> tuple[F64, F64]:
    """Per window and target channel: mean and floored standard deviation of the real
    (unmasked) context steps, each (n, 1, k)."""
    v = context[:, :, :k]
    w = (~mask)[:, :, None].astype(np.float64)
    cnt = np.maximum(w.sum(axis=1, keepdims=True), 1.0)
    mu = (v * w).sum(axis=1, keepdims=True) / cnt
    var = (((v - mu) ** 2) * w).sum(axis=1, keepdims=True) / cnt
    floor = STD_FLOOR * (np.abs(mu) + 1.0)
    return mu, np.sqrt(np.maximum(var, floor * floor))


def patchify(x: F64, mask: npt.NDArray[np.bool_], patch_len: int, stride: int
             ) -> tuple[F64, npt.NDArray[np.bool_]]:
    """(n, W, c) -> patches (n, N, patch_len * c) (a patch's steps, channels fastest),
    and the patch mask (n, N): a patch is padding when all its steps are."""
    n, w, c = x.shape
    npch = n_patches(w, patch_len, stride)
    idx = stride * np.arange(npch)[:, None] + np.arange(patch_len)[None, :]
    p = x[:, idx, :].reshape(n, npch, patch_len * c)
    pm: npt.NDArray[np.bool_] = np.asarray(mask[:, idx].all(axis=2))
    return np.ascontiguousarray(p), pm


def seasonal_naive(context: F64, horizon: int, season: int) -> F64:
    """The seasonal naive forecast from contexts (n, W, k): horizon step j (0-based)
    repeats the value one season before it, context[:, W - season + j % season]
    (the last value for season 1), shape (n, horizon, k). Needs season <= W."""
    w = context.shape[1]
    if not 1 <= season <= w:
        raise ValueError(f"season must be in [1, window={w}], got {season}")
    idx = w - season + np.arange(horizon) % season
    out: F64 = context[:, idx, :]
    return out


def seasonal_mean(context: F64, horizon: int, season: int) -> F64:
    """Like seasonal_naive, but each horizon step repeats the mean over the context's
    whole seasons of its phase (the last value's mean for season 1 is the context's
    mean): the seasonal profile without one observation's noise, (n, horizon, k)."""
    w = context.shape[1]
    if not 1 <= season <= w:
        raise ValueError(f"season must be in [1, window={w}], got {season}")
    n_seasons = w // season
    last = context[:, w - n_seasons * season:, :]
    profile = last.reshape(context.shape[0], n_seasons, season, -1).mean(axis=1)
    out: F64 = profile[:, np.arange(horizon) % season, :]
    return out


def check_quantiles(q: Any, name: str = "quantiles") -> tuple[float, ...]:
    try:
        arr = np.asarray(q, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be numbers in (0, 1), got {q!r}") from exc
    if arr.size == 0 or not np.all((arr > 0) & (arr < 1)):
        raise ValueError(f"{name} must be numbers in (0, 1), got {q!r}")
    if np.unique(arr).size != arr.size:
        raise ValueError(f"{name} must be distinct, got {q!r}")
    return tuple(float(v) for v in np.sort(arr))


def interval_levels(coverage: float) -> tuple[float, float]:
    if (isinstance(coverage, bool) or not isinstance(coverage, numbers.Real)
            or not 0 < float(coverage) < 1 or not math.isfinite(float(coverage))):
        raise ValueError(f"coverage must be in (0, 1), got {coverage!r}")
    a = (1.0 - float(coverage)) / 2.0
    return a, 1.0 - a


def aligned(name: str, X: Any, series: list[F64], *, missing: bool = False
            ) -> list[F64] | None:
    """X (or X_future) as one array per series, each with its series' rows (NaN
    allowed with `missing`)."""
    if X is None:
        return None
    items, _ = series_list(name, X if isinstance(X, (list, tuple)) or len(series) == 1
                               else list(X), missing=missing)
    if len(items) != len(series):
        raise ValueError(f"{name} must give one array per series ({len(series)}), "
                         f"got {len(items)}")
    for i, (a, s) in enumerate(zip(items, series)):
        if a.shape[0] != s.shape[0]:
            raise ValueError(f"{name} for series {i} must have {s.shape[0]} rows (the "
                             f"length of y), got {a.shape[0]}")
    return items

def static_features(static: Any, n: int) -> list[F64] | None:
    """static as one finite feature vector per series (n of them), or None."""
    if static is None:
        return None
    a = np.asarray(static, dtype=np.float64)
    if a.ndim == 1 and n == 1:
        a = a[None]
    if a.ndim != 2 or a.shape[0] != n or not np.all(np.isfinite(a)):
        raise ValueError(f"static must be finite per-series features (n_series={n}, s), "
                         f"got shape {np.shape(static)}")
    return list(a)
