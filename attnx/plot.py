"""Plots of attention weights and loss curves (matplotlib, an optional extra).

matplotlib is imported when a function here is called, not when attnx or this
module is imported; without it the functions raise ImportError saying how to
install it.
"""
from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt
    from matplotlib.axes import Axes

    from .runtime._typing import AnyArray

    F64Array = npt.NDArray[np.float64]

    class _Estimator(Protocol):
        """A fitted AttentionRegressor / TransformerRegressor (or classifier)."""

        def attention_weights(self, X: AnyArray) -> object: ...

    class _Model(Protocol):
        """A MultiHeadAttention or Transformer."""

        def forward(self, X: AnyArray, grad: bool = ...) -> object: ...
        def attention_weights(self) -> object: ...

_HINT = "attnx.plot needs matplotlib, an optional extra: pip install attnx[plot]"


def _matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise ImportError(_HINT) from exc


def _new_axes() -> Axes:
    _matplotlib()
    import matplotlib.pyplot as plt

    _, ax = plt.subplots()
    return ax


def attention_heatmap(weights_or_model: object, sample: int = 0, head: int = 0,
                      layer: int | None = None, ax: Axes | None = None, *,
                      X: npt.ArrayLike | None = None, cmap: str = "viridis",
                      annotate: bool | None = None, colorbar: bool = True,
                      title: str | None = None) -> Axes:
    """Draw the (Tq, Tk) attention map of one sample and head; returns the Axes.

    weights_or_model is one of:
      - an array (B, n_heads, Tq, Tk), as model.attention_weights() returns, or a
        single (Tq, Tk) map (sample and head are then ignored);
      - a list of such arrays, one per layer (a Transformer's); `layer` picks one
        (default 0);
      - a MultiHeadAttention or Transformer after a forward with grad=True, or
        given X (B, T, d) to run one on X[sample];
      - a fitted AttentionRegressor / TransformerRegressor, with X.
    annotate writes each probability in its cell (default: when T <= 10).
    """
    _matplotlib()
    w, layer_used = _weights(weights_or_model, sample, head, layer, X)
    if ax is None:
        ax = _new_axes()
    im = ax.imshow(w, cmap=cmap, vmin=0.0, vmax=max(float(w.max()), 1e-12),
                   interpolation="nearest")
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    if title is None:
        title = f"attention weights: sample {sample}, head {head}"
        if layer_used is not None:
            title += f", layer {layer_used}"
    ax.set_title(title)
    tq, tk = w.shape
    if max(tq, tk) <= 20:  # a tick per position while they stay readable
        ax.set_xticks(range(tk))
        ax.set_yticks(range(tq))
    if annotate is None:
        annotate = max(tq, tk) <= 10
    if annotate:
        mid = 0.5 * float(w.max())
        for i in range(tq):
            for j in range(tk):
                ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="black" if w[i, j] > mid else "white")
    if colorbar:
        ax.figure.colorbar(im, ax=ax, label="probability")
    return ax


def loss_curve(est_or_curve: object, ax: Axes | None = None, *, log: bool | None = None,
               title: str | None = None) -> Axes:
    """Plot training loss per epoch (and the validation loss when there is one).

    est_or_curve: a fitted estimator (loss_curve_, validation_loss_curve_) or a
    sequence of losses. log: logarithmic y axis (default: when all losses > 0).
    Returns the Axes.
    """
    _matplotlib()
    curves: dict[str, object] = {}
    if hasattr(est_or_curve, "loss_curve_"):
        curves["training"] = est_or_curve.loss_curve_
        validation = getattr(est_or_curve, "validation_loss_curve_", None)
        if validation is not None:
            curves["validation"] = validation
    elif hasattr(est_or_curve, "get_params"):
        raise ValueError("the estimator is not fitted yet: it has no loss_curve_")
    else:
        curves["training"] = est_or_curve
    arrays = {k: np.asarray(v, dtype=np.float64).reshape(-1) for k, v in curves.items()}
    if arrays["training"].size == 0:
        raise ValueError("the loss curve is empty")
    if ax is None:
        ax = _new_axes()
    for name, c in arrays.items():
        ax.plot(np.arange(1, c.size + 1), c, marker="o" if c.size <= 30 else None,
                markersize=3, label=name)
    allv = np.concatenate(list(arrays.values()))
    if log is None:
        log = bool(np.all(allv[np.isfinite(allv)] > 0))
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("epoch")
    ax.set_ylabel(_loss_name(est_or_curve))
    ax.set_title(title or "loss per epoch")
    if len(arrays) > 1:
        ax.legend()
    ax.grid(True, alpha=0.3)
    return ax


