"""Row-major GEMM through scipy's Fortran BLAS.

BLAS is column-major. A row-major (m, n) matrix C with leading dimension ldc is,
read column-major, C^T with the same leading dimension. So the row-major product
C = op(A) op(B) is computed as the column-major product C^T = op(B)^T op(A)^T,
i.e. by swapping the operands (and m with n) and keeping each transpose flag.
"""
import numpy as np
from scipy.linalg.cython_blas cimport sgemm, dgemm


cdef void gemm(int ta, int tb, int m, int n, int k, floating alpha,
               const floating *a, int lda, const floating *b, int ldb,
               floating beta, floating *c, int ldc) noexcept nogil:
    """C (m, n) = alpha * op(A) (m, k) @ op(B) (k, n) + beta * C, all row-major."""
    cdef char tra = b'T' if ta else b'N'
    cdef char trb = b'T' if tb else b'N'
    if m <= 0 or n <= 0:
        return
    if floating is float:
        sgemm(&trb, &tra, &n, &m, &k, &alpha, <float *> b, &ldb,
              <float *> a, &lda, &beta, c, &ldc)
    else:
        dgemm(&trb, &tra, &n, &m, &k, &alpha, <double *> b, &ldb,
              <double *> a, &lda, &beta, c, &ldc)


def gemm_into(bint ta, bint tb, floating[:, ::1] a, floating[:, ::1] b,
              floating[:, ::1] c, int m, int n, int k,
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
    with nogil:
        gemm(ta, tb, m, n, k, <floating> alpha, &a[0, 0], <int> a.shape[1],
             &b[0, 0], <int> b.shape[1], <floating> beta, &c[0, 0], <int> c.shape[1])
