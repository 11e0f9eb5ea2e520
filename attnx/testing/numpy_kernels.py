"""NumPy versions of the row kernels of attnx.kernels._seq (same signatures; nthreads
ignored), written from their formulas: the reference the compiled kernels are tested
against. attnx.testing.reference_pass runs a SequenceModel layer by layer on them
(`kernels=numpy_kernels`); they agree with the compiled kernels to rounding, not bit
for bit (NumPy sums in its own order)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..runtime._typing import BoolArray, FloatArray

    _U8Array = npt.NDArray[np.uint8]


def linear_forward(x: FloatArray, w: FloatArray, b: FloatArray, y: FloatArray,
                   nthreads: int = 1, pos: FloatArray | None = None, t: int = 1) -> None:
    """y = x w + b (+ pos[r % t] on row r); x (rows, k), w (k, n), b (n,), y (rows, n)."""
    np.matmul(x, w, out=y)
    y += b
    if pos is not None:
        add_positions(y, pos, t)


def linear_backward(dy: FloatArray, x: FloatArray, w: FloatArray, dw: FloatArray,
                    db: FloatArray, dx: FloatArray | None, nthreads: int = 1) -> None:
    """dw = x^T dy, db = sum of dy's rows, dx = dy w^T (skipped when dx is None)."""
    np.matmul(x.T, dy, out=dw)
    np.sum(dy, axis=0, out=db)
    if dx is not None:
        np.matmul(dy, w.T, out=dx)


def add_positions(h: FloatArray, table: FloatArray, t: int, nthreads: int = 1) -> None:
    """h[r] += table[r % t] for the rows of h (B*T, d)."""
    h3 = h.reshape(-1, t, h.shape[1])
    h3 += table[:t]


def positions_backward(dh: FloatArray, dp: FloatArray, t: int, nthreads: int = 1) -> None:
    """dp[:t] = sum over the batch of dh (B*T, d); the other rows of dp are zero."""
    dp[...] = 0
    np.sum(dh.reshape(-1, t, dh.shape[1]), axis=0, out=dp[:t])


def layernorm_forward(x: FloatArray, g: FloatArray, b: FloatArray, y: FloatArray,
                      st: FloatArray, eps: float, nthreads: int = 1) -> None:
    """y = (x - mean) / sqrt(var + eps) * g + b per row; st[0] = mean, st[1] = 1/std."""
    mu = x.mean(axis=1)
    xc = x - mu[:, None]
    var = (xc * xc).mean(axis=1)
    rs = 1.0 / np.sqrt(var + eps)
    st[0] = mu
    st[1] = rs
    np.multiply(xc * rs[:, None], g, out=y)
    y += b


def layernorm_backward(dy: FloatArray, x: FloatArray, g: FloatArray,
                       grads: tuple[FloatArray, FloatArray],
                       work: tuple[FloatArray, FloatArray], dx: FloatArray,
                       add: FloatArray | None, nthreads: int = 1) -> None:
    """dg, db, and dx = dL/dx (+ add when given) of layernorm_forward; grads = (dg, db),
    work = (st, part) as attnx.kernels._seq's (part unused here)."""
    (dg, db), (st, _) = grads, work
    mu, rs = st[0], st[1]
    xhat = (x - mu[:, None]) * rs[:, None]
    np.sum(dy * xhat, axis=0, out=dg)
    np.sum(dy, axis=0, out=db)
    dxh = dy * g
    m1 = dxh.mean(axis=1, keepdims=True)
    m2 = (dxh * xhat).mean(axis=1, keepdims=True)
    res = (dxh - m1 - xhat * m2) * rs[:, None]
    if add is not None:
        res += add
    dx[...] = res


def _valid(km: _U8Array | None, nb: int, t: int) -> BoolArray:
    if km is None:
        return np.ones((nb, t), dtype=bool)
    return np.equal(km, 0)


def pool_forward(h: FloatArray, km: _U8Array | None, pooled: FloatArray, nb: int, t: int,
                 last: bool, nthreads: int = 1) -> None:
    """pooled (B, d): mean of the valid rows of each sequence, or its last valid row;
    zeros for a sequence without valid rows."""
    h3 = h.reshape(nb, t, -1)
    v = _valid(km, nb, t)
    pooled[...] = 0
    for bi in range(nb):
        idx = np.flatnonzero(v[bi])
        if idx.size == 0:
            continue
        if last:
            pooled[bi] = h3[bi, idx[-1]]
        else:
            pooled[bi] = h3[bi, idx].sum(axis=0) / idx.size


def pool_backward(dpooled: FloatArray, km: _U8Array | None, dh: FloatArray, nb: int, t: int,
                  last: bool, nthreads: int = 1) -> None:
    """dh (B*T, d) of pool_forward: rows the pooling did not read get zero."""
    dh3 = dh.reshape(nb, t, -1)
    v = _valid(km, nb, t)
    dh3[...] = 0
    for bi in range(nb):
        idx = np.flatnonzero(v[bi])
        if idx.size == 0:
            continue
        if last:
            dh3[bi, idx[-1]] = dpooled[bi]
        else:
            dh3[bi, idx] = dpooled[bi] / idx.size


def zero_masked_rows(y: FloatArray, km: _U8Array, nthreads: int = 1) -> None:
    """Zero the rows of y (B*T, k) whose flat mask entry is set."""
    y[km.reshape(-1) != 0] = 0


def add_sub(out: FloatArray, a: FloatArray | None, b: FloatArray | None,
            nthreads: int = 1) -> None:
    """out += a - b (a or b may be None)."""
    if a is not None:
        out += a
    if b is not None:
        out -= b


def masked_add(out: FloatArray, res: FloatArray | None, a: FloatArray, b: FloatArray | None,
               mult: FloatArray, nthreads: int = 1) -> None:
    """out = res + mult * (a - b), res and b optional."""
    v = a - b if b is not None else a.copy()
    v *= mult
    if res is not None:
        v += res
    out[...] = v


def dropout_mask(bits: npt.NDArray[np.uint32], out: FloatArray, p: float,
                 nthreads: int = 1) -> None:
    """out = 0 where the 32-bit draw is below p * 2**32, 1/(1-p) elsewhere."""
    keep = bits[:out.size].reshape(out.shape).astype(np.float64) >= p * 2.0 ** 32
    out[...] = 0
    out[keep] = 1.0 / (1.0 - p)