#: the regressors' loss parameter, as an axis reads it
_REGRESSION_LOSS_NAMES = {"squared_error": "MSE loss", "absolute_error": "MAE loss",
                          "huber": "Huber loss", "pinball": "pinball (quantile) loss"}


def _loss_name(obj: object) -> str:
    """The loss the estimator was trained on (its loss parameter; cross-entropy for a
    classifier), or "loss" for a bare curve."""
    get_params = getattr(obj, "get_params", None)
    if get_params is None:
        return "loss"
    params = get_params()
    if getattr(obj, "_estimator_type", None) == "classifier":
        options = params.get("options")
        smoothing = (options or {}).get("label_smoothing") or 0.0
        return "cross-entropy loss" + (f" (label smoothing {smoothing:g})" if smoothing
                                       else "")
    name = params.get("loss", "squared_error")
    return _REGRESSION_LOSS_NAMES.get(name, f"{name} loss")


def _weights(obj: object, sample: int, head: int, layer: int | None,
             X: npt.ArrayLike | None) -> tuple[F64Array, int | None]:
    """The (Tq, Tk) map to draw, and the layer index used (None for one layer)."""
    for name, v in (("sample", sample), ("head", head)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"{name} must be an int, got {v!r}")
    if hasattr(obj, "get_params"):  # an estimator
        if X is None:
            raise ValueError("an estimator needs X to compute attention weights: "
                             "attention_heatmap(est, X=X)")
        obj = cast("_Estimator", obj).attention_weights(_one_sample(X, sample))
        sample = 0
    elif hasattr(obj, "attention_weights"):  # a model
        model = cast("_Model", obj)
        if X is not None:
            model.forward(_one_sample(X, sample), grad=True)
            sample = 0
        obj = model.attention_weights()
    layer_used = None
    if isinstance(obj, (list, tuple)):
        if not obj:
            raise ValueError("no attention weights: the list of layers is empty")
        n_layers = len(obj)
        chosen = 0 if layer is None else layer
        if (isinstance(chosen, bool) or not isinstance(chosen, numbers.Integral)
                or not -n_layers <= int(chosen) < n_layers):
            raise ValueError(f"layer must be an int in [0, {n_layers}), got {layer!r}")
        layer_used = int(chosen) % n_layers
        obj = obj[layer_used]
    w = np.asarray(obj, dtype=np.float64)
    if w.ndim == 4:
        if not 0 <= sample < w.shape[0]:
            raise ValueError(f"sample must be in [0, {w.shape[0]}), got {sample}")
        if not 0 <= head < w.shape[1]:
            raise ValueError(f"head must be in [0, {w.shape[1]}), got {head}")
        w = w[sample, head]
    elif w.ndim != 2:
        raise ValueError(f"attention weights must be (B, n_heads, Tq, Tk) or (Tq, Tk), "
                         f"got shape {w.shape}")
    return w, layer_used


def _one_sample(X: npt.ArrayLike, sample: int) -> AnyArray:
    X = np.asarray(X)
    if X.ndim != 3:
        raise ValueError(f"X must be (n_samples, seq_len, d), got shape {X.shape}")
    if not 0 <= sample < X.shape[0]:
        raise ValueError(f"sample must be in [0, {X.shape[0]}), got {sample}")
    return X[sample:sample + 1]


