# Shared kernel plumbing: SIMD level, threaded GEMM, bias and rotary helpers.
#
# SIMD dispatch, for every extension module that includes attnx_math.h
# (its softmax/exp/SiLU kernels):
#   the CPU is examined ONCE, when attnx.kernels._ops is imported (capped by ATTNX_SIMD=0|1|2:
#   portable C / AVX2+FMA / AVX-512F; the older ATTNX_NO_SIMD=1 means 0).
#   get_simd_level() (cimport) / attnx.kernels._ops.simd_level() (Python) return that level.
#   Each module including the header has its own copy of the dispatch state, so it
#   must call simd_attach() once at import:
#
#       from attnx.kernels._ops cimport simd_attach, attnx_get_level, attnx_dispatched_levels
#       simd_attach()                       # module level, before any kernel runs
#       def dispatch_state():               # for tests/kernels/test_simd_levels.py
#           return attnx_get_level(), attnx_dispatched_levels()
#
#   This is the one dispatch mechanism (the fused attention kernels and AdamW use it
#   too). Until simd_attach() runs, a module's level is -1 ("not attached") and every
#   Python entry point that reaches a dispatched kernel calls require_simd(), which
#   raises RuntimeError: a module that forgets to attach fails loudly.
#
# Threads: kernels never choose a thread count. The Python caller passes
# `nthreads` (attnx.runtime._threads.num_threads()) and holds attnx.runtime._threads.blas_single()
# around the call, so BLAS stays single-threaded inside attnx's parallel regions.
#
# Sizes: every offset, size and leading dimension is Py_ssize_t. BLAS takes 32-bit
# ints: callers check their GEMM sizes with attnx.kernels._blas.check_blas_int (Python, before
# any work); gemm/pgemm cast after that check.
from libc.stdint cimport uint8_t

from attnx.kernels._blas cimport floating, gemm, NT, TR

cdef extern from "attnx_math.h" nogil:
    int attnx_set_level(int level)
    int attnx_get_level()              # this module's attached level
    int attnx_dispatched_levels()      # bit L: a level-L kernel ran in this module

cdef int get_simd_level() noexcept nogil

cdef inline int simd_attach() noexcept nogil:
    """Copy the process-wide SIMD level into this module's dispatch state."""
    return attnx_set_level(get_simd_level())

cdef inline int require_simd() except -1:
    """RuntimeError unless this module attached its dispatch state (simd_attach)."""
    if attnx_get_level() < 0:
        raise RuntimeError("this attnx kernel module never called simd_attach(): its "
                           "SIMD dispatch level is unset (a build or import-order bug)")
    return 0

cdef void pgemm(int ta, int tb, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k, floating alpha,
                const floating *a, Py_ssize_t lda, const floating *b, Py_ssize_t ldb,
                floating beta, floating *c, Py_ssize_t ldc, int nthreads) noexcept nogil

cdef void fill_rows(floating *y, const floating *b, Py_ssize_t rows, Py_ssize_t cols,
                    Py_ssize_t ld) noexcept nogil
cdef void add_rows(floating *y, const floating *x, const floating *b, Py_ssize_t rows,
                   Py_ssize_t cols) noexcept nogil
cdef void colsum(const floating *x, Py_ssize_t rows, Py_ssize_t cols, Py_ssize_t ld,
                 floating *out) noexcept nogil
cdef void rope_rotate(floating *x, Py_ssize_t ldx, Py_ssize_t batch, Py_ssize_t t_len,
                      Py_ssize_t n_heads, Py_ssize_t d_head, const floating *cos_t,
                      const floating *sin_t, bint inverse) noexcept nogil

# Optional buffers (None allowed) as pointers: NULL for None.
cdef inline const floating *in1(const floating[::1] a) noexcept nogil:
    if a is None:
        return NULL
    return &a[0]
cdef inline const floating *in2(const floating[:, ::1] a) noexcept nogil:
    if a is None:
        return NULL
    return &a[0, 0]
cdef inline floating *out1(floating[::1] a) noexcept nogil:
    return NULL if a is None else &a[0]
cdef inline floating *out2(floating[:, ::1] a) noexcept nogil:
    return NULL if a is None else &a[0, 0]

# ---------------------------------------------------------------- attention
# Sizes of one attention call, as every attention kernel reads them: built from the
# layer's attnx.kernels._attnargs.AttnShape (which holds one) and completed per call by its
# prologue (keymask, rope tables, thread count, accumulation). Plain C so the head
# kernels and projections take it by value under nogil.
cdef struct Dims:
    Py_ssize_t nb, tq, tk, d, n_heads, d_head   # batch, lengths, width, heads
    Py_ssize_t rq, rk                           # rows of x (nb*tq) and of ctx (nb*tk)
    Py_ssize_t ldq, ldkv, ldz                   # leading dims of Q, [K|V], zcat
    Py_ssize_t bq, bk                           # blocked path: query/key block sizes
    Py_ssize_t fwd_per_thread, bwd_per_thread   # per-thread scratch elements
    double scale                                # 1/sqrt(d_head) (cast per float type)
    bint cross, causal, store                   # store: keep what backward needs
    int nthreads                                # OpenMP threads of this call
    const uint8_t *keymask                      # (nb, tk) or NULL
    const void *rope_cos                        # (>= max(tq, tk), d_head/2) or NULL
    const void *rope_sin
    double dx_beta, dctx_beta                   # 1: add into dx / dctx, 0: overwrite

# The attention layers' projections and their gradients (see _ops.pyx): the prologue
# and epilogue the dense, blocked and fused paths share.
cdef floating *key_columns(floating *qp, floating *kvp, Py_ssize_t d, Py_ssize_t *ldq,
                           Py_ssize_t *ldkv) noexcept nogil
cdef void qkv_project(const floating *x, const floating *ctx, const floating *w_qkv,
                      const floating *b_qkv, floating *qp, floating *kvp,
                      const Dims *dm) noexcept nogil
cdef void out_project(const floating *zcat, const floating *w_o, const floating *b_o,
                      const floating *residual, floating *y, Py_ssize_t rq, Py_ssize_t d,
                      int nthreads) noexcept nogil
cdef void out_project_backward(const floating *zcat, const floating *dy, const floating *w_o,
                               floating *dw_o, floating *db_o, floating *dzcat,
                               Py_ssize_t rq, Py_ssize_t d, int nthreads) noexcept nogil
cdef void qkv_project_backward(
        const floating *x, const floating *ctx, const floating *w_qkv, floating *dqp,
        floating *dkvp, floating *dw_qkv, floating *db_qkv, floating *dx, floating *dctx,
        const Dims *dm) noexcept nogil
