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

from attnx._blas cimport floating, gemm, NT, TR
from attnx._ops cimport (rope_rotate, simd_attach, attnx_get_level, attnx_dispatched_levels,
                         key_columns, in1, in2, out1, out2, qkv_project, out_project, qkv_project_backward,
                         out_project_backward)
from attnx._blas import check_blas_int

cdef extern from "attnx_math.h" nogil:
    float attnx_rowmax_f32(const float *s, Py_ssize_t n)
    float attnx_expsub_sum_f32(float *s, Py_ssize_t n, float mx)
    double attnx_rowmax_f64(const double *s, Py_ssize_t n)
    double attnx_expsub_sum_f64(double *s, Py_ssize_t n, double mx)
    void attnx_softmax_row_f32(float *s, Py_ssize_t n, Py_ssize_t n_valid, const uint8_t *keymask)
    void attnx_softmax_row_f64(double *s, Py_ssize_t n, Py_ssize_t n_valid, const uint8_t *keymask)
    void attnx_softmax_bwd_row_f32(const float *a, float *da, Py_ssize_t n, Py_ssize_t n_valid)
    void attnx_softmax_bwd_row_f64(const double *a, double *da, Py_ssize_t n, Py_ssize_t n_valid)

# AVX-512 / AVX2 / portable softmax and exp: the level attnx._ops detected.
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


cdef void heads_forward(const floating *q, Py_ssize_t ldq, const floating *k, const floating *v,
                        Py_ssize_t ldkv, floating *z, Py_ssize_t ldz, floating *probs, bint store,
                        floating *tbuf, Py_ssize_t nb, Py_ssize_t tq, Py_ssize_t tk,
                        Py_ssize_t n_heads, Py_ssize_t d_head,
                        floating scale, bint causal, const uint8_t *keymask,
                        int nthreads) noexcept nogil:
    """Per (batch, head): P = softmax(scale Q K^T + mask), Z = P V.

    probs holds (nb, n_heads, tq, tk) when store, else one (tq, tk) block per
    thread (inference: P is not kept). tbuf: (d_head, tk) per thread for K_h^T:
    OpenBLAS multiplies a thin Q_h by a transposed thin K_h about twice as slowly
    as by an explicit K_h^T, and the copy is d_head*tk elements against the
    GEMM's tq*tk*d_head multiply-adds.
    """
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
    for bh in prange(nb * n_heads, schedule="static", num_threads=nthreads):
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


cdef void heads_backward(const floating *q, Py_ssize_t ldq, const floating *k, const floating *v,
                         Py_ssize_t ldkv, const floating *dz, Py_ssize_t ldz, const floating *probs,
                         floating *scratch, floating *tbuf, floating *dq, floating *dk,
                         floating *dv, Py_ssize_t nb, Py_ssize_t tq, Py_ssize_t tk,
                         Py_ssize_t n_heads, Py_ssize_t d_head,
                         floating scale, bint causal, int nthreads) noexcept nogil:
    """Per (batch, head): dV = P^T dZ, dP = dZ V^T, dS = P*(dP - rowsum(dP*P)),
    dQ = scale dS K, dK = scale dS^T Q. dq shares ldq, dk/dv share ldkv.

    Causal row blocks run last to first: the last block touches every key and
    writes dK/dV (beta 0); earlier blocks, with fewer keys, add onto them."""
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
    for bh in prange(nb * n_heads, schedule="static", num_threads=nthreads):
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
# rows, keys in blocks of blk_k; only the output and the per-row
# log-sum-exp are kept. Backward recomputes P block by block.
cdef Py_ssize_t FLASH_BQ = 128
cdef Py_ssize_t FLASH_BK = 128


def set_block_sizes(Py_ssize_t bq, Py_ssize_t bk):
    """Tuning hook: query and key block sizes of the blocked path. They are part of
    the layers' workspace keys (block_sizes()), so the next forward makes scratch of
    the new size; a kernel handed scratch made for other sizes raises ValueError."""
    global FLASH_BQ, FLASH_BK
    if bq < 1 or bk < 1 or bq > 65536 or bk > 65536:
        raise ValueError(f"block sizes must be in [1, 65536], got bq={bq}, bk={bk}")
    FLASH_BQ, FLASH_BK = bq, bk


