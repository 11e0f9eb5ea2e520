"""The seasonal period of a set of series, found from the data (season="auto").

The rule (a peak of the autocorrelation function, as ACF-based seasonality tests do):

1. Each series (each channel) is linearly detrended (a least-squares line removed),
   so a trend does not make every lag look correlated.
2. Its autocorrelation function r(k) is estimated for lags k = 1..K + 1, K = T // 3
   (a period needs at least three cycles in the series), with the bias-adjusted
   estimator  r(k) = [sum_t x_t x_{t+k} / (T - k)] / [sum_t x_t^2 / T]  (the plain
   estimator's (T - k) / T shrinkage would favour the shorter of two close lags).
3. For many series (a global model), the functions are averaged over the series,
   each weighted by its length, at every lag it reaches.
4. The clear peaks are the lags m in [2, K] where r is a local maximum
   (r(m) >= r(m - 1) and r(m) >= r(m + 1)) above max(PEAK_LEVEL, 3 / sqrt(N_m))
   (N_m: the total length of the series reaching lag m, so a white-noise peak rarely
   passes) and at least PEAK_RISE above the lowest r(k), 1 <= k < m (the wiggles of
   a slowly decaying function are not peaks). No clear peak: season 1.
5. Else the season is the shortest clear peak whose r(m) is at least HARMONIC times
   the highest one (a cycle also peaks at its multiples, about as high). A long
   period's broad peak may be found a lag off when the series holds few cycles.
   A divisor p of that season is the season instead when r peaks at p (above
   3 / sqrt(N_p) and PEAK_RISE above the shorter lags, without the PEAK_LEVEL floor)
   and at every multiple of p up to the season: short quarterly series whose period-4
   peak stays under PEAK_LEVEL while the few long ones' noisy r(12) passes it.
   A divisor p of REFINE_FROM lags or more whose cycle repeats at least
   DIVISOR_CYCLES times in the season may peak a few lags off (within
   min(DIVISOR_LAGS, p / 12), at p and at each multiple): the day of half-hourly or
   hourly data whose week is the highest peak, where the week's slope moves the daily
   peaks by a lag or two (generated series with a daily and a weekly cycle: the day
   was missed on 29 of 116 and the week alone became the season, whose forecasts
   then cost up to twice the error and four times the time; no change on single
   long seasons with harmonics, whose two to four repeats need not be a cycle).
   Last, a season of two days whose day peaks so (within those lags) is the day when
   the day's own longer period (point 7: the week) is no multiple of the season
   (5 more of the 116 generated series; a single season's harmonics repeat within it,
   so their longer period is the season's).
   A season of REFINE_FROM lags or more is then located by its multiples: of m - 1,
   m and m + 1, the one whose multiples up to the reach have the highest mean r (a
   long period's peak is broad, and a slope under it, such as that of a weekly cycle
   or a wandering level, moves its top a lag off: 47 for a day of half-hours, which
   then drifts off the true peaks at 2, 3, ... days and at the week).

6. ``detect(relaxed=True)`` drops the PEAK_LEVEL floor of point 4 (only the
   3 / sqrt(N_m) significance level stays): a panel that mixes seasonal series with
   random walks dilutes the season's peak below PEAK_LEVEL (the classical path
   offers that period to its candidates, which test it per series).
7. A second, longer period (``longer_periods``): a multiple of the season whose
   autocorrelation stands out from its neighbouring multiples (the week of
   half-hourly data whose season is the day: 336 = 7 x 48); of several, the
   shortest that stands out at least HARMONIC times as much as the most (a weekly
   cycle also stands out at two weeks).
   The same test on the series differenced at the season, x_t - x_{t - season}:
   differencing removes the season and a wandering level, whose slowly decaying
   correlation leaves a weekly cycle's rise in r at the week a few hundredths (the
   week was missed on 8 of 80 generated half-hourly and hourly series, and 4 more
   took two or three weeks for it, at up to three times the forecast error). A
   multiple k * season, k >= 3, is a period there when r is a local maximum over its
   neighbouring multiples and at least DIFF_Z standard errors above zero (Bartlett's,
   from r up to the season lag and the T - k pairs); k = 2 is left out since
   differencing pulls r(season) down (-0.5 for noise), which makes r(2 season) look
   like a peak. Of the two tests' periods the shorter is kept when it divides the
   longer, else the differenced one.

On the development panel this gives 12 for co2 and PBS (monthly), 48 for the
half-hourly solar series, 10 for sunspots (its ~11-year cycle), and 1 for Nile, the
five US-change growth rates (no seasonal peak in them) and the short M1 yearly series.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ._exact_sum import ExactSums

if TYPE_CHECKING:
    import numpy.typing as npt

    F64 = npt.NDArray[np.float64]

__all__ = ["detect", "season_from", "longer_periods", "longer_from", "differenced", "AcfSums", "acf", "profile", "PEAK_LEVEL", "PEAK_RISE", "HARMONIC"]

#: a seasonal peak of the autocorrelation function must exceed this level ...
PEAK_LEVEL = 0.3
#: ... and rise at least this much above the lowest autocorrelation at shorter lags
PEAK_RISE = 0.2
#: the shortest clear peak at least this fraction of the highest one is the season
HARMONIC = 0.8
#: a multiple of the season is a second period when its autocorrelation stands this
#: much above both neighbouring multiples' (longer_periods)
MULTIPLE_RISE = 0.05
#: a season of at least this many lags is located by its multiples (module point 5)
REFINE_FROM = 16
#: a long divisor of the season may peak off its lags when it repeats this many times
DIVISOR_CYCLES = 5
#: ... by at most this many lags (and p / 12)
DIVISOR_LAGS = 2
#: a multiple of the season is a longer period when the autocorrelation of the
#: series differenced at the season peaks there this many standard errors above zero
DIFF_Z = 4.0


def acf(x: F64, max_lag: int) -> F64:
    """Bias-adjusted autocorrelations r(0..max_lag) of the linearly detrended 1-D x
    (all zeros after r(0) = 1 for a constant series)."""
    t = np.arange(x.shape[0], dtype=np.float64)
    slope, icept = np.polyfit(t, x, 1)
    z = x - (slope * t + icept)
    n = z.shape[0]
    var = float(z @ z) / n
    out = np.zeros(max_lag + 1)
    out[0] = 1.0
    if var <= 1e-12 * (1.0 + float(np.mean(x * x))):
        return out
    for k in range(1, max_lag + 1):
        out[k] = float(z[k:] @ z[:-k]) / (n - k) / var
    return out


class AcfSums:
    """The statistics _mean_acf combines, summed over series (module points 2-4):
    per lag, the sum of length x r(k) over the channels reaching it (exactly:
    attnx.forecasting._exact_sum) and of their lengths, and how many channels have each
    length. Sums of two sets of series merge into those of their union exactly, in
    any order, so a panel split over several processes gives the same season."""

    def __init__(self) -> None:
        self.num = ExactSums()
        self.den: dict[int, int] = {}        # lag -> total length of the channels reaching it
        self.lengths: dict[int, int] = {}    # channel length -> how many channels

    @classmethod
    def of(cls, series: list[F64]) -> AcfSums:
        """The sums of every channel of 2-D (T_i, k) series."""
        out = cls()
        lags, vals = [], []
        for s in series:
            for j in range(s.shape[1]):
                c = s[:, j]
                n = c.shape[0]
                out.lengths[n] = out.lengths.get(n, 0) + 1
                k = n // 3 + 1   # r(K + 1) tells whether K peaks
                if k < 4:
                    continue
                lags.append(np.arange(k + 1))
                vals.append(n * acf(c, k))
                for lag in range(k + 1):
                    out.den[lag] = out.den.get(lag, 0) + n
        if vals:
            out.num.add(np.concatenate(lags), np.concatenate(vals))
        return out

    def merge(self, other: AcfSums) -> AcfSums:
        """These sums plus other's (in place; returns self)."""
        self.num.merge(other.num)
        for table, more in ((self.den, other.den), (self.lengths, other.lengths)):
            for key, v in more.items():
                table[key] = table.get(key, 0) + v
        return self

    def mean(self) -> tuple[F64, F64, F64] | None:
        """The length-weighted mean autocorrelation r(0..reach), the peak level at each
        lag and the total length N reaching each lag; None when too short."""
        if not self.lengths or max(self.lengths) // 3 + 1 < 4:
            return None
        reach = max(self.den) if self.den else 0
        if reach < 3:
            return None
        den = np.array([float(self.den.get(lag, 0)) for lag in range(reach + 1)])
        r = self.num.values(reach + 1) / den
        level = np.maximum(PEAK_LEVEL, 3.0 / np.sqrt(np.maximum(den, 1.0)))
        return r, level, den


