"""Row-major GEMM through scipy's Fortran BLAS.

BLAS is column-major. A row-major (m, n) matrix C with leading dimension ldc is,
read column-major, C^T with the same leading dimension. So the row-major product
C = op(A) op(B) is computed as the column-major product C^T = op(B)^T op(A)^T,
i.e. by swapping the operands (and m with n) and keeping each transpose flag.
"""
from scipy.linalg.cython_blas cimport sgemm, dgemm

cdef extern from "attnx_gemm_small.h" nogil:
    int attnx_set_level(int level)
    int attnx_get_level()
    int attnx_dispatched_levels()
    int attnx_sgemm_small(int ta, int tb, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k,
                          float alpha, const float *a, Py_ssize_t lda, const float *b,
                          Py_ssize_t ldb, float beta, float *c, Py_ssize_t ldc)

BLAS_INT_MAX = 2**31 - 1


cdef void attach(int level) noexcept nogil:
    """Set this module's SIMD dispatch level (small float32 products at level 1 run
    on csrc/attnx_gemm_small.h's tiles). attnx.kernels._ops calls it at import with the level
    it detected: this module sits below it and cannot cimport it; until then (-1)
    every product goes to BLAS."""
    attnx_set_level(level)


def dispatch_state():
    """(SIMD level attached to this module, bit mask of levels whose kernels ran here)."""
    return attnx_get_level(), attnx_dispatched_levels()


def check_blas_int(str what, *sizes):
    """ValueError naming the size when a GEMM dimension or leading dimension
    does not fit BLAS's 32-bit int (scipy's BLAS takes C int arguments).

    what: the computation, for the message; sizes: (name, value) pairs.
    """
    for name, value in sizes:
        if value > BLAS_INT_MAX:
            raise ValueError(
                f"{what}: {name} = {value} exceeds {BLAS_INT_MAX} (2**31 - 1), the largest "
                "matrix dimension the BLAS interface takes; split the batch or the sequence")


cdef void gemm(int ta, int tb, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k, floating alpha,
               const floating *a, Py_ssize_t lda, const floating *b, Py_ssize_t ldb,
               floating beta, floating *c, Py_ssize_t ldc) noexcept nogil:
    """C (m, n) = alpha * op(A) (m, k) @ op(B) (k, n) + beta * C, all row-major.
    Every size must fit an int (checked by the caller with check_blas_int). Small
    float32 products at SIMD level 1 (AVX2) run on register tiles without BLAS's
    packing copies (csrc/attnx_gemm_small.h decides which)."""
    cdef char tra = b'T' if ta else b'N'
    cdef char trb = b'T' if tb else b'N'
    cdef int mi = <int> m, ni = <int> n, ki = <int> k
    cdef int la = <int> lda, lb = <int> ldb, lc = <int> ldc
    if m <= 0 or n <= 0:
        return
    if floating is float:
        if attnx_sgemm_small(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
            return
        sgemm(&trb, &tra, &ni, &mi, &ki, &alpha, <float *> b, &lb,
              <float *> a, &la, &beta, c, &lc)
    else:
        dgemm(&trb, &tra, &ni, &mi, &ki, &alpha, <double *> b, &lb,
              <double *> a, &la, &beta, c, &lc)


def _attach_for_benchmarks(int level):
    """Re-attach this module at another level (benchmarks/ A/B of the small-GEMM tiles
    against BLAS in one process: 1 tiles where they apply, 0 BLAS only); returns the
    previous level."""
    cdef int before = attnx_get_level()
    attach(level)
    return before
