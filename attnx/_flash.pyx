"""Fused attention layer for small heads: BLAS projections around fused head kernels.

The Q/K/V and output projections (and their weight gradients) are full-width
GEMMs through scipy's BLAS, as on the dense path. Between them, every
(sample, head) runs the fused tile kernels of csrc/attnx_flash.h: scores,
online softmax and P V in one pass over L1-sized blocks (forward, per query
block of ATTNX_FL_BQ rows), and dQ/dK/dV with P recomputed from the kept
per-row log-sum-exp (backward, per head). Nothing of size Tq*Tk is stored.

Buffers are those of the dense path: row-major (B*T, w) matrices, Q, K and V
side by side in projection buffers and addressed per head by offset and
leading dimension. Thread policy is the caller's: `nthreads` OpenMP threads, with
attnx._threads.blas_single() held around the call (the projections split their
GEMMs over those threads); BLAS is never called inside a prange over heads.
"""
from cython.parallel cimport prange, threadid
from libc.stdint cimport uint8_t

import numpy as np

from attnx._blas cimport floating, gemm, NT, TR
from attnx._ops cimport (in1, in2, out1, out2, key_columns, out_project, out_project_backward, qkv_project,
                         qkv_project_backward)

cdef extern from "attnx_flash.h" nogil:
    enum:
        ATTNX_FL_BQ
        ATTNX_FL_BK
        FL_NRN_f32
        FL_NRN_f64
    int attnx_flash_set_level(int want)
    Py_ssize_t attnx_flash_fwd_scratch(int tk, int dh, int nrn)
    Py_ssize_t attnx_flash_bwd_scratch(int tk, int dh, int nrn)
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


# ---------------------------------------------------------------- CPU level
def _detected_level():
    """The level attnx._ops chose (CPUID capped by ATTNX_SIMD / ATTNX_NO_SIMD)."""
    from attnx import _ops
    return int(_ops.cpu_level())


_LEVEL = attnx_flash_set_level(_detected_level())


def cpu_level():
    """Level of the fused kernels in use: 0 portable C, 1 AVX2+FMA, 2 AVX-512F."""
    return _LEVEL


# ---------------------------------------------------------------- sizes
def scratch_elements(int tk, int d_head, dtype):
    """Per-thread scratch elements for forward and backward at this key length and
    head width, rounded up to 64 elements so threads never share a cache line."""
    nrn = FL_NRN_f32 if np.dtype(dtype) == np.float32 else FL_NRN_f64
    n = max(attnx_flash_fwd_scratch(tk, d_head, nrn), attnx_flash_bwd_scratch(tk, d_head, nrn))
    return (n + 63) // 64 * 64


cdef int backward_threads(Py_ssize_t nbh, int tq, int tk, int d_head,
                          int nthreads) noexcept nogil:
    """Threads the backward's head kernels use: one when there is too little work
    to pay for waking the others."""
    if <double> nbh * tq * tk * d_head < 1.0e5:
        return 1
    return nthreads


cdef Py_ssize_t key_splits(Py_ssize_t nbh, int tk, int nthreads) noexcept nogil:
    """Key ranges per (sample, head) in the backward. Whole heads (1) when there
    are at least 4 heads per thread; else enough ranges of whole key blocks for
    about 4 work items per thread, so that B*H below the thread count (one long
    sequence) still fills the cores and causal ranges (unequal work) balance."""
    cdef Py_ssize_t nkb = (tk + ATTNX_FL_BK - 1) // ATTNX_FL_BK
    cdef Py_ssize_t want, per
    if nthreads <= 1 or nkb <= 1 or nbh >= 4 * nthreads:
        return 1
    want = (4 * nthreads + nbh - 1) // nbh
    if want > nkb:
        want = nkb
    per = (nkb + want - 1) // want           # key blocks per range
    return (nkb + per - 1) // per


def dq_parts_elements(Py_ssize_t nb, int tq, int tk, int n_heads, int d_head, int nthreads):
    """Elements of the backward's dQ buffer for heads split into key ranges: every
    range but the first writes its share of dQ there ((ranges - 1) * B*H*Tq*d_head,
    0 when heads are not split at this shape and thread count)."""
    cdef Py_ssize_t nbh = nb * n_heads
    cdef int nt = backward_threads(nbh, tq, tk, d_head, nthreads)
    return (key_splits(nbh, tk, nt) - 1) * nbh * tq * d_head


def block_sizes():
    """(query rows, keys) per block of the fused kernels."""
    return ATTNX_FL_BQ, ATTNX_FL_BK