def _mean_acf(series: list[F64]) -> tuple[F64, F64, F64] | None:
    """The length-weighted mean autocorrelation r(0..reach) of every channel of the
    series, the peak level at each lag and the total length N reaching each lag
    (module points 2-4); None when too short."""
    return AcfSums.of(series).mean()


def detect(series: list[F64], *, relaxed: bool = False) -> int:
    """The seasonal period of 2-D (T_i, k) series by the module's rule (1: none);
    relaxed: a peak need not reach PEAK_LEVEL, only 3 / sqrt(N_m) (a season that a
    panel of mixed series dilutes: the classical candidates' extra period)."""
    return season_from(_mean_acf(series), relaxed=relaxed)


def season_from(found: tuple[F64, F64, F64] | None, *, relaxed: bool = False) -> int:
    """detect() on the mean autocorrelation (AcfSums.mean) of the series."""
    if found is None:
        return 1
    r, level = found[0], found[1]
    if relaxed:
        den_level = np.where(level > PEAK_LEVEL, level, 0.0)
        level = den_level
    reach = r.shape[0] - 1
    peaks = [m for m in range(2, reach)
             if r[m] >= r[m - 1] and r[m] >= r[m + 1] and r[m] > level[m]
             and r[m] - r[1:m].min() >= PEAK_RISE]
    if not peaks:
        return 1
    high = max(r[m] for m in peaks)
    season = next(m for m in peaks if r[m] >= HARMONIC * high)
    sig = 3.0 / np.sqrt(np.maximum(found[2], 1.0))
    for p in range(2, season // 2 + 1):
        if season % p == 0 and (_divisor(r, sig, p, season, 0) or (
                p >= REFINE_FROM and season // p >= DIVISOR_CYCLES
                and _divisor(r, sig, p, season, _lags(p)))):
            season = p
            break
    season = _by_multiples(r, season) if season >= REFINE_FROM else season
    return _not_a_double(r, found[1], sig, season)


def _lags(p: int) -> int:
    """How far off its multiples a long divisor p may peak (module point 5)."""
    return min(DIVISOR_LAGS, max(1, round(p / 12)))


def _not_a_double(r: F64, level: F64, sig: F64, season: int) -> int:
    """A divisor p of a long season that peaks near every multiple (within _lags(p))
    and whose own longer period (longer_periods) is no multiple of the season: the
    season was two days, the longer cycle being a week (module point 5)."""
    if season < 2 * REFINE_FROM:
        return season
    for p in range(REFINE_FROM, season // 2 + 1):
        if season % p == 0 and _divisor(r, sig, p, season, _lags(p)):
            q = _by_multiples(r, p)
            longer = _longer(r, level, q, 1)
            if longer and longer[0] % season:
                return q
    return season


def _divisor(r: F64, sig: F64, p: int, season: int, lags: int) -> bool:
    """Whether r peaks at p (its highest within `lags` of p above the significance
    level sig and PEAK_RISE above the shorter lags) and at every multiple of p below
    `season`, each within `lags` (module point 5)."""
    top = max(range(p - lags, p + lags + 1), key=lambda j: r[j])
    if not (r[top] > sig[top] and r[top] - r[1:p - lags].min() >= PEAK_RISE):
        return False
    return all(any(r[j] >= r[j - 1] and r[j] >= r[j + 1] for j in range(q - lags, q + lags + 1))
               for q in range(p, season, p))


def _by_multiples(r: F64, m: int) -> int:
    """Of m - 1, m, m + 1: the period whose multiples up to the reach of r have the
    highest mean autocorrelation (module point 5); m on a tie."""
    reach = r.shape[0] - 1

    def mean_at_multiples(p: int) -> float:
        return float(np.mean(r[np.arange(p, reach + 1, p)]))
    best = max((m, m - 1, m + 1), key=mean_at_multiples)
    return best


def longer_periods(series: list[F64], season: int, most: int = 1) -> list[int]:
    """Seasonal periods beyond `season` (a second cycle: the week of half-hourly data
    with a daily season): the multiples k * season (k >= 2) whose mean autocorrelation
    stands at least MULTIPLE_RISE above the two neighbouring multiples' and above
    PEAK_LEVEL, the shortest first, at most `most` of them (and none when the series
    are too short to show two neighbours); and the same of the series differenced at
    the season (_longer_differenced). The first period is the shorter of the two
    tests' first when it divides the other's, else the differenced test's."""
    if season < 2:
        return []
    return longer_from(_mean_acf(series), differenced(series, season), season, most)


def differenced(series: list[F64], season: int) -> AcfSums:
    """The AcfSums of the series differenced at the season (those longer than it)."""
    return AcfSums.of([s[season:] - s[:-season] for s in series if s.shape[0] > season])


def longer_from(found: tuple[F64, F64, F64] | None, diffs: AcfSums, season: int,
                most: int = 1) -> list[int]:
    """longer_periods from the mean autocorrelation of the series (AcfSums.mean) and
    the AcfSums of the series differenced at the season (`differenced`)."""
    if season < 2:
        return []
    raw = [] if found is None else _longer(found[0], found[1], season, most)
    diff = _longer_differenced(diffs, season, most)
    if not (raw and diff):
        return raw or diff
    short, long_ = min(raw[0], diff[0]), max(raw[0], diff[0])
    first = short if long_ % short == 0 else diff[0]
    rest = sorted(set(raw + diff) - {first})
    return [first, *rest][:most]


def _longer_differenced(diffs: AcfSums, season: int, most: int) -> list[int]:
    """The longer periods of the series differenced at the season (module point 7)."""
    found = diffs.mean()
    if found is None:
        return []
    r = found[0]
    reach = r.shape[0] - 1
    near = 1.0 + 2.0 * float(np.sum(r[1:season + 1] ** 2))
    cand = {}
    for k in range(3, reach // season):
        m = k * season
        # the lag-m pairs of the channels reaching m (an integer: exact in any order)
        pairs = float(sum(c * (n - m) for n, c in diffs.lengths.items() if n // 3 + 1 >= m))
        if (pairs > 0 and r[m] > max(r[m - season], r[m + season])
                and r[m] > DIFF_Z * np.sqrt(near / pairs)):
            cand[m] = float(r[m])
    if not cand:
        return []
    top = max(cand.values())
    return sorted(m for m, v in cand.items() if v >= HARMONIC * top)[:most]


def _longer(r: F64, level: F64, season: int, most: int) -> list[int]:
    """longer_periods on the mean autocorrelation r and its peak level."""
    reach = r.shape[0] - 1
    cand = []
    for k in range(2, reach // season):
        m = k * season
        rise = r[m] - max(r[m - season], r[m + season])
        if rise >= MULTIPLE_RISE and r[m] > level[m]:
            cand.append((float(rise), m))
    if not cand:
        return []
    top = max(rise for rise, _ in cand)
    return sorted(m for rise, m in cand if rise >= HARMONIC * top)[:most]


def profile(context: F64, mask: npt.NDArray[np.bool_], horizon: int, season: int) -> F64:
    """The seasonal profile forecast from contexts (n, W, k) with padding `mask` (n, W)
    (True = padding): horizon step j repeats the mean of the context's real steps of
    its phase, the steps W - season + j % season - i * season, i = 0, 1, ...  (the
    mean of the whole real context for season 1), shape (n, horizon, k). A phase with
    no real step gets the mean of the real context. Needs 1 <= season <= W."""
    n, w, k = context.shape
    if not 1 <= season <= w:
        raise ValueError(f"season must be in [1, window={w}], got {season}")
    real = (~mask)[:, :, None].astype(np.float64)
    overall = (context * real).sum(axis=1) / np.maximum(real.sum(axis=1), 1.0)   # (n, k)
    # the phase of step t counted back from the end, (W - 1 - t) % season: step
    # W - season + p (p = 0..season-1) has phase season - 1 - p
    phase = (w - 1 - np.arange(w)) % season
    onehot = (phase[None, :] == np.arange(season)[:, None]).astype(np.float64)  # (s, W)
    tot = np.einsum("sw,nwk->nsk", onehot, context * real)
    cnt = np.einsum("sw,nwk->nsk", onehot, real)
    prof = np.where(cnt > 0, tot / np.maximum(cnt, 1.0), overall[:, None, :])
    steps = season - 1 - (np.arange(horizon) % season)
    out: F64 = prof[:, steps, :]
    return out
