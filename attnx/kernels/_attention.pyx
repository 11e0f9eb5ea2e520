"""Multi-head attention kernels: forward beside backward.

Buffers are row-major and batched: a sequence tensor (B, T, w) is a (B*T, w)
matrix. Q, K and V live side by side in projection buffers; head h of a
sequence b is addressed by pointer offset (b*T rows, h*d_head columns) and the
buffer's leading dimension, so no head is ever copied out.

Self-attention keeps [Q | K | V] in one (B*T, 3d) buffer made by one GEMM.
Cross-attention keeps Q (B*Tq, d) and [K | V] (B*Tk, 2d) apart, each one GEMM.
"""
from cython.parallel cimport prange, threadid
from libc.stdint cimport uint8_t
from libc.math cimport exp, log, INFINITY

from attnx.kernels._blas cimport floating, gemm, NT, TR
from attnx.kernels._ops cimport (Dims, simd_attach, require_simd, attnx_get_level,
                         attnx_dispatched_levels)
from attnx.kernels._attnargs cimport (AttnShape, AttnBuffers, AttnParams, Call, Heads, begin_run,
                              run_forward, run_backward)

cdef extern from "attnx_math.h" nogil:
    float attnx_rowmax_f32(const float *s, Py_ssize_t n)
    float attnx_expsub_sum_f32(float *s, Py_ssize_t n, float mx)
    double attnx_rowmax_f64(const double *s, Py_ssize_t n)
    double attnx_expsub_sum_f64(double *s, Py_ssize_t n, double mx)
    void attnx_softmax_row_f32(float *s, Py_ssize_t n, Py_ssize_t n_valid, const uint8_t *keymask)
    void attnx_softmax_row_f64(double *s, Py_ssize_t n, Py_ssize_t n_valid, const uint8_t *keymask)
    void attnx_softmax_bwd_row_f32(const float *a, float *da, Py_ssize_t n, Py_ssize_t n_valid)
    void attnx_softmax_bwd_row_f64(const double *a, double *da, Py_ssize_t n, Py_ssize_t n_valid)

# AVX-512 / AVX2 / portable softmax and exp: the level attnx.kernels._ops detected.
simd_attach()


def dispatch_state():
    """(SIMD level attached to this module, bit mask of levels whose kernels ran here)."""
    return attnx_get_level(), attnx_dispatched_levels()


cdef inline void softmax_rows(floating *s, Py_ssize_t row0, Py_ssize_t rows, Py_ssize_t tk,
                              bint causal,
                              const uint8_t *keymask) noexcept nogil:
    """Row softmax of a (rows, tk) score block whose first row is query row0;
    causal keeps keys j <= query index."""
    cdef Py_ssize_t i, n_valid
    for i in range(rows):
        n_valid = (row0 + i + 1 if row0 + i + 1 < tk else tk) if causal else tk
        if floating is float:
            attnx_softmax_row_f32(s + <Py_ssize_t> i * tk, tk, n_valid, keymask)
        else:
            attnx_softmax_row_f64(s + <Py_ssize_t> i * tk, tk, n_valid, keymask)


cdef inline void softmax_bwd_rows(const floating *a, floating *da, Py_ssize_t row0, Py_ssize_t rows,
                                  Py_ssize_t tk, bint causal) noexcept nogil:
    cdef Py_ssize_t i, n_valid
    for i in range(rows):
        n_valid = (row0 + i + 1 if row0 + i + 1 < tk else tk) if causal else tk
        if floating is float:
            attnx_softmax_bwd_row_f32(a + i * tk, da + i * tk, tk, n_valid)
        else:
            attnx_softmax_bwd_row_f64(a + i * tk, da + i * tk, tk, n_valid)


# Causal attention works in row blocks of this many queries: block [i0, i1) only
# needs keys [0, i1), so the GEMMs skip the masked upper triangle block-wise.
cdef enum:
    CAUSAL_BLOCK = 64


cdef inline Py_ssize_t n_row_blocks(Py_ssize_t tq, bint causal) noexcept nogil:
    return (tq + CAUSAL_BLOCK - 1) // CAUSAL_BLOCK if causal else 1


