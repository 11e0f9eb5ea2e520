"""PPV tokens (tokenizer="ppv" of the estimators): each token window of a series
described by fixed dilated convolutions and the proportion of their outputs above
fitted biases, instead of the window's raw values.

The convolutions are the 84 kernels of length 9 with weights -1 and 2 (three taps
of weight 2), at up to 8 dilations spread exponentially from 1 to (T_min - 1) / 8
(T_min the shortest training series), each channel on its own after centring and
scaling it by its training mean and standard deviation; the biases are the 0.1, 0.3,
0.5, 0.7 and 0.9 quantiles of each (dilation, channel, kernel)'s outputs over up to 8
training series drawn with the fit's seed (the 0.2 and 0.8 quantiles when five would
pass MAX_FEATURES at 8 dilations: more than 4 channels). A token then holds D * C * 84
* Q features (fewer dilations, then one bias, when that would pass MAX_FEATURES), each
a fraction in [0, 1] of the window's valid steps. Nothing here is trained: the transformer learns from
the tokens. Shift-invariant local shape features of this kind are what the strongest
classical classifiers of sequences are built on; here they feed attention over time
windows instead of one global pooling.

Ragged series (fit with own=True): the windows and dilations follow each series'
own length instead of the training set's. The dilations are fitted at a reference
length T_ref (the longest training series) and a series of T steps uses d * (T - 1)
// (T_ref - 1) (at least 1) for each fitted d; with `tokens` a series of T steps
makes ceil(T / ceil(T / tokens)) <= tokens tokens of ceil(T / tokens) steps, so a
short series (even one shorter than the fixed window would be) gets as many tokens,
each with the same dilation slots, as a long one. A series of T_ref steps gets the
tokens the fixed rule gives it. Models saved before this have no reference length
in their state and keep the fixed windows and dilations.

The kernel is attnx.kernels._ppv.ppv; this module fits the transform, applies it, and
writes / reads it as JSON-able values (the estimator's model spec)."""
from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from . import _sequences as seqs
from ..kernels._ppv import ppv
from ..runtime._threads import threads_for

if TYPE_CHECKING:
    from .. import distributed
    from ..runtime._typing import BoolArray, FloatArray, IntArray

#: the taps of weight 2 of the 84 kernels
COMB = np.array(list(itertools.combinations(range(9), 3)), dtype=np.int32)
#: the biases' quantiles: five beat two and three, nine cost more than they add
#: (benchmarks/results/constants.md)
QUANTILES = (0.1, 0.3, 0.5, 0.7, 0.9)
#: standardize=True divides each PPV token feature by this many training stds: thousands
#: of features per token move the embedding fast, smaller inputs slow it
#: (benchmarks/results/constants.md)
TOKEN_SCALE = 8.0
#: position_scale of a network on PPV tokens: where a shape comes must weigh against the
#: fast-growing tokens (chosen with TOKEN_SCALE: benchmarks/results/constants.md)
POSITION_SCALE = 2.0
#: the biases' quantiles when QUANTILES at MAX_DILATIONS would pass MAX_FEATURES (many
#: channels): the earlier rule's, which keeps its dilations
FEW_QUANTILES = (0.2, 0.8)
MAX_DILATIONS = 8
MAX_FEATURES = 16384
#: training series whose convolution outputs give the biases
BIAS_SERIES = 8
#: tokenizer="auto" picks PPV tokens for classifiers whose shortest training series
#: has at least this many steps (shorter ones keep raw-value patches)
AUTO_MIN_LENGTH = 64
#: tokenizer="auto" on ragged training series (their windows and dilations then
#: follow each series' own length, so the shortest one no longer limits them): PPV
#: tokens when the longest has AUTO_MIN_LENGTH steps or more, or, univariate, at
#: least AUTO_MIN_RAGGED. Set on the development sets: on the synthetic ragged sets
#: (cylinder-bell-funnel, two patterns; lengths 15-40 and 15-150) they beat raw
#: patches; on JapaneseVowels (12 channels, 7-29 steps) raw patches score higher
#: and train 6x faster (benchmarks/results/accuracy_ragged_short.md). A classifier's
#: univariate ragged series without missing steps are resampled to one length first
#: (attnx.estimators._resample) and never reach this rule; it applies to those with
#: missing steps
AUTO_MIN_RAGGED = 16
#: patch_len=None with own-length windows (ragged series): each series makes this
#: many tokens (fewer when shorter), windows of ceil(T / RAGGED_TOKENS) steps. 8
#: scored above 4 on each synthetic ragged set (order matters in two patterns)
RAGGED_TOKENS = 8
#: patch_len=None: a series makes at most this many PPV tokens (windows of
#: ceil(T_max / PPV_TOKENS) steps). Set on the development sets: 4 long windows
#: scored as well as or better than 8, 12 or 16 shorter ones (ACSF1, OSULeaf,
#: PigCVP, Coffee) and train several times faster
PPV_TOKENS = 4


