"""Fused attention layer for small heads: BLAS projections around fused head kernels.

The Q/K/V and output projections (and their weight gradients) are full-width
GEMMs through scipy's BLAS, as on the dense path. Between them, every
(sample, head) runs the fused tile kernels of csrc/attnx_flash.h: scores,
online softmax and P V in one pass over L1-sized blocks (forward, per query
block of ATTNX_FL_BQ rows), and dQ/dK/dV with P recomputed from the kept
per-row log-sum-exp (backward, per head). Nothing of size Tq*Tk is stored.

Buffers are those of the dense path: row-major (B*T, w) matrices, Q, K and V
side by side in projection buffers and addressed per head by offset and
leading dimension. The entry points take attnx.kernels._attnargs' shape, buffers and
parameters in the order of attnx.kernels._attention's. Thread policy is the caller's:
`nthreads` OpenMP threads, with
attnx.runtime._threads.blas_single() held around the call (the projections split their
GEMMs over those threads); BLAS is never called inside a prange over heads.
"""
from cython.parallel cimport prange, threadid
from libc.stdint cimport uint8_t

from attnx.kernels._blas cimport floating
from attnx.kernels._ops cimport (Dims, simd_attach, require_simd, attnx_get_level,
                         attnx_dispatched_levels)
from attnx.kernels._attnargs cimport (AttnShape, AttnBuffers, AttnParams, Call, Heads, begin_run,
                              run_forward, run_backward, backward_threads, key_splits)

cdef extern from "attnx_flash.h" nogil:
    enum:
        ATTNX_FL_BQ
        ATTNX_FL_BK
    void attnx_flash_forward_rows_f32(
        const float *q, Py_ssize_t ldq, const float *k, const float *v, Py_ssize_t ldkv,
        float *z, Py_ssize_t ldz, float *lse, int i0, int nq, int tk, int dh, float scale,
        int causal, const uint8_t *km, float *ws)
    void attnx_flash_forward_rows_f64(
        const double *q, Py_ssize_t ldq, const double *k, const double *v, Py_ssize_t ldkv,
        double *z, Py_ssize_t ldz, double *lse, int i0, int nq, int tk, int dh, double scale,
        int causal, const uint8_t *km, double *ws)
    void attnx_flash_backward_head_f32(
        const float *q, Py_ssize_t ldq, const float *k, const float *v, Py_ssize_t ldkv,
        const float *z, const float *dz, Py_ssize_t ldz, const float *lse,
        float *dq, Py_ssize_t lddq, float *dk, float *dv, int tq, int tk, int ka, int kb,
        int dh, float scale, int causal, const uint8_t *km, float *ws)
    void attnx_flash_backward_head_f64(
        const double *q, Py_ssize_t ldq, const double *k, const double *v, Py_ssize_t ldkv,
        const double *z, const double *dz, Py_ssize_t ldz, const double *lse,
        double *dq, Py_ssize_t lddq, double *dk, double *dv, int tq, int tk, int ka, int kb,
        int dh, double scale, int causal, const uint8_t *km, double *ws)
    void attnx_flash_exp_f32(const float *x, float *y, Py_ssize_t n, float shift)
    void attnx_flash_exp_f64(const double *x, double *y, Py_ssize_t n, double shift)

# The fused kernels dispatch through this module's attnx_simd.h state, like every
# other kernel module: attach it to the level attnx.kernels._ops detected.
simd_attach()


def dispatch_state():
    """(SIMD level attached to this module, bit mask of levels whose kernels ran here)."""
    return attnx_get_level(), attnx_dispatched_levels()


cdef void exp_shifted(const floating *x, floating *y, Py_ssize_t n,
                      double shift) noexcept nogil:
    """y = exp(x - shift) with the fused kernels' softmax exp at this module's level
    (accuracy tests: attnx.kernels._testing.flash_exp)."""
    if floating is float:
        attnx_flash_exp_f32(x, y, n, <float> shift)
    else:
        attnx_flash_exp_f64(x, y, n, shift)


# ---------------------------------------------------------------- heads
cdef inline Py_ssize_t item_runs(Py_ssize_t nbh, Py_ssize_t per_head,
                                 int nthreads) noexcept nogil:
    """Work items a thread takes at a time: one run of whole heads per thread when
    they divide evenly (or are plenty), else one item. Heads of one sample share the
    cache lines of every row of Q, K, V, Z and their gradients (d_head 8: 32 bytes a
    head, two heads a line): dealt out one at a time, the two cores wrote the same
    lines of Z, dK and dV head after head, and the backward's transposes took 2.3x
    their one-thread CPU time at two threads (B32 T128 d64 H8, Xeon SPR class). Every
    head costs the same, so runs of whole heads balance; fewer heads than runs, or a
    remainder, keep one item at a time (which thread runs an item never changes
    its result)."""
    if nthreads <= 1:
        return 1
    if nbh % nthreads == 0:
        return nbh // nthreads * per_head
    if nbh >= 4 * nthreads:
        return (nbh + 4 * nthreads - 1) // (4 * nthreads) * per_head
    return 1