# ---------------------------------------------------------------- typed entry points
cdef inline void forward_rows(const floating *q, Py_ssize_t ldq, const floating *k,
                              const floating *v, Py_ssize_t ldkv, floating *z, Py_ssize_t ldz,
                              floating *lse, int i0, int nq, int tk, int dh, floating scale,
                              bint causal, const uint8_t *km, floating *ws) noexcept nogil:
    """The C forward kernel of this float type (one query chunk of one head)."""
    if floating is float:
        attnx_flash_forward_rows_f32(q, ldq, k, v, ldkv, z, ldz, lse, i0, nq, tk, dh, scale,
                                     causal, km, ws)
    else:
        attnx_flash_forward_rows_f64(q, ldq, k, v, ldkv, z, ldz, lse, i0, nq, tk, dh, scale,
                                     causal, km, ws)


cdef inline void backward_head(const floating *q, Py_ssize_t ldq, const floating *k,
                               const floating *v, Py_ssize_t ldkv, const floating *z,
                               const floating *dz, Py_ssize_t ldz, const floating *lse,
                               floating *dq, Py_ssize_t lddq, floating *dk, floating *dv,
                               int tq, int tk, int ka, int kb, int dh, floating scale,
                               bint causal, const uint8_t *km, floating *ws) noexcept nogil:
    """The C backward kernel of this float type (one key range of one head)."""
    if floating is float:
        attnx_flash_backward_head_f32(q, ldq, k, v, ldkv, z, dz, ldz, lse, dq, lddq, dk, dv,
                                      tq, tk, ka, kb, dh, scale, causal, km, ws)
    else:
        attnx_flash_backward_head_f64(q, ldq, k, v, ldkv, z, dz, ldz, lse, dq, lddq, dk, dv,
                                      tq, tk, ka, kb, dh, scale, causal, km, ws)


# ---------------------------------------------------------------- heads
cdef void heads_forward(const floating *q, Py_ssize_t ldq, const floating *k,
                        const floating *v, Py_ssize_t ldkv, floating *z, Py_ssize_t ldz,
                        floating *lse, floating *scratch, Py_ssize_t per_thread,
                        Py_ssize_t nb, int tq, int tk, int n_heads, int d_head,
                        floating scale, bint causal, const uint8_t *keymask,
                        int nthreads) noexcept nogil:
    """Z and lse in parallel over (sample, head, query chunk). A chunk is as many
    query blocks as leave at least 8 work items per thread (whole heads when
    there are enough of them): each item packs its head's K^T and V once."""
    cdef Py_ssize_t nblk = (tq + ATTNX_FL_BQ - 1) // ATTNX_FL_BQ
    cdef Py_ssize_t want = (8 * nthreads + nb * n_heads - 1) // (nb * n_heads)
    cdef Py_ssize_t nchunk, rows, it, bh, b, h, i0
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
    for it in prange(nb * n_heads * nchunk, schedule="dynamic", num_threads=nthreads):
        bh = it // nchunk
        i0 = (it % nchunk) * rows
        b = bh // n_heads
        h = bh % n_heads
        nq = <int> (tq - i0 if tq - i0 < rows else rows)
        km = (keymask + b * tk) if keymask != NULL else NULL
        ws = scratch + threadid() * per_thread
        forward_rows(q + (b * tq + i0) * ldq + h * d_head, ldq,
                     k + b * tk * ldkv + h * d_head, v + b * tk * ldkv + h * d_head, ldkv,
                     z + (b * tq + i0) * ldz + h * d_head, ldz,
                     (lse + bh * tq + i0) if lse != NULL else NULL,
                     <int> i0, nq, tk, d_head, scale, causal, km, ws)


