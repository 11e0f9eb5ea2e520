"""Kernel of the PPV tokens (attnx.estimators._ppv_tokens): fixed dilated convolutions over
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

The dilations and the window may be one for every series (dilations (D,), window an
int) or each series' own (dilations (B, D), window (B,)): the tokens of a ragged
batch can follow each series' length. Either way a series' tokens depend on that
series alone (and the counting pass, csrc/attnx_ppv.h, is the same at every SIMD
level), so neither the batch, the thread count nor the level changes them.

Buffers as in attnx.kernels._embed: C-contiguous, one float dtype per call; the series run
in parallel (prange over the batch), each writing only its own rows.
"""
import numpy as np

cimport numpy as cnp
from cython.parallel cimport prange, threadid
from libc.math cimport INFINITY
from libc.stdint cimport uint8_t, int32_t, int64_t

from attnx.kernels._blas cimport floating
from attnx.kernels._ops cimport simd_attach, require_simd, attnx_get_level, attnx_dispatched_levels
from attnx.kernels._kernel_checks import check as _check, batch as _batch

cnp.import_array()


cdef extern from "attnx_ppv.h" nogil:
    ctypedef struct attnx_ppv_shape:
        Py_ssize_t n, p, nq, o0, o1, o2
    ctypedef struct attnx_ppv_bufs:
        const double *x
        const double *a
        const double *madd
        const double *bias
        int64_t *hits
    void attnx_ppv_counts(const attnx_ppv_shape *s, const attnx_ppv_bufs *b)

# the counting pass dispatches on the level attnx.kernels._ops detected (csrc/attnx_ppv.h)
simd_attach()


def dispatch_state():
    """(SIMD level attached to this module, bit mask of levels whose kernels ran here)."""
    return attnx_get_level(), attnx_dispatched_levels()


# A call's sizes (Shape) and buffers (Bufs, C-contiguous; x, bias and out in the float
# type of the kernels' `tag` argument) as ppv() checked them.
cdef struct Shape:
    Py_ssize_t nb, t, c         # x: batch, steps, channels
    Py_ssize_t nd, nk, nq       # dilations per series, kernels, biases per kernel
    Py_ssize_t ntok             # tokens per series in out
    Py_ssize_t rd, rp           # 1: each series' own row of dil and p, 0: row 0 for all
    Py_ssize_t pad              # zeros each side of a channel, >= 4 * the largest dilation
    Py_ssize_t ld_scratch       # a thread's row of scratch (doubles) and of counts
    Py_ssize_t ld_counts
    int nth                     # the threads over the series

cdef struct Bufs:
    const void *x               # (nb, t, c)
    const int32_t *lengths      # (nb,) each series' steps
    const uint8_t *miss         # (nb, t) missing steps, or NULL
    const int32_t *dil          # (nb or 1, nd) dilations
    const int32_t *comb         # (nk, 3) the taps of weight 2
    const void *bias            # (nd, c, nk, nq)
    const int32_t *p            # (nb or 1,) windows
    void *out                   # (nb, ntok, nd * c * nk * nq)
    double *scratch             # (threads, ld_scratch)
    int64_t *counts             # (threads, ld_counts)


