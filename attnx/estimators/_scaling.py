"""Input (and regression target) standardisation of the estimators (standardize=True):
learned at fit, applied to the training data, folded into the model after training.

The scales are powers of two, so folding them into the weight matrices and unfolding
them for more training are exact; the standardised biases are kept beside the model
(embed_bias_, head_bias_), so a resumed fit continues bit for bit."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from . import _sequences as seqs
from ._ppv_tokens import TOKEN_SCALE

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from .. import distributed
    from ..runtime._typing import FloatArray
    from ._hyper import Config
    from ._networks import Model

    F64Array = NDArray[np.float64]


class SequenceEstimator(Protocol):
    """What the standardisation reads and writes of an estimator: its network and the
    fitted attributes of ATTRIBUTES (set and removed through __dict__)."""

    __dict__: dict[str, Any]
    model_: Model
    input_mean_: F64Array
    input_scale_: F64Array
    target_mean_: F64Array
    target_scale_: F64Array
    embed_bias_: FloatArray
    head_bias_: FloatArray

    def _scales_targets(self) -> bool: ...

class FitPlan(Protocol):
    """What the standardisation reads of a fit plan (attnx.estimators._plan.FitPlan,
    which imports this module)."""

    @property
    def head(self) -> bool: ...
    @property
    def instance_norm(self) -> str | None: ...
    @property
    def stem(self) -> Any: ...
    @property
    def ppv(self) -> Any: ...


#: the fitted attributes of the standardisation
ATTRIBUTES = ("input_mean_", "input_scale_", "target_mean_", "target_scale_",
              "embed_bias_", "head_bias_")


def standardized(est: SequenceEstimator, data: seqs.Data, cfg: Config, plan: FitPlan,
                 dist: distributed.Local, refit: bool) -> seqs.Data:
    """Data with each input channel standardised (a copy; the caller's X is never
    changed). The mean and scale come from this data's valid positions (neither
    padding nor missing; over every rank with comm) when refit, else from the fit
    that learned them. The bare X -> Y network keeps X's units (no embedding to fold
    the scaling into). With a convolutional stem the input is scaled but not centred
    (mean 0): its zero padding must read zero in the user's units too, so that
    folding stays exact. data: the plan's tokens."""
    if not (cfg.standardize and plan.head):
        for k in ATTRIBUTES:
            est.__dict__.pop(k, None)
        return data
    x = data.x
    # the positions that hold data: not padding, not missing (missing="mask"); a
    # patch with some missing steps holds data (those steps read 0, as fill steps do)
    masked = seqs.key_mask(data.lengths, data.missing, slice(None), x.shape[1])
    if refit and plan.instance_norm is not None:
        # instance normalisation standardises each series itself: X stays as it is
        # (identity, which folds exactly)
        est.input_mean_ = np.zeros(x.shape[2])
        est.input_scale_ = np.ones(x.shape[2])
    elif refit:
        xv = (x if masked is None else x[~masked]).reshape(-1, x.shape[2]).astype(np.float64)
        count = dist.allsum(float(xv.shape[0]))
        s1 = dist.allsum(xv.sum(axis=0))
        mean = s1 / max(count, 1.0)
        s2 = dist.allsum(((xv - mean) ** 2).sum(axis=0))
        est.input_mean_ = mean if plan.stem is None else np.zeros_like(mean)
        scale = np.sqrt(s2 / max(count, 1.0))
        if plan.ppv is not None:   # PPV tokens: TOKEN_SCALE x std
            scale = scale * TOKEN_SCALE
        est.input_scale_ = power_of_two(scale)
    xs = ((x - est.input_mean_) / est.input_scale_).astype(x.dtype)
    if masked is not None:   # padding and missing positions stay zero
        xs[masked] = 0
    y = data.y
    # regression targets, per output column; not with instance_norm="revin", whose
    # de-normalisation gives outputs in the units of X's channels, series by series
    scale_y = (plan.instance_norm != "revin") if refit else "target_mean_" in est.__dict__
    if not scale_y:
        est.__dict__.pop("target_mean_", None)
        est.__dict__.pop("target_scale_", None)
        est.__dict__.pop("head_bias_", None)
    elif est._scales_targets():
        if refit:
            yv = y.reshape(-1, y.shape[-1]).astype(np.float64)
            if data.w is not None:   # rows that count (w per sample or per position)
                keep = np.broadcast_to(data.w.reshape(data.w.shape + (1,) * (
                    y.ndim - 1 - data.w.ndim)), y.shape[:-1])
                yv = yv[keep.reshape(-1) > 0]
            count = dist.allsum(float(yv.shape[0]))
            mean = dist.allsum(yv.sum(axis=0)) / max(count, 1.0)
            scale = np.sqrt(dist.allsum(((yv - mean) ** 2).sum(axis=0)) / max(count, 1.0))
            est.target_mean_ = mean
            est.target_scale_ = power_of_two(scale)
        y = ((y - est.target_mean_) / est.target_scale_).astype(y.dtype)
    return seqs.Data(np.ascontiguousarray(xs), data.lengths, y, data.w,
                     data.per_position, data.missing)



