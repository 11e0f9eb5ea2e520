"""Synthetic sequence-to-sequence tasks: arrays X, Y of shape (n_samples, seq_len, d_model).

Values are drawn in float64 from numpy.random.default_rng(random_state) and cast
to `dtype` at the end, so one seed gives the same data (up to rounding) in
float32 and float64.
"""
import numpy as np

from ._params import check_dtype, check_positive_int


def max_position_task(n_samples, seq_len=8, d_model=8, random_state=None, dtype=np.float32):
    """Find the position whose feature 0 is largest and copy its row to every position.

    X (n, T, d) is standard normal; for each sample i, with p = argmax_t X[i, t, 0],
    every output position gets that row: Y[i, t, :] = X[i, p, :] for all t.
    Returns (X, Y), both (n_samples, seq_len, d_model) of `dtype`.
    """
    n, t, d = _sizes(n_samples, seq_len, d_model)
    dt = check_dtype(dtype)
    rng = np.random.default_rng(random_state)
    x = rng.standard_normal((n, t, d))
    pos = np.argmax(x[:, :, 0], axis=1)
    rows = x[np.arange(n), pos]                      # (n, d)
    y = np.broadcast_to(rows[:, None, :], x.shape)
    return x.astype(dt), y.astype(dt)               # astype copies: Y owns its memory


def mixing_task(n_samples, seq_len=8, d_model=8, noise=0.01, random_state=None,
                dtype=np.float32, return_mixing=False):
    """A fixed attention pattern: Y[i] = A X[i] + noise * N(0, 1), one A for every sample.

    A (T, T) is a row-softmax of standard normal scores (each row sums to 1),
    drawn first from the seed; then X (n, T, d) standard normal, then the noise.
    Returns (X, Y), or (X, Y, A) with return_mixing=True (A in float64).
    """
    n, t, d = _sizes(n_samples, seq_len, d_model)
    dt = check_dtype(dtype)
    if isinstance(noise, bool) or not np.isscalar(noise) or not np.isfinite(noise) or noise < 0:
        raise ValueError(f"noise must be a finite number >= 0, got {noise!r}")
    rng = np.random.default_rng(random_state)
    scores = rng.standard_normal((t, t))
    a = np.exp(scores - scores.max(axis=1, keepdims=True))
    a /= a.sum(axis=1, keepdims=True)
    x = rng.standard_normal((n, t, d))
    y = np.einsum("ts,nsd->ntd", a, x)
    if noise:
        y += noise * rng.standard_normal(y.shape)
    out = (x.astype(dt), y.astype(dt))
    return out + (a,) if return_mixing else out


def _sizes(n_samples, seq_len, d_model):
    return (check_positive_int("n_samples", n_samples), check_positive_int("seq_len", seq_len),
            check_positive_int("d_model", d_model))