class PPVTokens:
    """A fitted PPV transform: per-channel mean and scale, dilations, biases
    (D, C, 84, Q) and the window (steps per token); with reference_length the
    dilations are those of a series that long and scale with each series' length,
    and with tokens (own-length windows) a series of T steps has windows of
    ceil(T / tokens) steps instead of `window`."""

    def __init__(self, mean: Any, scale: Any, dilations: Any, bias: Any, window: int,
                 reference_length: int | None = None, tokens: int | None = None) -> None:
        self.mean = np.asarray(mean, np.float64)
        self.scale = np.asarray(scale, np.float64)
        self.dilations = np.asarray(dilations, np.int32)
        self.bias = np.asarray(bias, np.float64)
        self._window = int(window)
        self.reference_length = None if reference_length is None else int(reference_length)
        self.tokens = None if tokens is None else int(tokens)
        c = self.mean.shape[0]
        if (self.mean.ndim != 1 or self.scale.shape != (c,) or self.dilations.ndim != 1
                or self.bias.shape[:3] != (len(self.dilations), c, len(COMB))
                or self.bias.ndim != 4 or self._window < 1 or not np.all(self.scale > 0)
                or not np.all(self.dilations >= 1)
                or (self.reference_length is not None and self.reference_length < 1)
                or (self.tokens is not None and (self.tokens < 1
                                                 or self.reference_length is None))):
            raise ValueError("the PPV tokens' state does not fit together (mean, scale, "
                             "dilations, bias, window, reference_length, tokens)")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PPVTokens) and self.to_spec() == other.to_spec()

    __hash__ = None  # type: ignore[assignment]   # mutable arrays: not a dict key

    def __repr__(self) -> str:
        own = ("" if self.reference_length is None else
               f", reference_length={self.reference_length}, tokens={self.tokens}")
        return (f"PPVTokens(channels={self.n_channels}, dilations={self.dilations.tolist()}, "
                f"quantiles={self.bias.shape[3]}, window={self._window}{own}, "
                f"n_features={self.n_features})")

    @property
    def own_length(self) -> bool:
        """Whether the dilations (and with tokens the windows) follow each series' length."""
        return self.reference_length is not None

    @property
    def window(self) -> int:
        """The steps per token, the same for every series (the fixed rule only)."""
        if self.own_length:
            raise NotImplementedError(
                "these PPV tokens have no single window: their windows and dilations "
                "follow each series' length (fitted on ragged series)")
        return self._window

    def series_dilations(self, lengths: IntArray) -> npt.NDArray[np.int32]:
        """(n, D) int32: each series' dilations, d * (T - 1) // (T_ref - 1) and at
        least 1 for each fitted d (own-length state only)."""
        return scaled_dilations(self.dilations, lengths, int(self.reference_length or 1))

    def series_windows(self, lengths: IntArray) -> npt.NDArray[np.int32]:
        """(n,) int32: each series' steps per token (ceil(T / tokens) with own-length
        windows, else the fixed window)."""
        lengths = np.asarray(lengths, np.int64)
        if self.tokens is None:
            return np.full(len(lengths), self._window, np.int32)
        return np.maximum(-(-lengths // self.tokens), 1).astype(np.int32)

    @property
    def n_features(self) -> int:
        """Features per token."""
        return int(np.prod(self.bias.shape))

    @property
    def n_channels(self) -> int:
        return int(self.mean.shape[0])

    # ---- fit -----------------------------------------------------------------
    @classmethod
    def fit(cls, data: seqs.Data, window: int, seed: int, dist: distributed.Local,
            own: bool = False, tokens: int | None = None) -> PPVTokens:
        """The transform for this training data (over every rank with comm: the
        statistics are summed over the ranks, the biases come from rank 0's series).
        own: dilations that follow each series' length (reference: the longest
        training series of any rank), and with tokens windows that do too."""
        x, lengths, missing = data.x, data.lengths, data.missing
        n, t, c = x.shape
        valid = _valid(n, t, lengths, missing)
        xv = x[valid].astype(np.float64)
        count = dist.allsum(float(xv.shape[0]))
        mean = dist.allsum(xv.sum(axis=0)) / max(count, 1.0)
        var = dist.allsum(((xv - mean) ** 2).sum(axis=0)) / max(count, 1.0)
        scale = np.sqrt(var)
        scale[~(scale > 1e-12)] = 1.0
        t_min = int(t if lengths is None or not lengths.size else lengths.min())
        t_min = -int(dist.allmax(-t_min))
        qs: tuple[float, ...] = QUANTILES if MAX_DILATIONS * c * len(COMB) * len(QUANTILES) <= MAX_FEATURES \
            else FEW_QUANTILES
        nd = MAX_DILATIONS
        while nd > 1 and nd * c * len(COMB) * len(qs) > MAX_FEATURES:
            nd -= 1
        if nd * c * len(COMB) * len(qs) > MAX_FEATURES:
            qs = (0.5,)
        nq = len(qs)
        t_ref = None
        if own:
            t_max = int(t if lengths is None or not lengths.size else lengths.max())
            t_ref = max(int(dist.allmax(t_max)), 1)
        dil = dilations(t_min if t_ref is None else t_ref, nd)
        rng = np.random.default_rng(seed)
        pick = rng.choice(n, size=min(n, BIAS_SERIES), replace=False) if n else []
        xs = _centred(x[pick], mean, scale, valid[pick])
        ls = (np.full(len(pick), t) if lengths is None else lengths[pick]).astype(np.int64)
        bias = np.zeros((len(dil), c, len(COMB), nq))
        own_dil = None if t_ref is None else scaled_dilations(dil, ls, t_ref)
        for i, d in enumerate(dil):
            if own_dil is None:
                out = conv_outputs(xs, ls, int(d), valid[pick])   # (m, C, 84)
            else:   # each series at its own dilation, in the same order
                out = np.concatenate(
                    [conv_outputs(xs[j:j + 1], ls[j:j + 1], int(own_dil[j, i]),
                                  valid[pick][j:j + 1]) for j in range(len(pick))]
                    or [np.zeros((0, c, len(COMB)))])
            if out.shape[0]:
                # each (channel, kernel)'s m outputs as one contiguous row: the
                # same quantiles as along axis 0, without strided partitions
                rows = np.ascontiguousarray(out.reshape(out.shape[0], -1).T)
                q = np.quantile(rows, qs, axis=1)                  # (nq, C * 84)
                bias[i] = q.T.reshape(c, len(COMB), nq)
        state = cls(mean, scale, dil, bias, window, t_ref, tokens if own else None)
        return dist.same(state)

    # ---- apply ---------------------------------------------------------------
    def transform(self, x: FloatArray, lengths: IntArray | None, missing: BoolArray | None,
                  nthreads: int | None = None
                  ) -> tuple[FloatArray, IntArray | None, BoolArray | None]:
        """(tokens (n, N, n_features) in x's dtype, the tokens' lengths or None, the
        tokens' missing mask or None) of x (n, T, C) with its lengths and missing
        steps, as patches of `window` steps would be (N = ceil(T / window)); with
        own-length windows each series' own (N: the most any series makes), a series'
        length then ending at its last observed step (trailing missing steps are a
        shorter series, as in the fixed rule)."""
        n, t, c = x.shape
        if c != self.n_channels:
            raise ValueError(f"X has {c} features, the PPV tokens were fitted on "
                             f"{self.n_channels}")
        valid = _valid(n, t, lengths, missing)
        xs = np.ascontiguousarray(_centred(x, self.mean, self.scale, valid), dtype=x.dtype)
        lens = np.full(n, t, np.int32) if lengths is None else lengths.astype(np.int32)
        miss = None if missing is None else np.ascontiguousarray(missing, dtype=np.uint8)
        if nthreads is None:   # the thread policy's count for this many kernel taps
            nthreads = threads_for(9.0 * 84 * len(self.dilations) * x.size)
        if not self.own_length:
            out = np.empty((n, -(-t // self._window), self.n_features), x.dtype)
            ppv(xs, lens, miss, self.dilations, COMB, self.bias.astype(x.dtype),
                self._window, out, nthreads)
            tl = None if lengths is None else -(-lengths // self._window)
            return out, tl, seqs.patch_missing(missing, lengths, self._window)
        if missing is not None:   # trailing missing steps end a series, as its end does
            last = np.where(valid.any(axis=1), t - np.argmax(valid[:, ::-1], axis=1), 0)
            lens = np.maximum(last, np.minimum(lens, 1)).astype(np.int32)
        wins = self.series_windows(lens)
        ntok = -(-lens.astype(np.int64) // wins)
        out = np.empty((n, max(int(ntok.max()) if n else 1, 1), self.n_features), x.dtype)
        ppv(xs, lens, miss, self.series_dilations(lens), COMB, self.bias.astype(x.dtype),
            wins, out, nthreads)
        if lengths is None and np.all(ntok == out.shape[1]):
            tl = None
        else:
            tl = ntok.astype(lengths.dtype if lengths is not None else np.int64)
        return out, tl, _window_missing(missing, lens, wins, out.shape[1])

    # ---- persistence -----------------------------------------------------------
    def to_spec(self) -> dict[str, Any]:
        """JSON-able values (float64 repr round-trips exactly); reference_length and
        tokens only when set (a fixed-rule state writes what it always wrote)."""
        spec = {"mean": self.mean.tolist(), "scale": self.scale.tolist(),
                "dilations": self.dilations.tolist(), "bias": self.bias.tolist(),
                "window": self._window}
        if self.reference_length is not None:
            spec["reference_length"] = self.reference_length
        if self.tokens is not None:
            spec["tokens"] = self.tokens
        return spec

    @classmethod
    def from_spec(cls, spec: Any) -> PPVTokens | None:
        if spec is None:
            return None
        if not isinstance(spec, dict):
            raise ValueError("the PPV tokens' state is not a mapping")
        try:
            # a state saved before own-length tokens: the fixed rule (None, None)
            return cls(spec["mean"], spec["scale"], spec["dilations"], spec["bias"],
                       spec["window"], spec.get("reference_length"), spec.get("tokens"))
        except (KeyError, TypeError) as e:
            raise ValueError(f"the PPV tokens' state is incomplete: {e}") from None


def dilations(t_min: int, n: int = MAX_DILATIONS) -> IntArray:
    """Up to n dilations from 1 to (t_min - 1) / 8, exponentially spaced (distinct)."""
    top = max(1.0, (t_min - 1) / 8)
    return np.unique(np.floor(2.0 ** np.linspace(0, np.log2(top), n)).astype(np.int32))


def extent(data: seqs.Data, dist: distributed.Local) -> tuple[int, int]:
    """(shortest, longest) training sequence of every rank (the padded length when
    dense)."""
    lengths, t = data.lengths, int(data.x.shape[1])
    lo = hi = t
    if lengths is not None and lengths.size:
        lo, hi = int(lengths.min()), int(lengths.max())
    return -int(dist.allmax(-lo)), int(dist.allmax(hi))


def ragged(data: seqs.Data, dist: distributed.Local) -> bool:
    """Whether the training sequences (of every rank) differ in length."""
    shortest, longest = extent(data, dist)
    return shortest < longest


def auto_pick(data: seqs.Data, dist: distributed.Local) -> bool:
    """tokenizer="auto"'s choice for a classifier that may take PPV tokens: equal
    lengths, at least AUTO_MIN_LENGTH steps; ragged, the longest at least
    AUTO_MIN_LENGTH, or at least AUTO_MIN_RAGGED with one channel."""
    shortest, longest = extent(data, dist)
    if shortest == longest:
        return shortest >= AUTO_MIN_LENGTH
    return longest >= AUTO_MIN_LENGTH or (int(data.x.shape[2]) == 1
                                          and longest >= AUTO_MIN_RAGGED)


def scaled_dilations(dil: IntArray, lengths: Any, t_ref: int) -> npt.NDArray[np.int32]:
    """(n, D) int32: for each series of T steps each of the dilations dil (fitted at
    t_ref steps) scaled to it, d * (T - 1) // (t_ref - 1), at least 1 (integers: a
    series of t_ref steps gets dil exactly)."""
    steps = np.maximum(np.asarray(lengths, np.int64) - 1, 0)[:, None]
    d = np.asarray(dil, np.int64)[None, :] * steps // max(int(t_ref) - 1, 1)
    return np.ascontiguousarray(np.maximum(d, 1), dtype=np.int32)


def conv_outputs(x: Any, lengths: Any, d: int, valid: Any) -> Any:
    """The 84 kernels' outputs at dilation d on the valid steps of x (m, T, C) (zero
    'same' padding, steps past a series' end read 0): (valid steps, C, 84) float64.
    The NumPy statement of what attnx.kernels._ppv computes (the biases' sample; tests)."""
    m, t, c = x.shape
    xp = np.zeros((m, t + 8 * d, c))
    xp[:, 4 * d:4 * d + t] = x
    for i in range(m):   # steps past the end read 0
        xp[i, 4 * d + int(lengths[i]):] = 0
    taps = np.stack([xp[:, k * d:k * d + t] for k in range(9)], -1)   # (m, T, C, 9)
    total = taps.sum(-1)[valid]
    tv = [taps[..., k][valid] for k in range(9)]                       # (valid, C) each
    out = np.empty(total.shape + (len(COMB),))
    for j, (a, b, e) in enumerate(COMB):   # 3 (x_a + x_b + x_e) - the nine taps' sum
        out[..., j] = 3 * ((tv[a] + tv[b]) + tv[e]) - total
    return out


def _window_missing(missing: BoolArray | None, lengths: IntArray, wins: IntArray,
                    ntok: int) -> BoolArray | None:
    """The tokens' missing mask with each series' own window: a token is masked when
    every step of its window is missing or past the series' end (as
    attnx.estimators._sequences.patch_missing with one window); None without missing steps."""
    if missing is None:
        return None
    n, t = missing.shape
    out = np.ones((n, ntok), bool)
    for i in range(n):
        li, w = int(lengths[i]), int(wins[i])
        k = -(-li // w)
        m = np.ones(k * w, bool)
        m[:li] = missing[i, :li]
        out[i, :k] = m.reshape(k, w).all(axis=1)
    return out


def _valid(n: int, t: int, lengths: IntArray | None, missing: BoolArray | None) -> BoolArray:
    v = np.ones((n, t), bool) if lengths is None else seqs.valid_positions(lengths, t)
    if missing is not None:
        v = v & ~missing
    return v


def _centred(x: Any, mean: Any, scale: Any, valid: Any) -> Any:
    out = (x - mean) / scale
    out[~valid] = 0
    return out
