"""Inference of the fitted estimators: X checked and cut as at fit, forwards in
chunks of bounded memory, attention weights, and what an exporter needs (ExportSpec).
A mixin of attnx.estimators._estimator.SequenceEstimator."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, cast

import numpy as np

from . import _sequences as seqs
from ..layers import _stem
from ..runtime._threads import hold
from ._base import sklearn_class
from ._networks import network_of

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from ..runtime._typing import BoolArray, FloatArray, IntArray
    from ._networks import BareClass, Model, Network
    from ._plan import FitPlan
    from ._ppv_tokens import PPVTokens

# predict and attention_weights run this many rows (samples x positions) per
# forward: bounded memory for any n, and no relation to the training batch_size
_PREDICT_ROWS = 8192


class ExportSpec(NamedTuple):
    """What an exporter (attnx.io.onnx) needs to reproduce predict: the fitted network,
    how its raw output becomes predict's output ("y": as it is; "squeeze": drop the
    single output column; "probabilities": softmax over the classes) and the class
    labels (classifiers; None otherwise), the patch length and the `missing` rule
    ("mask": the graph masks the time steps that hold NaN), how a partial last
    patch is filled (attnx.estimators._sequences.patch), and the PPV transform that
    makes the tokens (None: patches)."""

    model: Any
    output: str
    classes: Any = None
    patch_len: int = 1
    missing: str = "error"
    patch_fill: str = "last"
    tokens: PPVTokens | None = None


class Inference:
    """predict's machinery: the estimators' predict / predict_proba / score build on
    _forward_all; attention_weights and export_spec are public."""

    # set by fit (attnx.estimators._estimator.SequenceEstimator)
    model_: Model
    plan_: FitPlan
    #: the bare X -> Y network of the original regressors
    _bare_class: ClassVar[BareClass | None] = None

    # ---- the plan's fitted attributes -----------------------------------------------
    @property
    def n_features_in_(self) -> int:
        """The features (channels) of X at fit."""
        return self.plan_.channels

    @property
    def patch_len_(self) -> int:
        """The time steps of a token (with PPV tokens: of a token's window)."""
        return self.plan_.patch_len

    @property
    def resample_length_(self) -> int:
        """The length every series is resampled to (fitted on ragged univariate series
        by a classifier; attnx.estimators._resample); no such attribute otherwise."""
        length = self.plan_.resample_length
        if length is None:
            raise AttributeError("resample_length_: this model resamples no series")
        return length

    @property
    def augment_shift_(self) -> int:
        """The training batches' largest time shift (tokenizer="auto"'s short path,
        attnx.estimators._augment); no such attribute without shifts."""
        shift = self.plan_.augment_shift
        if shift is None:
            raise AttributeError("augment_shift_: this model was trained without time shifts")
        return shift

    def _network(self) -> Network:
        """The fitted network's kind (see attnx.estimators._networks)."""
        return network_of(self.plan_.network, self._bare_class, type(self).__name__)

    def _fitted_model(self) -> Model:
        if "model_" not in self.__dict__:
            raise sklearn_class("NotFittedError")(
                f"this {type(self).__name__} is not fitted yet: call fit or partial_fit first")
        return self.model_

    def _layout(self) -> str:
        """The `layout` X arrives in (models fitted before it existed: "ntc")."""
        return str(self.__dict__.get("layout", "ntc"))

    def _missing(self) -> str:
        """The `missing` rule for NaN in X (models fitted before it existed: "error")."""
        return str(self.__dict__.get("missing", "error"))

    def _inputs(self, X: ArrayLike, allow_empty: bool = False
                ) -> tuple[FloatArray, IntArray | None, BoolArray | None]:
        """X validated for the fitted model as at fit and cut into its patches: (x,
        lengths or None, the tokens' missing mask or None)."""
        model = self._fitted_model()
        plan = self.plan_
        x, lengths, _, nan = seqs.sequences("X", X, model.dtype, plan.channels,
                                            allow_empty=allow_empty, layout=self._layout(),
                                            missing=self._missing())
        self._check_missing(nan)
        if nan is not None:
            _stem.check_missing(plan.stem, seqs.key_mask(lengths, nan, slice(None), x.shape[1]))
        length = plan.resample_length
        if length is not None and nan is not None:
            raise ValueError("X holds NaN steps, but this model resamples each series to "
                             f"{length} steps (fitted on ragged series without missing "
                             "steps): give series without NaN")
        return plan.tokens(x, lengths, nan)

    def _fill_rule(self) -> str:
        """How the fitted model's partial last patches are filled: "last" since that
        rule, "zero" for a model fitted (and saved) before it."""
        return self.plan_.patch_fill

    def _check_missing(self, nan: BoolArray | None) -> None:
        """ValueError when X has missing steps (nan) that the fitted model cannot mask."""
        if nan is not None and self.plan_.per_position:
            raise ValueError("X holds NaN steps, which missing='mask' masks for a model with "
                             "one output per sequence only; this one was fitted with "
                             "targets per position")

    def _forward_all(self, X: ArrayLike, allow_empty: bool = True
                     ) -> tuple[FloatArray | list[FloatArray], IntArray | None]:
        """(raw model outputs, lengths or None): an array (n, ...) for dense X, and for
        ragged X an array of pooled rows or a list of (T_i, ...) arrays. BLAS is held
        at one thread once for all the chunks (attnx.runtime._threads.hold)."""
        with hold():
            return self._forward_chunks(X, allow_empty)

    def _forward_chunks(self, X: ArrayLike, allow_empty: bool
                        ) -> tuple[FloatArray | list[FloatArray], IntArray | None]:
        model = self._fitted_model()
        x, lengths, nan = self._inputs(X, allow_empty)
        t_floor = 1   # a batch's fewest steps
        stem = getattr(model, "stem", None)
        if stem and len(model.output_shape(1, x.shape[1])) != 3:
            t0 = x.shape[1]
            x, lengths = _stem.pad_short(stem, x, lengths)   # shorter than a kernel
            t_floor = _stem.min_length(stem)
            if nan is not None and x.shape[1] > t0:   # the added steps are padding
                nan = np.pad(nan, ((0, 0), (0, x.shape[1] - t0)))
        self._network().check_length(self.plan_.network, x.shape[1])
        n, t = x.shape[:2]
        shape = model.output_shape(n, t)
        per_position = len(shape) == 3
        tail = shape[2:] if per_position else shape[1:]
        if lengths is None:  # dense X
            out = np.empty(shape, dtype=model.dtype)
            step = max(1, _PREDICT_ROWS // max(t, 1))
            for s in range(0, n, step):
                rows = slice(s, s + step)
                if nan is None:
                    model.forward(x[rows], grad=False, out=out[rows])
                else:   # NaN steps: masked keys (a sequence model: _inputs checked)
                    cast("Any", model).forward(x[rows], key_padding_mask=nan[rows],
                                               grad=False, out=out[rows])
            return out, None
        order = np.argsort(lengths, kind="stable")
        pooled = np.empty((n,) + tail, dtype=model.dtype) if not per_position else None
        parts: list[FloatArray | None] = [None] * n
        step = max(1, _PREDICT_ROWS // t)
        for s in range(0, n, step):
            idx = order[s:s + step]
            tb = max(int(lengths[idx].max()), t_floor)
            mask = seqs.key_mask(lengths, nan, idx, tb)
            y = model.forward(x[idx, :tb], key_padding_mask=mask, grad=False)
            if per_position:
                for j, i in enumerate(idx):
                    parts[i] = y[j, :int(lengths[i])].copy()
            else:
                assert pooled is not None  # allocated above when not per_position
                pooled[idx] = y
        if per_position:
            return cast("list[FloatArray]", parts), lengths  # order covers every sample
        assert pooled is not None
        return pooled, lengths

    def attention_weights(self, X: ArrayLike) -> FloatArray | list[FloatArray]:
        """Attention probabilities of the fitted model on X, at inference (no dropout).

        The bare X -> Y models: (n, n_heads, T, T), a list of one per layer for a
        Transformer. Sequence models: a list with one (n, n_heads, T', T') array per
        layer, T' the tokens (T, or ceil(T / patch_len_) with patches; key position j
        covers steps [j * patch_len_, (j + 1) * patch_len_)). With a stem the tokens
        are its last layer's outputs (token j of a layer of stride s and kernel k
        covers steps j*s - (k-1)//2 .. j*s + k//2 of that layer's input, so with one
        layer T' = ceil(T / s)); with pooling="cls" token 0 is the class token and
        token j + 1 is data token j. For ragged X the arrays
        are padded to the longest sequence, padded keys weigh 0 and padded queries'
        rows are 0; with missing="mask" the masked (NaN) tokens alike.
        attnx.plot.attention_over_series draws one sample's over its series.
        """
        model = self._fitted_model()
        net = self._network()
        if not net.head:
            return net.attention_weights(model, lambda: self._inputs(X)[0], _PREDICT_ROWS)
        x, lengths, nan = self._inputs(X)
        n, t = x.shape[:2]
        step = max(1, _PREDICT_ROWS // max(t, 1))
        parts: list[list[FloatArray]] = []
        seq = cast("Any", model)
        dropout, seq.dropout = seq.dropout, 0.0   # inference weights: no dropout masks
        try:
            for s in range(0, n, step):
                mask = seqs.key_mask(lengths, nan, slice(s, s + step), t)
                seq.forward(x[s:s + step], key_padding_mask=mask, grad=True)
                w = [np.array(a) for a in seq.attention_weights()]
                km = seq.token_padding()   # the tokens' padding (stem, class token)
                mask = None if km is None else km.astype(bool)
                if mask is not None:
                    for a in w:
                        a[mask[:, None, :, None].repeat(a.shape[1], axis=1)
                          .repeat(a.shape[3], axis=3)] = 0
                parts.append(w)
        finally:
            seq.dropout = dropout
        return [np.concatenate(p, axis=0) for p in zip(*parts)]

    def export_spec(self) -> ExportSpec:
        """The fitted network and how predict turns its output into predictions (see
        ExportSpec); what attnx.io.onnx.export reads from an estimator."""
        model = self._fitted_model()
        plan = self.plan_
        return ExportSpec(model, "squeeze" if plan.k is None else "y",
                          patch_len=plan.patch_len, missing=self._missing(),
                          patch_fill=plan.patch_fill, tokens=plan.ppv)
