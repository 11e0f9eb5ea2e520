from attnx.kernels._blas cimport floating
from attnx.kernels._attnargs cimport Heads

# The fused kernels' softmax exp over an array (attnx.kernels._testing.flash_exp).
cdef void exp_shifted(const floating *x, floating *y, Py_ssize_t n,
                      double shift) noexcept nogil

# The fused path's head kernels (for attnx.kernels._blocks' calls of attnx.kernels._attnargs.layer_forward).
cdef const Heads *fused_heads() noexcept nogil
