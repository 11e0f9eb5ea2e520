# Row-major BLAS for attnx kernels, on top of scipy.linalg.cython_blas.
ctypedef fused floating:
    float
    double

# gemm flags: pass NT (0) or T (1) for each operand.
cdef enum:
    NT = 0
    TR = 1

cdef void gemm(int ta, int tb, int m, int n, int k, floating alpha,
               const floating *a, int lda, const floating *b, int ldb,
               floating beta, floating *c, int ldc) noexcept nogil