cdef inline void transpose_head(const floating *x, Py_ssize_t ld, Py_ssize_t rows, Py_ssize_t cols,
                                floating *out) noexcept nogil:
    """out (cols, rows) = x[:rows, :cols]^T for x with leading dimension ld."""
    cdef Py_ssize_t r, c
    for r in range(rows):
        for c in range(cols):
            out[c * rows + r] = x[r * ld + c]


cdef void heads_forward(const floating *q, const floating *k, const floating *v, floating *z,
                        floating *probs, floating *tbuf, const Dims *dm) noexcept nogil:
    """Per (batch, head): P = softmax(scale Q K^T + mask), Z = P V.

    probs holds (nb, n_heads, tq, tk) when store, else one (tq, tk) block per
    thread (inference: P is not kept). tbuf: (d_head, tk) per thread for K_h^T:
    OpenBLAS multiplies a thin Q_h by a transposed thin K_h about twice as slowly
    as by an explicit K_h^T, and the copy is d_head*tk elements against the
    GEMM's tq*tk*d_head multiply-adds.
    """
    cdef Py_ssize_t ldq = dm.ldq, ldkv = dm.ldkv, ldz = dm.ldz
    cdef Py_ssize_t nb = dm.nb, tq = dm.tq, tk = dm.tk, n_heads = dm.n_heads, d_head = dm.d_head
    cdef floating scale = <floating> dm.scale
    cdef bint causal = dm.causal
    cdef int nthreads = dm.nthreads
    cdef const uint8_t *keymask = dm.keymask
    cdef bint store = dm.store
    cdef Py_ssize_t bh, b, h, tid
    cdef Py_ssize_t blk = tq * tk
    cdef Py_ssize_t r, i0, i1, kk, nblk = n_row_blocks(tq, causal)
    cdef floating *p
    cdef floating *kt
    cdef const floating *qh
    cdef const floating *vh
    cdef const uint8_t *km
    if <double> nb * n_heads * blk * d_head < 1.0e5:
        nthreads = 1  # too little work to pay for waking threads
    for bh in prange(nb * n_heads, schedule="static", num_threads=nthreads, use_threads_if=nthreads > 1):
        b = bh // n_heads
        h = bh % n_heads
        tid = threadid()
        p = probs + (bh if store else tid) * blk
        km = (keymask + b * tk) if keymask != NULL else NULL
        qh = q + b * tq * ldq + h * d_head
        kt = tbuf + tid * d_head * tk
        transpose_head(k + b * tk * ldkv + h * d_head, ldkv, tk, d_head, kt)
        vh = v + b * tk * ldkv + h * d_head
        for r in range(nblk):
            i0 = r * CAUSAL_BLOCK if causal else 0
            i1 = min(i0 + CAUSAL_BLOCK, tq) if causal else tq
            kk = min(i1, tk) if causal else tk
            gemm(NT, NT, i1 - i0, kk, d_head, scale, qh + i0 * ldq, ldq, kt, tk,
                 <floating> 0, p + i0 * tk, tk)
            softmax_rows(p + i0 * tk, i0, i1 - i0, tk, causal, km)
            gemm(NT, NT, i1 - i0, d_head, kk, <floating> 1, p + i0 * tk, tk, vh, ldkv,
                 <floating> 0, z + (b * tq + i0) * ldz + h * d_head, ldz)


