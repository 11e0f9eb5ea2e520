"""SiLU MLP block with its residual, forward beside backward.

    H = Z W1 + b1          (rows, d_hidden)
    S = H * sigmoid(H)     SiLU ("swish")
    out = S W2 + b2 + Z    (rows, d)
"""
from cython.parallel cimport prange

from attnx.kernels._blas cimport floating, NT, TR
from attnx.kernels._ops cimport (fill_rows, colsum, pgemm, simd_attach, require_simd,
                         attnx_get_level, attnx_dispatched_levels)
from attnx.kernels._blas import check_blas_int

cdef extern from "attnx_math.h" nogil:
    void attnx_silu_row_f32(const float *h, float *s, float *sg, Py_ssize_t n)
    void attnx_silu_row_f64(const double *h, double *s, double *sg, Py_ssize_t n)
    void attnx_silu_bwd_row_f32(const float *h, const float *sg, float *dh, Py_ssize_t n)
    void attnx_silu_bwd_row_f64(const double *h, const double *sg, double *dh, Py_ssize_t n)

# AVX-512 / AVX2 / portable SiLU: the level attnx.kernels._ops detected.
simd_attach()


def dispatch_state():
    """(SIMD level attached to this module, bit mask of levels whose kernels ran here)."""
    return attnx_get_level(), attnx_dispatched_levels()


cdef _check(str what, Py_ssize_t rows, Py_ssize_t d, Py_ssize_t dh, int nthreads, bufs):
    require_simd()
    if nthreads < 1:
        raise ValueError(f"nthreads must be >= 1, got {nthreads}")
    check_blas_int(what, ("rows", rows), ("d_model", d), ("d_hidden", dh))
    for name, r, c, width in bufs:
        if r != rows or c != width:
            raise ValueError(f"{what}: {name} must be ({rows}, {width}), got ({r}, {c})")


cdef inline void silu_row(const floating *h, floating *s, floating *sg,
                          Py_ssize_t n) noexcept nogil:
    if floating is float:
        attnx_silu_row_f32(h, s, sg, n)
    else:
        attnx_silu_row_f64(h, s, sg, n)


cdef inline void silu_bwd_row(const floating *h, const floating *sg, floating *dh,
                              Py_ssize_t n) noexcept nogil:
    """dh *= silu'(h) = sg (1 + h (1 - sg)) on one row."""
    if floating is float:
        attnx_silu_bwd_row_f32(h, sg, dh, n)
    else:
        attnx_silu_bwd_row_f64(h, sg, dh, n)


cdef int mlp_threads(Py_ssize_t rows, Py_ssize_t dh, int nthreads) noexcept nogil:
    return nthreads if rows * dh >= 16384 else 1


cdef void mlp_fwd(const floating *z, floating *out, const Mlp *m) noexcept nogil:
    cdef Py_ssize_t rows = m.rows, d = m.d, dh = m.dh, i, j
    cdef int nth = m.nthreads
    cdef floating *h = <floating *> m.hid
    cdef floating *s = <floating *> m.s
    cdef floating *sg = <floating *> m.sg
    cdef const floating *b1 = <const floating *> m.b1
    cdef const floating *b2 = <const floating *> m.b2
    if b1 != NULL:
        fill_rows(h, b1, rows, dh, dh)
    pgemm(NT, NT, rows, dh, d, <floating> 1, z, d, <const floating *> m.w1, dh,
          <floating> (1 if b1 != NULL else 0), h, dh, nth)
    for i in prange(rows, schedule="static", num_threads=nth, use_threads_if=nth > 1):
        silu_row(h + i * dh, s + i * dh, sg + i * dh if sg != NULL else NULL, dh)
        for j in range(d):
            out[i * d + j] = z[i * d + j] + (b2[j] if b2 != NULL else 0)
    pgemm(NT, NT, rows, d, dh, <floating> 1, s, dh, <const floating *> m.w2, d,
          <floating> 1, out, d, nth)


cdef void mlp_bwd(const floating *dout, const floating *z, floating *dz,
                  const Mlp *m) noexcept nogil:
    cdef Py_ssize_t rows = m.rows, d = m.d, dh = m.dh, i, j
    cdef int nth = m.nthreads
    cdef const floating *h = <const floating *> m.hid
    cdef const floating *sg = <const floating *> m.sg
    cdef floating *dhb = <floating *> m.dhid
    pgemm(TR, NT, dh, d, rows, <floating> 1, <const floating *> m.s, dh, dout, d,
          <floating> 0, <floating *> m.dw2, d, nth)
    if m.db2 != NULL:
        colsum(dout, rows, d, d, <floating *> m.db2)
    pgemm(NT, TR, rows, dh, d, <floating> 1, dout, d, <const floating *> m.w2, d,
          <floating> 0, dhb, dh, nth)
    for i in prange(rows, schedule="static", num_threads=nth, use_threads_if=nth > 1):
        silu_bwd_row(h + i * dh, sg + i * dh, dhb + i * dh, dh)
        for j in range(d):
            dz[i * d + j] = dout[i * d + j]
    pgemm(TR, NT, d, dh, rows, <floating> 1, z, d, dhb, dh,
          <floating> 0, <floating *> m.dw1, dh, nth)
    if m.db1 != NULL:
        colsum(dhb, rows, dh, dh, <floating *> m.db1)
    pgemm(NT, TR, rows, d, dh, <floating> 1, dhb, dh, <const floating *> m.w1, dh,
          <floating> 1, dz, d, nth)


