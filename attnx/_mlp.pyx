"""SiLU MLP block with its residual, forward beside backward.

    H = Z W1 + b1          (rows, d_hidden)
    S = H * sigmoid(H)     SiLU ("swish")
    out = S W2 + b2 + Z    (rows, d)
"""
from cython.parallel cimport prange

from attnx._blas cimport floating, NT, TR
from attnx._ops cimport (fill_rows, colsum, omp_threads, blas_single_begin,
                         blas_single_end, pgemm)

cdef extern from "attnx_math.h" nogil:
    int attnx_init_cpu(int max_level)
    void attnx_silu_row_f32(const float *h, float *s, float *sg, int n)
    void attnx_silu_row_f64(const double *h, double *s, double *sg, int n)

import os as _os
_CPU_LEVEL = attnx_init_cpu(0 if _os.environ.get("ATTNX_NO_SIMD") else
                            int(_os.environ.get("ATTNX_SIMD", "2") or 2))


cdef inline void silu_row(const floating *h, floating *s, floating *sg, int n) noexcept nogil:
    if floating is float:
        attnx_silu_row_f32(h, s, sg, n)
    else:
        attnx_silu_row_f64(h, s, sg, n)


def mlp_forward(const floating[:, ::1] z, const floating[:, ::1] w1, const floating[::1] b1,
                const floating[:, ::1] w2, const floating[::1] b2,
                floating[:, ::1] h, floating[:, ::1] s, floating[:, ::1] sg,
                floating[:, ::1] out):
    """out = silu(z W1 + b1) W2 + b2 + z; keeps H, S = silu(H) and sigmoid(H) for backward."""
    cdef Py_ssize_t rows = z.shape[0], i, j
    cdef int d = <int> z.shape[1], dh = <int> w1.shape[1]
    cdef int nth = omp_threads() if rows * w1.shape[1] >= 16384 else 1
    cdef int saved
    with nogil:
        saved = blas_single_begin()
        if b1 is not None:
            fill_rows(&h[0, 0], &b1[0], rows, dh, dh)
        pgemm(NT, NT, <int> rows, dh, d, <floating> 1, &z[0, 0], d, &w1[0, 0], dh,
             <floating> (1 if b1 is not None else 0), &h[0, 0], dh, nth)
        for i in prange(rows, schedule="static", num_threads=nth):
            silu_row(&h[i, 0], &s[i, 0], &sg[i, 0], dh)
            for j in range(d):
                out[i, j] = z[i, j] + (b2[j] if b2 is not None else 0)
        pgemm(NT, NT, <int> rows, d, dh, <floating> 1, &s[0, 0], dh, &w2[0, 0], d,
             <floating> 1, &out[0, 0], d, nth)
        blas_single_end(saved)


def mlp_backward(const floating[:, ::1] dout, const floating[:, ::1] z,
                 const floating[:, ::1] w1, const floating[:, ::1] w2,
                 const floating[:, ::1] h, const floating[:, ::1] s,
                 const floating[:, ::1] sg, floating[:, ::1] dh_buf,
                 floating[:, ::1] dw1, floating[::1] db1,
                 floating[:, ::1] dw2, floating[::1] db2,
                 floating[:, ::1] dz):
    """Fill dW1, dW2 (and biases); dz = dL/dz including the residual path."""
    cdef Py_ssize_t rows = z.shape[0], i, j
    cdef int d = <int> z.shape[1], dh = <int> w1.shape[1]
    cdef floating hv, g
    cdef int nth = omp_threads() if rows * w1.shape[1] >= 16384 else 1
    cdef int saved
    with nogil:
        saved = blas_single_begin()
        pgemm(TR, NT, dh, d, <int> rows, <floating> 1, &s[0, 0], dh, &dout[0, 0], d,
             <floating> 0, &dw2[0, 0], d, nth)
        if db2 is not None:
            colsum(&dout[0, 0], rows, d, d, &db2[0])
        pgemm(NT, TR, <int> rows, dh, d, <floating> 1, &dout[0, 0], d, &w2[0, 0], d,
             <floating> 0, &dh_buf[0, 0], dh, nth)
        for i in prange(rows, schedule="static", num_threads=nth):
            for j in range(dh):
                hv = h[i, j]
                g = sg[i, j]
                dh_buf[i, j] = dh_buf[i, j] * g * (1 + hv * (1 - g))
            for j in range(d):
                dz[i, j] = dout[i, j]
        pgemm(TR, NT, d, dh, <int> rows, <floating> 1, &z[0, 0], d, &dh_buf[0, 0], dh,
             <floating> 0, &dw1[0, 0], dh, nth)
        if db1 is not None:
            colsum(&dh_buf[0, 0], rows, dh, dh, &db1[0])
        pgemm(NT, TR, <int> rows, d, dh, <floating> 1, &dh_buf[0, 0], dh, &w1[0, 0], dh,
             <floating> 1, &dz[0, 0], d, nth)
        blas_single_end(saved)