cdef void heads_backward(const floating *q, const floating *k, const floating *v,
                         const floating *dz, const floating *probs, floating *scratch,
                         floating *tbuf, floating *dq, floating *dk, floating *dv,
                         const Dims *dm) noexcept nogil:
    """Per (batch, head): dV = P^T dZ, dP = dZ V^T, dS = P*(dP - rowsum(dP*P)),
    dQ = scale dS K, dK = scale dS^T Q. dq shares ldq, dk/dv share ldkv.

    Causal row blocks run last to first: the last block touches every key and
    writes dK/dV (beta 0); earlier blocks, with fewer keys, add onto them."""
    cdef Py_ssize_t ldq = dm.ldq, ldkv = dm.ldkv, ldz = dm.ldz
    cdef Py_ssize_t nb = dm.nb, tq = dm.tq, tk = dm.tk, n_heads = dm.n_heads, d_head = dm.d_head
    cdef floating scale = <floating> dm.scale
    cdef bint causal = dm.causal
    cdef int nthreads = dm.nthreads
    cdef Py_ssize_t bh, b, h, tid
    cdef Py_ssize_t blk = tq * tk
    cdef Py_ssize_t r, i0, i1, kk, nblk = n_row_blocks(tq, causal)
    cdef floating acc
    cdef const floating *p
    cdef floating *ds
    cdef const floating *qh
    cdef const floating *kh
    cdef floating *vt
    cdef const floating *dzh
    cdef floating *dkh
    cdef floating *dvh
    if <double> nb * n_heads * blk * d_head < 1.0e5:
        nthreads = 1
    for bh in prange(nb * n_heads, schedule="static", num_threads=nthreads, use_threads_if=nthreads > 1):
        b = bh // n_heads
        h = bh % n_heads
        tid = threadid()
        p = probs + bh * blk
        ds = scratch + tid * blk
        qh = q + b * tq * ldq + h * d_head
        kh = k + b * tk * ldkv + h * d_head
        vt = tbuf + tid * d_head * tk
        transpose_head(v + b * tk * ldkv + h * d_head, ldkv, tk, d_head, vt)
        dzh = dz + b * tq * ldz + h * d_head
        dkh = dk + b * tk * ldkv + h * d_head
        dvh = dv + b * tk * ldkv + h * d_head
        if causal and tk > tq:
            # keys past the last query get no gradient from any row block
            zero_rows(dkh + tq * ldkv, tk - tq, d_head, ldkv)
            zero_rows(dvh + tq * ldkv, tk - tq, d_head, ldkv)
        for r in range(nblk - 1, -1, -1):
            i0 = r * CAUSAL_BLOCK if causal else 0
            i1 = min(i0 + CAUSAL_BLOCK, tq) if causal else tq
            kk = min(i1, tk) if causal else tk
            acc = 0 if r == nblk - 1 else 1
            gemm(TR, NT, kk, d_head, i1 - i0, <floating> 1, p + i0 * tk, tk,
                 dzh + i0 * ldz, ldz, acc, dvh, ldkv)
            gemm(NT, NT, i1 - i0, kk, d_head, <floating> 1, dzh + i0 * ldz, ldz, vt, tk,
                 <floating> 0, ds + i0 * tk, tk)
            softmax_bwd_rows(p + i0 * tk, ds + i0 * tk, i0, i1 - i0, tk, causal)
            gemm(NT, NT, i1 - i0, d_head, kk, scale, ds + i0 * tk, tk, kh, ldkv,
                 <floating> 0, dq + (b * tq + i0) * ldq + h * d_head, ldq)
            gemm(TR, NT, kk, d_head, i1 - i0, scale, ds + i0 * tk, tk,
                 qh + i0 * ldq, ldq, acc, dkh, ldkv)


cdef inline void zero_rows(floating *x, Py_ssize_t rows, Py_ssize_t cols,
                           Py_ssize_t ld) noexcept nogil:
    cdef Py_ssize_t r, j
    for r in range(rows):
        for j in range(cols):
            x[r * ld + j] = 0



# ---------------------------------------------------------------------------
# Blocked attention (online softmax): O(T) memory. Queries in blocks of blk_q
# rows, keys in blocks of blk_k (the shape's block sizes, attnx.kernels._attnargs); only
# the output and the per-row log-sum-exp are kept. Backward recomputes P block by
# block.
cdef inline floating rowmax(const floating *s, Py_ssize_t n) noexcept nogil:
    if floating is float:
        return attnx_rowmax_f32(s, n)
    else:
        return attnx_rowmax_f64(s, n)


cdef inline floating expsub_sum(floating *s, Py_ssize_t n, floating mx) noexcept nogil:
    if floating is float:
        return attnx_expsub_sum_f32(s, n, mx)
    else:
        return attnx_expsub_sum_f64(s, n, mx)


cdef inline void mask_block(floating *s, Py_ssize_t rows, Py_ssize_t cols, Py_ssize_t i0,
                            Py_ssize_t j0, bint causal,
                            const uint8_t *km) noexcept nogil:
    """-inf where key j0+j is padding or, causal, lies after query i0+r."""
    cdef Py_ssize_t r, j, nv
    for r in range(rows):
        if causal:
            nv = i0 + r + 1 - j0
            for j in range(nv if nv > 0 else 0, cols):
                s[r * cols + j] = -INFINITY
        if km != NULL:
            for j in range(cols):
                if km[j0 + j]:
                    s[r * cols + j] = -INFINITY


