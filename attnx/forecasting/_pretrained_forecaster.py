"""A pretrained forecasting network: forecasts a series it never saw, with no fit.

The network is attnx's own TransformerRegressor (2 pre-norm blocks, d_model 64, about
75k parameters), trained once with AdamW and the Huber loss on windows of synthetic
series only (attnx.forecasting._synthetic_series; benchmarks/train_pretrained_forecaster.py, which
reproduces the weights from its seed) and shipped as
attnx/forecasting/data/forecaster_pretrained.safetensors with its settings in
forecaster_pretrained.json. How a forecast is made:

1. The context is the last CONTEXT (256) values of the series (fewer for a short
   series: left-padded with its first value, and the padded steps masked), scaled by
   the mean and standard deviation of its real steps.
2. The season s (given, or found from the series by attnx.forecasting._season) is used when the
   context holds one whole cycle (else s = 1). Its seasonal profile is each phase's
   mean over the context's last whole cycles after removing a least-squares line
   (two or more cycles); the deseasonalised context is the scaled values minus the
   profile. The baseline is the seasonal naive forecast (the last value for s = 1).
3. Per step the features are the scaled value, its seasonal difference and the
   deseasonalised value; steps are grouped into non-overlapping patches of PATCH (16)
   steps, one token each, newest first, each with two global features (log s and
   the share of the context that is real); fully padded tokens are masked.
4. The network maps the tokens to the residual from the baseline at all HORIZON (64)
   steps at once, in units of q, the context's mean absolute seasonal difference
   (MASE's scale, so the squared error it was trained with weighs windows as MASE
   does); the first h are scaled back. h > 64 is refused.

5. The zero-shot forecast is a hybrid (as the M4 competition's winner was): a fixed
   combination, NET_WEIGHT (0.4) times the network's forecast plus 1 - NET_WEIGHT
   times an exponential-smoothing forecast computed from the same series inside
   predict (attnx.forecasting._smoothing: SES, Holt or damped Holt chosen by AICc on
   the seasonally adjusted, and where multiplicative the log, series; a few ms).
   Nothing is fitted to the series' future; ``blend=False`` gives the network alone
   (the default of the plain function ``forecast``, which method="auto" uses as one
   of its candidates beside its own classical ones).
   (On the synthetic evaluation panels the combination's mean MASE is 8-10% below the
   network's alone and 3% below the smoothing's alone; see the benchmarks' results.)

``forecast(y, h, season=None, blend=False)`` is the plain function; ``PretrainedForecaster`` (also
``TransformerForecaster.pretrained()``) adds intervals: ``fit(y)`` stores the series
and forecasts it from its own last origins (rolling origin, the network unchanged);
the absolute errors there, divided by each origin's context scale and by the square
root of the step ahead, give a pooled conformal quantile that, times the same two
factors at the final origin, is the interval's half-width. ``fit(y, epochs=N)`` also
fine-tunes a copy of the network on the series' own windows (the steps beyond the
series' end in a window's 64-step target are filled with the network's own forecast,
so they pull it nowhere).
"""
from __future__ import annotations

import copy
import json
import math
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _season, _smoothing
from . import _windows as win

if TYPE_CHECKING:
    import numpy.typing as npt

    F64 = npt.NDArray[np.float64]

__all__ = ["forecast", "PretrainedForecaster", "features", "load_network", "CONTEXT",
           "HORIZON", "PATCH", "N_FEATURES", "WEIGHTS", "CONFIG"]

#: context length, longest horizon, patch length (one token per patch)
CONTEXT, HORIZON, PATCH = 256, 64, 16
N_TOKENS = CONTEXT // PATCH
#: features per token: PATCH scaled values, seasonal differences and deseasonalised
#: values each, 2 globals
N_FEATURES = 3 * PATCH + 2
#: scaled values and targets are clipped to +-CLIP
CLIP = 30.0
#: the output unit q (MASE's scale in the context's scaled units) is at least this
Q_FLOOR = 0.05
#: the network's share of the blended forecast (the rest: exponential smoothing)
NET_WEIGHT = 0.4
_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
WEIGHTS = os.path.join(_DATA, "forecaster_pretrained.safetensors")
CONFIG = os.path.join(_DATA, "forecaster_pretrained.json")
_CACHE: dict[str, Any] = {}