def block_sizes():
    """(query block, key block) of the blocked path now."""
    return FLASH_BQ, FLASH_BK


def blocked_scratch_sizes(Py_ssize_t tq, Py_ssize_t d_head, bq=None, bk=None):
    """Per-thread scratch elements of the blocked forward and backward (for the
    current block sizes unless bq/bk are given)."""
    cdef Py_ssize_t q = FLASH_BQ if bq is None else bq
    cdef Py_ssize_t k = FLASH_BK if bk is None else bk
    return (q * k + q * d_head + 2 * q, 2 * q * k + tq)


def check_sizes(Py_ssize_t nb, Py_ssize_t tq, Py_ssize_t tk, Py_ssize_t d_model):
    """ValueError when a GEMM of attention over (nb, tq) queries and (nb, tk) keys of
    width d_model has a dimension or leading dimension beyond BLAS's 32-bit int.
    Pure arithmetic: callable before allocating anything."""
    check_blas_int(f"attention over batch={nb}, Tq={tq}, Tk={tk}, d_model={d_model}",
                   **{"batch*Tq": nb * tq, "batch*Tk": nb * tk, "3*d_model": 3 * d_model,
                      "Tq": tq, "Tk": tk})


cdef _need(str what, Py_ssize_t have, Py_ssize_t need):
    if have < need:
        raise ValueError(f"{what} holds {have} elements, the kernel needs {need} "
                         "(workspace made for other sizes or thread count)")