cdef int _record(str what, str name, object rec, tuple fields) except -1:
    """ValueError naming the argument unless rec is a tuple of len(fields) (its
    fields: an entry's weights, activations or gradients, in this order)."""
    if not isinstance(rec, tuple) or len(rec) != len(fields):
        got = f"a tuple of {len(rec)}" if isinstance(rec, tuple) else type(rec).__name__
        raise ValueError(f"{what}: {name} must be a tuple ({', '.join(fields)}), got {got}")
    return 0


def mlp_forward(const floating[:, ::1] z, weights, acts, floating[:, ::1] out,
                int nthreads=0):
    """out = silu(z W1 + b1) W2 + b2 + z.

    weights = (W1, b1, W2, b2): W1 (d, d_hidden), W2 (d_hidden, d), b1/b2 None
    without biases. acts = (H, S, sg), each (rows, d_hidden): H = z W1 + b1, S =
    silu(H) and sg = sigmoid(H), kept for backward (sg None: inference, sigmoid(H)
    not written: a pass of rows*d_hidden stores saved).
    nthreads: OpenMP threads (attnx.runtime._threads.num_threads())."""
    what = "SiLU MLP forward"
    _record(what, "weights", weights, ("W1", "b1", "W2", "b2"))
    _record(what, "acts", acts, ("h", "s", "sg"))
    cdef const floating[:, ::1] w1 = weights[0]
    cdef const floating[::1] b1 = weights[1]
    cdef const floating[:, ::1] w2 = weights[2]
    cdef const floating[::1] b2 = weights[3]
    cdef floating[:, ::1] h = acts[0]
    cdef floating[:, ::1] s = acts[1]
    cdef floating[:, ::1] sg = acts[2]
    cdef Py_ssize_t rows = z.shape[0]
    cdef Py_ssize_t d = z.shape[1], dh = w1.shape[1]
    cdef Mlp m
    _check(what, rows, d, dh, nthreads,
           (("h", h.shape[0], h.shape[1], dh), ("s", s.shape[0], s.shape[1], dh),
            ("out", out.shape[0], out.shape[1], d))
           + ((("sg", sg.shape[0], sg.shape[1], dh),) if sg is not None else ()))
    if w1.shape[0] != d or w2.shape[0] != dh or w2.shape[1] != d:
        raise ValueError("SiLU MLP forward: W1 must be (d, d_hidden) and W2 (d_hidden, d)")
    if rows == 0:
        return
    m.rows, m.d, m.dh, m.nthreads = rows, d, dh, mlp_threads(rows, dh, nthreads)
    m.w1, m.w2, m.hid, m.s = &w1[0, 0], &w2[0, 0], &h[0, 0], &s[0, 0]
    m.b1 = &b1[0] if b1 is not None else NULL
    m.b2 = &b2[0] if b2 is not None else NULL
    m.sg = &sg[0, 0] if sg is not None else NULL
    with nogil:
        mlp_fwd(&z[0, 0], &out[0, 0], &m)


