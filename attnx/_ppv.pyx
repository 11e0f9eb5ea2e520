"""Kernel of the PPV tokens (attnx._ppv_tokens): fixed dilated convolutions over
time and, per token window, the proportion of positive values (PPV) of each
convolution output minus a bias.

Each series channel is convolved with the 84 kernels of length 9 whose weights are
-1 at six taps and 2 at three (comb, the three taps of weight 2), at each dilation d,
with zero 'same' padding: out(t) = -A(t) + 3 (x(t + (i-4)d) + x(t + (j-4)d) + x(t +
(k-4)d)), A(t) the sum of the nine taps; steps past a series' end read 0 (so do
missing steps, which the caller set to 0). For each token window of p steps the
feature (dilation, channel, kernel, bias q) is the fraction of the window's valid
steps (neither past the end nor missing) where out(t) > bias[dil, channel, kernel, q];
a window without a valid step gives zeros.

Buffers as in attnx._embed: C-contiguous, one float dtype per call; the series run
in parallel (prange over the batch), each writing only its own rows.
"""
import numpy as np

from cython.parallel cimport prange, threadid
from libc.stdint cimport uint8_t, int32_t

from attnx._blas cimport floating
from attnx._kernel_checks import check as _check, batch as _batch


cdef inline double _tap(const floating[:, :, ::1] x, Py_ssize_t b, Py_ssize_t u,
                        Py_ssize_t n, Py_ssize_t j) noexcept nogil:
    """Step u of series b, channel j, 0 outside [0, n)."""
    if u < 0 or u >= n:
        return 0.0
    return x[b, u, j]


cdef void _ppv_series(const floating[:, :, ::1] x, Py_ssize_t b, Py_ssize_t n,
                      const uint8_t[:, ::1] miss, const int32_t[::1] dil,
                      const int32_t[:, ::1] comb, const floating[:, :, :, ::1] bias,
                      Py_ssize_t p, floating[:, :, ::1] out, double* v2,
                      int32_t* counts) noexcept nogil:
    """Series b (n valid steps) into out[b], window by window: for each (dilation,
    channel) the K * Q comparisons of a step run over contiguous rows (v2: each
    kernel's output repeated Q times; counts: the window's hits), and the
    fractions are written once per window."""
    cdef Py_ssize_t c = x.shape[2], nd = dil.shape[0], nk = comb.shape[0]
    cdef Py_ssize_t nq = bias.shape[3], ntok = out.shape[1]
    cdef Py_ssize_t g = nk * nq
    cdef Py_ssize_t di, j, t, k, m, q, i, tok, col, d, cnt, t1
    cdef double taps[9]
    cdef double a, v
    cdef const floating* bp
    for di in range(nd):
        d = dil[di]
        for j in range(c):
            col = (di * c + j) * g
            bp = &bias[di, j, 0, 0]
            for tok in range(ntok):
                for i in range(g):
                    counts[i] = 0
                cnt = 0
                t1 = min((tok + 1) * p, n)
                for t in range(tok * p, t1):
                    if miss is not None and miss[b, t]:
                        continue
                    cnt = cnt + 1
                    a = 0.0
                    for k in range(9):
                        taps[k] = _tap(x, b, t + (k - 4) * d, n, j)
                        a = a + taps[k]
                    for m in range(nk):
                        v = 3.0 * (taps[comb[m, 0]] + taps[comb[m, 1]] + taps[comb[m, 2]]) - a
                        for q in range(nq):
                            v2[m * nq + q] = v
                    for i in range(g):
                        counts[i] += v2[i] > bp[i]
                if cnt > 0:
                    for i in range(g):
                        out[b, tok, col + i] = <floating> (<double> counts[i] / cnt)
                else:
                    for i in range(g):
                        out[b, tok, col + i] = 0


cdef void _ppv(const floating[:, :, ::1] x, const int32_t[::1] lengths,
               const uint8_t[:, ::1] miss, const int32_t[::1] dil,
               const int32_t[:, ::1] comb, const floating[:, :, :, ::1] bias,
               Py_ssize_t p, floating[:, :, ::1] out, double[:, ::1] v2,
               int32_t[:, ::1] counts, int nth) noexcept:
    """Series in parallel; thread i uses row i of the scratch v2 and counts."""
    cdef Py_ssize_t b
    cdef int tid
    with nogil:
        for b in prange(x.shape[0], schedule="dynamic", num_threads=nth):
            tid = threadid()
            _ppv_series(x, b, lengths[b], miss, dil, comb, bias, p, out, &v2[tid, 0],
                        &counts[tid, 0])


def ppv(x, lengths, missing, dilations, comb, bias, Py_ssize_t window, out,
        int nthreads=1):
    """PPV tokens of x (B, T, C) into out (B, ceil(T / window), D * C * K * Q).

    lengths (B,) int32: each series' steps (<= T); missing (B, T) uint8 or None: steps
    left out of the fractions (they must read 0 in x); dilations (D,) int32 >= 1; comb
    (K, 3) int32 in [0, 9): the taps of weight 2; bias (D, C, K, Q) in x's dtype."""
    what = "ppv"
    dt, (nb, t, c) = _batch(what, "x", x, nthreads)
    if window < 1:
        raise ValueError(f"{what}: window must be >= 1, got {window}")
    _check(what, "lengths", lengths, np.int32, (nb,))
    _check(what, "missing", missing, np.uint8, (nb, t), optional=True)
    _check(what, "dilations", dilations, np.int32, (-1,))
    _check(what, "comb", comb, np.int32, (-1, 3))
    nd, nk = dilations.shape[0], comb.shape[0]
    _check(what, "bias", bias, dt, (nd, c, nk, -1))
    nq = bias.shape[3]
    _check(what, "out", out, dt, (nb, -(-t // window), nd * c * nk * nq), out=True)
    if nb and (lengths.min() < 0 or lengths.max() > t):
        raise ValueError(f"{what}: lengths must lie in [0, {t}]")
    if nd and dilations.min() < 1:
        raise ValueError(f"{what}: dilations must be >= 1")
    if nk and (comb.min() < 0 or comb.max() > 8):
        raise ValueError(f"{what}: comb entries must lie in [0, 8]")
    # per-thread scratch (one row per thread, at least one element)
    v2 = np.empty((nthreads, max(nk * nq, 1)), np.float64)
    counts = np.empty((nthreads, max(nk * nq, 1)), np.int32)
    if dt == np.float32:
        _ppv[float](x, lengths, missing, dilations, comb, bias, window, out, v2, counts,
                    nthreads)
    else:
        _ppv[double](x, lengths, missing, dilations, comb, bias, window, out, v2, counts,
                     nthreads)