cdef void heads_forward(const floating *q, const floating *k, const floating *v,
                        floating *z, floating *lse, floating *scratch,
                        const Dims *dm) noexcept nogil:
    """Z and lse (NULL: inference) in parallel over (sample, head, query chunk). A
    chunk is as many query blocks as leave at least 8 work items per thread (whole
    heads when there are enough of them): each item packs its head's K^T and V once."""
    cdef Py_ssize_t ldq = dm.ldq, ldkv = dm.ldkv, ldz = dm.ldz, nb = dm.nb
    cdef int tq = <int> dm.tq, tk = <int> dm.tk, n_heads = <int> dm.n_heads
    cdef int d_head = <int> dm.d_head, nthreads = dm.nthreads
    cdef floating scale = <floating> dm.scale
    cdef bint causal = dm.causal
    cdef const uint8_t *keymask = dm.keymask
    cdef Py_ssize_t per_thread = dm.fwd_per_thread
    cdef Py_ssize_t nblk = (tq + ATTNX_FL_BQ - 1) // ATTNX_FL_BQ
    cdef Py_ssize_t want = (8 * nthreads + nb * n_heads - 1) // (nb * n_heads)
    cdef Py_ssize_t nchunk, rows, it, bh, b, h, i0, run
    cdef int nq
    cdef const uint8_t *km
    cdef floating *ws
    if <double> nb * n_heads * tq * tk * d_head < 2.0e5:
        nthreads = 1  # too little work to pay for waking threads
    if nthreads == 1:
        want = 1
    nchunk = want if want < nblk else nblk
    rows = (nblk + nchunk - 1) // nchunk * ATTNX_FL_BQ
    nchunk = (tq + rows - 1) // rows
    run = item_runs(nb * n_heads, nchunk, nthreads)
    for it in prange(nb * n_heads * nchunk, schedule="dynamic", chunksize=run,
                     num_threads=nthreads, use_threads_if=nthreads > 1):
        bh = it // nchunk
        i0 = (it % nchunk) * rows
        b = bh // n_heads
        h = bh % n_heads
        nq = <int> (tq - i0 if tq - i0 < rows else rows)
        km = (keymask + b * tk) if keymask != NULL else NULL
        ws = scratch + threadid() * per_thread
        if floating is float:
            attnx_flash_forward_rows_f32(
                q + (b * tq + i0) * ldq + h * d_head, ldq,
                k + b * tk * ldkv + h * d_head, v + b * tk * ldkv + h * d_head, ldkv,
                z + (b * tq + i0) * ldz + h * d_head, ldz,
                (lse + bh * tq + i0) if lse != NULL else NULL,
                <int> i0, nq, tk, d_head, scale, causal, km, ws)
        else:
            attnx_flash_forward_rows_f64(
                q + (b * tq + i0) * ldq + h * d_head, ldq,
                k + b * tk * ldkv + h * d_head, v + b * tk * ldkv + h * d_head, ldkv,
                z + (b * tq + i0) * ldz + h * d_head, ldz,
                (lse + bh * tq + i0) if lse != NULL else NULL,
                <int> i0, nq, tk, d_head, scale, causal, km, ws)


