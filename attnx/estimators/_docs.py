"""The estimators' docstrings: the Parameters section is made from the parameter table
(attnx.estimators._hyper.PARAMETERS: each parameter's type, default and line of
documentation); the Notes below explain the settings that need more than a line."""
from __future__ import annotations

import textwrap
from typing import Any

import numpy as np

from ._hyper import OPTIONS, PARAMETERS, options_of, signature_of

_WIDTH = 88

#: the notes every estimator's docstring ends with, by topic: prose, not declarations
_NOTES = [
    ("The bare X -> Y model", """With d_model=None, y of X's own shape (dense X) and none
    of positional (other than "rope"), norm, dropout, max_len, stem (nor d_hidden for
    AttentionRegressor) set, the regressors train the bare MultiHeadAttention /
    Transformer mapping X to Y directly, as attnx always did; positional="rope" gives it
    rotary positions."""),
    ("options", """The settings that are rarely changed are keys of the one parameter
    options (None: every default), e.g. options={"lr_schedule": "constant",
    "max_grad_norm": None}; each key is checked at fit, and an unknown key or a bad value
    is an error naming options['key']. get_params, set_params, clone and GridSearchCV
    (a grid over dicts of options) treat options as one parameter. Below, an option is
    named by its key."""),
    ("pooling", """How one output per sequence is made (valid positions only): "mean",
    "last", "max" (per feature, the maximum over the positions) or "cls" (a learned class
    token put before the positions; the head reads its final row; not with causal);
    per-position targets are not pooled."""),
    ("stem", """None, "auto", or a convolutional stem ((kernel, stride), ...) before the
    embedding. "auto" picks two layers from the data at fit, at most 16 tokens:
    (min(8, T_min), s1) with s1 = 4 for T_max >= 32 (else 1), then windows of 2 s2 every
    s2 = ceil(T_max / s1 / 16) steps (attnx.layers._stem.auto; none for per-position
    targets). Per layer a 1-D convolution over time to d_model channels ('same' zero
    padding, left (kernel-1)//2), a bias and SiLU; the blocks then see ceil(T / stride)
    tokens per layer, e.g. stem=((5, 1), (3, 2)) halves the length. Token j of a layer of
    stride s covers steps j*s - (kernel-1)//2 to j*s + kernel//2 of its input. Every
    kernel must fit the shortest sequence at its layer. Replaces patches: patch_len must
    be None (off with a stem) or 1. Per-position targets need strides of 1. With
    standardize the input is scaled but not centred (the convolution's zero padding stays
    zero)."""),
    ("instance_norm", """None, "input", "revin" (RevIN, Kim et al. 2022) or "auto"
    (TransformerRegressor's default): "revin" for a regressor whose targets (one per
    sequence) are in the units of X's series (one target and one channel, or one per
    channel; each target's 5-95% range inside its channel's 1-99% range widened by a
    tenth, its std within a factor 2 of the channel's: the next values of a series cut
    into windows), else None. "input": each input series (sample, channel) is centred on
    its mean over its valid steps and divided by sqrt(var + 1e-5) (in X's units) before
    the network, so the network sees every series at one level and scale. "revin" (the
    regressors only): the outputs are also mapped back, y_j = out_j * std_c + mean_c of
    the sample's own series, output j by channel j when there are as many outputs as
    channels, or every output by the one channel of univariate X (ValueError otherwise):
    for targets in the units of X's channels, such as forecasts. Instance normalisation
    replaces the input standardisation of standardize (input_mean_ 0, input_scale_ 1);
    with "revin" y is not standardised either (the de-normalisation puts the outputs at
    each series' own level and scale), with "input" it is as usual. With patches the
    statistics run over every step of a patch (the steps that fill a sequence's partial
    last patch count as its last step, which they repeat). The option instance_affine
    adds RevIN's learnable per-channel gain and bias after the normalisation (inverted
    before the de-normalisation; with "auto": when it picks "revin")."""),
    ("tokenizer", """What a token holds (one output per sequence only). "patch": the raw
    values of its window (patch_len steps). "ppv": a description of the window's local
    shapes: the 84 fixed length-9 kernels with weights -1 and 2 convolved with each
    channel (centred and scaled by its training mean and std) at up to 8 dilations from 1
    to (T_min - 1) / 8, and per kernel the fractions of the window's valid steps where the
    output exceeds each of five biases (its 0.1, 0.3, 0.5, 0.7 and 0.9 quantiles on up to
    8 training series; two, 0.2 and 0.8, with more than 4 channels): D * C * 420 (168)
    features per token (attnx.estimators._ppv_tokens; the windows are the patches the
    patch_len rule makes; with patch_len=None at most 4 windows, of ceil(T_max / 4)
    steps). Fitted once at fit, not trained; the transformer learns from the tokens
    (standardize scales their features to std 1/8) with its sinusoidal positions at twice
    their amplitude (SequenceModel's position_scale). "auto" (TransformerClassifier's
    default): "ppv" for a classifier with no stem and no instance_norm whose series have
    64+ steps (the longest, when lengths differ: then 16+ with one channel, and each
    series' windows and dilations follow its length), else "patch"; and for a
    classifier's univariate series under 64 steps (stem=None, patch_len=None, no missing
    steps) raw values through a small convolutional stem, ((3, 1), (2 p, p)) with p =
    ceil(T_max / 16) (attnx.layers._stem.short): a pattern then makes the same features
    wherever it lies; in training every series is moved in time by its own random -p..p
    steps each epoch, the first or last value repeated at the ends (augment_shift_ = p;
    validation and predict see the series as given; attnx.estimators._augment). A
    classifier's univariate series of different lengths are first each resampled (linear
    interpolation) to the longest training length, resample_length_, and then take the
    rule for equal lengths; predict resamples alike (attnx.estimators._resample).
    "select" (classifiers): "auto"'s choice, "patch" or "ppv", whichever scores best on a
    held-out quarter of each class's training series, then the fit on them all
    (selected_tokenizer_, tokenizer_scores_; 2-13 times a fit's time;
    attnx.estimators._select_tokens). "ppv" not with a stem or per-position targets; not
    exported to ONNX."""),
    ("patch_len", """Steps per token (one output per sequence only). None: ceil(T_max /
    16) raw-value tokens (with PPV tokens a window of ceil(T_max / 4), or one that follows
    each series' length for ragged sets); 1: one token per step. A sequence that ends
    inside a patch repeats its last step to the patch's end; per-position targets always
    use 1."""),
    ("layout", """How X is laid out in fit, predict, score and attention_weights: "ntc"
    (n_samples, seq_len, n_features), or a list of (seq_len_i, n_features) arrays for
    unequal lengths; "nct" aeon's and sktime's (n_cases, n_channels, n_timepoints), or a
    list of (n_channels, n_timepoints_i) arrays. Explicit, never guessed from the shapes.
    Targets per position keep (n, seq_len[, k]); the ONNX graph takes (n, seq_len,
    n_features)."""),
    ("missing", """What NaN in X means, in fit, predict, score and attention_weights:
    "error" (a ValueError) or "mask": a time step with NaN in any channel is missing as a
    whole and treated exactly as padding: a masked key in every attention layer, left out
    of the pooling ("mean", "last", "max"; "cls" reads the class token, which never
    attends to it), of the input standardisation's statistics and of attention_weights,
    its values read as 0 (X itself is never modified). With patches (patch_len) a patch is
    masked when all its steps are missing, else its missing steps read 0 (those after the
    last observed step repeat it, as the steps filling a partial last patch do: see
    patch_len); a stem's window reads them as 0 and is masked when every step it covers
    is, as with padding. Masking keeps the positions of the later steps: trailing NaN
    steps give the predictions of the shorter sequence. Needs targets per sequence.
    Infinity stays a ValueError, as does a sequence whose every step holds NaN, and NaN in
    y. The ONNX graph does the same masking inside (attnx.io.onnx.export)."""),
    ("epochs", """None (the Transformer estimators' default): a budget of about 1500 AdamW
    steps, round(1500 / batches per epoch) clipped to [30, 300]; a regressor first holds
    out 20% of the samples (10 or more) and trains on the rest, scored on them every
    epoch: once the network explains half of their variance (a strong signal) the fit
    trains the whole budget, otherwise as many epochs as that run's best one (30 epochs of
    patience, at least 5): on a weak signal a longer fit learns the noise of a small set.
    The fit then trains on every sample from the same initial weights; epoch_selection_
    records the choice (without validation_fraction, early_stopping or warm_start
    only)."""),
    ("batch_size", """A short last batch is padded with zero-weighted rows, so every step
    sees one batch shape. Ragged input is batched by length: the shuffled samples are cut
    into windows of 16 batches, each window is sorted by length and cut into batches
    (padding stays small), and the batches are shuffled."""),
    ("lr_schedule", """"constant"; "warmup_cosine": a linear warm-up over the first
    warmup fraction of the steps, then a cosine decay to 0; "one_cycle": up to lr over the
    warm-up, then down to lr / 1e4. With lr_schedule "constant", max_grad_norm None,
    decay "all" and standardize False the fit is plain AdamW training."""),
    ("standardize", """Each input channel (and a regressor's targets) is scaled by the
    training data's mean and a power-of-two scale, folded into the first and last layers
    after the fit: predict, saved files and ONNX graphs take raw units."""),
    ("early_stopping", """With early_stopping fit stops when the validation loss (or the
    training loss without validation) has not improved by tol for n_iter_no_change
    epochs, keeping the best weights; without it a plateau of the training loss stops fit
    with a ConvergenceWarning."""),
    ("distributed", """With comm (MPI), "balanced": each rank shuffles its own shard and
    takes ceil(batch_size / P) rows of it per step (reproducible for a given seed and
    number of ranks P); "exact": the global batches of one process, split over the ranks
    (the fit equals the single-process one to rounding, but ranks pad to their largest
    share; no dropout). Without comm both are the plain fit."""),
    ("pretrain", """"masked": self-supervised pre-training of the encoder before the
    supervised fit (a new fit only, not warm_start or partial_fit): about 15% of the input
    values of every training series (and of fit(..., X_unlabelled=...)'s series) are
    replaced by 0 (the training mean with standardize) and the network, with a linear
    head per token, learns to reconstruct them (mean squared error over the masked
    values); its encoder weights then start the fit, the reconstruction head is dropped.
    Patch tokens are masked in spans of about 3 time steps per channel, PPV tokens
    feature by feature (each token rebuilds what it sees of its window).
    pretrain_loss_curve_ records the loss of every epoch; pretrain_epochs sets its
    length. Not with a stem, instance normalisation, comm or the bare X -> Y model
    (attnx.estimators._pretrain)."""),
]

