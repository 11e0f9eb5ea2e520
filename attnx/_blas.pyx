"""Row-major GEMM through scipy's Fortran BLAS.

BLAS is column-major. A row-major (m, n) matrix C with leading dimension ldc is,
read column-major, C^T with the same leading dimension. So the row-major product
C = op(A) op(B) is computed as the column-major product C^T = op(B)^T op(A)^T,
i.e. by swapping the operands (and m with n) and keeping each transpose flag.
"""
import numpy as np
from scipy.linalg.cython_blas cimport sgemm, dgemm

BLAS_INT_MAX = 2**31 - 1


def check_blas_int(what, **sizes):
    """ValueError naming the size when a GEMM dimension or leading dimension
    does not fit BLAS's 32-bit int (scipy's BLAS takes C int arguments).

    what: the computation, for the message; sizes: name=value pairs.
    """
    for name, value in sizes.items():
        if value > BLAS_INT_MAX:
            raise ValueError(
                f"{what}: {name} = {value} exceeds {BLAS_INT_MAX} (2**31 - 1), the largest "
                "matrix dimension the BLAS interface takes; split the batch or the sequence")


cdef void gemm(int ta, int tb, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k, floating alpha,
               const floating *a, Py_ssize_t lda, const floating *b, Py_ssize_t ldb,
               floating beta, floating *c, Py_ssize_t ldc) noexcept nogil:
    """C (m, n) = alpha * op(A) (m, k) @ op(B) (k, n) + beta * C, all row-major.
    Every size must fit an int (checked by the caller with check_blas_int)."""
    cdef char tra = b'T' if ta else b'N'
    cdef char trb = b'T' if tb else b'N'
    cdef int mi = <int> m, ni = <int> n, ki = <int> k
    cdef int la = <int> lda, lb = <int> ldb, lc = <int> ldc
    if m <= 0 or n <= 0:
        return
    if floating is float:
        sgemm(&trb, &tra, &ni, &mi, &ki, &alpha, <float *> b, &lb,
              <float *> a, &la, &beta, c, &lc)
    else:
        dgemm(&trb, &tra, &ni, &mi, &ki, &alpha, <double *> b, &lb,
              <double *> a, &la, &beta, c, &lc)


def gemm_into(bint ta, bint tb, floating[:, ::1] a, floating[:, ::1] b,
              floating[:, ::1] c, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k,
              double alpha=1.0, double beta=0.0):
    """Test hook: c[:m, :n] = alpha * op(a)[:m, :k] @ op(b)[:k, :n] + beta * c.

    The leading dimensions are the row lengths of a, b and c, which may exceed
    the matrix widths; only the leading sub-blocks are read and written.
    """
    if a.shape[0] * a.shape[1] == 0 or b.shape[0] * b.shape[1] == 0:
        raise ValueError("empty operands")
    if (ta and (a.shape[0] < k or a.shape[1] < m)) or (not ta and (a.shape[0] < m or a.shape[1] < k)):
        raise ValueError("a is too small for op(a) of shape (m, k)")
    if (tb and (b.shape[0] < n or b.shape[1] < k)) or (not tb and (b.shape[0] < k or b.shape[1] < n)):
        raise ValueError("b is too small for op(b) of shape (k, n)")
    if c.shape[0] < m or c.shape[1] < n:
        raise ValueError("c is too small for (m, n)")
    check_blas_int("gemm_into", m=m, n=n, k=k, lda=a.shape[1], ldb=b.shape[1], ldc=c.shape[1])
    with nogil:
        gemm(ta, tb, m, n, k, <floating> alpha, &a[0, 0], a.shape[1],
             &b[0, 0], b.shape[1], <floating> beta, &c[0, 0], c.shape[1])