cdef void heads_backward(const floating *q, const floating *k, const floating *v,
                         const floating *z, const floating *dz, const floating *lse,
                         floating *dq, floating *dk, floating *dv, floating *scratch,
                         floating *parts, const Dims *dm) noexcept nogil:
    """dQ, dK, dV in parallel over (sample, head, key range) (key_splits ranges per
    head). A range's dK and dV rows belong to one thread; its share of dQ goes to
    dq (first range) or to `parts` (the others), summed into dq afterwards in range
    order, so the result does not depend on which thread ran what."""
    cdef Py_ssize_t ldq = dm.ldq, ldkv = dm.ldkv, ldz = dm.ldz, nb = dm.nb
    cdef int tq = <int> dm.tq, tk = <int> dm.tk, n_heads = <int> dm.n_heads
    cdef int d_head = <int> dm.d_head, nthreads = dm.nthreads
    cdef floating scale = <floating> dm.scale
    cdef bint causal = dm.causal
    cdef const uint8_t *keymask = dm.keymask
    cdef Py_ssize_t per_thread = dm.bwd_per_thread
    cdef Py_ssize_t nbh = nb * n_heads
    cdef Py_ssize_t nsplit, per, it, bh, b, h, c, ka, kb, r, j, row, run
    cdef Py_ssize_t lddq
    cdef const uint8_t *km
    cdef floating *ws
    cdef floating *dqt
    cdef floating *dst
    cdef const floating *src
    nthreads = backward_threads(nbh, tq, tk, d_head, nthreads)
    nsplit = key_splits(nbh, tk, nthreads)
    per = ((tk + ATTNX_FL_BK - 1) // ATTNX_FL_BK + nsplit - 1) // nsplit * ATTNX_FL_BK
    run = item_runs(nbh, nsplit, nthreads)
    for it in prange(nbh * nsplit, schedule="dynamic", chunksize=run, num_threads=nthreads,
                     use_threads_if=nthreads > 1):
        bh = it // nsplit
        c = it % nsplit
        b = bh // n_heads
        h = bh % n_heads
        ka = c * per
        kb = tk if ka + per > tk else ka + per
        km = (keymask + b * tk) if keymask != NULL else NULL
        ws = scratch + threadid() * per_thread
        if c == 0:
            dqt = dq + b * tq * ldq + h * d_head
            lddq = ldq
        else:
            dqt = parts + ((c - 1) * nbh + bh) * tq * d_head
            lddq = d_head
        if floating is float:
            attnx_flash_backward_head_f32(
                q + b * tq * ldq + h * d_head, ldq, k + b * tk * ldkv + h * d_head,
                v + b * tk * ldkv + h * d_head, ldkv, z + b * tq * ldz + h * d_head,
                dz + b * tq * ldz + h * d_head, ldz, lse + bh * tq, dqt, lddq,
                dk + b * tk * ldkv + h * d_head, dv + b * tk * ldkv + h * d_head,
                tq, tk, <int> ka, <int> kb, d_head, scale, causal, km, ws)
        else:
            attnx_flash_backward_head_f64(
                q + b * tq * ldq + h * d_head, ldq, k + b * tk * ldkv + h * d_head,
                v + b * tk * ldkv + h * d_head, ldkv, z + b * tq * ldz + h * d_head,
                dz + b * tq * ldz + h * d_head, ldz, lse + bh * tq, dqt, lddq,
                dk + b * tk * ldkv + h * d_head, dv + b * tk * ldkv + h * d_head,
                tq, tk, <int> ka, <int> kb, d_head, scale, causal, km, ws)
    if nsplit > 1:
        for row in prange(nbh * tq, schedule="static", num_threads=nthreads, use_threads_if=nthreads > 1):
            bh = row // tq
            r = row % tq
            b = bh // n_heads
            h = bh % n_heads
            dst = dq + (b * tq + r) * ldq + h * d_head
            for c in range(1, nsplit):
                src = parts + ((c - 1) * nbh + bh) * tq * d_head + r * d_head
                for j in range(d_head):
                    dst[j] = dst[j] + src[j]


# ---------------------------------------------------------------- layer
cdef void heads_fwd(const Call *c, floating *qp, floating *kp) noexcept nogil:
    """The fused heads of a forward (attnx.kernels._attnargs.Heads); lse kept when store."""
    heads_forward(qp, kp, kp + c.dm.d, <floating *> c.zcat,
                  <floating *> c.lse if c.dm.store else NULL, <floating *> c.fwd_scratch,
                  &c.dm)


cdef void heads_bwd(const Call *c, floating *qp, floating *kp, floating *dqp,
                    floating *dkp) noexcept nogil:
    """The fused heads of a backward (attnx.kernels._attnargs.Heads)."""
    heads_backward(qp, kp, kp + c.dm.d, <const floating *> c.zcat, <const floating *> c.dzcat,
                   <const floating *> c.lse, dqp, dkp, dkp + c.dm.d, <floating *> c.fwd_scratch,
                   <floating *> c.dq_parts, &c.dm)


cdef Heads HEADS = Heads(heads_fwd[float], heads_fwd[double], heads_bwd[float],
                         heads_bwd[double], True)


cdef const Heads *fused_heads() noexcept nogil:
    return &HEADS


def attention_forward(AttnShape shape, AttnBuffers buffers, AttnParams params, x, ctx,
                      key_padding_mask, rope, residual, y, int nthreads):
    """Y = concat_h(softmax(Q_h K_h^T / sqrt(d_head) + mask) V_h) Wo + bo (+ residual)
    with the fused kernels: arguments and checks as attnx.kernels._attention.attention_forward
    (a shape of path "fused"); the log-sum-exp goes to buffers.lse when shape.store."""
    require_simd()
    cdef Call c
    begin_run(shape, buffers, params, x, ctx, key_padding_mask, rope, nthreads, False,
              &HEADS, &c)
    run_forward(shape, &c, residual, y, &HEADS)


def attention_backward(AttnShape shape, AttnBuffers buffers, AttnParams params, x, ctx,
                       key_padding_mask, rope, dy, dx, dctx, int accumulate, int nthreads):
    """The fused backward: arguments and checks as attnx.kernels._attention.attention_backward
    (the dQ shares buffer must fit the key split at this thread count)."""
    require_simd()
    cdef Call c
    begin_run(shape, buffers, params, x, ctx, key_padding_mask, rope, nthreads, True,
              &HEADS, &c)
    run_backward(shape, &c, dy, dx, dctx, accumulate, &HEADS)