cdef void _ppv_series(floating *tag, const Shape *sh, const Bufs *bf, Py_ssize_t b,
                      double* scratch, int64_t* counts) noexcept nogil:
    """Series b into out[b]. For each channel: the channel copied into a zero-padded
    contiguous row xs (pad zeros each side, pad >= 4 * the largest dilation) and the
    additive mask madd (0, or -inf at a missing step, so that no comparison counts
    it); for each dilation: the nine-tap sums a(t) over the steps; for each kernel:
    one pass over the steps (attnx_ppv_counts) counts, per window, the outputs above
    each bias. The arithmetic is the one stated in the module docstring, in double.
    scratch, counts: this thread's rows (counts: the valid steps per window, then the
    hits per window and bias). The series' n valid steps, nd dilations and window p
    are its entries of lengths, dil and p."""
    cdef Py_ssize_t tx = sh.t, c = sh.c, nk = sh.nk, nd = sh.nd, pad = sh.pad
    cdef Py_ssize_t nq = sh.nq, ntok = sh.ntok
    cdef Py_ssize_t g = nk * nq
    cdef Py_ssize_t width = nd * c * g          # out's columns
    cdef Py_ssize_t n = bf.lengths[b], p = bf.p[b * sh.rp]
    cdef const int32_t* dil = bf.dil + b * sh.rd * nd if nd else NULL
    cdef const floating* x = <const floating *> bf.x + b * tx * c
    cdef const uint8_t* miss = bf.miss + b * tx if bf.miss != NULL else NULL
    cdef const int32_t* comb = bf.comb
    cdef floating* out = <floating *> bf.out + b * ntok * width
    cdef Py_ssize_t di, j, t, k, m, q, tok, col, d, o0, cnt
    cdef double* xs = scratch                  # pad + n + pad
    cdef double* madd = xs + n + 2 * pad       # n
    cdef double* a = madd + n                  # n
    cdef double* bq = a + n                    # nq: one kernel's biases in double
    cdef double* xc = xs + pad                 # step 0 of the channel
    cdef int64_t* valid = counts               # ntok
    cdef int64_t* hits = counts + ntok         # ntok * nq
    cdef const floating* bp
    cdef attnx_ppv_shape shape
    cdef attnx_ppv_bufs bufs
    for t in range(n):
        madd[t] = 0.0
        if miss != NULL and miss[t]:
            madd[t] = -INFINITY
    for tok in range(ntok):
        cnt = 0
        for t in range(tok * p, min(tok * p + p, n)):
            cnt = cnt + (madd[t] == 0.0)
        valid[tok] = cnt
    for t in range(n + 2 * pad):
        xs[t] = 0.0
    shape.n, shape.p, shape.nq = n, p, nq
    bufs.x, bufs.a, bufs.madd, bufs.bias, bufs.hits = xc, a, madd, bq, hits
    for j in range(c):
        for t in range(n):
            xc[t] = x[t * c + j]
        for di in range(nd):
            d = dil[di]
            col = (di * c + j) * g
            bp = <const floating *> bf.bias + (di * c + j) * g
            for t in range(n):
                a[t] = 0.0
            for k in range(9):
                o0 = (k - 4) * d
                for t in range(n):
                    a[t] = a[t] + xc[t + o0]
            for m in range(nk):
                shape.o0 = (comb[m * 3] - 4) * d
                shape.o1 = (comb[m * 3 + 1] - 4) * d
                shape.o2 = (comb[m * 3 + 2] - 4) * d
                for q in range(nq):
                    bq[q] = bp[m * nq + q]
                attnx_ppv_counts(&shape, &bufs)
                for tok in range(ntok):
                    for q in range(nq):
                        if valid[tok] == 0:
                            out[tok * width + col + m * nq + q] = 0
                        else:
                            out[tok * width + col + m * nq + q] = <floating> (
                                <double> hits[tok * nq + q] / valid[tok])


cdef void _ppv(floating *tag, const Shape *sh, const Bufs *bf) noexcept nogil:
    """Series in parallel; thread i uses row i of each scratch."""
    cdef Py_ssize_t b
    cdef int tid, nth = sh.nth
    for b in prange(sh.nb, schedule="dynamic", num_threads=nth, use_threads_if=nth > 1):
        tid = threadid()
        _ppv_series(tag, sh, bf, b, bf.scratch + tid * sh.ld_scratch,
                    bf.counts + tid * sh.ld_counts)


cdef const void *_data(object a):
    """The data of a checked array, NULL for None."""
    return cnp.PyArray_DATA(<cnp.ndarray> a) if a is not None else NULL


