# The attention kernels' arguments: one class of shapes (AttnShape: sizes, path and
# the size table of every buffer), one of buffers (AttnBuffers: the workspace, made
# from an AttnShape and so sized by construction), one of parameters (AttnParams:
# weights and gradients), and the per-call C struct the kernels read (Call). The
# dense/blocked (attnx.kernels._attention) and fused (attnx.kernels._flash) entry points take them
# in one order and share one prologue (begin_call) and the projections around their
# head kernels (run_forward, run_backward).
from attnx.kernels._blas cimport floating
from attnx.kernels._ops cimport Dims

cdef enum:
    PATH_DENSE = 0      # BLAS per head, (Tq, Tk) probabilities kept for backward
    PATH_BLOCKED = 1    # BLAS per key block, online softmax, log-sum-exp kept
    PATH_FUSED = 2      # register-tiled C kernels (csrc/attnx_flash.h)

cdef enum:
    ACC_DX = 1          # backward adds dL/dx into dx instead of overwriting it
    ACC_DCTX = 2        # ... and dL/dctx into dctx

# One call's operands as C pointers (element type: the shape's dtype), filled by
# begin_call and the entry points from the checked arrays.
cdef struct Call:
    Dims dm
    const void *x           # (rq, d) query input
    const void *ctx         # (rk, d) key/value input, NULL for self-attention
    const void *residual    # (rq, d) added to y, or NULL
    const void *dy          # (rq, d)
    void *y                 # (rq, d)
    void *dx                # (rq, d) or NULL
    void *dctx              # (rk, d) or NULL
    const void *w_qkv       # (d, 3d) = [Wq | Wk | Wv]
    const void *b_qkv       # (3d,) or NULL
    const void *w_o         # (d, d)
    const void *b_o         # (d,) or NULL
    void *dw_qkv
    void *db_qkv
    void *dw_o
    void *db_o
    void *q                 # self: (rq, 3d) [Q | K | V]; cross: (rq, d)
    void *kv                # cross: (rk, 2d) [K | V]; self: NULL
    void *zcat              # (rq, d) concatenated head outputs
    void *probs             # dense: (nb*H or threads, tq*tk) probabilities
    void *tbuf              # dense: per-thread (d_head, tk) transposes
    void *lse               # blocked, fused: (nb*H*tq) log-sum-exp per row
    void *fwd_scratch       # blocked, fused: per-thread scratch (fused: backward too)
    void *dzcat
    void *dq
    void *dkv
    void *bwd_scratch       # dense: per-thread dS blocks; blocked: per-thread blocks
    void *dq_parts          # fused: dQ shares of key ranges after the first

cdef Py_ssize_t get_flash_bq() noexcept nogil
cdef Py_ssize_t get_flash_bk() noexcept nogil
cdef int set_blocked_sizes(Py_ssize_t bq, Py_ssize_t bk) except -1

cdef int backward_threads(Py_ssize_t nbh, Py_ssize_t tq, Py_ssize_t tk, Py_ssize_t d_head,
                          int nthreads) noexcept nogil
cdef Py_ssize_t key_splits(Py_ssize_t nbh, Py_ssize_t tk, int nthreads) noexcept nogil


cdef class AttnShape:
    cdef Dims dims                      # the per-call struct's fixed part
    cdef readonly int path, threads, type_num
    cdef readonly Py_ssize_t nb, tq, tk, d, n_heads, d_head, itemsize
    cdef readonly bint cross, causal, store
    cdef readonly object dtype
    # the size table: elements of every buffer of this shape (0 = not used here)
    cdef readonly Py_ssize_t n_q, n_kv, n_zcat, n_probs, n_tbuf, n_lse, n_fwd_scratch
    cdef readonly Py_ssize_t n_dzcat, n_dq, n_dkv, n_bwd_scratch, n_dq_parts
    cdef readonly Py_ssize_t n_inputs     # copies of x (and ctx) a training forward keeps


cdef class AttnBuffers:
    cdef readonly AttnShape shape
    cdef readonly object q, kv, zcat, probs, tbuf, lse, fwd_scratch
    cdef readonly object dzcat, dq, dkv, bwd_scratch, dq_parts
    cdef readonly bint has_backward
    cdef Call ptrs                      # workspace pointers, copied into every call


cdef class AttnParams:
    cdef readonly Py_ssize_t d
    cdef readonly int type_num
    cdef readonly object w_qkv, w_o, b_qkv, b_o, dw_qkv, dw_o, db_qkv, db_o
    cdef Call ptrs                      # weight and gradient pointers


cdef int begin_call(AttnShape s, AttnBuffers b, AttnParams p, object x, object ctx,
                    object key_padding_mask, object rope, int nthreads, bint backward,
                    Call *c) except -1
cdef int check_parts(AttnShape s, const Call *c) except -1
cdef int take(str name, object a, Py_ssize_t rows, Py_ssize_t cols, int type_num,
              bint write, bint optional, void **out) except -1

# A kernel module's head kernels, one per direction and float type: Q at q, K at k and
# V at k + d (leading dimensions c.dm.ldq, c.dm.ldkv); backward writes dQ, dK, dV
# alike at dq and dk. `fused`: the module runs the fused path only (attnx.kernels._flash),
# else every other path (attnx.kernels._attention).
ctypedef void (*HeadsForwardF32)(const Call *c, float *q, float *k) noexcept nogil
ctypedef void (*HeadsForwardF64)(const Call *c, double *q, double *k) noexcept nogil
ctypedef void (*HeadsBackwardF32)(const Call *c, float *q, float *k, float *dq,
                                  float *dk) noexcept nogil
ctypedef void (*HeadsBackwardF64)(const Call *c, double *q, double *k, double *dq,
                                  double *dk) noexcept nogil

cdef struct Heads:
    HeadsForwardF32 forward_f32
    HeadsForwardF64 forward_f64
    HeadsBackwardF32 backward_f32
    HeadsBackwardF64 backward_f64
    bint fused

# One forward / backward on a filled Call (what run_forward / run_backward run after
# their checks; attnx.kernels._blocks calls them on Calls it checked once per workspace).
cdef void layer_forward(floating *y, const Call *c, const Heads *heads) noexcept nogil
cdef void layer_backward(const floating *dy, const Call *c, const Heads *heads) noexcept nogil

# The checked call of an attention entry point: its prologue (begin_run: the shape's
# path, then begin_call), the projections around `heads` and the output (see
# attnx.kernels._attention.attention_forward / _backward).
cdef int begin_run(AttnShape s, AttnBuffers b, AttnParams p, object x, object ctx,
                   object key_padding_mask, object rope, int nthreads, bint backward,
                   const Heads *heads, Call *c) except -1
cdef int run_forward(AttnShape s, Call *c, object residual, object y,
                     const Heads *heads) except -1
cdef int run_backward(AttnShape s, Call *c, object dy, object dx, object dctx, int accumulate,
                      const Heads *heads) except -1
