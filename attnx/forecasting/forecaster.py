"""TransformerForecaster: the next `horizon` values of one series or of many, with
conformal prediction intervals.

By default (method=None) series alone are forecast by method="auto": candidates chosen
per series on rolling origins (attnx.forecasting._forecaster_auto; classical models and
the pretrained network); with covariates, or intervals="quantile", by the transformer
(method="network", one global model over all series), which falls back to "auto", with a
UserWarning, on series too short for its windows: ``method_`` says what forecasts.
The network path, step by step (windows, instance scaling, patches, the baseline and
its weight, channel independence, split-conformal intervals, covariates), is written
out in the user guide (docs/guide/forecasting.rst, "How the network forecasts"); its
parts: _forecaster_inputs (targets, tokens, baselines, season),
_forecaster_calibration (calibration and intervals), _forecaster_stats.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

import numpy as np

from . import _forecaster_state, _gaps, _pandas
from ..estimators import _model_file
from . import _windows as win
from ..estimators._base import EstimatorParams
from . import _forecaster_params as _params
from ._forecaster_auto import ClassicalPath, TooFewWindows
from ._forecaster_calibration import ConformalIntervals
from ._forecaster_stats import MIN_EVIDENCE
from ._forecaster_stats import col_stats as _col_stats
from ._forecaster_stats import evidence as _evidence
from ..runtime._progress import progress_phase

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..runtime._typing import RandomStateLike

    F64 = npt.NDArray[np.float64]

__all__ = ["TransformerForecaster", "FORECASTERS"]

# what the network path's fallback to the classical one keeps of the network's fit
_KEEP = ("time_index_", "was_list_", "k_", "k_out_", "season_", "horizon_", "levels_")



class ForecastSpec(NamedTuple):
    """What an exporter (attnx.io.onnx) needs to reproduce predict from the last `window`
    steps of each series: the network (the regressor's ExportSpec), the sizes, the
    baseline and its weight, the patches, the covariates' standardisation and the
    intervals: the network's outputs per forecast value are n_levels quantile
    levels (1 unless intervals="quantile"), sorted ascending; `point` weighs them
    into the point forecast (n_levels,), and `interval(coverage)` gives (lower
    weights, upper weights, half-width (1, horizon, k_out) in scaled units): an
    interval end is the weighted sorted outputs times blend, plus the baseline,
    minus (lower) / plus (upper) the half-width, scaled back (None without
    intervals)."""

    network: Any
    horizon: int
    window: int
    k: int
    k_out: int
    channel_independent: bool
    period: int
    baseline: str
    blend: float
    patch_len: int
    patch_stride: int
    cov_mean: Any
    cov_std: Any
    fut_mean: Any
    fut_std: Any
    n_static: int | None
    std_floor: float
    n_levels: int
    point: Any
    interval: Callable[[float], tuple[Any, Any, Any]] | None


class TransformerForecaster(ConformalIntervals, ClassicalPath, EstimatorParams):
    __doc__ = _params.docs_of("""
    Multi-horizon forecaster over one series or many (one global model).""", [
        ("window", """context length; None chooses it from the data (``min(max(3*horizon, 4*season,
        16), median length - horizon)``, at least ``max(2*horizon, 8)``)."""),
        ("patch_len, patch_stride", """patch size and step; None: ``clip(window // 8, 1, 16)`` and half of it
        (half-overlapping patches, about 16 tokens)."""),
        ("season", """seasonal period of the data (12 for monthly with a yearly cycle; 1 none); None
        (default): from the frequency of a pandas DatetimeIndex / PeriodIndex when y
        carries one (attnx.forecasting._pandas.season: 12 monthly, 4 quarterly, 48 for
        half-hours, ...; used when the median series holds two cycles), else from the
        data (attnx.forecasting._season: the highest clear peak of the autocorrelation
        of the detrended series). Sets the default window and the baseline; the fitted
        value is ``season_``."""),
        ("baseline", """what the network forecasts the residual from, in the window's scaled units.
        "seasonal_naive": the seasonal naive forecast (each horizon step's value one
        season before, taken from the context), so a network that outputs zeros
        forecasts exactly seasonal naive (naive, the last value, with season 1 or when
        the window is shorter than the season); "seasonal_mean": the context's seasonal
        profile (each phase's mean over the context's real steps; the context's mean
        with season 1); "none": the context's mean (the network forecasts the scaled
        values themselves, as model files from before this parameter do); "combined":
        the mean of seasonal naive and the profile; "auto" (default): seasonal naive for
        a seasonal series and the context's mean ("seasonal_mean" with season 1) without
        a season, unless the other has a significantly smaller mean absolute error on
        the held-out calibration windows (on every window with intervals=None);
        "combined" when the held-out windows are too few to tell (module docstring,
        point 6). The choice is ``baseline_``; the network's weight on top of it (0: the
        baseline alone) is ``blend_``."""),
        ("intervals", """"conformal" (split-conformal calibration of the point forecast's errors, one
        extra fit), "quantile" (the network learns quantile_levels of each future value
        with the pinball loss; its intervals are calibrated conformally on the same
        held-out windows, CQR) or None."""),
        ("quantile_levels", """with intervals="quantile": the levels the network learns (0.5 is added when
        missing: the point forecast is the median); predict_interval(coverage) needs (1
        - coverage) / 2 within them (levels in between are interpolated linearly)."""),
        ("calibration", """origins per series kept for calibration; None: enough for about 200 calibration
        windows in all, between 1 and a quarter of each series' windows."""),
        ("steps", """optimizer steps to train for when epochs is None: epochs = steps / batches per
        epoch, clipped to [20, 300], the floor of 20 epochs costing at most 2 * steps
        optimizer steps (a large panel of many windows trains for round(2 * steps /
        batches per epoch) epochs, at least 1)."""),
        ("epochs, batch_size, lr, weight_decay", """training; AdamW at a constant learning rate (the calibration run is resumed in
        chunks to check its held-out error), weight decay on the weight matrices only,
        gradient clipping at norm 1."""),
        ("method", """None (default): "auto" for series alone; "network" when X, X_future or static is
        given or intervals="quantile" (only the network uses them). "auto" had the
        smaller mean MASE per series on 392 generated series of every kind (1.31 against
        the network's 1.41) and fits a 500-value series in about a second (the network:
        several seconds); the network was ahead on the development series (3.16 against
        3.19, from its global model over 181 yearly series). "network": the transformer
        above (one global model over all the series given); series too short for its
        training and calibration windows fall back to "auto" with a UserWarning. "auto":
        classical candidates (attnx's own naive, seasonal naive, drift, SES, Theta and a
        seasonal autoregression; statsforecast's AutoETS, AutoTheta, AutoARIMA and MSTL
        when it is installed) chosen per series on rolling-origin errors, intervals
        calibrated conformally on the same origins (attnx.forecasting._selection); or
        one candidate's name. The fitted ``method_`` says what forecasts
        (attnx.forecasting._forecaster_auto). The classical path always has intervals
        (``intervals`` and the network's sizes and training settings do not apply to it)
        and ignores X, X_future, static."""),
        ("n_jobs", """None (default: in this process), -1 (one worker process per CPU this process may
        use) or the number of worker processes the classical path chooses the series'
        candidates in (at most one per 50 series; the same forecasts as in one process).
        Workers start with the "spawn" method, so a script needs the ``if __name__ ==
        "__main__":`` guard; where they cannot start, the series are chosen in this
        process after a UserWarning. The network path ignores it (its threads follow
        attnx.set_num_threads)."""),
    ])

    def __init__(self, horizon: int = 1, *, window: int | None = None,
                 patch_len: int | None = None, patch_stride: int | None = None,
                 season: int | None = None, baseline: str = "auto", d_model: int = 64,
                 n_heads: int = 4, n_layers: int = 2, d_hidden: int | None = None,
                 dropout: float = 0.1, channel_independent: bool = True,
                 intervals: str | None = "conformal",
                 quantile_levels: Any = _params.QUANTILE_LEVELS,
                 calibration: int | None = None, steps: int = 500,
                 epochs: int | None = None, batch_size: int = 32, lr: float = 1e-3,
                 weight_decay: float = 0.01, random_state: RandomStateLike = None,
                 verbose: int = 0, dtype: npt.DTypeLike = np.float32,
                 method: str | None = None, n_jobs: int | None = None) -> None:
        self.horizon = horizon
        self.window = window
        self.patch_len = patch_len
        self.patch_stride = patch_stride
        self.season = season
        self.baseline = baseline
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_layers = n_layers
        self.d_hidden = d_hidden
        self.dropout = dropout
        self.channel_independent = channel_independent
        self.intervals = intervals
        self.quantile_levels = quantile_levels
        self.calibration = calibration
        self.steps = steps
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.random_state = random_state
        self.verbose = verbose
        self.dtype = dtype
        self.method = method
        self.n_jobs = n_jobs

    @classmethod
    def pretrained(cls, horizon: int = 1, **kw: Any) -> Any:
        """attnx's pretrained forecasting network (a small transformer trained on
        synthetic series, shipped with the package): ``predict(y)`` forecasts any 1-D
        series zero-shot, with no fit, by default combining the network's forecast
        (weight 0.4) with an exponential-smoothing forecast computed from the same
        series (blend=False: the network alone); ``fit(y)`` stores the series and
        calibrates prediction intervals on its own last origins; ``fit(y)`` with
        ``epochs=N`` also fine-tunes a copy of the network on it. horizon: 1..64;
        keywords: season, epochs, lr, batch_size, calibration, random_state, blend
        (attnx.forecasting._pretrained_forecaster.PretrainedForecaster)."""
        from ._pretrained_forecaster import PretrainedForecaster
        return PretrainedForecaster(horizon=horizon, **kw)

    # ---- configuration ---------------------------------------------------
    def _check(self) -> None:
        """Every parameter's rule (attnx.forecasting._forecaster_params), then the
        learned levels of intervals="quantile"."""
        self.horizon_ = _params.check(self.get_params())["horizon"]
        if self.intervals == "quantile":
            levels = win.check_quantiles(self.quantile_levels, "quantile_levels")
            self.levels_ = tuple(sorted(set(levels) | {0.5}))
        else:
            self.levels_ = (0.5,)

    # ---- fit / predict ---------------------------------------------------
    def fit(self, y: Any, X: Any = None, *, X_future: Any = None, static: Any = None,
            sample_weight: Any = None) -> TransformerForecaster:
        """Train on y: one series (T,) / (T, k) or a list of series (a global model).

        X: past-observed covariates aligned with y ((T_i, c) per series); X_future:
        covariates known in advance, aligned with y ((T_i, c_f) per series; predict then
        needs the next horizon rows); static: per-series features ((s,) per series, or an
        (n_series, s) array). sample_weight is not supported yet (must be None).
        """
        for k in [k for k in vars(self) if k.endswith("_") and not k.startswith("_")]:
            delattr(self, k)   # a refit forgets the previous fit, whichever path it took
        self._check()
        if sample_weight is not None:
            raise ValueError("sample_weight is not supported by TransformerForecaster yet; "
                             "pass None")
        h = self.horizon_
        y_index = _gaps.indexes(y)
        y, self.time_index_ = _pandas.unwrap("y", y)
        raw, self.was_list_ = win.series_list("y", y, min_len=h + 2, missing=True)
        # missing values: leading ones dropped, the rest filled per path (_gaps)
        series, leads = _gaps.observed_series("y", raw, self.was_list_, self.time_index_,
                                              y_index, h + 2)
        self.k_ = series[0].shape[1]
        self.k_out_ = 1 if self.channel_independent else self.k_
        self.season_ = self._season([_gaps.fill_2d(s, 1) for s in series])
        given = X is not None or X_future is not None or static is not None
        if self.method != "network" and not (self.method is None
                                             and self._wants_network(given)):
            self._fit_classical(series, None, given)
            return self
        try:
            return self._fit_network(series, X, X_future, static, raw, leads)
        except TooFewWindows as exc:
            for k in [k for k in vars(self) if k.endswith("_") and k not in _KEEP]:
                delattr(self, k)
            self._fit_classical(series, str(exc), given)
            return self

    def _wants_network(self, covariates: bool) -> bool:
        """Whether method=None trains the network: covariates given, or learned
        quantiles asked for (only the network has either)."""
        return covariates or self.intervals == "quantile"

    def _fit_network(self, series: list[F64], X: Any, X_future: Any, static: Any,
                     raw: list[F64], leads: list[int]) -> TransformerForecaster:
        """The network path on the series (leading NaNs dropped: `leads` rows of the
        given series `raw`, which the covariates are aligned with)."""
        h = self.horizon_
        self.method_ = "network"
        self.baseline_ = "seasonal_naive" if self.baseline == "auto" else self.baseline
        self.blend_ = 1.0
        cov = _gaps.covariates("X", win.aligned("X", X, raw, missing=True), leads)
        fut = _gaps.covariates("X_future", win.aligned("X_future", X_future, raw,
                                                       missing=True), leads)
        stat = win.static_features(static, len(series))
        # the network's inputs are complete: filled values, left out of the scores
        seen = [~np.isnan(s) if _gaps.has_gaps(s) else None for s in series]
        series = [_gaps.fill_2d(s, self.season_) for s in series]
        lengths = [s.shape[0] for s in series]
        self.window_ = (win.check_int("window", self.window, 2) if self.window is not None
                        else win.default_window(lengths, h, self.season_))
        if self.patch_len is None:
            self.patch_len_, self.patch_stride_ = win.default_patch(self.window_)
        else:
            self.patch_len_ = win.check_int("patch_len", self.patch_len, 1)
            self.patch_stride_ = (self.patch_len_ if self.patch_stride is None
                                  else win.check_int("patch_stride", self.patch_stride, 1))
        n_tok = win.n_patches(self.window_, self.patch_len_, self.patch_stride_)
        min_len = min(lengths)
        if min_len < self.patch_len_ + h:
            raise TooFewWindows(f"every series needs at least patch_len + horizon = "
                             f"{self.patch_len_ + h} time steps; the shortest has {min_len}")
        self.cov_mean_, self.cov_std_ = _col_stats(cov)
        self.fut_mean_, self.fut_std_ = _col_stats(fut)
        targets = self._targets(series)
        cov_t, fut_t, stat_t = self._per_target(cov), self._per_target(fut), \
            self._per_target(stat)
        if max(lengths) < self._min_context() + h:
            raise TooFewWindows(f"no training window: the longest series has {max(lengths)} "
                                f"time steps, {self._min_context() + h} are needed")
        w = win.cut(targets, self.window_, h, min_context=self._min_context(), covariates=cov_t)
        if len(w.origin) < 2:
            raise TooFewWindows(f"the series give {len(w.origin)} training window(s) of "
                                f"window={self.window_} and horizon={h}")
        extra = self._extra(stat_t, fut_t, w.series, w.origin)
        mu, sd, base, _, xin = self._tokens(w.context, w.mask, extra)
        scaled = (w.target - mu) / sd
        held = self._held_out(w) if self.intervals is not None else None
        recent = held if held is not None else np.ones(len(w.origin), bool)
        self.evidence_ = _evidence(w, recent, h)
        if self.baseline == "auto":
            # the default baseline (seasonal naive; the context's mean without a
            # season), unless the other has a significantly smaller absolute error
            # on the held-out (most recent) windows: the error MASE scores; both
            # averaged when the held-out windows are too few to tell
            x = (w.context[:, :, :self.k_out_] - mu) / sd
            self.baseline_ = self._auto_baseline(scaled[recent], x[recent], w.mask[recent])
            base = self._baseline(self.baseline_, x, w.mask)
        tgt = (scaled - base).reshape(len(w.target), -1)
        seed = int(np.random.default_rng(self.random_state).integers(2 ** 31 - 1))
        self.calibration_scores_ = None
        final = self._regressor(len(tgt), n_tok, seed, tgt.shape[1])
        if held is not None and self.evidence_ < MIN_EVIDENCE:
            # too few held-out forecasts to trust the network's gain there: the
            # baseline alone, calibrated on its own held-out errors
            self.calibration_scores_, self.blend_ = self._scores(tgt[held], None, 0.0), 0.0
        elif held is not None:
            self.calibration_scores_, best, self.blend_ = self._calibrate(
                held, xin, tgt, seed, n_tok)
            if self.epochs is None:   # as long as the held-out check liked best
                final.set_params(epochs=max(1, best))
        if held is not None and any(m is not None for m in seen):
            self.calibration_scores_ = self._unscore_filled(
                self.calibration_scores_, self._targets_seen(seen, lengths, w, held))
        with progress_phase("final fit"):   # verbose: the bar's name
            self.regressor_ = final.fit(xin, self._repeat_levels(tgt))
        self.n_windows_ = len(tgt)
        # what predict() without y forecasts from: the end of each series seen
        self.history_ = [s[-self.window_:].copy() for s in series]
        self.history_cov_ = None if cov is None else [c[-self.window_:].copy() for c in cov]
        self.static_ = stat
        self.n_series_ = len(series)
        return self

    # ---- persistence ---------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the forecaster (hyper-parameters, the wrapped regressor's weights,
        optimizer and RNG state, and the fitted window, scaling statistics, conformal
        scores and series ends) to exactly `path`, a safetensors file (see attnx.io);
        attnx.load(path) reads it back and predicts the same values bit for bit."""
        _model_file.check_saveable(self)
        _model_file.write(path, *_forecaster_state.get_state(self, portable=True))

    def __getstate__(self) -> dict[str, Any]:
        # the same state as a model file (attnx.forecasting._forecaster_state)
        return {"attnx_state": _forecaster_state.get_state(self, portable=False)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        _forecaster_state.set_state(self, *state["attnx_state"])

    def _classical(self) -> bool:
        """Whether the fitted forecaster forecasts with a classical method."""
        self._fitted()
        return getattr(self, "method_", "network") != "network"

    def _fitted(self) -> None:
        if not hasattr(self, "method_") and not hasattr(self, "regressor_"):
            from ..estimators._base import sklearn_class
            raise sklearn_class("NotFittedError")(
                "this TransformerForecaster is not fitted yet: call fit first")

    def _forecast(self, y: Any, X: Any, X_future: Any
                  ) -> tuple[F64, F64, F64, bool, list[dict[str, Any]] | None]:
        """The forecasts of every level in the windows' scaled units (n_targets,
        horizon, k_out, n_levels: blend_ times the network's sorted outputs plus the
        baseline), the scales mu and sd (n_targets, 1, k_out), whether the series came
        as a list, and their pandas index records (or None)."""
        self._fitted()
        h = self.horizon_
        if y is None:
            series, was_list = self.history_, self.was_list_
            index = self.time_index_
            cov = self.history_cov_
            if X is not None:   # the past covariates up to the end of the fit's series
                items, _ = win.series_list("X", X if isinstance(X, (list, tuple))
                                           or len(series) == 1 else list(X))
                if len(items) != len(series) or any(
                        a.shape[0] < s.shape[0] for a, s in zip(items, series)):
                    raise ValueError(f"X must give the past covariates of each series "
                                     f"({len(series)}), at least its last "
                                     f"{series[0].shape[0]} rows")
                cov = [a[-s.shape[0]:] for a, s in zip(items, series)]
        else:
            y_index = _gaps.indexes(y)
            y, index = _pandas.unwrap("y", y)
            raw, was_list = win.series_list("y", y, min_len=self.patch_len_, missing=True)
            series, leads = _gaps.observed_series("y", raw, was_list, index, y_index,
                                                  self.patch_len_, "patch_len")
            if series[0].shape[1] != self.k_:
                raise ValueError(f"y must have {self.k_} channel(s) as at fit, got "
                                 f"{series[0].shape[1]}")
            series = [_gaps.fill_2d(s, self.season_) for s in series]
            cov = _gaps.covariates("X", win.aligned("X", X, raw, missing=True), leads)
        if (cov is None) != (self.cov_mean_ is None):
            raise ValueError("X (past covariates) must be given at predict exactly when it "
                             "was given at fit")
        fut = None
        if self.fut_mean_ is not None:
            if X_future is None:
                raise ValueError(f"X_future must give the next {h} rows of the future "
                                 f"covariates for each series")
            fut, _ = win.series_list("X_future", X_future)
            if len(fut) != len(series) or any(f.shape[0] != h for f in fut):
                raise ValueError(f"X_future must give {h} rows per series "
                                 f"({len(series)} series)")
        elif X_future is not None:
            raise ValueError("X_future was not given at fit, so it cannot be used at predict")
        stat = self.static_
        if stat is not None and len(stat) != len(series):
            raise ValueError("static features were given at fit for a different number of "
                             "series; predict(y=...) needs the same series")
        targets = self._targets(series)
        ctx, msk = [], []
        covs = self._per_target(cov)
        for i, s in enumerate(targets):
            feats = s if covs is None else np.concatenate([s, covs[i]], axis=1)
            c = feats[-self.window_:]
            pad = self.window_ - c.shape[0]
            m = np.zeros(self.window_, bool)
            m[:pad] = True
            if pad:
                c = np.concatenate([np.repeat(c[:1], pad, axis=0), c], axis=0)
            ctx.append(c)
            msk.append(m)
        rows = np.arange(len(targets), dtype=np.intp)
        extra = self._extra(self._per_target(stat), self._per_target(fut), rows, None)
        mu, sd, base, _, xin = self._tokens(np.stack(ctx), np.stack(msk), extra)
        out = self._levels_sorted(self.regressor_.predict(xin), len(targets))
        out = out.reshape(len(targets), h, self.k_out_, len(self.levels_))
        return self.blend_ * out + base[..., None], mu, sd, was_list, index

    def _merge(self, a: F64) -> F64:
        """(n_targets, h, k_out) -> (n_series, h, k)."""
        if self.channel_independent and self.k_ > 1:
            n = a.shape[0] // self.k_
            return a.reshape(n, self.k_, a.shape[1]).transpose(0, 2, 1).copy()
        return a

    def _shape(self, a: F64, was_list: bool) -> Any:
        out = [s if self.k_ > 1 else s[:, 0] for s in a]
        return out if was_list else out[0]

    @staticmethod
    def _one_or_list(out: list[Any], was_list: bool) -> Any:
        return out if was_list else out[0]

    def export_spec(self) -> ForecastSpec:
        """The fitted pipeline as values (see ForecastSpec); what attnx.io.onnx.export reads
        from a forecaster."""
        if self._classical():
            raise ValueError(f"this forecaster forecasts with the classical method "
                             f"{self.method_!r}, which ONNX export does not cover (the "
                             f"network only): fit with method='network' and series long "
                             f"enough for its windows")
        stat = self.static_
        n_q = len(self.levels_)
        point = np.zeros(n_q)
        point[self.levels_.index(0.5)] = 1.0

        def interval(coverage: float) -> tuple[F64, F64, F64]:
            return self._interval(coverage)
        return ForecastSpec(
            self.regressor_.export_spec(), self.horizon_, self.window_, self.k_, self.k_out_,
            bool(self.channel_independent and self.k_ > 1), self._base_period(),
            self.baseline_, float(self.blend_), self.patch_len_, self.patch_stride_,
            self.cov_mean_, self.cov_std_, self.fut_mean_, self.fut_std_,
            None if stat is None else int(np.asarray(stat[0]).shape[0]), win.STD_FLOOR,
            n_q, point, interval if self.calibration_scores_ is not None else None)

    def predict(self, y: Any = None, X: Any = None, *, X_future: Any = None) -> Any:
        """The next `horizon` values after the end of each series: (horizon,) or
        (horizon, k), a list of those for a list of series. Without y, after the
        series seen at fit; with y (and X), after the series given. Series given as
        pandas give pandas: a Series / DataFrame on the next `horizon` time stamps."""
        if self._classical():
            return self._classical_predict(y)
        q, mu, sd, was_list, index = self._forecast(y, X, X_future)
        point = self._merge(self._point(q) * sd + mu)
        if index is None:
            return self._shape(point, was_list)
        return self._one_or_list([_pandas.point(m, a) for m, a in
                                  zip(index, self._shape(point, True))], was_list)

    def predict_interval(self, y: Any = None, X: Any = None, *, X_future: Any = None,
                         coverage: float = 0.9) -> Any:
        """(lower, upper) of intervals that cover each future value with probability
        about `coverage` (conformally calibrated), each shaped as predict's result for
        one series; for a list of series, a list of such (lower, upper) pairs."""
        if self._classical():
            return self._classical_interval(y, coverage)
        self._interval(coverage)   # the checks, before the forecast's work
        q, mu, sd, was_list, index = self._forecast(y, X, X_future)
        lo, hi = self._ends(q, float(coverage))
        lower = self._shape(self._merge(lo * sd + mu), True)
        upper = self._shape(self._merge(hi * sd + mu), True)
        if index is not None:
            return self._one_or_list([_pandas.interval(m, a, b) for m, a, b in
                                      zip(index, lower, upper)], was_list)
        return self._one_or_list(list(zip(lower, upper)), was_list)

    def predict_quantiles(self, y: Any = None, X: Any = None, *, X_future: Any = None,
                          quantiles: Any = (0.1, 0.5, 0.9)) -> Any:
        """Forecast quantiles, shape predict's result + (n_quantiles,), levels sorted:
        level q is the lower end of the central (1 - 2q) interval for q < 0.5, the
        upper end of the central (2q - 1) interval for q > 0.5, the point forecast
        at 0.5; sorted along the levels (so quantiles never cross). For pandas series:
        a DataFrame per series on the future time stamps, one column per level (per
        column of a DataFrame: (column, level))."""
        qs = win.check_quantiles(quantiles)
        if self._classical():
            return self._classical_quantiles(y, qs)
        for lv in qs:   # the checks, before the forecast's work
            if lv != 0.5:
                self._interval(abs(2.0 * lv - 1.0))
        if self.calibration_scores_ is None:
            raise ValueError("this forecaster was fitted with intervals=None: no quantiles")
        q, mu, sd, was_list, index = self._forecast(y, X, X_future)
        cols = []
        for lv in qs:
            if lv == 0.5:
                cols.append(self._point(q))
            else:
                lo, hi = self._ends(q, abs(2.0 * lv - 1.0))
                cols.append(lo if lv < 0.5 else hi)
        scaled = np.sort(np.stack(cols, axis=-1), axis=-1)
        stacked = np.stack([self._merge(scaled[..., j] * sd + mu) for j in range(len(qs))],
                           axis=-1)
        if index is not None:
            return self._one_or_list([_pandas.quantiles(m, a, qs) for m, a in
                                      zip(index, self._shape(stacked, True))], was_list)
        return self._shape(stacked, was_list)


#: the forecaster classes a model file may name: attnx.io looks them up here
FORECASTERS: dict[str, type[TransformerForecaster]] = {
    TransformerForecaster.__name__: TransformerForecaster}
_model_file.register(*FORECASTERS.values())