cdef inline void block_scores(const floating *qh, const floating *kh, const uint8_t *km,
                              floating *s, Py_ssize_t i0, Py_ssize_t j0, Py_ssize_t bq,
                              Py_ssize_t bk, const Dims *dm) noexcept nogil:
    """s (bq, bk) = scale Q[i0:i0+bq] K[j0:j0+bk]^T of one head, -inf where masked:
    the score block of the blocked forward, recomputed alike by its backward. qh, kh:
    the head's columns of Q and K, km: its sequence's key mask (or NULL); the head
    width, leading dimensions, scale and causality are the call's (dm)."""
    gemm(NT, TR, bq, bk, dm.d_head, <floating> dm.scale, qh + i0 * dm.ldq, dm.ldq,
         kh + j0 * dm.ldkv, dm.ldkv, <floating> 0, s, bk)
    if dm.causal or km != NULL:
        mask_block(s, bq, bk, i0, j0, dm.causal, km)


cdef void heads_forward_blocked(const floating *q, const floating *k, const floating *v,
                                floating *z, floating *lse, floating *scratch,
                                const Dims *dm) noexcept nogil:
    """Per (batch, head), per query block: running max m, running sum l and an
    accumulator rescaled by exp(m_old - m_new) as key blocks stream past;
    Z = acc / l and lse = m + log l (-inf and Z = 0 for a row with no key)."""
    cdef Py_ssize_t ldq = dm.ldq, ldkv = dm.ldkv, ldz = dm.ldz
    cdef Py_ssize_t nb = dm.nb, tq = dm.tq, tk = dm.tk, n_heads = dm.n_heads, d_head = dm.d_head
    cdef bint causal = dm.causal
    cdef int nthreads = dm.nthreads
    cdef const uint8_t *keymask = dm.keymask
    cdef Py_ssize_t per_thread = dm.fwd_per_thread, blk_q = dm.bq, blk_k = dm.bk
    cdef Py_ssize_t bh, b, h
    cdef Py_ssize_t i0, j0, bq, bk, jend, r, c
    cdef floating mx, mold, alpha, ssum
    cdef floating *sblk
    cdef floating *acc
    cdef floating *mrow
    cdef floating *lrow
    cdef floating *row
    cdef const floating *qh
    cdef const floating *kh
    cdef const floating *vh
    cdef floating *zh
    cdef const uint8_t *km
    for bh in prange(nb * n_heads, schedule="dynamic", num_threads=nthreads, use_threads_if=nthreads > 1):
        b = bh // n_heads
        h = bh % n_heads
        sblk = scratch + threadid() * per_thread
        acc = sblk + blk_q * blk_k
        mrow = acc + blk_q * d_head
        lrow = mrow + blk_q
        qh = q + b * tq * ldq + h * d_head
        kh = k + b * tk * ldkv + h * d_head
        vh = v + b * tk * ldkv + h * d_head
        zh = z + b * tq * ldz + h * d_head
        km = (keymask + b * tk) if keymask != NULL else NULL
        i0 = 0
        while i0 < tq:
            bq = min(blk_q, tq - i0)
            for r in range(bq):
                mrow[r] = -INFINITY
                lrow[r] = 0
                for c in range(d_head):
                    acc[r * d_head + c] = 0
            jend = min(tk, i0 + bq) if causal else tk
            j0 = 0
            while j0 < jend:
                bk = min(blk_k, jend - j0)
                block_scores(qh, kh, km, sblk, i0, j0, bq, bk, dm)
                for r in range(bq):
                    row = sblk + r * bk
                    mold = mrow[r]
                    mx = rowmax(row, bk)
                    if mx < mold:
                        mx = mold
                    if mx == -INFINITY:
                        for c in range(bk):
                            row[c] = 0
                        continue
                    alpha = <floating> exp(mold - mx)
                    ssum = expsub_sum(row, bk, mx)
                    lrow[r] = lrow[r] * alpha + ssum
                    mrow[r] = mx
                    if alpha != 1:
                        for c in range(d_head):
                            acc[r * d_head + c] *= alpha
                gemm(NT, NT, bq, d_head, bk, <floating> 1, sblk, bk, vh + j0 * ldkv, ldkv,
                     <floating> 1, acc, d_head)
                j0 = j0 + bk
            for r in range(bq):
                # l == 0: no key at all (masked row). NaN (score overflow) is divided
                # through so that it reaches the output, as on the dense path.
                if lrow[r] != 0:
                    for c in range(d_head):
                        zh[(i0 + r) * ldz + c] = acc[r * d_head + c] / lrow[r]
                    lse[bh * tq + i0 + r] = mrow[r] + <floating> log(lrow[r])
                else:
                    for c in range(d_head):
                        zh[(i0 + r) * ldz + c] = 0
                    lse[bh * tq + i0 + r] = -INFINITY
            i0 = i0 + bq


