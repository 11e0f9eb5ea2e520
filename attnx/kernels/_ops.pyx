"""Elementwise kernels: MSE loss, finiteness, bias and rotary helpers, the threaded
GEMM, and the one CPU-feature detection of attnx (see _ops.pxd)."""
cimport numpy as cnp
from cython.parallel cimport prange

from attnx.kernels._blas cimport floating, gemm, NT, TR, attach as blas_attach

cdef extern from "attnx_math.h" nogil:
    int attnx_max_threads()
    int attnx_detect_cpu(int max_level)
    int attnx_any_nonfinite_f32(const float *x, Py_ssize_t n)
    int attnx_any_nonfinite_f64(const double *x, Py_ssize_t n)
    double attnx_mse_f32(const float *y, const float *t, float *dy, Py_ssize_t n, float g)
    double attnx_mse_f64(const double *y, const double *t, double *dy, Py_ssize_t n,
                         double g)

import os as _os

cnp.import_array()


def _requested_level():
    """ATTNX_SIMD caps the level: 0 = portable C, 1 = AVX2 at most, 2 = AVX-512 at
    most (default); the older ATTNX_NO_SIMD=1 means 0."""
    if _os.environ.get("ATTNX_NO_SIMD"):
        return 0
    raw = _os.environ.get("ATTNX_SIMD", "").strip() or "2"
    if raw not in ("0", "1", "2"):
        raise ImportError(f"ATTNX_SIMD must be 0, 1 or 2, got {raw!r}")
    return int(raw)


# The one CPU examination of the process (CPUID); every other module copies it.
cdef int _SIMD_LEVEL = attnx_detect_cpu(_requested_level())
simd_attach()   # this module's own kernels (mse_into, all_finite)
blas_attach(_SIMD_LEVEL)   # attnx.kernels._blas's small-GEMM tiles (below this module)

_LEVEL_NAMES = ("portable", "avx2", "avx512")


cdef int get_simd_level() noexcept nogil:
    return _SIMD_LEVEL


cdef void pgemm(int ta, int tb, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k, floating alpha,
                const floating *a, Py_ssize_t lda, const floating *b, Py_ssize_t ldb,
                floating beta, floating *c, Py_ssize_t ldc, int nthreads) noexcept nogil:
    """gemm split over nthreads OpenMP threads, each a single-threaded BLAS call on
    a slab of C: rows when m is the larger side, else columns. The caller keeps
    BLAS single-threaded meanwhile (attnx.runtime._threads.blas_single)."""
    cdef Py_ssize_t t, lo, hi
    if nthreads <= 1 or <double> m * n * k < 2.0e5:
        gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
        return
    if m >= n:
        for t in prange(nthreads, num_threads=nthreads, schedule="static", use_threads_if=nthreads > 1):
            lo = (m * t) // nthreads
            hi = (m * (t + 1)) // nthreads
            # rows lo:hi of op(A): rows of A, or columns of A when transposed
            gemm(ta, tb, hi - lo, n, k, alpha, a + (lo if ta else lo * lda), lda,
                 b, ldb, beta, c + lo * ldc, ldc)
    else:
        for t in prange(nthreads, num_threads=nthreads, schedule="static", use_threads_if=nthreads > 1):
            lo = (n * t) // nthreads
            hi = (n * (t + 1)) // nthreads
            gemm(ta, tb, m, hi - lo, k, alpha, a, lda,
                 b + (lo * ldb if tb else lo), ldb, beta, c + lo, ldc)


def simd_level():
    """The SIMD level kernels dispatch to: 0 portable C, 1 AVX2+FMA, 2 AVX-512F."""
    return _SIMD_LEVEL


def cpu_level():
    """Same as simd_level() (older name)."""
    return _SIMD_LEVEL


def simd_level_name():
    """'portable', 'avx2' or 'avx512': the kernels in use."""
    return _LEVEL_NAMES[_SIMD_LEVEL]


def dispatch_state():
    """(level attached to this module, bit mask of levels whose kernels ran here)."""
    return attnx_get_level(), attnx_dispatched_levels()


def max_threads():
    """OpenMP's current thread limit in the calling thread (omp_get_max_threads);
    attnx.runtime._threads.num_threads() turns it into the count passed to kernels."""
    return attnx_max_threads()


