"""NumPy versions of the sequence-model kernels (same signatures as attnx._seq):
the reference the Cython kernels are tested and timed against."""
import numpy as np

from . import _mlp


def linear_forward(x, w, b, y):
    """y = x w + b; x (rows, k), w (k, n), b (n,), y (rows, n)."""
    np.matmul(x, w, out=y)
    y += b


def linear_backward(dy, x, w, dw, db, dx):
    """dw = x^T dy, db = sum of dy's rows, dx = dy w^T (skipped when dx is None)."""
    np.matmul(x.T, dy, out=dw)
    np.sum(dy, axis=0, out=db)
    if dx is not None:
        np.matmul(dy, w.T, out=dx)


def add_positions(h, table, t):
    """h[r] += table[r % t] for the rows of h (B*T, d)."""
    h3 = h.reshape(-1, t, h.shape[1])
    h3 += table[:t]


def positions_backward(dh, dp, t):
    """dp[:t] = sum over the batch of dh (B*T, d); the other rows of dp are zero."""
    dp[...] = 0
    np.sum(dh.reshape(-1, t, dh.shape[1]), axis=0, out=dp[:t])


def layernorm_forward(x, g, b, y, st, eps):
    """y = (x - mean) / sqrt(var + eps) * g + b per row; st[0] = mean, st[1] = 1/std."""
    mu = x.mean(axis=1)
    xc = x - mu[:, None]
    var = (xc * xc).mean(axis=1)
    rs = 1.0 / np.sqrt(var + eps)
    st[0] = mu
    st[1] = rs
    np.multiply(xc * rs[:, None], g, out=y)
    y += b


def layernorm_backward(dy, x, g, st, dg, db, dx, add):
    """dg, db, and dx = dL/dx (+ add when given) of layernorm_forward."""
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


def _valid(km, nb, t):
    if km is None:
        return np.ones((nb, t), dtype=bool)
    return km == 0


def pool_forward(h, km, pooled, nb, t, last):
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


def pool_backward(dpooled, km, dh, nb, t, last):
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


def zero_masked_rows(y, km):
    """Zero the rows of y (B*T, k) whose flat mask entry is set."""
    y[km.reshape(-1) != 0] = 0


def add_into(out, a, b):
    np.add(a, b, out=out)


def mlp_forward(u, w1, b1, w2, b2, hid, s, sg, residual, out):
    """out = silu(u w1 + b1) w2 + b2 + residual."""
    _mlp.mlp_forward(u, w1, b1, w2, b2, hid, s, sg, out)
    if residual is not u:
        out += residual - u


def mlp_backward(dout, u, w1, w2, hid, s, sg, dhid, dw1, db1, dw2, db2, du):
    """Weight gradients and du = dL/du through the MLP branch only."""
    _mlp.mlp_backward(dout, u, w1, w2, hid, s, sg, dhid, dw1, db1, dw2, db2, du)
    du -= dout
