"""The forecaster's conformal intervals: the calibration fit on held-out windows (the
last origins of each series), the conformity scores it keeps, and the interval ends
and half-widths made from them, on the network path's inputs (NetworkInputs). A mixin
of TransformerForecaster."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _windows as win
from ..estimators.regressors import TransformerRegressor
from ..runtime._progress import progress_phase
from ._forecaster_auto import TooFewWindows
from ._forecaster_inputs import NetworkInputs
from ._training_budget import default_epochs
from ._forecaster_stats import l1_weight as _l1_weight
from ._forecaster_stats import level_weights as _level_weights

if TYPE_CHECKING:
    import numpy.typing as npt

    F64 = npt.NDArray[np.float64]

#: checks of the held-out error during the calibration fit
_CHECKS = 10


class ConformalIntervals(NetworkInputs):
    """Calibration and intervals of the network path (see the module)."""

    calibration: int | None
    intervals: str | None
    # the network's parameters, as the forecaster stores them (its constructor)
    n_heads: int
    n_layers: int
    d_hidden: int | None
    d_model: int
    dropout: float
    steps: int
    epochs: int | None
    batch_size: int
    lr: float
    weight_decay: float
    verbose: int
    dtype: Any
    levels_: tuple[float, ...]
    calibration_scores_: F64 | None
    horizon_: int
    k_: int
    k_out_: int

    def _regressor(self, n_windows: int, n_tokens: int, seed: int, n_targets: int
                   ) -> TransformerRegressor:
        """The network: n_targets = horizon * k_out values per window, each learned
        as len(levels_) quantiles with intervals="quantile" (the pinball loss; the
        columns run value-major, levels fastest), else with the squared error."""
        bs = win.check_int("batch_size", self.batch_size, 1)
        pinball = len(self.levels_) > 1
        if self.epochs is None:
            epochs = default_epochs(self.steps, math.ceil(n_windows / bs))
        else:
            epochs = int(self.epochs)
        return TransformerRegressor(
            n_heads=self.n_heads, n_layers=self.n_layers, d_hidden=self.d_hidden,
            d_model=self.d_model, positional="sinusoidal", norm="pre", pooling="mean",
            dropout=self.dropout, epochs=epochs, batch_size=bs, lr=self.lr,
            weight_decay=self.weight_decay, random_state=seed, verbose=self.verbose,
            dtype=self.dtype, patch_len=1, instance_norm=None,
            loss="pinball" if pinball else "squared_error",
            # the windows are scaled and patched here; a constant rate, as the
            # calibration fit is resumed in chunks to check its held-out error
            options={"max_len": n_tokens, "standardize": False, "lr_schedule": "constant",
                     "quantiles": self.levels_ * n_targets if pinball else None})

    def _held_out(self, w: win.Windows) -> npt.NDArray[np.bool_]:
        """Which training windows the calibration fit holds out: the last origins of
        each series (``calibration`` of them, at most a quarter of its windows)."""
        order = np.lexsort((w.origin, w.series))
        per = np.bincount(w.series[order])
        if self.calibration is not None:
            n_cal = int(self.calibration)
        else:
            n_cal = max(1, math.ceil(200 / max(int((per > 0).sum()), 1)))
        cal = np.zeros(len(w.origin), bool)
        start = 0
        for cnt in per:
            take = min(n_cal, max(cnt // 4, 1)) if cnt > 1 else 0
            cal[order[start + cnt - take:start + cnt]] = True
            start += cnt
        if not cal.any() or cal.all():
            raise TooFewWindows("too few training windows to hold some out for the "
                                "conformal calibration")
        return cal

    def _calibrate(self, cal: npt.NDArray[np.bool_], xin: list[F64] | F64, tgt: F64,
                   seed: int, n_tok: int) -> tuple[F64, int, float]:
        """Train without the held-out windows `cal`, checking the error on them every
        few epochs: (scaled absolute errors (n_cal, horizon * k_out) of the best check,
        the epochs it had trained, the network's weight there).

        The weight shrinks the network's output towards the baseline: at each check,
        the factor c in [0, 1] with the smallest held-out absolute error (the error
        MASE scores; the network trains on squared error) of c times the network's
        outputs against the residual targets (c = 0, the baseline alone, exactly,
        when the baseline is exact on most of them or the outputs do not correlate
        positively with them); the best check has the smallest absolute error."""
        pick, held = np.flatnonzero(~cal), np.flatnonzero(cal)

        def sub(ix: npt.NDArray[np.intp]) -> list[F64] | F64:
            return [xin[i] for i in ix] if isinstance(xin, list) else xin[ix]
        model = self._regressor(len(pick), n_tok, seed, tgt.shape[1])
        total = model.epochs
        assert total is not None   # _regressor always sets the epochs
        chunk = max(1, total // _CHECKS)
        model.set_params(epochs=chunk, warm_start=True)
        x_fit, x_held, y_fit = sub(pick), sub(held), self._repeat_levels(tgt[pick])
        best, best_err, best_epochs, best_c, done = None, math.inf, total, 1.0, 0
        y_held = tgt[held]
        with progress_phase("held-out run"):   # one bar over its warm-started fits
            while done < total:
                model.fit(x_fit, y_fit)
                done += chunk
                levels = self._levels_sorted(model.predict(x_held), len(held))
                point = levels[..., self.levels_.index(0.5)]
                c = _l1_weight(point, y_held)
                score = float(np.mean(np.abs(c * point - y_held)))
                if score < best_err:
                    best, best_err, best_epochs, best_c = levels, score, done, c
        assert best is not None
        return self._scores(y_held, best, best_c), best_epochs, best_c

    def _targets_seen(self, seen: list[Any], lengths: list[int], w: win.Windows,
                      held: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
        """Which values of the held-out windows' targets were observed (n_held,
        horizon * k_out), from each series' observed mask (None: all observed)."""
        per = self._targets([np.ones((n, self.k_), bool) if m is None else m
                             for m, n in zip(seen, lengths)])
        h = self.horizon_
        rows = [per[i][t:t + h] for i, t in zip(w.series[held], w.origin[held])]
        out: npt.NDArray[np.bool_] = np.stack(rows).reshape(len(rows), -1)
        return out

    def _unscore_filled(self, scores: F64 | None, seen: npt.NDArray[np.bool_]) -> F64 | None:
        """The calibration scores with those of filled (not observed) values NaN."""
        if scores is None:
            return None
        out = scores.copy()
        out[~seen] = np.nan
        return out

    def _repeat_levels(self, tgt: F64) -> F64:
        """Targets (n, horizon * k_out) as the network's columns: each once per level."""
        return np.repeat(tgt, len(self.levels_), axis=1) if len(self.levels_) > 1 else tgt

    def _levels_sorted(self, out: Any, n: int) -> F64:
        """The network's outputs for n windows as (n, horizon * k_out, n_levels), the
        levels sorted ascending at every value (the rearrangement that keeps
        quantiles from crossing; it never increases the pinball loss)."""
        a = np.asarray(out, dtype=np.float64).reshape(n, -1, len(self.levels_))
        return np.sort(a, axis=-1)

    def _scores(self, y: F64, levels: F64 | None, c: float) -> F64:
        """The calibration scores of held-out residual targets y (n, horizon * k_out)
        against c times the sorted network outputs `levels` (None: zeros, the
        baseline alone): "conformal", the absolute errors of the point forecast
        (n, horizon * k_out); "quantile", the signed residuals of every level
        (n, horizon * k_out, n_levels), from which an interval's conformity scores
        are made (_half_width)."""
        if levels is None:
            levels = np.zeros(y.shape + (len(self.levels_),))
        if self.intervals == "quantile":
            out: F64 = y[..., None] - c * levels
            return out
        return np.abs(y - c * levels[..., 0])

    def _point(self, q: F64) -> F64:
        """The point forecasts (the median level) of _forecast's scaled levels."""
        out: F64 = q[..., self.levels_.index(0.5)]
        return out

    def _ends(self, q: F64, coverage: float) -> tuple[F64, F64]:
        """The interval's scaled ends (n_targets, horizon, k_out) from _forecast's
        levels q: the interpolated levels (1 -+ coverage) / 2 (the point forecast
        with intervals="conformal") widened by the conformal half-width, each end
        kept on its side of the point forecast."""
        w_lo, w_hi, half = self._interval(coverage)
        point = self._point(q)
        lower = np.minimum(q @ w_lo - half, point)
        upper = np.maximum(q @ w_hi + half, point)
        return lower, upper

    def _interval(self, coverage: float) -> tuple[F64, F64, F64]:
        """(weights of the sorted levels for the lower end (n_levels,), for the upper
        end, the conformal half-width (1, horizon, k_out) in scaled units) of the
        central `coverage` interval (ValueError: a bad coverage, no intervals, levels
        outside the learned ones)."""
        a, b = win.interval_levels(coverage)
        if self.calibration_scores_ is None:
            raise ValueError("this forecaster was fitted with intervals=None: no intervals")
        if len(self.levels_) == 1:
            w_lo = w_hi = np.ones(1)
        else:
            w_lo, w_hi = self._level_weights(a, coverage), self._level_weights(b, coverage)
        return w_lo, w_hi, self._half_width(float(coverage), w_lo, w_hi)

    def _level_weights(self, p: float, coverage: float) -> F64:
        """Weights of the sorted learned levels that interpolate level p linearly."""
        return _level_weights(self.levels_, p, coverage)

    def _half_width(self, coverage: float, w_lo: F64, w_hi: F64) -> F64:
        """Per horizon step (and k_out channel): the conformal quantile of the
        calibration windows' conformity scores, level ceil((n + 1) * coverage) / n of
        the n windows, made non-decreasing along the horizon (its running maximum: an
        error further ahead is not expected to be smaller, and the running maximum
        steadies the quantiles of a few, overlapping calibration windows);
        (1, horizon, k_out). The scores: "conformal", the absolute errors of the point
        forecast; "quantile", how far the value lies outside the interval of the
        learned levels (w_lo, w_hi), max(lower - y, y - upper), negative inside it
        (conformalized quantile regression, Romano et al. 2019)."""
        s = self.calibration_scores_
        assert s is not None
        e = s if s.ndim == 2 else np.maximum(-(s @ w_lo), s @ w_hi)
        if np.isnan(e).any():   # filled values' scores left out: each column's own n
            q = _column_quantiles(e, coverage)
        else:
            n = e.shape[0]
            level = min(1.0, math.ceil((n + 1) * coverage) / n)
            q = np.quantile(e, level, axis=0, method="higher")
        out: F64 = np.maximum.accumulate(q.reshape(1, self.horizon_, self.k_out_), axis=1)
        return out


def _column_quantiles(e: F64, coverage: float) -> F64:
    """The conformal quantile (level ceil((n + 1) coverage) / n) of each column's
    n non-NaN scores; a column without scores takes the largest of the others."""
    out = np.full(e.shape[1], np.nan)
    for j in range(e.shape[1]):
        col = e[:, j][~np.isnan(e[:, j])]
        if col.size:
            level = min(1.0, math.ceil((col.size + 1) * coverage) / col.size)
            out[j] = np.quantile(col, level, method="higher")
    if np.isnan(out).all():
        return np.zeros(e.shape[1])
    return np.where(np.isnan(out), np.nanmax(out), out)