cdef void heads_backward(const floating *q, Py_ssize_t ldq, const floating *k,
                         const floating *v, Py_ssize_t ldkv, const floating *z,
                         const floating *dz, Py_ssize_t ldz, const floating *lse,
                         floating *dq, floating *dk, floating *dv,
                         floating *scratch, Py_ssize_t per_thread, floating *parts,
                         Py_ssize_t nb, int tq, int tk, int n_heads, int d_head,
                         floating scale, bint causal, const uint8_t *keymask,
                         int nthreads) noexcept nogil:
    """dQ, dK, dV in parallel over (sample, head, key range) (key_splits ranges per
    head). A range's dK and dV rows belong to one thread; its share of dQ goes to
    dq (first range) or to `parts` (the others), summed into dq afterwards in range
    order, so the result does not depend on which thread ran what."""
    cdef Py_ssize_t nbh = nb * n_heads
    cdef Py_ssize_t nsplit, per, it, bh, b, h, c, ka, kb, r, j, row
    cdef Py_ssize_t lddq
    cdef const uint8_t *km
    cdef floating *ws
    cdef floating *dqt
    cdef floating *dst
    cdef const floating *src
    nthreads = backward_threads(nbh, tq, tk, d_head, nthreads)
    nsplit = key_splits(nbh, tk, nthreads)
    per = ((tk + ATTNX_FL_BK - 1) // ATTNX_FL_BK + nsplit - 1) // nsplit * ATTNX_FL_BK
    for it in prange(nbh * nsplit, schedule="dynamic", num_threads=nthreads):
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
        backward_head(q + b * tq * ldq + h * d_head, ldq, k + b * tk * ldkv + h * d_head,
                      v + b * tk * ldkv + h * d_head, ldkv, z + b * tq * ldz + h * d_head,
                      dz + b * tq * ldz + h * d_head, ldz, lse + bh * tq, dqt, lddq,
                      dk + b * tk * ldkv + h * d_head, dv + b * tk * ldkv + h * d_head,
                      tq, tk, <int> ka, <int> kb, d_head, scale, causal, km, ws)
    if nsplit > 1:
        for row in prange(nbh * tq, schedule="static", num_threads=nthreads):
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
def attention_forward(
    const floating[:, ::1] x,        # (B*Tq, d) query input
    const floating[:, ::1] ctx,      # (B*Tk, d) key/value input, or None for self-attention
    const floating[:, ::1] w_qkv,    # (d, 3d) = [Wq | Wk | Wv]
    const floating[::1] b_qkv,       # (3d,) or None
    const floating[:, ::1] w_o,      # (d, d)
    const floating[::1] b_o,         # (d,) or None
    floating[:, ::1] qbuf,           # self: (B*Tq, 3d); cross: (B*Tq, d)
    floating[:, ::1] kvbuf,          # self: None; cross: (B*Tk, 2d)
    floating[:, ::1] zcat,           # (B*Tq, d) concatenated head outputs
    floating[::1] lse,               # (B*H*Tq) per-row log-sum-exp for backward, or None
    floating[::1] scratch,           # (nthreads * scratch_elements(Tk, d_head, dtype))
    floating[:, ::1] y,              # (B*Tq, d) output
    Py_ssize_t nb, int n_heads, bint causal,
    const uint8_t[:, ::1] key_padding_mask,   # (B, Tk) nonzero = ignored, or None
    const floating[:, ::1] rope_cos,          # (max(Tq, Tk), d_head/2) or None
    const floating[:, ::1] rope_sin,
    const floating[:, ::1] residual,          # (B*Tq, d) added to Y, or None
    int nthreads,
):
    """Y = concat_h(softmax(Q_h K_h^T / sqrt(d_head) + mask) V_h) Wo + bo."""
    cdef Py_ssize_t d = w_o.shape[0]
    cdef int d_head = <int> (d // n_heads)
    cdef int tq = <int> (x.shape[0] // nb)
    cdef bint cross = ctx is not None
    cdef int tk = <int> (ctx.shape[0] // nb) if cross else tq
    cdef floating scale = <floating> (1.0 / (<double> d_head) ** 0.5)
    cdef floating *qp = &qbuf[0, 0]
    cdef floating *kp
    cdef floating *vp
    cdef Py_ssize_t ldq, ldkv
    cdef const uint8_t *km = &key_padding_mask[0, 0] if key_padding_mask is not None else NULL
    cdef Py_ssize_t rq = x.shape[0], rk = tk * nb
    cdef Py_ssize_t per_thread = scratch_elements(tk, d_head, np.float32 if floating is float
                                                  else np.float64)
    if nthreads < 1:
        raise ValueError(f"nthreads must be >= 1, got {nthreads}")
    if scratch.shape[0] < nthreads * per_thread or (lse is not None
                                                     and lse.shape[0] < nb * n_heads * tq):
        raise ValueError("scratch or lse too small for this shape and thread count")
    qp = &qbuf[0, 0]
    kp = key_columns(qp, out2(kvbuf) if cross else NULL, d, &ldq, &ldkv)
    vp = kp + d
    with nogil:
        qkv_project(&x[0, 0], in2(ctx) if cross else NULL, &w_qkv[0, 0], in1(b_qkv), qp,
                    kp if cross else NULL, nb, tq, tk, d, n_heads,
                    in2(rope_cos), in2(rope_sin), nthreads)
        heads_forward(qp, ldq, kp, vp, ldkv, &zcat[0, 0], d, out1(lse), &scratch[0], per_thread,
                      nb, tq, tk, n_heads, d_head, scale, causal, km, nthreads)
        out_project(&zcat[0, 0], &w_o[0, 0], in1(b_o), in2(residual), &y[0, 0], rq, d, nthreads)


def attention_backward(
    const floating[:, ::1] x, const floating[:, ::1] ctx,
    const floating[:, ::1] w_qkv, const floating[:, ::1] w_o,
    const floating[:, ::1] qbuf, const floating[:, ::1] kvbuf,
    const floating[:, ::1] zcat, const floating[::1] lse,
    const floating[:, ::1] dy,       # (B*Tq, d)
    floating[:, ::1] dzcat,          # (B*Tq, d) workspace
    floating[:, ::1] dqbuf,          # shaped like qbuf
    floating[:, ::1] dkvbuf,         # shaped like kvbuf (cross) or None
    floating[::1] scratch,           # as in the forward
    floating[::1] dq_parts,          # (dq_parts_elements(...)) or None when that is 0
    floating[:, ::1] dw_qkv, floating[::1] db_qkv,   # db_* None without bias
    floating[:, ::1] dw_o, floating[::1] db_o,
    floating[:, ::1] dx,             # (B*Tq, d) or None when not needed
    floating[:, ::1] dctx,           # (B*Tk, d) or None
    Py_ssize_t nb, int n_heads, bint causal,
    const uint8_t[:, ::1] key_padding_mask,
    const floating[:, ::1] rope_cos, const floating[:, ::1] rope_sin,
    bint dx_accumulate, bint dctx_accumulate, int nthreads,
):
    """Fill dWqkv, dWo (and biases) from dY; write (or add, when *_accumulate)
    dL/dx and dL/dctx when given."""
    cdef floating bx = 1 if dx_accumulate else 0
    cdef floating bc = 1 if dctx_accumulate else 0
    cdef Py_ssize_t d = w_o.shape[0]
    cdef int d_head = <int> (d // n_heads)
    cdef int tq = <int> (x.shape[0] // nb)
    cdef bint cross = ctx is not None
    cdef int tk = <int> (ctx.shape[0] // nb) if cross else tq
    cdef floating scale = <floating> (1.0 / (<double> d_head) ** 0.5)
    cdef Py_ssize_t rq = x.shape[0], rk = tk * nb
    cdef const uint8_t *km = &key_padding_mask[0, 0] if key_padding_mask is not None else NULL
    cdef const floating *qp = &qbuf[0, 0]
    cdef const floating *kp
    cdef const floating *vp
    cdef floating *dqp = &dqbuf[0, 0]
    cdef floating *dkp
    cdef floating *dvp
    cdef Py_ssize_t ldq, ldkv
    cdef Py_ssize_t per_thread = scratch_elements(tk, d_head, np.float32 if floating is float
                                                  else np.float64)
    if nthreads < 1:
        raise ValueError(f"nthreads must be >= 1, got {nthreads}")
    if scratch.shape[0] < nthreads * per_thread or lse.shape[0] < nb * n_heads * tq:
        raise ValueError("scratch or lse too small for this shape and thread count")
    cdef Py_ssize_t nparts = dq_parts_elements(nb, tq, tk, n_heads, d_head, nthreads)
    cdef floating *partp = NULL
    if nparts:
        if dq_parts is None or dq_parts.shape[0] < nparts:
            raise ValueError(f"dq_parts must hold {nparts} elements at this shape and "
                             f"thread count, got "
                             f"{0 if dq_parts is None else dq_parts.shape[0]}")
        partp = &dq_parts[0]
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
                             &dzcat[0, 0], rq, d, nthreads)
        heads_backward(qp, ldq, kp, vp, ldkv, &zcat[0, 0], &dzcat[0, 0], d, &lse[0],
                       dqp, dkp, dvp, &scratch[0], per_thread, partp, nb, tq, tk, n_heads,
                       d_head, scale, causal, km, nthreads)
        qkv_project_backward(&x[0, 0], in2(ctx) if cross else NULL, &w_qkv[0, 0], dqp,
                             dkp if cross else NULL, &dw_qkv[0, 0], out1(db_qkv), out2(dx),
                             out2(dctx) if cross else NULL, bx, bc, nb, tq, tk, d, n_heads,
                             in2(rope_cos), in2(rope_sin),
                             nthreads)


def exp_array(const floating[::1] x, double shift=0.0):
    """exp(x - shift) over an array with the fused kernels' softmax exp at the level
    in use (accuracy tests; the kernels call it with shift = the row's max or
    log-sum-exp, so x - shift <= 0 there)."""
    out = np.empty(x.shape[0], dtype=np.float32 if floating is float else np.float64)
    cdef floating[::1] o = out
    if x.shape[0]:
        with nogil:
            if floating is float:
                attnx_flash_exp_f32(&x[0], &o[0], x.shape[0], <float> shift)
            else:
                attnx_flash_exp_f64(&x[0], &o[0], x.shape[0], shift)
    return out