def _as_series(y: Any, name: str = "y", min_len: int = 1) -> F64:
    """A finite 1-D float64 series (ValueError / TypeError naming `name` otherwise)."""
    try:
        a = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must hold real numbers: {exc}") from exc
    if a.ndim == 2 and a.shape[1] == 1:
        a = a[:, 0]
    if a.ndim != 1:
        raise ValueError(f"{name} must be one series, shape (T,), got shape {a.shape}")
    if a.shape[0] < min_len:
        raise ValueError(f"{name} has {a.shape[0]} values; at least {min_len} are needed")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contains NaN or infinity (first at time step "
                         f"{int(np.argmax(~np.isfinite(a)))})")
    return a


def _check_h(h: Any) -> int:
    h = win.check_int("h", h, 1)
    if h > HORIZON:
        raise ValueError(f"h must be at most {HORIZON} (the pretrained network's longest "
                         f"horizon), got {h}")
    return int(h)


def season_of(y: F64, season: Any) -> int:
    """The season to use: the given one (an int >= 1), else found from the series."""
    if season is None:
        return int(_season.detect([y[:, None]])) if y.shape[0] >= 8 else 1
    return int(win.check_int("season", season, 1))


def profile(x: F64, s: int) -> F64:
    """The seasonal profile (s,) of the real context x (phase 0 = the step after its
    end): the mean of each phase over the last whole cycles after a least-squares line
    is removed (with two or more cycles), centred; zeros for s = 1."""
    if s == 1:
        return np.zeros(1)
    k = x.shape[0] // s
    last = x[x.shape[0] - k * s:]
    if k >= 2:
        t = np.arange(last.shape[0], dtype=np.float64)
        t -= t.mean()
        last = last - last.mean() - t * (t @ last) / (t @ t)
    p = last.reshape(k, s).mean(axis=0)
    out: F64 = p - p.mean()
    return out


def features(y: F64, season: int) -> tuple[F64, F64, float, float, float]:
    """(tokens (N_TOKENS, N_FEATURES) with NaN rows for padded tokens, newest first;
    the baseline (HORIZON,) in scaled units; mu; sd; q) of the context at the end of
    y. The tokens hold the scaled values, their seasonal differences and the
    deseasonalised values; the baseline is seasonal naive; q, the mean absolute
    seasonal difference of the context's real steps (MASE's scale, in scaled units,
    at least Q_FLOOR), is the unit of the network's output."""
    ctx = y[-CONTEXT:]
    n_real = ctx.shape[0]
    pad = CONTEXT - n_real
    x = np.concatenate([np.full(pad, ctx[0]), ctx]) if pad else ctx.copy()
    mu = float(ctx.mean())
    sd = float(max(ctx.std(), win.STD_FLOOR * (abs(mu) + 1.0)))
    x = np.clip((x - mu) / sd, -CLIP, CLIP)
    s = season if 1 < season <= n_real else 1
    p = profile(x[pad:], s)
    z = x - p[np.arange(-CONTEXT, 0) % s]
    base = x[CONTEXT - s + np.arange(HORIZON) % s]
    d = np.zeros(CONTEXT)
    d[s:] = x[s:] - x[:-s]
    tok = np.concatenate([x.reshape(N_TOKENS, PATCH), d.reshape(N_TOKENS, PATCH),
                          z.reshape(N_TOKENS, PATCH),
                          np.broadcast_to([[math.log(s) / math.log(48.0),
                                            n_real / CONTEXT]], (N_TOKENS, 2))], axis=1)
    real = x[pad:]
    sq = s if real.shape[0] > s else 1
    q = float(np.abs(real[sq:] - real[:-sq]).mean()) if real.shape[0] > sq else 1.0
    q = max(q, Q_FLOOR)
    tok = tok[::-1].copy()
    n_pad_tok = pad // PATCH
    if n_pad_tok:
        tok[N_TOKENS - n_pad_tok:] = np.nan
    return tok, base, mu, sd, q


def load_network(path: str | None = None) -> Any:
    """The pretrained TransformerRegressor (read once, then cached)."""
    path = WEIGHTS if path is None else os.fspath(path)
    net = _CACHE.get(path)
    if net is None:
        from ..estimators import _model_file, _state
        from ..estimators._registry import ESTIMATORS
        if not os.path.exists(path):
            raise FileNotFoundError(f"the pretrained forecaster's weights are missing: {path}")
        try:
            net = _state.new_from_state(*_model_file.read(path), dict(ESTIMATORS))
        except ValueError as exc:
            # a RuntimeError: the candidate search drops candidates on ValueError, and a
            # broken packaged file must not silently leave the pretrained model out
            raise RuntimeError(f"the pretrained forecaster's weights do not load: {exc}") from exc
        _CACHE[path] = net
    return net


