from attnx._blas cimport floating

# The fused kernels' softmax exp over an array (attnx._testing.flash_exp).
cdef void exp_shifted(const floating *x, floating *y, Py_ssize_t n,
                      double shift) noexcept nogil