def attention_over_series(series: npt.ArrayLike, weights: npt.ArrayLike,
                          ax: Axes | None = None, *, patch_len: int = 1,
                          patch_stride: int | None = None, cmap: str = "magma_r",
                          title: str | None = None) -> Axes:
    """Draw a series with the attention its time steps received shaded beneath it.

    series: (T,) or (T, n_channels) values of one sample. weights: the attention one
    sample received, as a (Tq, Tk) map (averaged over the queries), a (n_heads, Tq, Tk)
    stack (averaged over heads and queries) or already a (Tk,) importance per key
    position. With patches (patch_len, patch_stride), key position j covers the time
    steps [j*stride, j*stride + patch_len); a step's shade is the mean importance of the
    positions that cover it. Padded keys (weight 0 everywhere) shade nothing.
    Returns the Axes.
    """
    _matplotlib()
    y = np.asarray(series, dtype=np.float64)
    if y.ndim == 1:
        y = y[:, None]
    if y.ndim != 2 or y.shape[0] == 0:
        raise ValueError(f"series must be (T,) or (T, n_channels), got shape "
                         f"{np.shape(series)}")
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim == 3:
        w = w.mean(axis=0)
    if w.ndim == 2:
        w = w.mean(axis=0)
    if w.ndim != 1 or w.size == 0 or not np.all(np.isfinite(w)):
        raise ValueError(f"weights must be (Tk,), (Tq, Tk) or (n_heads, Tq, Tk) finite "
                         f"values, got shape {np.shape(weights)}")
    for name, v in (("patch_len", patch_len), ("patch_stride", patch_stride)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Integral)
                              or v < 1):
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    stride = patch_len if patch_stride is None else int(patch_stride)
    t_len = y.shape[0]
    need = (w.size - 1) * stride + patch_len
    if need > t_len + stride:
        raise ValueError(f"{w.size} key positions of patch_len={patch_len}, "
                         f"stride={stride} cover {need} steps, but the series has {t_len}")
    per_step = np.zeros(t_len)
    count = np.zeros(t_len)
    for j, v in enumerate(w):
        a = j * stride
        per_step[a:a + patch_len] += v
        count[a:a + patch_len] += 1
    per_step = np.divide(per_step, count, out=np.zeros_like(per_step), where=count > 0)
    if ax is None:
        ax = _new_axes()
    lo, hi = float(np.min(y)), float(np.max(y))
    pad = 0.05 * (hi - lo or 1.0)
    top = per_step.max() or 1.0
    ax.imshow(per_step[None, :] / top, aspect="auto", cmap=cmap, vmin=0.0, vmax=1.0,
              extent=(-0.5, t_len - 0.5, lo - pad, hi + pad), alpha=0.6, origin="lower")
    for c in range(y.shape[1]):
        ax.plot(np.arange(t_len), y[:, c], lw=1.2, color="C0" if y.shape[1] == 1 else None)
    ax.set_xlim(-0.5, t_len - 0.5)
    ax.set_ylim(lo - pad, hi + pad)
    ax.set_xlabel("time step")
    ax.set_ylabel("value")
    ax.set_title(title or "attention received per time step (darker = more)")
    return ax


def _series(name: str, values: Any) -> npt.NDArray[np.float64]:
    """values as a flat float64 array (a pandas Series gives its values); a TypeError
    naming the argument for anything that is not numbers."""
    if isinstance(values, str) and values in ("lower", "upper"):
        # `lo, hi = f.predict_interval(...)` on pandas unpacks the DataFrame's columns
        raise TypeError(f"{name} is the column name {values!r}, not its values: on pandas "
                        f"input predict_interval returns a DataFrame; pass "
                        f"lower=iv['lower'], upper=iv['upper'] with "
                        f"iv = f.predict_interval(...)")
    try:
        return np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a 1-D series of numbers, got "
                        f"{type(values).__name__}") from None


