"""PPV tokens (tokenizer="ppv" of the estimators): each token window of a series
described by fixed dilated convolutions and the proportion of their outputs above
fitted biases, instead of the window's raw values.

The convolutions are the 84 kernels of length 9 with weights -1 and 2 (three taps
of weight 2), at up to 8 dilations spread exponentially from 1 to (T_min - 1) / 8
(T_min the shortest training series), each channel on its own after centring and
scaling it by its training mean and standard deviation; the biases are the 0.2 and
0.8 quantiles of each (dilation, channel, kernel)'s outputs over up to 8 training
series drawn with the fit's seed. A token then holds D * C * 84 * 2 features (fewer
dilations, then one bias, when that would pass MAX_FEATURES), each a fraction in [0,
1] of the window's valid steps. Nothing here is trained: the transformer learns from
the tokens. Shift-invariant local shape features of this kind are what the strongest
classical classifiers of sequences are built on; here they feed attention over time
windows instead of one global pooling.

The kernel is attnx._ppv.ppv; this module fits the transform, applies it, and
writes / reads it as JSON-able values (the estimator's model spec)."""
from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _sequences as seqs
from ._ppv import ppv
from ._threads import threads_for

if TYPE_CHECKING:
    from . import distributed
    from ._typing import BoolArray, FloatArray, IntArray

#: the taps of weight 2 of the 84 kernels
COMB = np.array(list(itertools.combinations(range(9), 3)), dtype=np.int32)
QUANTILES = (0.2, 0.8)
MAX_DILATIONS = 8
MAX_FEATURES = 16384
#: training series whose convolution outputs give the biases
BIAS_SERIES = 8
#: tokenizer="auto" picks PPV tokens for classifiers whose shortest training series
#: has at least this many steps (shorter ones keep raw-value patches)
AUTO_MIN_LENGTH = 64
#: patch_len=None: a series makes at most this many PPV tokens (windows of
#: ceil(T_max / PPV_TOKENS) steps). Set on the development sets: 4 long windows
#: scored as well as or better than 8, 12 or 16 shorter ones (ACSF1, OSULeaf,
#: PigCVP, Coffee) and train several times faster
PPV_TOKENS = 4