cdef void fill_rows(floating *y, const floating *b, Py_ssize_t rows, Py_ssize_t cols,
                    Py_ssize_t ld) noexcept nogil:
    """y[r, :cols] = b for every row r (y row-major with leading dimension ld)."""
    cdef Py_ssize_t r, j
    for r in range(rows):
        for j in range(cols):
            y[r * ld + j] = b[j]


cdef void add_rows(floating *y, const floating *x, const floating *b, Py_ssize_t rows,
                   Py_ssize_t cols) noexcept nogil:
    """y = x + b row by row (b may be NULL); all (rows, cols) contiguous."""
    cdef Py_ssize_t r, j
    for r in range(rows):
        if b != NULL:
            for j in range(cols):
                y[r * cols + j] = x[r * cols + j] + b[j]
        else:
            for j in range(cols):
                y[r * cols + j] = x[r * cols + j]


cdef void colsum(const floating *x, Py_ssize_t rows, Py_ssize_t cols, Py_ssize_t ld,
                 floating *out) noexcept nogil:
    """out[:cols] = x[:rows, :cols].sum(axis=0)."""
    cdef Py_ssize_t r, j
    for j in range(cols):
        out[j] = 0
    for r in range(rows):
        for j in range(cols):
            out[j] += x[r * ld + j]


cdef void rope_rotate(floating *x, Py_ssize_t ldx, Py_ssize_t batch, Py_ssize_t t_len,
                      Py_ssize_t n_heads, Py_ssize_t d_head, const floating *cos_t,
                      const floating *sin_t, bint inverse) noexcept nogil:
    """Rotate pairs (2i, 2i+1) of every head of x (batch*t_len rows) by angle t*theta_i.

    cos_t, sin_t: (t_len, d_head // 2). inverse rotates by -angle (the backward,
    since a rotation's transpose is its inverse).
    """
    cdef Py_ssize_t r, t, h, i, half = d_head // 2
    cdef floating c, s, a, b
    cdef floating *row
    for r in range(batch * t_len):
        t = r % t_len
        for h in range(n_heads):
            row = x + r * ldx + h * d_head
            for i in range(half):
                c = cos_t[t * half + i]
                s = sin_t[t * half + i]
                if inverse:
                    s = -s
                a = row[2 * i]
                b = row[2 * i + 1]
                row[2 * i] = a * c - b * s
                row[2 * i + 1] = a * s + b * c


def mse_into(const floating[::1] y, const floating[::1] t, floating[::1] dy):
    """Mean squared error of flat y against t; writes dL/dy = 2 (y - t) / n into dy.

    The sum of squares is kept in float64 in 8 interleaved partial sums (one
    running sum is a chain of dependent adds, about 4 cycles an element), in the
    same order at every SIMD level (attnx_mse_* in csrc/attnx_math.h)."""
    cdef Py_ssize_t n = y.shape[0]
    cdef double total
    require_simd()
    if t.shape[0] != n or dy.shape[0] != n:
        raise ValueError(f"y, t and dy must have one length, got {n}, {t.shape[0]}, "
                         f"{dy.shape[0]}")
    if n == 0:
        raise ValueError("mse_into of empty arrays is undefined")
    with nogil:
        if floating is float:
            total = attnx_mse_f32(&y[0], &t[0], &dy[0], n, <float> (2.0 / n))
        else:
            total = attnx_mse_f64(&y[0], &t[0], &dy[0], n, 2.0 / n)
    return total