_LOSS_NOTE = ("loss", """The training loss (elementwise, averaged over the outputs and
    the samples): "squared_error" (MSE), "absolute_error" (MAE: a median forecast),
    "huber" (quadratic within 1 of the target, linear beyond; in the units the network is
    trained in, i.e. standardised targets unless instance_norm="revin") or "pinball"
    (quantile regression: output column j is trained as the quantiles[j] quantile of its
    target; to learn several levels of one target, give y that column once per level).
    The validation loss and epochs=None's held-out run score with the same loss (that
    run's reference is the loss of predicting the training targets' mean); score() stays
    R^2.""")


def _default(value: object) -> str:
    if isinstance(value, type) and issubclass(value, np.generic):
        return f"np.{value.__name__}"
    return repr(value).replace("'", '"')


def _wrap(text: str, indent: str) -> list[str]:
    return textwrap.wrap(" ".join(text.split()), _WIDTH, initial_indent=indent,
                         subsequent_indent=indent, break_on_hyphens=False)


def parameters_section(entries: list[tuple[str, str, Any, str]],
                       options: list[tuple[str, str, Any, str]] | None = None) -> str:
    """A numpydoc Parameters section of the entries (name, type, default, line), and,
    when given, the structured parameter `options` listing its keys alike."""
    lines = ["Parameters", "----------"]
    for name, kind, default, doc in entries:
        lines.append(f"{name} : {kind}, default={_default(default)}")
        lines += _wrap(doc, "    ")
    if options is not None:
        lines.append(f"{OPTIONS} : None or dict, default=None")
        lines += _wrap("The settings that are rarely changed, by key (None: every "
                       "default; see Notes):", "    ")
        lines.append("")
        for name, kind, default, doc in options:
            entry = f"- {name} ({kind}, default {_default(default)}): {doc}"
            lines += [("    " if i == 0 else "      ") + line.strip()
                      for i, line in enumerate(_wrap(entry, "    "))]
    return "\n".join(lines)


