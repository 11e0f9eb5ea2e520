# The pointer-level cores of attnx._seq's LayerNorm and residual kernels, for the
# compiled block stack (attnx._blocks). The def entry points check their arrays and
# call these; the cores check nothing. Arrays are row-major (rows, width), C-contiguous.
from attnx._blas cimport floating

# One LayerNorm's operands beside the rows it normalises.
cdef struct Norm:
    const void *g           # (d,) gain
    const void *b           # (d,) bias
    void *dg                # (d,) gradients (backward)
    void *db
    void *st                # (2, rows): mean, 1/sqrt(var + eps) per row
    void *part              # (>= nthreads, 2d) backward scratch: per-thread dg, db sums
    Py_ssize_t rows, d, ldpart
    double eps
    int nthreads            # the backward's reduction uses min(nthreads, part rows)

cdef void norm_forward(const floating *x, floating *y, const Norm *n) noexcept nogil
cdef void norm_backward(const floating *dy, const floating *x, floating *dx,
                        const floating *add, const Norm *n) noexcept nogil
# out = res + mult * (a - b) (res, b may be NULL)
cdef void masked_add_rows(floating *out, const floating *res, const floating *a,
                          const floating *b, const floating *mult, Py_ssize_t rows,
                          Py_ssize_t k, int nthreads) noexcept nogil
# out += a - b (a, b may be NULL)
cdef void add_sub_rows(floating *out, const floating *a, const floating *b, Py_ssize_t rows,
                       Py_ssize_t k, int nthreads) noexcept nogil