def all_finite(x):
    """True when no element of x, a C-contiguous float32 or float64 array of any shape
    in native byte order, is NaN or infinite (TypeError or ValueError for any other
    x). Typed checks, no memoryview: it runs on every input and parameter check."""
    cdef cnp.ndarray a
    cdef int bad = 0, t
    cdef Py_ssize_t n
    require_simd()
    if not isinstance(x, cnp.ndarray):
        raise TypeError(f"x must be a NumPy array, got {type(x).__name__}")
    a = <cnp.ndarray> x
    t = cnp.PyArray_TYPE(a)
    if (t != cnp.NPY_FLOAT32 and t != cnp.NPY_FLOAT64) or not cnp.PyArray_ISNOTSWAPPED(a):
        raise TypeError(f"x must be float32 or float64 in native byte order, got {x.dtype}")
    if not cnp.PyArray_IS_C_CONTIGUOUS(a):
        raise ValueError("x must be C-contiguous")
    n = cnp.PyArray_SIZE(a)
    if n == 0:
        return True
    with nogil:
        if t == cnp.NPY_FLOAT32:
            bad = attnx_any_nonfinite_f32(<const float *> cnp.PyArray_DATA(a), n)
        else:
            bad = attnx_any_nonfinite_f64(<const double *> cnp.PyArray_DATA(a), n)
    return not bad


# ---------------------------------------------------------------- projections
# The attention layers' GEMMs around the heads, shared by the dense, blocked and
# fused paths (attnx.kernels._attention, attnx.kernels._flash). Self-attention (ctx NULL): one
# (B*Tq, 3d) buffer [Q | K | V] from one GEMM. Cross-attention: Q (B*Tq, d) and
# [K | V] (B*Tk, 2d), one GEMM each.

cdef floating *key_columns(floating *qp, floating *kvp, Py_ssize_t d, Py_ssize_t *ldq,
                           Py_ssize_t *ldkv) noexcept nogil:
    """Start of K and the leading dimensions of the Q and K buffers. Self-attention
    (kvp NULL): K is columns d:2d of the [Q | K | V] buffer qp; cross: K starts the
    [K | V] buffer kvp. V is always K + d, with K's leading dimension."""
    if kvp == NULL:
        ldq[0] = 3 * d
        ldkv[0] = 3 * d
        return qp + d
    ldq[0] = d
    ldkv[0] = 2 * d
    return kvp


