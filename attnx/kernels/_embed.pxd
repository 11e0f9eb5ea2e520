# The pointer-level cores of attnx.kernels._embed (sliding windows, max pooling, the class
# token and its pooling), for the whole-model pass (attnx.kernels._model_pass). The def
# entry points check their arrays and call these; the cores check nothing. Arrays are
# C-contiguous, batched (B, T, C) with a sequence's steps contiguous; km (B, T) uint8,
# 1 = padded, or NULL.
from libc.stdint cimport uint8_t, int64_t

from attnx.kernels._blas cimport floating

cdef struct Geom:
    Py_ssize_t nb, t, c, n      # batch, time steps, channels, windows per sequence
    Py_ssize_t l, s, pl, pr     # window length, stride, left and right padding
    bint rep                    # padding replicates the sequence's end steps

# u (B, N, L*C) = the windows of x (B, T, C); dx (B, T, C) = their fold (overwritten)
cdef void unfold(const Geom *g, const floating *x, const uint8_t *km, floating *u,
                 int nth) noexcept nogil
cdef void fold(const Geom *g, const floating *du, const uint8_t *km, floating *dx,
               int nth) noexcept nogil
# pooled (B, D), idx (B, D) = the maximum of h (B, T, D) over the valid steps and its step
cdef void maxpool_fwd(const floating *h, const uint8_t *km, floating *pooled, int64_t *idx,
                      Py_ssize_t nb, Py_ssize_t t, Py_ssize_t d, int nth) noexcept nogil
cdef void maxpool_bwd(const floating *dpooled, const int64_t *idx, floating *dh,
                      Py_ssize_t nb, Py_ssize_t t, Py_ssize_t d, int nth) noexcept nogil
# out (B, T+1, D) = [cls; h (B, T, D)]; backward: dh = dout[:, 1:], dcls (+)= sum dout[:, 0]
cdef void cls_fwd(const floating *h, const floating *cls, floating *out, Py_ssize_t nb,
                  Py_ssize_t t, Py_ssize_t d, int nth) noexcept nogil
cdef void cls_bwd(const floating *dout, floating *dh, floating *dcls, Py_ssize_t nb,
                  Py_ssize_t t, Py_ssize_t d, bint acc, int nth) noexcept nogil
# pooled (B, D) = h[:, 0] of h (B, T1, D); backward: dh row 0 = dpooled, the rest 0
cdef void first_fwd(const floating *h, floating *pooled, Py_ssize_t nb, Py_ssize_t t1,
                    Py_ssize_t d, int nth) noexcept nogil
cdef void first_bwd(const floating *dpooled, floating *dh, Py_ssize_t nb, Py_ssize_t t1,
                    Py_ssize_t d, int nth) noexcept nogil