def fold(est: SequenceEstimator) -> None:
    """Fold the standardisation into the input embedding (and a regressor's head),
    so that the fitted model (predict, save, ONNX) takes X and gives y in their own
    units: W' = W / scale (per input row), b' = b - (mean / scale) W; head
    W' = W * scale_y, b' = b * scale_y + mean_y. The scales are powers of two, so the
    weight matrices fold and unfold exactly; the standardised biases are kept
    (embed_bias_, head_bias_) so that training resumes bit for bit. A fitted model is
    folded: each training call unfolds it (a new network starts unfolded) and folds it
    when it ends, however it ends."""
    if "input_mean_" not in est.__dict__:
        return
    p = est.model_.params
    w, b, scale = _first_layer(est)
    est.embed_bias_ = b.copy()
    r = np.tile(est.input_mean_ / est.input_scale_, len(scale) // len(est.input_scale_))
    b[...] = (b.astype(np.float64) - r @ w.astype(np.float64)).astype(b.dtype)
    w /= scale[:, None].astype(w.dtype)
    if "target_mean_" in est.__dict__:   # y = y_std * scale + mean
        hw, hb = p["head.W"], p["head.b"]
        est.head_bias_ = hb.copy()
        hw *= est.target_scale_.astype(hw.dtype)
        hb[...] = (hb.astype(np.float64) * est.target_scale_
                   + est.target_mean_).astype(hb.dtype)



def unfold(est: SequenceEstimator) -> None:
    """The inverse of fold, before training goes on in standardised units."""
    if "input_mean_" not in est.__dict__:
        return
    p = est.model_.params
    w, b, scale = _first_layer(est)
    w *= scale[:, None].astype(w.dtype)
    b[...] = est.embed_bias_
    if "target_mean_" in est.__dict__:
        p["head.W"][...] /= est.target_scale_.astype(p["head.W"].dtype)
        p["head.b"][...] = est.head_bias_


def _first_layer(est: SequenceEstimator) -> tuple[NDArray[np.floating], NDArray[np.floating],
                                                  F64Array]:
    """(W, b, scale per row of W) of the layer that reads X: the embedding, or the
    stem's first convolution (rows l * C + c, the scale of channel c; with a stem
    the mean is 0, see standardized)."""
    p = est.model_.params
    if "stem.0.W" in p:
        w = p["stem.0.W"]
        return w, p["stem.0.b"], np.tile(est.input_scale_, w.shape[0] // len(est.input_scale_))
    return p["embed.W"], p["embed.b"], est.input_scale_


def same_units(x: NDArray[np.floating], valid: NDArray[np.bool_], y: NDArray[np.floating]
               ) -> bool:
    """Whether per-sequence regression targets y (n, k) are in the units of X's
    channels (x (n, T, C), valid (n, T) the positions that hold data), as the next
    values of the series are when a series is cut into windows: one target and one
    channel, or one target per channel, each target's 5-95% range inside its
    channel's 1-99% range widened by a tenth of that range on both sides, and its
    standard deviation within a factor 2 of the channel's. instance_norm="auto"
    picks "revin" for such targets."""
    c, k = x.shape[2], y.shape[1]
    if k != c or not y.shape[0] or not valid.any():
        return False
    xv = x[valid].astype(np.float64)
    for j in range(c):
        lo, hi = np.quantile(xv[:, j], [0.01, 0.99])
        y_lo, y_hi = np.quantile(y[:, j].astype(np.float64), [0.05, 0.95])
        pad = 0.1 * (hi - lo)
        sx, sy = float(xv[:, j].std()), float(np.std(y[:, j]))
        if not (lo - pad <= y_lo and y_hi <= hi + pad and sx > 0 and 0.5 <= sy / sx <= 2.0):
            return False
    return True


def power_of_two(scale: F64Array) -> F64Array:
    """Each positive scale rounded to the nearest power of two (1 where it is 0): the
    data is then standardised to within a factor sqrt(2), and scaling by it is exact."""
    out = np.ones_like(scale)
    pos = scale > 0
    out[pos] = np.exp2(np.round(np.log2(scale[pos])))
    return out
