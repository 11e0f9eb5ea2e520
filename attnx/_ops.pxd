# Elementwise kernels shared by the layer modules (bias, rotary embedding, BLAS threads).
from attnx._blas cimport floating, gemm, NT, TR

ctypedef void (*set_threads_fn)(int) noexcept nogil
ctypedef int (*get_threads_fn)() noexcept nogil

cdef int blas_threads_get() noexcept nogil
cdef void blas_threads_set(int n) noexcept nogil
cdef int omp_threads() noexcept nogil
cdef int blas_single_begin() noexcept nogil
cdef void blas_single_end(int saved) noexcept nogil
cdef void pgemm(int ta, int tb, int m, int n, int k, floating alpha,
                const floating *a, int lda, const floating *b, int ldb,
                floating beta, floating *c, int ldc, int nthreads) noexcept nogil

cdef void fill_rows(floating *y, const floating *b, Py_ssize_t rows, int cols, int ld) noexcept nogil
cdef void add_rows(floating *y, const floating *x, const floating *b, Py_ssize_t rows,
                   int cols) noexcept nogil
cdef void colsum(const floating *x, Py_ssize_t rows, int cols, int ld, floating *out) noexcept nogil
cdef void rope_rotate(floating *x, int ldx, Py_ssize_t batch, int t_len, int n_heads,
                      int d_head, const floating *cos_t, const floating *sin_t,
                      bint inverse) noexcept nogil