def load_config(path: str | None = None) -> dict[str, Any]:
    """The training settings written next to the weights (sizes, seed, data)."""
    with open(CONFIG if path is None else path, encoding="utf-8") as f:
        out: dict[str, Any] = json.load(f)
    return out


def _predict_scaled(net: Any, tokens: F64) -> F64:
    """The network's residuals (n, HORIZON) in units of q for token arrays
    (n, N_TOKENS, F)."""
    out = np.asarray(net.predict(tokens.astype(np.float32)), dtype=np.float64)
    return out.reshape(tokens.shape[0], HORIZON)


def _forecast_many(net: Any, contexts: list[F64], season: int, blend: bool = True
                   ) -> tuple[F64, F64, F64]:
    """Forecasts (n, HORIZON) in the series' units of several contexts (blend: the
    network's combined with exponential smoothing's), with their mu and sd (n,)."""
    toks, bases, mus, sds, qs = [], [], [], [], []
    for c in contexts:
        t, b, m, s, q = features(c, season)
        toks.append(t)
        bases.append(b)
        mus.append(m)
        sds.append(s)
        qs.append(q)
    res = _predict_scaled(net, np.stack(toks)) * np.asarray(qs)[:, None]
    mu, sd = np.asarray(mus), np.asarray(sds)
    out = (np.stack(bases) + res) * sd[:, None] + mu[:, None]
    if blend:
        smooth = np.stack([_smoothing.smoothing_forecast(c, HORIZON, season if
                                                         season <= c.shape[0] else 1)
                           for c in contexts])
        out = NET_WEIGHT * out + (1.0 - NET_WEIGHT) * smooth
    return out, mu, sd


def forecast(y: Any, h: int, season: int | None = None, blend: bool = False) -> F64:
    """The pretrained network's zero-shot forecast of the next h (1..64) values of the
    1-D series y (at least 3 finite values). season: its seasonal period (None: found
    from the series); blend: combine it with exponential smoothing as
    PretrainedForecaster does by default (step 5 of the module docstring)."""
    h = _check_h(h)
    a = _as_series(y, min_len=3)
    s = season_of(a, season)
    out, _, _ = _forecast_many(load_network(), [a], s, _check_blend(blend))
    res: F64 = out[0, :h].copy()
    return res


def _check_blend(blend: Any) -> bool:
    if not isinstance(blend, (bool, np.bool_)):
        raise TypeError(f"blend must be True or False, got {blend!r} "
                        f"({type(blend).__name__})")
    return bool(blend)