def mlp_backward(const floating[:, ::1] dout, const floating[:, ::1] z, weights, acts,
                 floating[:, ::1] dh_buf, grads, floating[:, ::1] dz, int nthreads=0):
    """Fill the gradients grads = (dW1, db1, dW2, db2) (db1/db2 None without biases);
    dz = dL/dz including the residual path. weights = (W1, W2) (the biases are not
    read); acts = (H, S, sg) as forward left them; dh_buf: a (rows, d_hidden) scratch."""
    what = "SiLU MLP backward"
    _record(what, "weights", weights, ("W1", "W2"))
    _record(what, "acts", acts, ("h", "s", "sg"))
    _record(what, "grads", grads, ("dW1", "db1", "dW2", "db2"))
    cdef const floating[:, ::1] w1 = weights[0]
    cdef const floating[:, ::1] w2 = weights[1]
    cdef const floating[:, ::1] h = acts[0]
    cdef const floating[:, ::1] s = acts[1]
    cdef const floating[:, ::1] sg = acts[2]
    cdef floating[:, ::1] dw1 = grads[0]
    cdef floating[::1] db1 = grads[1]
    cdef floating[:, ::1] dw2 = grads[2]
    cdef floating[::1] db2 = grads[3]
    cdef Py_ssize_t rows = z.shape[0]
    cdef Py_ssize_t d = z.shape[1], dh = w1.shape[1]
    cdef Mlp m
    _check(what, rows, d, dh, nthreads,
           (("dout", dout.shape[0], dout.shape[1], d), ("h", h.shape[0], h.shape[1], dh),
            ("s", s.shape[0], s.shape[1], dh), ("sg", sg.shape[0], sg.shape[1], dh),
            ("dh_buf", dh_buf.shape[0], dh_buf.shape[1], dh),
            ("dz", dz.shape[0], dz.shape[1], d)))
    if (w1.shape[0] != d or w2.shape[0] != dh or w2.shape[1] != d or dw1.shape[0] != d
            or dw1.shape[1] != dh or dw2.shape[0] != dh or dw2.shape[1] != d):
        raise ValueError("SiLU MLP backward: W1/dW1 must be (d, d_hidden), W2/dW2 (d_hidden, d)")
    if rows == 0:
        dw1[:, :] = 0
        dw2[:, :] = 0
        if db1 is not None:
            db1[:] = 0
        if db2 is not None:
            db2[:] = 0
        return
    m.rows, m.d, m.dh, m.nthreads = rows, d, dh, mlp_threads(rows, dh, nthreads)
    m.w1, m.w2, m.hid, m.s, m.sg = &w1[0, 0], &w2[0, 0], <void *> &h[0, 0], <void *> &s[0, 0], <void *> &sg[0, 0]
    m.dw1, m.dw2, m.dhid = &dw1[0, 0], &dw2[0, 0], &dh_buf[0, 0]
    m.db1 = &db1[0] if db1 is not None else NULL
    m.db2 = &db2[0] if db2 is not None else NULL
    with nogil:
        mlp_bwd(&dout[0, 0], &z[0, 0], &dz[0, 0], &m)


# ---- the activation on its own (the convolutional stem of attnx.SequenceModel) -------
cdef void silu_fwd_rows(const floating *h, floating *s, floating *sg, Py_ssize_t rows,
                        Py_ssize_t n, int nthreads) noexcept nogil:
    cdef Py_ssize_t i
    cdef int nth = nthreads if rows * n >= 16384 else 1
    for i in prange(rows, schedule="static", num_threads=nth, use_threads_if=nth > 1):
        silu_row(h + i * n, s + i * n, sg + i * n if sg != NULL else NULL, n)


cdef void silu_bwd_rows(const floating *ds, const floating *h, const floating *sg,
                        floating *dh, Py_ssize_t rows, Py_ssize_t n,
                        int nthreads) noexcept nogil:
    cdef Py_ssize_t i, j
    cdef int nth = nthreads if rows * n >= 16384 else 1
    for i in prange(rows, schedule="static", num_threads=nth, use_threads_if=nth > 1):
        if dh + i * n != ds + i * n:
            for j in range(n):
                dh[i * n + j] = ds[i * n + j]
        silu_bwd_row(h + i * n, sg + i * n, dh + i * n, n)


def silu_forward(const floating[:, ::1] h, floating[:, ::1] s, floating[:, ::1] sg,
                 int nthreads=1):
    """s = silu(h) = h * sigmoid(h) row by row, sg = sigmoid(h) for backward (None:
    not kept, inference); h, s, sg (rows, n)."""
    cdef Py_ssize_t rows = h.shape[0], n = h.shape[1], i
    require_simd()
    if nthreads < 1:
        raise ValueError(f"SiLU forward: nthreads must be >= 1, got {nthreads}")
    for name, a in (("s", s), ("sg", sg)):
        if a is not None and (a.shape[0] != rows or a.shape[1] != n):
            raise ValueError(f"SiLU forward: {name} must be ({rows}, {n}), "
                             f"got ({a.shape[0]}, {a.shape[1]})")
    if rows == 0 or n == 0:
        return
    with nogil:
        silu_fwd_rows(&h[0, 0], &s[0, 0], &sg[0, 0] if sg is not None else NULL, rows, n,
                      nthreads)


def silu_backward(const floating[:, ::1] ds, const floating[:, ::1] h,
                  const floating[:, ::1] sg, floating[:, ::1] dh, int nthreads=1):
    """dh = ds * silu'(h) = ds * sg * (1 + h (1 - sg)) from silu_forward's h and sg;
    dh may be ds itself (in place)."""
    cdef Py_ssize_t rows = h.shape[0], n = h.shape[1], i, j
    if nthreads < 1:
        raise ValueError(f"SiLU backward: nthreads must be >= 1, got {nthreads}")
    for name, a in (("ds", ds), ("sg", sg), ("dh", dh)):
        if a.shape[0] != rows or a.shape[1] != n:
            raise ValueError(f"SiLU backward: {name} must be ({rows}, {n}), "
                             f"got ({a.shape[0]}, {a.shape[1]})")
    if rows == 0 or n == 0:
        return
    with nogil:
        silu_bwd_rows(&ds[0, 0], &h[0, 0], &sg[0, 0], &dh[0, 0], rows, n, nthreads)
