# Row-major BLAS for attnx kernels, on top of scipy.linalg.cython_blas.
ctypedef fused floating:
    float
    double

# gemm flags: pass NT (0) or T (1) for each operand.
cdef enum:
    NT = 0
    TR = 1

# Sizes are Py_ssize_t like every other size in attnx; BLAS itself takes 32-bit
# ints, so callers check them first with check_blas_int (Python, before any work)
# and gemm casts.
cdef void gemm(int ta, int tb, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k, floating alpha,
               const floating *a, Py_ssize_t lda, const floating *b, Py_ssize_t ldb,
               floating beta, floating *c, Py_ssize_t ldc) noexcept nogil

# Set the SIMD dispatch level of the small-GEMM tiles (attnx.kernels._ops, at import).
cdef void attach(int level) noexcept nogil