def estimator_parameters(cls_name: str) -> str:
    """The Parameters section of the estimator class `cls_name`, from the table: each
    parameter's type, its default in the class and its line."""
    entries = [(name, PARAMETERS[name].rule.describe(), default, PARAMETERS[name].doc)
               for name, default, _ in signature_of(cls_name) if name != OPTIONS]
    options = [(name, p.rule.describe(), default, p.doc)
               for name, (p, default) in options_of(cls_name).items()]
    return parameters_section(entries, options)


def notes(paragraphs: list[tuple[str, str]]) -> list[str]:
    """A Notes section's lines: one paragraph per (topic, text)."""
    lines = ["Notes", "-----"]
    for topic, text in paragraphs:
        lines.append("")
        lines += _wrap(f"{topic}: {text}", "")
    return lines


def docstring(cls_name: str, summary: str, attributes: str) -> str:
    """The class docstring: `summary`, the Parameters section, `attributes` (the fitted
    attributes, prose) and the Notes."""
    paragraphs = [("Fitted attributes", attributes)] + _NOTES
    if cls_name.endswith("Regressor"):
        paragraphs.append(_LOSS_NOTE)
    body = [textwrap.dedent(summary).strip(), "", estimator_parameters(cls_name), ""]
    return "\n".join(body + notes(paragraphs)) + "\n"
