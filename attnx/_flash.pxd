from attnx._blas cimport floating
from attnx._attnargs cimport Heads

# The fused kernels' softmax exp over an array (attnx._testing.flash_exp).
cdef void exp_shifted(const floating *x, floating *y, Py_ssize_t n,
                      double shift) noexcept nogil

# The fused path's head kernels (for attnx._blocks' calls of attnx._attnargs.layer_forward).
cdef const Heads *fused_heads() noexcept nogil