cdef void heads_backward_blocked(const floating *q, const floating *k, const floating *v,
                                 const floating *z, const floating *dz, const floating *lse,
                                 floating *scratch, floating *dq, floating *dk, floating *dv,
                                 const Dims *dm) noexcept nogil:
    """P = exp(scale Q K^T - lse) recomputed per block; with D = rowsum(dZ * Z):
    dV += P^T dZ, dS = P * (dZ V^T - D), dQ += scale dS K, dK += scale dS^T Q.
    Each (batch, head) belongs to one thread, so dK and dV need no locks."""
    cdef Py_ssize_t ldq = dm.ldq, ldkv = dm.ldkv, ldz = dm.ldz
    cdef Py_ssize_t nb = dm.nb, tq = dm.tq, tk = dm.tk, n_heads = dm.n_heads, d_head = dm.d_head
    cdef floating scale = <floating> dm.scale
    cdef bint causal = dm.causal
    cdef int nthreads = dm.nthreads
    cdef const uint8_t *keymask = dm.keymask
    cdef Py_ssize_t per_thread = dm.bwd_per_thread, blk_q = dm.bq, blk_k = dm.bk
    cdef Py_ssize_t bh, b, h
    cdef Py_ssize_t i0, j0, bq, bk, jend, r, c
    cdef floating L, dd
    cdef bint first
    cdef floating *pblk
    cdef floating *dpblk
    cdef floating *dvec
    cdef const floating *qh
    cdef const floating *kh
    cdef const floating *vh
    cdef const floating *zh
    cdef const floating *dzh
    cdef floating *dqh
    cdef floating *dkh
    cdef floating *dvh
    cdef const uint8_t *km
    for bh in prange(nb * n_heads, schedule="dynamic", num_threads=nthreads, use_threads_if=nthreads > 1):
        b = bh // n_heads
        h = bh % n_heads
        pblk = scratch + threadid() * per_thread
        dpblk = pblk + blk_q * blk_k
        dvec = dpblk + blk_q * blk_k
        qh = q + b * tq * ldq + h * d_head
        kh = k + b * tk * ldkv + h * d_head
        vh = v + b * tk * ldkv + h * d_head
        zh = z + b * tq * ldz + h * d_head
        dzh = dz + b * tq * ldz + h * d_head
        dqh = dq + b * tq * ldq + h * d_head
        dkh = dk + b * tk * ldkv + h * d_head
        dvh = dv + b * tk * ldkv + h * d_head
        km = (keymask + b * tk) if keymask != NULL else NULL
        zero_rows(dkh, tk, d_head, ldkv)
        zero_rows(dvh, tk, d_head, ldkv)
        for r in range(tq):
            dd = 0
            for c in range(d_head):
                dd = dd + dzh[r * ldz + c] * zh[r * ldz + c]
            dvec[r] = dd
        i0 = 0
        while i0 < tq:
            bq = min(blk_q, tq - i0)
            jend = min(tk, i0 + bq) if causal else tk
            first = True
            j0 = 0
            while j0 < jend:
                bk = min(blk_k, jend - j0)
                block_scores(qh, kh, km, pblk, i0, j0, bq, bk, dm)
                for r in range(bq):
                    L = lse[bh * tq + i0 + r]
                    if L == -INFINITY:
                        for c in range(bk):
                            pblk[r * bk + c] = 0
                    else:
                        expsub_sum(pblk + r * bk, bk, L)
                gemm(TR, NT, bk, d_head, bq, <floating> 1, pblk, bk, dzh + i0 * ldz, ldz,
                     <floating> 1, dvh + j0 * ldkv, ldkv)
                gemm(NT, TR, bq, bk, d_head, <floating> 1, dzh + i0 * ldz, ldz,
                     vh + j0 * ldkv, ldkv, <floating> 0, dpblk, bk)
                for r in range(bq):
                    dd = dvec[i0 + r]
                    for c in range(bk):
                        dpblk[r * bk + c] = pblk[r * bk + c] * (dpblk[r * bk + c] - dd)
                gemm(NT, NT, bq, d_head, bk, scale, dpblk, bk, kh + j0 * ldkv, ldkv,
                     <floating> (0 if first else 1), dqh + i0 * ldq, ldq)
                gemm(TR, NT, bk, d_head, bq, scale, dpblk, bk, qh + i0 * ldq, ldq,
                     <floating> 1, dkh + j0 * ldkv, ldkv)
                first = False
                j0 = j0 + bk
            i0 = i0 + bq


