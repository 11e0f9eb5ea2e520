"""Plots of attention weights and loss curves (matplotlib, an optional extra).

matplotlib is imported when a function here is called, not when attnx or this
module is imported; without it the functions raise ImportError saying how to
install it.
"""
from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Protocol, cast

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt
    from matplotlib.axes import Axes

    from ._typing import AnyArray

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
    ax.set_ylabel("MSE loss")
    ax.set_title(title or "loss per epoch")
    if len(arrays) > 1:
        ax.legend()
    ax.grid(True, alpha=0.3)
    return ax


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