def ppv(x, lengths, missing, dilations, comb, bias, window, out, int nthreads=1):
    """PPV tokens of x (B, T, C) into out (B, N, D * C * K * Q).

    lengths (B,) int32: each series' steps (<= T); missing (B, T) uint8 or None: steps
    left out of the fractions (they must read 0 in x); dilations (D,) int32 >= 1, or
    (B, D) (each series' own); comb (K, 3) int32 in [0, 9): the taps of weight 2; bias
    (D, C, K, Q) in x's dtype; window an int >= 1 (then N = ceil(T / window)) or (B,)
    int32 >= 1, each series' own (then N >= every ceil(lengths[b] / window[b]); the
    tokens past a series' windows read 0)."""
    what = "ppv"
    require_simd()
    dt, (nb, t, c) = _batch(what, "x", x, nthreads)
    _check(what, "lengths", lengths, np.int32, (nb,))
    _check(what, "missing", missing, np.uint8, (nb, t), optional=True)
    own = isinstance(window, np.ndarray)
    if own:
        _check(what, "window", window, np.int32, (nb,))
        if nb and window.min() < 1:
            raise ValueError(f"{what}: windows must be >= 1")
        wins = window
    else:
        if window < 1:
            raise ValueError(f"{what}: window must be >= 1, got {window}")
        wins = np.full(1, window, np.int32)
    if isinstance(dilations, np.ndarray) and dilations.ndim == 2:
        _check(what, "dilations", dilations, np.int32, (nb, -1))
        dil = dilations
    else:
        _check(what, "dilations", dilations, np.int32, (-1,))
        dil = dilations.reshape(1, -1)
    _check(what, "comb", comb, np.int32, (-1, 3))
    nd, nk = dil.shape[1], comb.shape[0]
    _check(what, "bias", bias, dt, (nd, c, nk, -1))
    nq = bias.shape[3]
    if nb and (lengths.min() < 0 or lengths.max() > t):
        raise ValueError(f"{what}: lengths must lie in [0, {t}]")
    ntok = -(-t // window) if not own else -1
    _check(what, "out", out, dt, (nb, ntok, nd * c * nk * nq), out=True)
    if own and nb and out.shape[1] < int((-(-lengths // window)).max()):
        raise ValueError(f"{what}: out must have at least ceil(lengths / window) tokens "
                         f"per series, got {out.shape[1]}")
    if nd and dil.size and dil.min() < 1:
        raise ValueError(f"{what}: dilations must be >= 1")
    if nk and (comb.min() < 0 or comb.max() > 8):
        raise ValueError(f"{what}: comb entries must lie in [0, 8]")
    # per-thread scratch: the padded channel, the missing mask, the tap sums and a
    # kernel's biases; the valid steps and hits per window (one row per thread)
    pad = 4 * int(dil.max()) if nd and dil.size else 0
    scratch = np.empty((nthreads, max(2 * pad + 3 * t + nq, 1)), np.float64)
    ntok = out.shape[1]
    counts = np.empty((nthreads, max(ntok * (nq + 1), 1)), np.int64)
    cdef Shape sh
    cdef Bufs bf
    sh.nb, sh.t, sh.c, sh.nd, sh.nk, sh.nq, sh.ntok = nb, t, c, nd, nk, nq, ntok
    sh.rd, sh.rp = (1 if dil.shape[0] > 1 else 0), (1 if wins.shape[0] > 1 else 0)
    sh.pad, sh.ld_scratch, sh.ld_counts = pad, scratch.shape[1], counts.shape[1]
    sh.nth = nthreads
    bf.x, bf.bias, bf.out = _data(x), _data(bias), <void *> _data(out)
    bf.lengths, bf.p = <const int32_t *> _data(lengths), <const int32_t *> _data(wins)
    bf.miss = <const uint8_t *> _data(missing)
    bf.dil, bf.comb = <const int32_t *> _data(dil), <const int32_t *> _data(comb)
    bf.scratch, bf.counts = <double *> _data(scratch), <int64_t *> _data(counts)
    cdef bint f32 = dt == np.float32
    with nogil:
        if f32:
            _ppv(<float *> NULL, &sh, &bf)
        else:
            _ppv(<double *> NULL, &sh, &bf)