cdef _check_rope(const floating[:, ::1] c, const floating[:, ::1] s, Py_ssize_t t,
                 Py_ssize_t d_head):
    if c is None:
        return
    if (s is None or c.shape[0] < t or s.shape[0] < t or c.shape[1] != d_head // 2
            or s.shape[1] != d_head // 2):
        raise ValueError(f"rope tables must be ({t}, {d_head // 2}) or longer")


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


cdef void heads_forward_blocked(const floating *q, Py_ssize_t ldq, const floating *k,
                                const floating *v, Py_ssize_t ldkv, floating *z, Py_ssize_t ldz,
                                floating *lse, floating *scratch, Py_ssize_t per_thread,
                                Py_ssize_t blk_q, Py_ssize_t blk_k, Py_ssize_t nb,
                                Py_ssize_t tq, Py_ssize_t tk, Py_ssize_t n_heads,
                                Py_ssize_t d_head,
                                floating scale, bint causal, const uint8_t *keymask,
                                int nthreads) noexcept nogil:
    """Per (batch, head), per query block: running max m, running sum l and an
    accumulator rescaled by exp(m_old - m_new) as key blocks stream past;
    Z = acc / l and lse = m + log l (-inf and Z = 0 for a row with no key)."""
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
    for bh in prange(nb * n_heads, schedule="dynamic", num_threads=nthreads):
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
                gemm(NT, TR, bq, bk, d_head, scale, qh + i0 * ldq, ldq, kh + j0 * ldkv, ldkv,
                     <floating> 0, sblk, bk)
                if causal or km != NULL:
                    mask_block(sblk, bq, bk, i0, j0, causal, km)
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


cdef void heads_backward_blocked(const floating *q, Py_ssize_t ldq, const floating *k,
                                 const floating *v, Py_ssize_t ldkv, const floating *z,
                                 const floating *dz, Py_ssize_t ldz, const floating *lse,
                                 floating *scratch, Py_ssize_t per_thread,
                                 Py_ssize_t blk_q, Py_ssize_t blk_k, floating *dq,
                                 floating *dk, floating *dv, Py_ssize_t nb, Py_ssize_t tq,
                                 Py_ssize_t tk, Py_ssize_t n_heads, Py_ssize_t d_head,
                                 floating scale, bint causal, const uint8_t *keymask,
                                 int nthreads) noexcept nogil:
    """P = exp(scale Q K^T - lse) recomputed per block; with D = rowsum(dZ * Z):
    dV += P^T dZ, dS = P * (dZ V^T - D), dQ += scale dS K, dK += scale dS^T Q.
    Each (batch, head) belongs to one thread, so dK and dV need no locks."""
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
    for bh in prange(nb * n_heads, schedule="dynamic", num_threads=nthreads):
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
                gemm(NT, TR, bq, bk, d_head, scale, qh + i0 * ldq, ldq, kh + j0 * ldkv, ldkv,
                     <floating> 0, pblk, bk)
                if causal or km != NULL:
                    mask_block(pblk, bq, bk, i0, j0, causal, km)
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


def attention_forward(
    const floating[:, ::1] x,        # (B*Tq, d) query input
    const floating[:, ::1] ctx,      # (B*Tk, d) key/value input, or None for self-attention
    const floating[:, ::1] w_qkv,    # (d, 3d) = [Wq | Wk | Wv]
    const floating[::1] b_qkv,       # (3d,) or None
    const floating[:, ::1] w_o,      # (d, d)
    const floating[::1] b_o,         # (d,) or None
    floating[:, ::1] qbuf,           # self: (B*Tq, 3d); cross: (B*Tq, d)
    floating[:, ::1] kvbuf,          # self: unused (None); cross: (B*Tk, 2d)
    floating[:, ::1] zcat,           # (B*Tq, d) concatenated head outputs
    floating[::1] probs,             # (B*H*Tq*Tk) when store, else (nthreads*Tq*Tk)
    floating[:, ::1] y,              # (B*Tq, d) output
    Py_ssize_t nb, Py_ssize_t n_heads, bint causal, bint store,
    const uint8_t[:, ::1] key_padding_mask,   # (B, Tk) or None
    const floating[:, ::1] rope_cos,          # (max(Tq, Tk), d_head/2) or None
    const floating[:, ::1] rope_sin,
    const floating[:, ::1] residual=None,     # (B*Tq, d) added to Y, or None
    floating[::1] lse=None,                   # (B*H*Tq): blocked path; probs is then scratch
    floating[::1] tbuf=None,                  # dense path: (nthreads*d_head*Tk) scratch
    int nthreads=0,                           # OpenMP threads (attnx._threads.num_threads())
):
    """Y = concat_h(softmax(Q_h K_h^T / sqrt(d_head) + mask) V_h) Wo + bo (+ residual).

    Checks, before any work, that every buffer is large enough for these sizes
    and nthreads, and that the GEMM sizes fit BLAS's int (ValueError otherwise).
    """
    cdef Py_ssize_t d = w_o.shape[0]
    cdef Py_ssize_t d_head = d // n_heads
    cdef Py_ssize_t tq = x.shape[0] // nb
    cdef bint cross = ctx is not None
    cdef Py_ssize_t tk = ctx.shape[0] // nb if cross else tq
    cdef floating scale = <floating> (1.0 / (<double> d_head) ** 0.5)
    cdef floating *qp
    cdef floating *kp
    cdef floating *vp
    cdef Py_ssize_t ldq, ldkv
    cdef const uint8_t *km = &key_padding_mask[0, 0] if key_padding_mask is not None else NULL
    cdef Py_ssize_t rq = x.shape[0], rk = tk * nb
    cdef Py_ssize_t bq = FLASH_BQ, bk = FLASH_BK, per_thread = 0
    cdef int nth = nthreads
    # ---- everything the kernels will touch, checked before any work
    if nth < 1:
        raise ValueError(f"nthreads must be >= 1, got {nth}")
    check_sizes(nb, tq, tk, d)
    _need("qbuf", qbuf.shape[0] * qbuf.shape[1], rq * (d if cross else 3 * d))
    if cross:
        _need("kvbuf", kvbuf.shape[0] * kvbuf.shape[1] if kvbuf is not None else 0, rk * 2 * d)
    _need("zcat", zcat.shape[0] * zcat.shape[1], rq * d)
    _need("y", y.shape[0] * y.shape[1], rq * d)
    if key_padding_mask is not None:
        _need("key_padding_mask", key_padding_mask.shape[0] * key_padding_mask.shape[1], nb * tk)
    if residual is not None:
        _need("residual", residual.shape[0] * residual.shape[1], rq * d)
    _check_rope(rope_cos, rope_sin, max(tq, tk), d_head)
    if lse is not None:
        _need("lse", lse.shape[0], nb * n_heads * tq)
        per_thread = probs.shape[0] // nth
        _need("probs (blocked scratch per thread)", per_thread, bq * bk + bq * d_head + 2 * bq)
    else:
        _need("probs", probs.shape[0], (nb * n_heads if store else nth) * tq * tk)
        _need("tbuf", tbuf.shape[0] if tbuf is not None else 0, nth * d_head * tk)
    qp = &qbuf[0, 0]
    kp = key_columns(qp, out2(kvbuf) if cross else NULL, d, &ldq, &ldkv)
    vp = kp + d
    with nogil:
        qkv_project(&x[0, 0], in2(ctx) if cross else NULL, &w_qkv[0, 0], in1(b_qkv), qp,
                    kp if cross else NULL, nb, tq, tk, d, n_heads,
                    in2(rope_cos), in2(rope_sin), nth)
        if lse is not None:
            heads_forward_blocked(qp, ldq, kp, vp, ldkv, &zcat[0, 0], d, &lse[0], &probs[0],
                                  per_thread, bq, bk, nb, tq, tk, n_heads, d_head, scale,
                                  causal, km, nth)
        else:
            heads_forward(qp, ldq, kp, vp, ldkv, &zcat[0, 0], d, &probs[0], store, &tbuf[0],
                          nb, tq, tk, n_heads, d_head, scale, causal, km, nth)
        out_project(&zcat[0, 0], &w_o[0, 0], in1(b_o), in2(residual), &y[0, 0], rq, d, nth)


def attention_backward(
    const floating[:, ::1] x, const floating[:, ::1] ctx,
    const floating[:, ::1] w_qkv, const floating[:, ::1] w_o,
    const floating[:, ::1] qbuf, const floating[:, ::1] kvbuf,
    const floating[:, ::1] zcat, const floating[::1] probs,
    const floating[:, ::1] dy,       # (B*Tq, d)
    floating[:, ::1] dzcat,          # (B*Tq, d) workspace
    floating[:, ::1] dqbuf,          # shaped like qbuf
    floating[:, ::1] dkvbuf,         # shaped like kvbuf (cross) or None
    floating[::1] scratch,           # dense: (nthreads*Tq*Tk); blocked: nthreads * per-thread
    floating[:, ::1] dw_qkv, floating[::1] db_qkv,   # db_* None without bias
    floating[:, ::1] dw_o, floating[::1] db_o,
    floating[:, ::1] dx,             # (B*Tq, d) or None when not needed
    floating[:, ::1] dctx,           # (B*Tk, d) or None
    Py_ssize_t nb, Py_ssize_t n_heads, bint causal,
    const floating[:, ::1] rope_cos, const floating[:, ::1] rope_sin,
    bint dx_accumulate=False, bint dctx_accumulate=False,
    const floating[::1] lse=None,                  # blocked path: from the forward
    const uint8_t[:, ::1] key_padding_mask=None,   # blocked path recomputes the mask
    floating[::1] tbuf=None,                       # dense path: (nthreads*d_head*Tk) scratch
    int nthreads=0,                                # OpenMP threads
):
    """Fill dWqkv, dWo (and biases) from dY; write dL/dx (and dL/dctx) when given.

    With dx_accumulate / dctx_accumulate the input gradients are added to what
    dx / dctx already hold (a residual path, or context shared by several layers).
    Buffer sizes and BLAS int limits are checked first, as in attention_forward.
    """
    cdef int nth = nthreads
    cdef const uint8_t *km = &key_padding_mask[0, 0] if key_padding_mask is not None else NULL
    cdef floating bx = 1 if dx_accumulate else 0
    cdef floating bc = 1 if dctx_accumulate else 0
    cdef Py_ssize_t d = w_o.shape[0]
    cdef Py_ssize_t d_head = d // n_heads
    cdef Py_ssize_t tq = x.shape[0] // nb
    cdef bint cross = ctx is not None
    cdef Py_ssize_t tk = ctx.shape[0] // nb if cross else tq
    cdef floating scale = <floating> (1.0 / (<double> d_head) ** 0.5)
    cdef Py_ssize_t rq = x.shape[0], rk = tk * nb
    cdef Py_ssize_t bq = FLASH_BQ, bk = FLASH_BK, per_thread = 0
    cdef const floating *qp
    cdef const floating *kp
    cdef const floating *vp
    cdef floating *dqp
    cdef floating *dkp
    cdef floating *dvp
    cdef Py_ssize_t ldq, ldkv
    if nth < 1:
        raise ValueError(f"nthreads must be >= 1, got {nth}")
    check_sizes(nb, tq, tk, d)
    _need("qbuf", qbuf.shape[0] * qbuf.shape[1], rq * (d if cross else 3 * d))
    _need("dqbuf", dqbuf.shape[0] * dqbuf.shape[1], rq * (d if cross else 3 * d))
    if cross:
        _need("kvbuf", kvbuf.shape[0] * kvbuf.shape[1] if kvbuf is not None else 0, rk * 2 * d)
        _need("dkvbuf", dkvbuf.shape[0] * dkvbuf.shape[1] if dkvbuf is not None else 0,
              rk * 2 * d)
    _need("dzcat", dzcat.shape[0] * dzcat.shape[1], rq * d)
    _need("dy", dy.shape[0] * dy.shape[1], rq * d)
    _check_rope(rope_cos, rope_sin, max(tq, tk), d_head)
    if lse is not None:
        _need("lse", lse.shape[0], nb * n_heads * tq)
        per_thread = scratch.shape[0] // nth
        _need("scratch (blocked, per thread)", per_thread, 2 * bq * bk + tq)
        if key_padding_mask is not None:
            _need("key_padding_mask", key_padding_mask.shape[0] * key_padding_mask.shape[1],
                  nb * tk)
    else:
        _need("probs", probs.shape[0], nb * n_heads * tq * tk)
        _need("scratch", scratch.shape[0], nth * tq * tk)
        _need("tbuf", tbuf.shape[0] if tbuf is not None else 0, nth * d_head * tk)
    qp = &qbuf[0, 0]
    dqp = &dqbuf[0, 0]
    if cross:
        ldq, ldkv = d, 2 * d
        kp = &kvbuf[0, 0]
        dkp = &dkvbuf[0, 0]
    else:
        ldq, ldkv = 3 * d, 3 * d
        kp = qp + d
        dkp = dqp + d
    vp = kp + d
    dvp = dkp + d
    with nogil:
        out_project_backward(&zcat[0, 0], &dy[0, 0], &w_o[0, 0], &dw_o[0, 0], out1(db_o),
                             &dzcat[0, 0], rq, d, nth)
        if lse is not None:
            heads_backward_blocked(qp, ldq, kp, vp, ldkv, &zcat[0, 0], &dzcat[0, 0], d,
                                   &lse[0], &scratch[0], per_thread, bq, bk, dqp, dkp, dvp,
                                   nb, tq, tk, n_heads, d_head, scale, causal, km, nth)
        else:
            heads_backward(qp, ldq, kp, vp, ldkv, &dzcat[0, 0], d, &probs[0], &scratch[0],
                           &tbuf[0], dqp, dkp, dvp, nb, tq, tk, n_heads, d_head, scale,
                           causal, nth)
        qkv_project_backward(&x[0, 0], in2(ctx) if cross else NULL, &w_qkv[0, 0], dqp,
                             dkp if cross else NULL, &dw_qkv[0, 0], out1(db_qkv), out2(dx),
                             out2(dctx) if cross else NULL, bx, bc, nb, tq, tk, d, n_heads,
                             in2(rope_cos), in2(rope_sin),
                             nth)