def _pandas_x(history: Any, prediction: Any, h: int) -> Any:
    """The x positions a pandas history implies: its index, then the prediction's (or,
    for a prediction without one, the next h steps of the history's); None when the
    history is not pandas or its index has no regular step."""
    from .forecasting import _pandas

    if not _pandas.is_pandas(history):
        return None
    if _pandas.is_pandas(prediction):
        future = prediction.index
    else:
        try:
            future = _pandas.future_index(_pandas._meta("history", history), h)
        except (TypeError, ValueError):
            return None
    x = history.index.append(future)
    return x.to_timestamp() if hasattr(x, "to_timestamp") else x


def forecast(history: npt.ArrayLike, prediction: npt.ArrayLike, ax: Axes | None = None, *,
             lower: npt.ArrayLike | None = None, upper: npt.ArrayLike | None = None,
             actual: npt.ArrayLike | None = None, index: npt.ArrayLike | None = None,
             coverage: float | None = None, title: str | None = None) -> Axes:
    """Draw a series' history, its point forecast, an optional interval band and the
    held-out actual values; returns the Axes.

    history (T,), prediction (H,), lower/upper (H,) (both or neither), actual (H,) the
    values that came after; numpy arrays or pandas Series (e.g. the "lower" and "upper"
    columns of predict_interval's DataFrame). index: T + H x positions (dates or
    numbers); default: a pandas history's index followed by the prediction's (or the
    next H steps of the history's frequency), else 0, 1, ...; coverage labels the band
    (e.g. 0.9 -> "90% interval").
    """
    _matplotlib()
    hist = _series("history", history)
    pred = _series("prediction", prediction)
    if hist.size == 0 or pred.size == 0:
        raise ValueError(f"history and prediction must be non-empty 1-D series, got "
                         f"{hist.size} and {pred.size} values")
    h = pred.size
    if (lower is None) != (upper is None):
        raise ValueError("give both lower and upper (an interval), or neither")
    arrays = {}
    for name, v in (("lower", lower), ("upper", upper), ("actual", actual)):
        if v is not None:
            a = _series(name, v)
            if a.size != h:
                raise ValueError(f"{name} must have one value per forecast step ({h}), "
                                 f"got {a.size}")
            arrays[name] = a
    x: Any = _pandas_x(history, prediction, h) if index is None else None
    if x is not None and len(x) != hist.size + h:   # e.g. a DataFrame of several columns
        x = None
    if x is None and index is None:
        x = np.arange(hist.size + h)
    elif x is None:
        to_timestamp = getattr(index, "to_timestamp", None)   # a PeriodIndex: its starts
        x = np.asarray(index if to_timestamp is None else to_timestamp())
        if x.shape != (hist.size + h,):
            raise ValueError(f"index must have len(history) + horizon = {hist.size + h} "
                             f"entries, got shape {x.shape}")
    if ax is None:
        ax = _new_axes()
    xh, xf = x[:hist.size], x[hist.size:]
    ax.plot(xh, hist, color="C0", lw=1.2, label="history")
    if "lower" in arrays:
        label = "interval" if coverage is None else f"{round(100 * coverage)}% interval"
        ax.fill_between(xf, arrays["lower"], arrays["upper"], color="C1", alpha=0.25,
                        label=label)
    if "actual" in arrays:
        ax.plot(xf, arrays["actual"], color="k", lw=1.0, ls="--", label="actual")
    ax.plot(xf, pred, color="C1", lw=1.8, label="forecast")
    ax.axvline(xh[-1], color="grey", lw=0.8, alpha=0.6)
    ax.set_xlabel("time")
    ax.set_ylabel("value")
    ax.set_title(title or f"forecast, horizon {h}")
    ax.legend()
    ax.grid(True, alpha=0.3)
    return ax