cdef void qkv_project(const floating *x, const floating *ctx, const floating *w_qkv,
                      const floating *b_qkv, floating *qp, floating *kvp,
                      const Dims *dm) noexcept nogil:
    """Q, K, V = x Wq + bq, ctx Wk + bk, ctx Wv + bv, then Q and K rotated (rotary
    position embedding) when dm.rope_cos is not NULL. Self-attention: ctx and kvp
    NULL, tk = tq. b_qkv may be NULL."""
    cdef Py_ssize_t nb = dm.nb, tq = dm.tq, tk = dm.tk, d = dm.d, n_heads = dm.n_heads
    cdef int nthreads = dm.nthreads
    cdef const floating *cos_t = <const floating *> dm.rope_cos
    cdef const floating *sin_t = <const floating *> dm.rope_sin
    cdef floating beta = 1 if b_qkv != NULL else 0
    cdef Py_ssize_t rq = nb * tq, rk = nb * tk, ldq, ldkv
    cdef floating *kp = key_columns(qp, kvp, d, &ldq, &ldkv)
    if ctx == NULL:
        if b_qkv != NULL:
            fill_rows(qp, b_qkv, rq, 3 * d, 3 * d)
        pgemm(NT, NT, rq, 3 * d, d, <floating> 1, x, d, w_qkv, 3 * d, beta, qp, 3 * d,
              nthreads)
    else:
        if b_qkv != NULL:
            fill_rows(qp, b_qkv, rq, d, d)
            fill_rows(kp, b_qkv + d, rk, 2 * d, 2 * d)
        pgemm(NT, NT, rq, d, d, <floating> 1, x, d, w_qkv, 3 * d, beta, qp, d, nthreads)
        pgemm(NT, NT, rk, 2 * d, d, <floating> 1, ctx, d, w_qkv + d, 3 * d, beta, kp, 2 * d,
              nthreads)
    if cos_t != NULL:
        rope_rotate(qp, ldq, nb, tq, n_heads, d // n_heads, cos_t, sin_t, False)
        rope_rotate(kp, ldkv, nb, tk, n_heads, d // n_heads, cos_t, sin_t, False)


cdef void out_project(const floating *zcat, const floating *w_o, const floating *b_o,
                      const floating *residual, floating *y, Py_ssize_t rq, Py_ssize_t d,
                      int nthreads) noexcept nogil:
    """y = zcat Wo + bo (+ residual); b_o and residual may be NULL."""
    # y starts as bo + residual (or zero) and the projection GEMM adds onto it
    if residual != NULL:
        add_rows(y, residual, b_o, rq, d)
    elif b_o != NULL:
        fill_rows(y, b_o, rq, d, d)
    pgemm(NT, NT, rq, d, d, <floating> 1, zcat, d, w_o, d,
          <floating> (1 if (b_o != NULL or residual != NULL) else 0), y, d, nthreads)


cdef void out_project_backward(const floating *zcat, const floating *dy, const floating *w_o,
                               floating *dw_o, floating *db_o, floating *dzcat,
                               Py_ssize_t rq, Py_ssize_t d, int nthreads) noexcept nogil:
    """dWo = zcat^T dY, dbo = colsum(dY) (db_o may be NULL), dZcat = dY Wo^T."""
    pgemm(TR, NT, d, d, rq, <floating> 1, zcat, d, dy, d, <floating> 0, dw_o, d, nthreads)
    if db_o != NULL:
        colsum(dy, rq, d, d, db_o)
    pgemm(NT, TR, rq, d, d, <floating> 1, dy, d, w_o, d, <floating> 0, dzcat, d, nthreads)


cdef void qkv_project_backward(
        const floating *x, const floating *ctx, const floating *w_qkv, floating *dqp,
        floating *dkvp, floating *dw_qkv, floating *db_qkv, floating *dx, floating *dctx,
        const Dims *dm) noexcept nogil:
    """From dQ, dK, dV laid out as qkv_project wrote Q, K, V (dkvp NULL for
    self-attention): rotate dQ, dK back in place when dm.rope_cos is not NULL, then
    dWqkv, dbqkv (NULL to skip), dx = dQKV Wqkv^T + bx dx and, cross, dctx = d[K|V]
    Wkv^T + bc dctx (NULL to skip); bx, bc = dm.dx_beta, dm.dctx_beta."""
    cdef Py_ssize_t nb = dm.nb, tq = dm.tq, tk = dm.tk, d = dm.d, n_heads = dm.n_heads
    cdef int nthreads = dm.nthreads
    cdef const floating *cos_t = <const floating *> dm.rope_cos
    cdef const floating *sin_t = <const floating *> dm.rope_sin
    cdef floating bx = <floating> dm.dx_beta, bc = <floating> dm.dctx_beta
    cdef Py_ssize_t rq = nb * tq, rk = nb * tk, ldq, ldkv
    cdef floating *dkp = key_columns(dqp, dkvp, d, &ldq, &ldkv)
    if cos_t != NULL:
        rope_rotate(dqp, ldq, nb, tq, n_heads, d // n_heads, cos_t, sin_t, True)
        rope_rotate(dkp, ldkv, nb, tk, n_heads, d // n_heads, cos_t, sin_t, True)
    if ctx == NULL:
        pgemm(TR, NT, d, 3 * d, rq, <floating> 1, x, d, dqp, 3 * d,
              <floating> 0, dw_qkv, 3 * d, nthreads)
        if db_qkv != NULL:
            colsum(dqp, rq, 3 * d, 3 * d, db_qkv)
        if dx != NULL:
            pgemm(NT, TR, rq, d, 3 * d, <floating> 1, dqp, 3 * d, w_qkv, 3 * d,
                  bx, dx, d, nthreads)
    else:
        pgemm(TR, NT, d, d, rq, <floating> 1, x, d, dqp, d,
              <floating> 0, dw_qkv, 3 * d, nthreads)
        pgemm(TR, NT, d, 2 * d, rk, <floating> 1, ctx, d, dkp, 2 * d,
              <floating> 0, dw_qkv + d, 3 * d, nthreads)
        if db_qkv != NULL:
            colsum(dqp, rq, d, d, db_qkv)
            colsum(dkp, rk, 2 * d, 2 * d, db_qkv + d)
        if dx != NULL:
            pgemm(NT, TR, rq, d, d, <floating> 1, dqp, d, w_qkv, 3 * d, bx, dx, d, nthreads)
        if dctx != NULL:
            pgemm(NT, TR, rk, d, 2 * d, <floating> 1, dkp, 2 * d, w_qkv + d, 3 * d,
                  bc, dctx, d, nthreads)
