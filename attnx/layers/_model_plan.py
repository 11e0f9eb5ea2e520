"""A SequenceModel's structure as one ordered list of stages, read from its config.

    instance_norm ("input" / "revin")        the input series normalised
    stem layer i (kernel, stride, pads)      windows, one GEMM, bias, SiLU
    embed (width_in -> d_model)              the tokens' linear map
    positions ("sinusoidal" / "learned")     added to the embedding
    cls                                      the class token, prepended
    block i ("pre" or None)                  a transformer block
    final_norm                               the last LayerNorm (pre-norm)
    pool ("mean" / "last" / "max" / "cls")   one row per sequence
    head (d_model -> n_outputs)              the output map
    denorm                                   RevIN's de-normalisation of the outputs

Stages a configuration lacks are left out (rotary positions live in the blocks'
attention). The parameter table (attnx.layers._sequence_params: the flat buffer's
order), the compiled whole pass (its construction in attnx.layers._sequence_blocks) and
the ONNX export (attnx.io._onnx_layers) all walk this list instead of re-deriving the
model's structure from its attributes; each stage names the prefix of its weights in
the model's `params`.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from ..kernels._embed import same_padding

KINDS = ("instance_norm", "stem", "embed", "positions", "cls", "block", "final_norm",
         "pool", "head", "denorm")


class Stage(NamedTuple):
    """One stage: its kind (KINDS), the prefix of its weights ("" without any), its
    input and output widths, and its options (`how`: the instance norm's,
    positions', block norm's or pooling's kind; a stem layer's window geometry;
    `layer`: the stem layer's or block's number)."""

    kind: str
    prefix: str
    width_in: int
    width_out: int
    how: str | None = None
    kernel: int = 0
    stride: int = 1
    pad_left: int = 0
    pad_right: int = 0
    layer: int = 0


def model_plan(config: Mapping[str, Any]) -> tuple[Stage, ...]:
    """The stages, in order, of the SequenceModel that get_config() describes."""
    d, f = int(config["d_model"]), int(config["n_features"])
    out: list[Stage] = []
    inorm = config.get("instance_norm")
    affine = "revin." if config.get("instance_affine") else ""   # its gains and biases
    if inorm is not None:
        out.append(Stage("instance_norm", affine, f, f, how=inorm))
    width = f
    for i, (k, s) in enumerate(config.get("stem") or ()):   # checked by the model
        k, s = int(k), int(s)
        left, right = same_padding(k)
        out.append(Stage("stem", f"stem.{i}.", width, d, kernel=k, stride=s, pad_left=left,
                         pad_right=right, layer=i))
        width = d
    out.append(Stage("embed", "embed.", width, d))
    positional = config.get("positional", "none")
    if positional in ("sinusoidal", "learned"):
        out.append(Stage("positions", "pos." if positional == "learned" else "", d, d,
                         how=positional))
    pooling = config.get("pooling")
    if pooling == "cls":
        out.append(Stage("cls", "cls", d, d))
    norm = config.get("norm")
    for i in range(int(config["n_layers"])):
        out.append(Stage("block", f"layers.{i}.", d, d, how=norm, layer=i))
    if norm == "pre":
        out.append(Stage("final_norm", "norm.", d, d))
    if pooling is not None:
        out.append(Stage("pool", "", d, d, how=pooling))
    n_out = int(config["n_outputs"])
    out.append(Stage("head", "head.", d, n_out))
    if inorm == "revin":
        out.append(Stage("denorm", affine, n_out, n_out))
    return tuple(out)


def stages(plan: tuple[Stage, ...], kind: str) -> list[Stage]:
    """The plan's stages of one kind, in order."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return [s for s in plan if s.kind == kind]

