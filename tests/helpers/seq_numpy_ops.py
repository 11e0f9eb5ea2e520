"""NumPy versions of the kernels in attnx.kernels._seq (same signatures; nthreads ignored):
the reference the Cython kernels are tested and timed against. A SequenceModel
runs on them after `model._k = seq_numpy_ops`."""
import numpy as np


def linear_forward(x, w, b, y, nthreads=1, pos=None, t=1):
    """y = x w + b (+ pos[r % t] on row r); x (rows, k), w (k, n), b (n,), y (rows, n)."""
    np.matmul(x, w, out=y)
    y += b
    if pos is not None:
        add_positions(y, pos, t)


def linear_backward(dy, x, w, dw, db, dx, nthreads=1):
    """dw = x^T dy, db = sum of dy's rows, dx = dy w^T (skipped when dx is None)."""
    np.matmul(x.T, dy, out=dw)
    np.sum(dy, axis=0, out=db)
    if dx is not None:
        np.matmul(dy, w.T, out=dx)


def add_positions(h, table, t, nthreads=1):
    """h[r] += table[r % t] for the rows of h (B*T, d)."""
    h3 = h.reshape(-1, t, h.shape[1])
    h3 += table[:t]


def positions_backward(dh, dp, t, nthreads=1):
    """dp[:t] = sum over the batch of dh (B*T, d); the other rows of dp are zero."""
    dp[...] = 0
    np.sum(dh.reshape(-1, t, dh.shape[1]), axis=0, out=dp[:t])


def layernorm_forward(x, g, b, y, st, eps, nthreads=1):
    """y = (x - mean) / sqrt(var + eps) * g + b per row; st[0] = mean, st[1] = 1/std."""
    mu = x.mean(axis=1)
    xc = x - mu[:, None]
    var = (xc * xc).mean(axis=1)
    rs = 1.0 / np.sqrt(var + eps)
    st[0] = mu
    st[1] = rs
    np.multiply(xc * rs[:, None], g, out=y)
    y += b


def layernorm_backward(dy, x, g, grads, work, dx, add, nthreads=1):
    """dg, db, and dx = dL/dx (+ add when given) of layernorm_forward; grads = (dg, db),
    work = (st, part) as attnx._seq's."""
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


def _valid(km, nb, t):
    if km is None:
        return np.ones((nb, t), dtype=bool)
    return km == 0


def pool_forward(h, km, pooled, nb, t, last, nthreads=1):
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


def pool_backward(dpooled, km, dh, nb, t, last, nthreads=1):
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


def zero_masked_rows(y, km, nthreads=1):
    """Zero the rows of y (B*T, k) whose flat mask entry is set."""
    y[km.reshape(-1) != 0] = 0


def add_sub(out, a, b, nthreads=1):
    """out += a - b (a or b may be None)."""
    if a is not None:
        out += a
    if b is not None:
        out -= b


def masked_add(out, res, a, b, mult, nthreads=1):
    """out = res + mult * (a - b), res and b optional."""
    v = a - b if b is not None else a.copy()
    v *= mult
    if res is not None:
        v += res
    out[...] = v


def dropout_mask(bits, out, p, nthreads=1):
    """out = 0 where the 32-bit draw is below p * 2**32, 1/(1-p) elsewhere."""
    keep = bits[:out.size].reshape(out.shape).astype(np.float64) >= p * 2.0 ** 32
    out[...] = 0
    out[keep] = 1.0 / (1.0 - p)


def cross_entropy_rows(z, lab, w, total, dz):
    """sum(w * l) / total of the rows of z at labels lab; dz its gradient."""
    rows = np.arange(z.shape[0])
    mx = z.max(axis=1, keepdims=True)
    np.subtract(z, mx, out=dz)
    np.exp(dz, out=dz)
    se = dz.sum(axis=1, keepdims=True)
    dz /= se
    loss = np.log(se[:, 0]).astype(np.float64) + mx[:, 0] - z[rows, lab]
    dz[rows, lab] -= 1
    scale = (np.ones(z.shape[0]) if w is None else w) / total
    dz *= scale[:, None].astype(dz.dtype)
    return float(np.dot(loss, np.ones_like(loss) if w is None else w) / total)