class PPVTokens:
    """A fitted PPV transform: per-channel mean and scale, dilations, biases
    (D, C, 84, Q) and the window (steps per token)."""

    def __init__(self, mean: Any, scale: Any, dilations: Any, bias: Any, window: int) -> None:
        self.mean = np.asarray(mean, np.float64)
        self.scale = np.asarray(scale, np.float64)
        self.dilations = np.asarray(dilations, np.int32)
        self.bias = np.asarray(bias, np.float64)
        self.window = int(window)
        c = self.mean.shape[0]
        if (self.mean.ndim != 1 or self.scale.shape != (c,) or self.dilations.ndim != 1
                or self.bias.shape[:3] != (len(self.dilations), c, len(COMB))
                or self.bias.ndim != 4 or self.window < 1 or not np.all(self.scale > 0)
                or not np.all(self.dilations >= 1)):
            raise ValueError("the PPV tokens' state does not fit together (mean, scale, "
                             "dilations, bias, window)")

    @property
    def n_features(self) -> int:
        """Features per token."""
        return int(np.prod(self.bias.shape))

    @property
    def n_channels(self) -> int:
        return int(self.mean.shape[0])

    # ---- fit -----------------------------------------------------------------
    @classmethod
    def fit(cls, data: seqs.Data, window: int, seed: int,
            dist: distributed.Local) -> PPVTokens:
        """The transform for this training data (over every rank with comm: the
        statistics are summed over the ranks, the biases come from rank 0's series)."""
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
        nq = len(QUANTILES)
        nd = MAX_DILATIONS
        while nd > 1 and nd * c * len(COMB) * nq > MAX_FEATURES:
            nd -= 1
        if nd * c * len(COMB) * nq > MAX_FEATURES:
            nq = 1
        dil = dilations(t_min, nd)
        rng = np.random.default_rng(seed)
        pick = rng.choice(n, size=min(n, BIAS_SERIES), replace=False) if n else []
        xs = _centred(x[pick], mean, scale, valid[pick])
        ls = (np.full(len(pick), t) if lengths is None else lengths[pick]).astype(np.int64)
        qs = QUANTILES if nq == len(QUANTILES) else (0.5,)
        bias = np.zeros((len(dil), c, len(COMB), nq))
        for i, d in enumerate(dil):
            out = conv_outputs(xs, ls, int(d), valid[pick])   # (m, C, 84)
            if out.shape[0]:
                # each (channel, kernel)'s m outputs as one contiguous row: the
                # same quantiles as along axis 0, without strided partitions
                rows = np.ascontiguousarray(out.reshape(out.shape[0], -1).T)
                q = np.quantile(rows, qs, axis=1)                  # (nq, C * 84)
                bias[i] = q.T.reshape(c, len(COMB), nq)
        state = cls(mean, scale, dil, bias, window)
        return dist.same(state)

    # ---- apply ---------------------------------------------------------------
    def transform(self, x: FloatArray, lengths: IntArray | None, missing: BoolArray | None,
                  nthreads: int | None = None
                  ) -> tuple[FloatArray, IntArray | None, BoolArray | None]:
        """(tokens (n, ceil(T / window), n_features) in x's dtype, the tokens' lengths
        or None, the tokens' missing mask or None) of x (n, T, C) with its lengths and
        missing steps, as patches of `window` steps would be."""
        n, t, c = x.shape
        if c != self.n_channels:
            raise ValueError(f"X has {c} features, the PPV tokens were fitted on "
                             f"{self.n_channels}")
        valid = _valid(n, t, lengths, missing)
        xs = np.ascontiguousarray(_centred(x, self.mean, self.scale, valid), dtype=x.dtype)
        lens = np.full(n, t, np.int32) if lengths is None else lengths.astype(np.int32)
        miss = None if missing is None else np.ascontiguousarray(missing, dtype=np.uint8)
        out = np.empty((n, -(-t // self.window), self.n_features), x.dtype)
        if nthreads is None:   # the thread policy's count for this many kernel taps
            nthreads = threads_for(9.0 * 84 * len(self.dilations) * x.size)
        ppv(xs, lens, miss, self.dilations, COMB, self.bias.astype(x.dtype), self.window,
            out, nthreads)
        tl = None if lengths is None else -(-lengths // self.window)
        return out, tl, seqs.patch_missing(missing, lengths, self.window)

    # ---- persistence -----------------------------------------------------------
    def to_spec(self) -> dict[str, Any]:
        """JSON-able values (float64 repr round-trips exactly)."""
        return {"mean": self.mean.tolist(), "scale": self.scale.tolist(),
                "dilations": self.dilations.tolist(), "bias": self.bias.tolist(),
                "window": self.window}

    @classmethod
    def from_spec(cls, spec: Any) -> PPVTokens | None:
        if spec is None:
            return None
        if not isinstance(spec, dict):
            raise ValueError("the PPV tokens' state is not a mapping")
        try:
            return cls(spec["mean"], spec["scale"], spec["dilations"], spec["bias"],
                       spec["window"])
        except (KeyError, TypeError) as e:
            raise ValueError(f"the PPV tokens' state is incomplete: {e}") from None


def dilations(t_min: int, n: int = MAX_DILATIONS) -> IntArray:
    """Up to n dilations from 1 to (t_min - 1) / 8, exponentially spaced (distinct)."""
    top = max(1.0, (t_min - 1) / 8)
    return np.unique(np.floor(2.0 ** np.linspace(0, np.log2(top), n)).astype(np.int32))


def conv_outputs(x: Any, lengths: Any, d: int, valid: Any) -> Any:
    """The 84 kernels' outputs at dilation d on the valid steps of x (m, T, C) (zero
    'same' padding, steps past a series' end read 0): (valid steps, C, 84) float64.
    The NumPy statement of what attnx._ppv computes (the biases' sample; tests)."""
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


def _valid(n: int, t: int, lengths: IntArray | None, missing: BoolArray | None) -> BoolArray:
    v = np.ones((n, t), bool) if lengths is None else seqs.valid_positions(lengths, t)
    if missing is not None:
        v = v & ~missing
    return v


def _centred(x: Any, mean: Any, scale: Any, valid: Any) -> Any:
    out = (x - mean) / scale
    out[~valid] = 0
    return out