cdef void heads_fwd(const Call *c, floating *qp, floating *kp) noexcept nogil:
    """The dense or blocked heads of a forward (attnx.kernels._attnargs.Heads)."""
    if c.lse != NULL:
        heads_forward_blocked(qp, kp, kp + c.dm.d, <floating *> c.zcat, <floating *> c.lse,
                              <floating *> c.fwd_scratch, &c.dm)
    else:
        heads_forward(qp, kp, kp + c.dm.d, <floating *> c.zcat, <floating *> c.probs,
                      <floating *> c.tbuf, &c.dm)


cdef void heads_bwd(const Call *c, floating *qp, floating *kp, floating *dqp,
                    floating *dkp) noexcept nogil:
    """The dense or blocked heads of a backward (attnx.kernels._attnargs.Heads)."""
    if c.lse != NULL:
        heads_backward_blocked(qp, kp, kp + c.dm.d, <const floating *> c.zcat,
                               <const floating *> c.dzcat, <const floating *> c.lse,
                               <floating *> c.bwd_scratch, dqp, dkp, dkp + c.dm.d, &c.dm)
    else:
        heads_backward(qp, kp, kp + c.dm.d, <const floating *> c.dzcat,
                       <const floating *> c.probs, <floating *> c.bwd_scratch,
                       <floating *> c.tbuf, dqp, dkp, dkp + c.dm.d, &c.dm)


cdef Heads HEADS = Heads(heads_fwd[float], heads_fwd[double], heads_bwd[float],
                         heads_bwd[double], False)


cdef const Heads *dense_heads() noexcept nogil:
    return &HEADS


def attention_forward(AttnShape shape, AttnBuffers buffers, AttnParams params, x, ctx,
                      key_padding_mask, rope, residual, y, int nthreads):
    """Y = concat_h(softmax(Q_h K_h^T / sqrt(d_head) + mask) V_h) Wo + bo (+ residual),
    dense or blocked as `shape` says (attnx.kernels._attnargs: the argument order of every
    attention entry point).

    x (B*Tq, d), ctx (B*Tk, d) or None (self-attention), key_padding_mask (B, Tk)
    uint8 or None, rope None or (cos, sin) tables (>= max(Tq, Tk), d_head/2),
    residual (B*Tq, d) or None, y (B*Tq, d) output; nthreads in [1, shape.threads].
    Every array is checked (shape, dtype, layout) before any work; ValueError
    otherwise. The dense path keeps the probabilities in buffers.probs when
    shape.store; the blocked path the log-sum-exp in buffers.lse.
    """
    require_simd()
    cdef Call c
    begin_run(shape, buffers, params, x, ctx, key_padding_mask, rope, nthreads, False,
              &HEADS, &c)
    run_forward(shape, &c, residual, y, &HEADS)


def attention_backward(AttnShape shape, AttnBuffers buffers, AttnParams params, x, ctx,
                       key_padding_mask, rope, dy, dx, dctx, int accumulate, int nthreads):
    """Fill the gradients of `params` from dY (B*Tq, d) of the forward that ran with
    these arguments (x, ctx, key_padding_mask, rope as there; buffers as it left
    them); write dL/dx into dx and dL/dctx into dctx (None: not needed), or add to
    what they hold where accumulate has ACCUMULATE_DX / ACCUMULATE_DCTX set (a
    residual path, or context shared by several layers). Checked as the forward.
    """
    require_simd()
    cdef Call c
    begin_run(shape, buffers, params, x, ctx, key_padding_mask, rope, nthreads, True,
              &HEADS, &c)
    run_backward(shape, &c, dy, dx, dctx, accumulate, &HEADS)
