"""What the network path makes of the series: the targets (one per channel when
channel-independent), the tokens of a window's context (patches, with the covariates
and static features appended), the baseline the network forecasts the residual from,
the season and the shortest usable context. A mixin of TransformerForecaster."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import _panel_season, _season
from . import _windows as win
from ._forecaster_stats import MIN_EVIDENCE
from ._panel_season import PanelStats
from ._forecaster_stats import significantly_positive as _significantly_positive

if TYPE_CHECKING:
    import numpy.typing as npt

    F64 = npt.NDArray[np.float64]


class NetworkInputs:
    """The network path's inputs (see the module)."""

    season: int | None
    channel_independent: bool
    horizon_: int
    k_: int
    k_out_: int
    season_: int
    window_: int
    patch_len_: int
    patch_stride_: int
    baseline_: str
    evidence_: float
    time_index_: Any
    cov_mean_: Any
    cov_std_: Any
    fut_mean_: Any
    fut_std_: Any

    def _targets(self, series: list[F64]) -> list[F64]:
        """The model's series: each channel alone when channel-independent."""
        if self.channel_independent and self.k_ > 1:
            return [s[:, j:j + 1] for s in series for j in range(self.k_)]
        return series

    def _per_target(self, items: list[F64] | None) -> list[F64] | None:
        if items is None or not (self.channel_independent and self.k_ > 1):
            return items
        return [a for a in items for _ in range(self.k_)]

    def _tokens(self, context: F64, mask: npt.NDArray[np.bool_], extra: F64 | None
                ) -> tuple[F64, F64, F64, F64, list[F64] | F64]:
        """Scaled, patched, newest-first tokens of windows (n, W, c) -> the scale
        (mu, sd), the baseline forecast in scaled units (n, horizon, k_out), and the
        model input (a dense (n, N, F) array, or a list of (N_i, F) arrays when some
        are padded)."""
        ko = self.k_out_
        mu, sd = win.scale_stats(context, mask, ko)
        x = context.copy()
        x[:, :, :ko] = (x[:, :, :ko] - mu) / sd
        base = self._baseline(self.baseline_, x[:, :, :ko], mask)
        if x.shape[2] > ko:   # past covariates: fit-time standardisation
            x[:, :, ko:] = (x[:, :, ko:] - self.cov_mean_) / self.cov_std_
        p, pm = win.patchify(x, mask, self.patch_len_, self.patch_stride_)
        p, pm = p[:, ::-1], pm[:, ::-1]
        if extra is not None:
            p = np.concatenate([p, np.broadcast_to(extra[:, None, :], p.shape[:2]
                                                   + extra.shape[1:])], axis=2)
        p = np.ascontiguousarray(p)
        if pm.any():
            n_valid = (~pm).sum(axis=1)
            return mu, sd, base, p, [p[i, :max(int(v), 1)] for i, v in enumerate(n_valid)]
        return mu, sd, base, p, p

    def _baseline(self, name: str, x: F64, mask: npt.NDArray[np.bool_]) -> F64:
        """The baseline forecast `name` (n, horizon, k_out) from scaled contexts x."""
        if name == "seasonal_naive":
            return win.seasonal_naive(x, self.horizon_, self._base_period())
        if name == "seasonal_mean":
            return _season.profile(x, mask, self.horizon_, self._base_period())
        if name == "combined":
            return 0.5 * (self._baseline("seasonal_naive", x, mask)
                          + self._baseline("seasonal_mean", x, mask))
        return np.zeros((x.shape[0], self.horizon_, x.shape[2]))

    def _extra(self, static: list[F64] | None, future: list[F64] | None,
               index: npt.NDArray[np.intp], origins: npt.NDArray[np.intp] | None) -> F64 | None:
        parts = []
        if static is not None:
            parts.append(np.stack([static[i] for i in index]))
        if future is not None:
            h = self.horizon_
            rows = []
            for i, t in zip(index, origins if origins is not None else [None] * len(index)):
                f = future[i] if t is None else future[i][t:t + h]
                rows.append(((f - self.fut_mean_) / self.fut_std_).reshape(-1))
            parts.append(np.stack(rows))
        return np.concatenate(parts, axis=1) if parts else None

    def _season(self, series: list[F64]) -> int:
        """The season: as given, else the index frequency's, else the data's
        (attnx.forecasting._panel_season.season_of)."""
        if self.season is not None:
            return int(self.season)
        return _panel_season.season_of(PanelStats.of(series, self.time_index_), None)

    def _auto_baseline(self, scaled: F64, x: F64, mask: npt.NDArray[np.bool_]) -> str:
        """baseline="auto"'s choice from the held-out windows' scaled targets and
        contexts: "combined" on too little evidence, else the default baseline unless
        the other one has a significantly smaller absolute error there."""
        if self.evidence_ < MIN_EVIDENCE:
            return "combined"
        default, other = (("seasonal_naive", "seasonal_mean") if self._base_period() > 1
                          else ("seasonal_mean", "seasonal_naive"))
        err = {name: np.mean(np.abs(scaled - self._baseline(name, x, mask)), axis=(1, 2))
               for name in (default, other)}
        return other if _significantly_positive(err[default] - err[other],
                                                self.evidence_) else default

    def _base_period(self) -> int:
        """The baseline's period: the season when the window holds one, else 1."""
        return self.season_ if self.season_ <= self.window_ else 1

    def _min_context(self) -> int:
        """Real steps a training window's context needs: a scale estimated from fewer
        steps than this is too noisy to train on (its targets blow up)."""
        return int(min(self.window_, max(self.patch_len_, self.horizon_, 4)))
