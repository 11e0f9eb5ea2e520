# The pointer-level cores of attnx.kernels._seq's LayerNorm and residual kernels, for the
# compiled block stack (attnx.kernels._blocks). The def entry points check their arrays and
# call these; the cores check nothing. Arrays are row-major (rows, width), C-contiguous.
from libc.stdint cimport uint8_t

from attnx.kernels._blas cimport floating

# One LayerNorm's operands beside the rows it normalises and their statistics st
# (2, rows): mean, 1/sqrt(var + eps) per row (an activation: passed with the rows).
cdef struct Norm:
    const void *g           # (d,) gain
    const void *b           # (d,) bias
    void *dg                # (d,) gradients (backward)
    void *db
    void *part              # (>= nthreads, 2d) backward scratch: per-thread dg, db sums
    Py_ssize_t rows, d, ldpart
    double eps
    int nthreads            # the backward's reduction uses min(nthreads, part rows)

cdef void norm_forward(const floating *x, floating *y, floating *st, const Norm *n) noexcept nogil
cdef void norm_backward(const floating *dy, const floating *x, const floating *st, floating *dx,
                        const floating *add, const Norm *n) noexcept nogil
# out = res + mult * (a - b) (res, b may be NULL)
cdef void masked_add_rows(floating *out, const floating *res, const floating *a,
                          const floating *b, const floating *mult, Py_ssize_t rows,
                          Py_ssize_t k, int nthreads) noexcept nogil
# out += a - b (a, b may be NULL)
cdef void add_sub_rows(floating *out, const floating *a, const floating *b, Py_ssize_t rows,
                       Py_ssize_t k, int nthreads) noexcept nogil
# y (rows, n) = x (rows, k) w (k, n) + b (+ pos[r % t], pos (>= t, n), when not NULL)
cdef void linear_fwd(const floating *x, const floating *w, const floating *b, floating *y,
                     const floating *pos, Py_ssize_t rows, Py_ssize_t k, Py_ssize_t n,
                     Py_ssize_t t, int nthreads) noexcept nogil
# dw = x^T dy, db = column sums of dy, dx = dy w^T (dx may be NULL)
cdef void linear_bwd(const floating *dy, const floating *x, const floating *w, floating *dw,
                     floating *db, floating *dx, Py_ssize_t rows, Py_ssize_t k,
                     Py_ssize_t n) noexcept nogil
# dp (tp, d) = per position tt < t the batch's sum of dh[b*t + tt], zero from t on
cdef void positions_bwd(const floating *dh, floating *dp, Py_ssize_t rows, Py_ssize_t d,
                        Py_ssize_t t, Py_ssize_t tp, int nthreads) noexcept nogil
# mean (last=False) or last valid row of each sequence; km (nb, t) or NULL
cdef void pool_fwd(const floating *h, const uint8_t *km, floating *pooled, Py_ssize_t nb,
                   Py_ssize_t t, Py_ssize_t d, bint last, int nthreads) noexcept nogil
cdef void pool_bwd(const floating *dpooled, const uint8_t *km, floating *dh, Py_ssize_t nb,
                   Py_ssize_t t, Py_ssize_t d, bint last, int nthreads) noexcept nogil
# zero row r of y (rows, k) where km[r] is set
cdef void zero_rows(floating *y, const uint8_t *km, Py_ssize_t rows, Py_ssize_t k) noexcept nogil
