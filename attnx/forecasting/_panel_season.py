"""The seasonal periods of a whole panel, from statistics that merge exactly.

TransformerForecaster's season (season_) and the classical candidates' periods
(periods_) are chosen from all the series together: the mean autocorrelation
(attnx.forecasting._season), the median length and the frequencies of pandas indexes.
``PanelStats`` holds what those need of a set of series, ``merge`` combines the
statistics of two sets into those of their union (exactly: integers, sets and
attnx.forecasting._exact_sum's sums), and ``season_of`` / ``classical_periods`` read
them. A forecaster in one process computes the statistics of all its series at once;
attnx.forecasting.dask computes them per partition on the workers, merges them on the
client, and so chooses the same periods: two map-reduce passes (the second, over the
series differenced at the season, only when there is one).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _pandas, _season

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    F64 = npt.NDArray[np.float64]

__all__ = ["PanelStats", "season_of", "classical_periods", "median_length"]


class PanelStats:
    """What the panel's season needs of a set of series: their mean autocorrelation's
    sums (AcfSums), how many series have each length, and the seasons the frequencies
    of their pandas indexes imply (None: no pandas index)."""

    def __init__(self, acf: _season.AcfSums, lengths: dict[int, int],
                 freq_seasons: set[int | None] | None) -> None:
        self.acf, self.lengths, self.freq_seasons = acf, lengths, freq_seasons

    @classmethod
    def of(cls, series: list[F64], metas: list[dict[str, Any]] | None) -> PanelStats:
        """The statistics of complete (filled) 2-D series and their pandas index
        records (attnx.forecasting._pandas.unwrap; None for arrays)."""
        lengths: dict[int, int] = {}
        for s in series:
            lengths[s.shape[0]] = lengths.get(s.shape[0], 0) + 1
        seasons = None if not metas else {_pandas.season(m) for m in metas}
        return cls(_season.AcfSums.of(series), lengths, seasons)

    def merge(self, other: PanelStats) -> PanelStats:
        """These statistics plus other's (in place; returns self)."""
        self.acf.merge(other.acf)
        for n, c in other.lengths.items():
            self.lengths[n] = self.lengths.get(n, 0) + c
        if other.freq_seasons is not None:
            self.freq_seasons = (set(other.freq_seasons) if self.freq_seasons is None
                                 else self.freq_seasons | other.freq_seasons)
        return self

    @property
    def n_series(self) -> int:
        return sum(self.lengths.values())


def median_length(lengths: dict[int, int]) -> float:
    """np.median of the lengths that `lengths` counts (length -> how many series)."""
    keys = sorted(lengths)
    total = sum(lengths.values())

    def at(i: int) -> int:   # the i-th smallest length (0-based)
        seen = 0
        for k in keys:
            seen += lengths[k]
            if i < seen:
                return k
        raise IndexError(i)
    if total % 2:
        return float(at(total // 2))
    return (at(total // 2 - 1) + at(total // 2)) / 2


def season_of(stats: PanelStats, season: int | None) -> int:
    """The season: as given, else the index frequency's (one for every series, and the
    median series holding two of its cycles), else the data's (_season.detect)."""
    if season is not None:
        return int(season)
    med = int(median_length(stats.lengths))
    found = set(stats.freq_seasons or ())
    if len(found) == 1:
        m = found.pop()
        if m is not None and med >= 2 * m:
            return m
    return _season.season_from(stats.acf.mean())


def classical_periods(stats: PanelStats, diffs: _season.AcfSums | None, season_: int,
                      season: int | None) -> list[int]:
    """The classical candidates' periods (TransformerForecaster.periods_): the season;
    when neither it, nor the parameter season, nor a pandas index gave one, a weaker
    peak that leaves three cycles in the median series (_season.detect with
    relaxed=True; the candidates test it per series); then the longer period the data
    show (_season.longer_periods). `diffs`: the AcfSums of the series differenced at
    season_ (_season.differenced; needed when season_ > 1)."""
    periods = [season_] if season_ > 1 else []
    if season is None and stats.freq_seasons is None and not periods:
        weak = _season.season_from(stats.acf.mean(), relaxed=True)
        med = median_length(stats.lengths)
        periods += [weak] if 1 < weak and 3 * weak <= med else []
    periods = sorted(periods)
    if season_ > 1:
        if diffs is None:
            raise ValueError("classical_periods needs the differenced series' sums when "
                             "the season is > 1")
        periods += _season.longer_from(stats.acf.mean(), diffs, season_)
    return [int(p) for p in periods]
