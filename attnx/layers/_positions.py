"""Position tables: the sinusoidal table added to a sequence's embedding and the
rotary (RoPE) cos/sin tables applied to queries and keys."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..runtime._typing import FloatArray


def sinusoidal_table(t_len: int, d_model: int, dtype: npt.DTypeLike) -> FloatArray:
    """PE (t_len, d_model): PE[t, 2i] = sin(t / 10000^(2i/d)), PE[t, 2i+1] = cos(same)."""
    pos = np.arange(t_len, dtype=np.float64)[:, None]
    i2 = np.arange(0, d_model, 2, dtype=np.float64)
    ang = pos / 10000.0 ** (i2 / d_model)
    pe = np.empty((t_len, d_model), dtype=np.float64)
    pe[:, 0::2] = np.sin(ang)
    pe[:, 1::2] = np.cos(ang[:, :d_model // 2])
    return np.ascontiguousarray(pe, dtype=dtype)


def rope_tables(t_len: int, d_head: int, dtype: npt.DTypeLike,
                base: float = 10000.0) -> tuple[FloatArray, FloatArray]:
    """cos and sin of angle t * base^(-2i/d_head): arrays (t_len, d_head // 2)."""
    i = np.arange(d_head // 2, dtype=np.float64)
    theta = base ** (-2.0 * i / d_head)
    ang = np.arange(t_len, dtype=np.float64)[:, None] * theta[None, :]
    return (np.ascontiguousarray(np.cos(ang), dtype=dtype),
            np.ascontiguousarray(np.sin(ang), dtype=dtype))