class PretrainedForecaster:
    """The pretrained network as a forecaster (see the module docstring).

    Parameters
    ----------
    horizon : steps to forecast, 1..64.
    season : the seasonal period (None: found from the series at fit / predict).
    epochs : fit fine-tunes a copy of the network on the series for this many epochs
        (0: no fine-tuning, zero-shot); lr, batch_size: its AdamW settings.
    calibration : at most this many rolling origins at the series' end calibrate the
        intervals.
    random_state : seeds the fine-tuning.
    blend : combine the network's forecast with exponential smoothing's (True, the
        default; step 5 of the module docstring) or use the network alone (False).
    """

    def __init__(self, horizon: int = 1, *, season: int | None = None, epochs: int = 0,
                 lr: float = 1e-4, batch_size: int = 32, calibration: int = 48,
                 random_state: Any = 0, blend: bool = True) -> None:
        self.horizon = horizon
        self.season = season
        self.epochs = epochs
        self.lr = lr
        self.batch_size = batch_size
        self.calibration = calibration
        self.random_state = random_state
        self.blend = blend

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("horizon", "season", "epochs", "lr",
                                               "batch_size", "calibration", "random_state",
                                               "blend")}

    def set_params(self, **params: Any) -> PretrainedForecaster:
        for k, v in params.items():
            if k not in self.get_params():
                raise ValueError(f"invalid parameter {k!r} for PretrainedForecaster")
            setattr(self, k, v)
        return self

    # ---- fit -------------------------------------------------------------
    def fit(self, y: Any, X: Any = None) -> PretrainedForecaster:
        """Store y (1-D, at least horizon + 2 values), fine-tune when epochs > 0, and
        calibrate the intervals on the series' last origins."""
        h = _check_h(self.horizon)
        if X is not None:
            raise ValueError("X is not supported by the pretrained forecaster; pass None")
        epochs = win.check_int("epochs", self.epochs, 0)
        a = _as_series(y, min_len=h + 2)
        self.blend_ = _check_blend(self.blend)
        self.horizon_ = h
        self.season_ = season_of(a, self.season)
        self.y_ = a
        self.network_ = load_network()
        self.method_ = "pretrained"
        if epochs > 0:
            self.network_ = self._fine_tune(a, epochs)
            self.method_ = "pretrained+fine-tuned"
        if self.blend_:
            self.method_ += "+smoothing"
        self.scores_ = self._calibrate(a)
        return self

    def _origins(self, n: int) -> range:
        """Calibration origins: the last `calibration` ones with 3+ steps of context
        (2 for a series of 3 values, the shortest that fits at horizon 1)."""
        cal = win.check_int("calibration", self.calibration, 1)
        return range(max(3 if n > 3 else 2, n - cal), n)

    def _calibrate(self, a: F64) -> F64:
        """Pooled scores |error| / (sd * sqrt(step)) over the origins' available steps."""
        h = self.horizon_
        origins = list(self._origins(a.shape[0]))
        fc, _, sd = _forecast_many(self.network_, [a[:t] for t in origins], self.season_,
                                   self.blend_)
        scores = []
        for i, t in enumerate(origins):
            k = min(h, a.shape[0] - t)
            steps = np.sqrt(np.arange(1, k + 1))
            scores.append(np.abs(a[t:t + k] - fc[i, :k]) / (sd[i] * steps))
        return np.concatenate(scores)

    def _fine_tune(self, a: F64, epochs: int) -> Any:
        net = copy.deepcopy(self.network_)
        n = a.shape[0]
        origins = list(range(max(3, n - 2000), n - 1))
        toks, tgts = [], []
        own, _, _ = _forecast_many(net, [a[:t] for t in origins], self.season_, False)
        for i, t in enumerate(origins):
            tok, base, mu, sd, q = features(a[:t], self.season_)
            fut = own[i].copy()
            k = min(HORIZON, n - t)
            fut[:k] = a[t:t + k]
            tgts.append(np.clip(((fut - mu) / sd - base) / q, -CLIP, CLIP))
            toks.append(tok)
        net.set_params(warm_start=True, epochs=int(epochs), lr=float(self.lr),
                       batch_size=int(self.batch_size), random_state=self.random_state,
                       verbose=0, options={**(net.options or {}), "validation_fraction": 0.0,
                                           "early_stopping": False})
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            net.fit(np.stack(toks).astype(np.float32), np.stack(tgts).astype(np.float32))
        return net

    # ---- predict ---------------------------------------------------------
    def _series(self, y: Any) -> F64:
        if y is None:
            if not hasattr(self, "y_"):
                raise ValueError("predict needs y when the forecaster is not fitted "
                                 "(zero-shot: predict(y)), or call fit(y) first")
            return self.y_
        return _as_series(y, min_len=3)

    def predict(self, y: Any = None) -> F64:
        """The next `horizon` values after y (or after the fitted series)."""
        h = _check_h(self.horizon)
        a = self._series(y)
        net = getattr(self, "network_", None) or load_network()
        s = self.season_ if y is None else season_of(a, self.season)
        blend = self.blend_ if hasattr(self, "blend_") else _check_blend(self.blend)
        out, _, _ = _forecast_many(net, [a], s, blend)
        res: F64 = out[0, :h].copy()
        return res

    def predict_interval(self, y: Any = None, coverage: float = 0.9) -> tuple[F64, F64]:
        """(lower, upper) of the central `coverage` interval (needs fit: the scores
        come from the fitted series' own last origins)."""
        lo_p, _ = win.interval_levels(coverage)
        if not hasattr(self, "scores_"):
            raise ValueError("predict_interval needs fit(y) first (it calibrates the "
                             "intervals on the series' own last origins)")
        h = self.horizon_
        a = self._series(y)
        s = self.season_ if y is None else season_of(a, self.season)
        out, _, sd = _forecast_many(self.network_, [a], s, self.blend_)
        e = self.scores_
        n = e.shape[0]
        level = min(1.0, math.ceil((n + 1) * float(coverage)) / n)
        q = float(np.quantile(e, level, method="higher"))
        half = q * sd[0] * np.sqrt(np.arange(1, h + 1))
        point = out[0, :h]
        return point - half, point + half
