"""Attention weights of the models built from a stack of attention layers."""
from __future__ import annotations

from typing import TYPE_CHECKING, overload

from .attention import _index

if TYPE_CHECKING:
    from ..runtime._typing import FloatArray
    from .attention import MultiHeadAttention


class _AttentionStack:
    """attention_weights for the models built from a stack of MultiHeadAttention
    layers (`attn`, `n_layers`): Transformer and SequenceModel."""

    attn: list[MultiHeadAttention]
    n_layers: int

    def _check_weights_kept(self) -> None:
        """Raise when the model's last forward kept no attention weights."""

    @overload
    def attention_weights(self, layer: None = None, sample: int | None = None,
                          head: int | None = None) -> list[FloatArray]: ...
    @overload
    def attention_weights(self, layer: int, sample: int | None = None,
                          head: int | None = None) -> FloatArray: ...

    def attention_weights(self, layer: int | None = None, sample: int | None = None,
                          head: int | None = None) -> FloatArray | list[FloatArray]:
        """Attention probabilities of the last forward with grad=True: a list with one
        (B, H, Tq, Tk) array per layer, or that of one `layer`; sample/head select as in
        MultiHeadAttention.attention_weights."""
        self._check_weights_kept()
        if layer is not None:
            return self.attn[_index("layer", layer, self.n_layers)].attention_weights(
                sample, head)
        return [a.attention_weights(sample, head) for a in self.attn]
