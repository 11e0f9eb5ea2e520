"""Kernels of the sequence model around the transformer blocks: embedding and head
GEMMs, positions, LayerNorm, pooling, masked rows, residual fix-ups, cross-entropy.

Every array is row-major: activations are (B*T, width) with row r = b*T + t.
Thread policy: the Python caller passes `nthreads` for the prange loops (1 for
small work); the GEMMs are single BLAS calls over all rows. Reductions over rows
(LayerNorm gains, position gradients) use fixed per-thread slices combined in a
fixed order, so results are the same from run to run at a given thread count.
"""
from cython.parallel cimport prange
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid
from libc.math cimport ceil, exp, log
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t

from attnx.kernels._blas cimport floating, gemm, NT, TR
from attnx.kernels._ops cimport simd_attach, require_simd, attnx_get_level, attnx_dispatched_levels

cdef extern from "attnx_math.h" nogil:
    void attnx_splitmix_fill(uint64_t key, uint32_t *out, Py_ssize_t n)

# the dropout bits' AVX-512 / AVX2 / portable stream: the level attnx.kernels._ops detected
simd_attach()


def dispatch_state():
    """(SIMD level attached to this module, bit mask of levels whose kernels ran here)."""
    return attnx_get_level(), attnx_dispatched_levels()

cdef extern from "attnx_seq.h" nogil:
    void attnx_mask_fill_f32(const uint32_t *bits, float *out, Py_ssize_t n, float keep,
                             uint32_t cut)
    void attnx_mask_fill_f64(const uint32_t *bits, double *out, Py_ssize_t n, double keep,
                             uint32_t cut)
    void attnx_ln_fwd_f32(const float *x, const float *g, const float *b, float *y,
                          Py_ssize_t d, float eps, float *mean_out, float *rs_out)
    void attnx_ln_fwd_f64(const double *x, const double *g, const double *b, double *y,
                          Py_ssize_t d, double eps, double *mean_out, double *rs_out)
    void attnx_ln_bwd_f32(const float *dy, const float *x, const float *g, float mu, float rs,
                          float *dx, const float *add, float *pg, float *pb, Py_ssize_t d)
    void attnx_ln_bwd_f64(const double *dy, const double *x, const double *g, double mu,
                          double rs, double *dx, const double *add, double *pg, double *pb,
                          Py_ssize_t d)


cdef extern from "numpy/random/bitgen.h" nogil:
    ctypedef struct bitgen_t:
        void *state
        uint64_t (*next_uint64)(void *st) nogil


cdef _shape(str what, str name, arr, Py_ssize_t rows, Py_ssize_t cols):
    """ValueError unless arr is None or a 2-D buffer of (rows, cols); -1 = any."""
    if arr is None:
        return
    if (rows >= 0 and arr.shape[0] != rows) or (cols >= 0 and arr.shape[1] != cols):
        raise ValueError(f"{what}: {name} must be ({rows}, {cols}), got "
                         f"({arr.shape[0]}, {arr.shape[1]})")


cdef _len(str what, str name, arr, Py_ssize_t n):
    if arr is not None and arr.shape[0] != n:
        raise ValueError(f"{what}: {name} must have length {n}, got {arr.shape[0]}")


cdef _threads(str what, int nthreads):
    if nthreads < 1:
        raise ValueError(f"{what}: nthreads must be >= 1, got {nthreads}")


cdef void linear_fwd(const floating *x, const floating *w, const floating *b, floating *y,
                     const floating *pos, Py_ssize_t rows, Py_ssize_t k, Py_ssize_t n,
                     Py_ssize_t t, int nthreads) noexcept nogil:
    """y (rows, n) = x (rows, k) w (k, n) + b (+ pos[r % t] for row r, pos (>= t, n),
    when not NULL)."""
    cdef Py_ssize_t r, j, tt
    if rows == 0:
        return
    for r in prange(rows, schedule="static", num_threads=nthreads, use_threads_if=nthreads > 1):
        if pos != NULL:
            tt = r % t
            for j in range(n):
                y[r * n + j] = b[j] + pos[tt * n + j]
        else:
            for j in range(n):
                y[r * n + j] = b[j]
    gemm(NT, NT, rows, n, k, <floating> 1, x, k, w, n, <floating> 1, y, n)


cdef void linear_bwd(const floating *dy, const floating *x, const floating *w, floating *dw,
                     floating *db, floating *dx, Py_ssize_t rows, Py_ssize_t k,
                     Py_ssize_t n) noexcept nogil:
    """dw = x^T dy, db = column sums of dy, dx = dy w^T (skipped when dx is NULL)."""
    cdef Py_ssize_t r, j
    gemm(TR, NT, k, n, rows, <floating> 1, x, k, dy, n, <floating> 0, dw, n)
    for j in range(n):
        db[j] = 0
    for r in range(rows):
        for j in range(n):
            db[j] += dy[r * n + j]
    if dx != NULL:
        gemm(NT, TR, rows, k, n, <floating> 1, dy, n, w, n, <floating> 0, dx, k)


def linear_forward(const floating[:, ::1] x, const floating[:, ::1] w,
                   const floating[::1] b, floating[:, ::1] y, int nthreads=1,
                   const floating[:, ::1] pos=None, Py_ssize_t t=1):
    """y (rows, n) = x (rows, k) w (k, n) + b (+ pos[r % t] for row r when pos is
    given: the positional table, added in the same pass that writes the bias),
    then one GEMM over every row."""
    cdef Py_ssize_t rows = x.shape[0], k = x.shape[1], n = w.shape[1]
    _threads("linear", nthreads)
    _shape("linear", "w", w, k, -1)
    _len("linear", "b", b, n)
    _shape("linear", "y", y, rows, n)
    if pos is not None and (t < 1 or pos.shape[0] < t or pos.shape[1] != n):
        raise ValueError(f"linear: pos must be (>= {t}, {n}), got "
                         f"({pos.shape[0]}, {pos.shape[1]})")
    if rows == 0:
        return
    with nogil:
        linear_fwd(&x[0, 0], &w[0, 0], &b[0], &y[0, 0],
                   &pos[0, 0] if pos is not None else NULL, rows, k, n, t, nthreads)


def linear_backward(const floating[:, ::1] dy, const floating[:, ::1] x,
                    const floating[:, ::1] w, floating[:, ::1] dw, floating[::1] db,
                    floating[:, ::1] dx, int nthreads=1):
    """dw = x^T dy, db = column sums of dy, dx = dy w^T (skipped when dx is None)."""
    cdef Py_ssize_t rows = x.shape[0], k = x.shape[1], n = w.shape[1]
    _shape("linear backward", "w", w, k, -1)
    _shape("linear backward", "dy", dy, rows, n)
    _shape("linear backward", "dw", dw, k, n)
    _len("linear backward", "db", db, n)
    _shape("linear backward", "dx", dx, rows, k)
    with nogil:
        linear_bwd(&dy[0, 0], &x[0, 0], &w[0, 0], &dw[0, 0], &db[0],
                   &dx[0, 0] if dx is not None else NULL, rows, k, n)


def add_positions(floating[:, ::1] h, const floating[:, ::1] table, Py_ssize_t t,
                  int nthreads=1):
    """h[r] += table[r % t] for every row r of h (B*T, d)."""
    cdef Py_ssize_t rows = h.shape[0], d = h.shape[1], r, j, tt
    _threads("positions", nthreads)
    if t < 1 or table.shape[0] < t or table.shape[1] != d:
        raise ValueError(f"positions: table must be (>= {t}, {d}), got "
                         f"({table.shape[0]}, {table.shape[1]})")
    with nogil:
        for r in prange(rows, schedule="static", num_threads=nthreads, use_threads_if=nthreads > 1):
            tt = r % t
            for j in range(d):
                h[r, j] += table[tt, j]


cdef void positions_bwd(const floating *dh, floating *dp, Py_ssize_t rows, Py_ssize_t d,
                        Py_ssize_t t, Py_ssize_t tp, int nthreads) noexcept nogil:
    """dp[tt] (tp rows) = sum over the batch of dh[b*t + tt] for tt < t, else 0."""
    cdef Py_ssize_t nb = rows // t, tt, b, j
    for tt in prange(tp, schedule="static", num_threads=nthreads, use_threads_if=nthreads > 1):
        for j in range(d):
            dp[tt * d + j] = 0
        if tt < t:
            for b in range(nb):
                for j in range(d):
                    dp[tt * d + j] += dh[(b * t + tt) * d + j]


def positions_backward(const floating[:, ::1] dh, floating[:, ::1] dp, Py_ssize_t t,
                       int nthreads=1):
    """dp[tt] = sum over the batch of dh[b*t + tt] for tt < t; rows from t on are zero."""
    cdef Py_ssize_t rows = dh.shape[0], d = dh.shape[1]
    _threads("positions backward", nthreads)
    if t < 1 or rows % t or dp.shape[0] < t or dp.shape[1] != d:
        raise ValueError(f"positions backward: dh ({rows}, {d}) must hold whole sequences "
                         f"of {t} rows and dp be (>= {t}, {d}), got "
                         f"({dp.shape[0]}, {dp.shape[1]})")
    if dp.shape[0] == 0:
        return
    with nogil:
        positions_bwd(&dh[0, 0] if rows else NULL, &dp[0, 0], rows, d, t, dp.shape[0],
                      nthreads)


cdef void norm_forward(const floating *x, floating *y, floating *st, const Norm *n) noexcept nogil:
    cdef Py_ssize_t rows = n.rows, d = n.d, r
    for r in prange(rows, schedule="static", num_threads=n.nthreads, use_threads_if=n.nthreads > 1):
        if floating is float:
            attnx_ln_fwd_f32(x + r * d, <const float *> n.g, <const float *> n.b, y + r * d, d,
                             <float> n.eps, st + r, st + rows + r)
        else:
            attnx_ln_fwd_f64(x + r * d, <const double *> n.g, <const double *> n.b, y + r * d,
                             d, n.eps, st + r, st + rows + r)


cdef void norm_backward(const floating *dy, const floating *x, const floating *st, floating *dx,
                        const floating *add, const Norm *n) noexcept nogil:
    cdef Py_ssize_t rows = n.rows, d = n.d, ld = n.ldpart, r, j, c, lo, hi
    cdef int nth = n.nthreads
    cdef floating *part = <floating *> n.part
    cdef floating *dg = <floating *> n.dg
    cdef floating *db = <floating *> n.db
    cdef const floating *ap
    for c in prange(nth, schedule="static", num_threads=nth, use_threads_if=nth > 1):
        lo = rows * c // nth
        hi = rows * (c + 1) // nth
        for j in range(2 * d):
            part[c * ld + j] = 0
        for r in range(lo, hi):
            ap = add + r * d if add != NULL else NULL
            if floating is float:
                attnx_ln_bwd_f32(dy + r * d, x + r * d, <const float *> n.g, st[r],
                                 st[rows + r], dx + r * d, ap, part + c * ld,
                                 part + c * ld + d, d)
            else:
                attnx_ln_bwd_f64(dy + r * d, x + r * d, <const double *> n.g, st[r],
                                 st[rows + r], dx + r * d, ap, part + c * ld,
                                 part + c * ld + d, d)
    for j in range(d):
        dg[j] = 0
        db[j] = 0
    for c in range(nth):
        for j in range(d):
            dg[j] += part[c * ld + j]
            db[j] += part[c * ld + d + j]


def layernorm_forward(const floating[:, ::1] x, const floating[::1] g, const floating[::1] b,
                      floating[:, ::1] y, floating[:, ::1] st, double eps, int nthreads=1):
    """y = (x - mean) / sqrt(var + eps) * g + b per row (biased variance, as torch);
    st[0, r] = mean, st[1, r] = 1/sqrt(var + eps), kept for backward."""
    cdef Py_ssize_t rows = x.shape[0], d = x.shape[1]
    cdef Norm n
    _threads("LayerNorm", nthreads)
    _len("LayerNorm", "g", g, d)
    _len("LayerNorm", "b", b, d)
    _shape("LayerNorm", "y", y, rows, d)
    _shape("LayerNorm", "st", st, 2, rows)
    if rows == 0:
        return
    n.g, n.b, n.rows, n.d, n.eps, n.nthreads = &g[0], &b[0], rows, d, eps, nthreads
    with nogil:
        norm_forward(&x[0, 0], &y[0, 0], &st[0, 0], &n)


def layernorm_backward(const floating[:, ::1] dy, const floating[:, ::1] x, const floating[::1] g,
                       grads, work, floating[:, ::1] dx, const floating[:, ::1] add, int nthreads=1):
    """dg = sum_r dy * xhat, db = sum_r dy, per row dx = rs * (dy g - mean(dy g) - xhat *
    mean(dy g xhat)) (+ add); grads = (dg, db); work = (st, part): forward's statistics
    (2, rows), a (>= nthreads, 2 d) scratch: each thread's dg, db, summed in thread order."""
    for name, rec in (("grads", grads), ("work", work)):
        if not isinstance(rec, tuple) or len(rec) != 2:
            raise ValueError(f"LayerNorm backward: {name} must be a tuple of 2 arrays, got "
                             f"{len(rec) if isinstance(rec, tuple) else type(rec).__name__}")
    cdef floating[::1] dg = grads[0], db = grads[1]
    cdef const floating[:, ::1] st = work[0]
    cdef floating[:, ::1] part = work[1]
    cdef Py_ssize_t rows = x.shape[0], d = x.shape[1]
    cdef Norm n
    _threads("LayerNorm backward", nthreads)
    _shape("LayerNorm backward", "dy", dy, rows, d)
    _len("LayerNorm backward", "g", g, d)
    _shape("LayerNorm backward", "st", st, 2, rows)
    _len("LayerNorm backward", "dg", dg, d)
    _len("LayerNorm backward", "db", db, d)
    _shape("LayerNorm backward", "dx", dx, rows, d)
    _shape("LayerNorm backward", "add", add, rows, d)
    if part.shape[0] < 1 or part.shape[1] < 2 * d:
        raise ValueError(f"LayerNorm backward: part must be (>= 1, >= {2 * d}), got "
                         f"({part.shape[0]}, {part.shape[1]})")
    if rows == 0:
        dg[:] = 0
        db[:] = 0
        return
    n.g, n.dg, n.db, n.part = &g[0], &dg[0], &db[0], &part[0, 0]
    n.rows, n.d, n.ldpart, n.nthreads = rows, d, part.shape[1], min(nthreads, part.shape[0])
    with nogil:
        norm_backward(&dy[0, 0], &x[0, 0], &st[0, 0], &dx[0, 0],
                      &add[0, 0] if add is not None else NULL, &n)


cdef inline Py_ssize_t last_valid(const uint8_t *km, Py_ssize_t b,
                                  Py_ssize_t t) noexcept nogil:
    cdef Py_ssize_t tt = t - 1
    while tt >= 0 and km[b * t + tt]:
        tt -= 1
    return tt


cdef void pool_fwd(const floating *h, const uint8_t *km, floating *pooled, Py_ssize_t nb,
                   Py_ssize_t t, Py_ssize_t d, bint last, int nthreads) noexcept nogil:
    """pooled (nb, d) from h (nb * t, d); km (nb, t) or NULL."""
    cdef Py_ssize_t b, tt, j, cnt
    cdef floating inv
    for b in prange(nb, schedule="static", num_threads=nthreads, use_threads_if=nthreads > 1):
        for j in range(d):
            pooled[b * d + j] = 0
        if last:
            tt = last_valid(km, b, t) if km != NULL else t - 1
            if tt >= 0:
                for j in range(d):
                    pooled[b * d + j] = h[(b * t + tt) * d + j]
        else:
            cnt = 0
            for tt in range(t):
                if km == NULL or not km[b * t + tt]:
                    cnt = cnt + 1
                    for j in range(d):
                        pooled[b * d + j] += h[(b * t + tt) * d + j]
            if cnt > 0:
                inv = <floating> (1.0 / cnt)
                for j in range(d):
                    pooled[b * d + j] = pooled[b * d + j] * inv


cdef void pool_bwd(const floating *dpooled, const uint8_t *km, floating *dh, Py_ssize_t nb,
                   Py_ssize_t t, Py_ssize_t d, bint last, int nthreads) noexcept nogil:
    """dh (nb * t, d) from dpooled (nb, d); zero where the pooling did not read."""
    cdef Py_ssize_t b, tt, j, cnt
    cdef floating inv
    for b in prange(nb, schedule="static", num_threads=nthreads, use_threads_if=nthreads > 1):
        for tt in range(t):
            for j in range(d):
                dh[(b * t + tt) * d + j] = 0
        if last:
            tt = last_valid(km, b, t) if km != NULL else t - 1
            if tt >= 0:
                for j in range(d):
                    dh[(b * t + tt) * d + j] = dpooled[b * d + j]
        else:
            cnt = 0
            for tt in range(t):
                if km == NULL or not km[b * t + tt]:
                    cnt = cnt + 1
            if cnt > 0:
                inv = <floating> (1.0 / cnt)
                for tt in range(t):
                    if km == NULL or not km[b * t + tt]:
                        for j in range(d):
                            dh[(b * t + tt) * d + j] = dpooled[b * d + j] * inv


cdef inline const uint8_t *mask_ptr(const uint8_t[:, ::1] km) noexcept:
    return &km[0, 0] if km is not None and km.shape[0] and km.shape[1] else NULL


def pool_forward(const floating[:, ::1] h, const uint8_t[:, ::1] km, floating[:, ::1] pooled,
                 Py_ssize_t nb, Py_ssize_t t, bint last, int nthreads=1):
    """pooled[b] = mean of the valid rows of sequence b (km[b, tt] == 0, or all rows
    when km is None), or its last valid row; zeros when it has none."""
    cdef Py_ssize_t d = h.shape[1]
    _threads("pooling", nthreads)
    _shape("pooling", "h", h, nb * t, -1)
    _shape("pooling", "key mask", km, nb, t)
    _shape("pooling", "pooled", pooled, nb, d)
    if nb == 0 or d == 0:
        return
    cdef const uint8_t *kp = mask_ptr(km)
    with nogil:
        pool_fwd(&h[0, 0] if t else NULL, kp, &pooled[0, 0], nb, t, d, last, nthreads)


def pool_backward(const floating[:, ::1] dpooled, const uint8_t[:, ::1] km,
                  floating[:, ::1] dh, Py_ssize_t nb, Py_ssize_t t, bint last, int nthreads=1):
    """dh (B*T, d) from dpooled (B, d): spread over the valid rows (mean) or put on the
    last valid row; zero elsewhere."""
    cdef Py_ssize_t d = dh.shape[1]
    _threads("pooling backward", nthreads)
    _shape("pooling backward", "dh", dh, nb * t, -1)
    _shape("pooling backward", "key mask", km, nb, t)
    _shape("pooling backward", "dpooled", dpooled, nb, d)
    if nb == 0 or t == 0 or d == 0:
        return
    cdef const uint8_t *kp = mask_ptr(km)
    with nogil:
        pool_bwd(&dpooled[0, 0], kp, &dh[0, 0], nb, t, d, last, nthreads)


cdef void zero_rows(floating *y, const uint8_t *km, Py_ssize_t rows, Py_ssize_t k) noexcept nogil:
    """Zero row r of y (rows, k) where km[r] (the flat (B, T) mask) is set."""
    cdef Py_ssize_t r, j
    for r in range(rows):
        if km[r]:
            for j in range(k):
                y[r * k + j] = 0


def zero_masked_rows(floating[:, ::1] y, const uint8_t[:, ::1] km, int nthreads=1):
    """Zero row r of y (B*T, k) where the flat mask km (B, T) is set."""
    cdef Py_ssize_t rows = y.shape[0], k = y.shape[1], t = km.shape[1]
    if km.shape[0] * t != rows:
        raise ValueError(f"masked rows: y has {rows} rows, the mask "
                         f"({km.shape[0]}, {t}) covers {km.shape[0] * t}")
    if rows == 0 or k == 0:
        return
    with nogil:
        zero_rows(&y[0, 0], &km[0, 0], rows, k)


cdef void add_sub_rows(floating *out, const floating *a, const floating *b, Py_ssize_t rows,
                       Py_ssize_t k, int nthreads) noexcept nogil:
    cdef Py_ssize_t r, j
    for r in prange(rows, schedule="static", num_threads=nthreads, use_threads_if=nthreads > 1):
        for j in range(k):
            if a != NULL:
                out[r * k + j] += a[r * k + j]
            if b != NULL:
                out[r * k + j] -= b[r * k + j]


def add_sub(floating[:, ::1] out, const floating[:, ::1] a, const floating[:, ::1] b,
            int nthreads=1):
    """out += a - b (a or b may be None)."""
    cdef Py_ssize_t rows = out.shape[0], k = out.shape[1]
    _threads("add_sub", nthreads)
    _shape("add_sub", "a", a, rows, k)
    _shape("add_sub", "b", b, rows, k)
    if rows == 0 or k == 0:
        return
    with nogil:
        add_sub_rows(&out[0, 0], &a[0, 0] if a is not None else NULL,
                     &b[0, 0] if b is not None else NULL, rows, k, nthreads)


def cross_entropy_rows(const floating[:, ::1] z, const int64_t[::1] lab,
                       const double[::1] w, double total, floating[:, ::1] dz,
                       double smoothing=0.0):
    """sum_r w_r l_r / total with l_r = logsumexp(z_r) - z_r[lab_r] (row max subtracted);
    dz = w_r / total * (softmax(z_r) - onehot(lab_r)). w None means every w_r = 1.
    smoothing e > 0 replaces the one-hot target by (1 - e) onehot + e / C (PyTorch's
    label_smoothing): l_r = lse(z_r) - (1 - e) z_r[lab_r] - e mean_j z_r[j]."""
    cdef Py_ssize_t n = z.shape[0], c = z.shape[1], r, j
    cdef double mx, se, acc = 0, wr, e, zs, keep = 1.0 - smoothing
    _len("cross-entropy", "labels", lab, n)
    _len("cross-entropy", "sample_weight", w, n)
    _shape("cross-entropy", "dz", dz, n, c)
    if c < 1 or not total > 0:
        raise ValueError(f"cross-entropy: needs classes and a positive total, got "
                         f"{c} classes, total {total}")
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"cross-entropy: label_smoothing must be in [0, 1), got {smoothing}")
    for r in range(n):
        if not 0 <= lab[r] < c:
            raise ValueError(f"cross-entropy: label {lab[r]} at row {r} is outside [0, {c})")
    with nogil:
        for r in range(n):
            mx = z[r, 0]
            for j in range(1, c):
                if z[r, j] > mx:
                    mx = z[r, j]
            se = 0
            zs = 0
            for j in range(c):
                e = exp(<double> z[r, j] - mx)
                dz[r, j] = <floating> e
                se = se + e
                zs = zs + z[r, j]
            wr = w[r] if w is not None else 1.0
            if smoothing == 0.0:
                acc = acc + wr * (log(se) + mx - z[r, lab[r]])
            else:
                acc = acc + wr * (log(se) + mx - keep * z[r, lab[r]] - smoothing * zs / c)
            wr = wr / total
            for j in range(c):
                dz[r, j] = <floating> (dz[r, j] / se * wr)
            if smoothing == 0.0:
                dz[r, lab[r]] -= <floating> wr
            else:
                for j in range(c):
                    dz[r, j] -= <floating> (wr * smoothing / c)
                dz[r, lab[r]] -= <floating> (wr * keep)
    return acc / total


cdef void masked_add_rows(floating *out, const floating *res, const floating *a,
                          const floating *b, const floating *mult, Py_ssize_t rows,
                          Py_ssize_t k, int nthreads) noexcept nogil:
    cdef Py_ssize_t r, j, i
    cdef floating v
    for r in prange(rows, schedule="static", num_threads=nthreads, use_threads_if=nthreads > 1):
        for j in range(k):
            i = r * k + j
            v = a[i]
            if b != NULL:
                v = v - b[i]
            v = v * mult[i]
            if res != NULL:
                v = v + res[i]
            out[i] = v


def masked_add(floating[:, ::1] out, const floating[:, ::1] res, const floating[:, ::1] a,
               const floating[:, ::1] b, const floating[:, ::1] mult, int nthreads=1):
    """out = res + mult * (a - b), res and b optional (None reads as 0): a dropped-out
    residual branch (mult holds 0 or 1/(1-p)) and its backward."""
    cdef Py_ssize_t rows = out.shape[0], k = out.shape[1]
    _threads("masked_add", nthreads)
    _shape("masked_add", "res", res, rows, k)
    _shape("masked_add", "a", a, rows, k)
    _shape("masked_add", "b", b, rows, k)
    _shape("masked_add", "mult", mult, rows, k)
    if rows == 0 or k == 0:
        return
    with nogil:
        masked_add_rows(&out[0, 0], &res[0, 0] if res is not None else NULL, &a[0, 0],
                        &b[0, 0] if b is not None else NULL, &mult[0, 0], rows, k, nthreads)


cdef int dropout_cut(double p, double *keep, uint32_t *cut) except -1:
    """The multiplier of a kept element and the smallest kept 32-bit draw for p."""
    cdef uint64_t c   # bits >= p * 2**32 exactly when bits >= ceil(p * 2**32)
    if not 0 <= p < 1:
        raise ValueError(f"dropout: p must lie in [0, 1), got {p}")
    keep[0] = 1.0 / (1.0 - p)   # after the check: p = 1 would divide by zero
    c = <uint64_t> ceil(p * 4294967296.0)
    if c > 0xFFFFFFFFU:   # p within 2**-32 of 1: no draw reaches the cut
        keep[0] = 0
        c = 0
    cut[0] = <uint32_t> c
    return 0


cdef inline void mask_fill(const uint32_t *bits, floating *out, Py_ssize_t n, floating keep,
                           uint32_t cut) noexcept nogil:
    """out[i] = keep where bits[i] >= cut, else 0."""
    if floating is float:
        attnx_mask_fill_f32(bits, out, n, keep, cut)
    else:
        attnx_mask_fill_f64(bits, out, n, keep, cut)


def dropout_mask(const uint32_t[::1] bits, floating[:, ::1] out, double p, int nthreads=1):
    """Dropout multipliers from random bits: out[r, j] = 0 where the 32-bit draw
    bits[r * k + j] is below p * 2**32 (dropped: probability p, to 2**-32), else
    1/(1-p). bits holds at least rows * k draws (the rest is not read)."""
    cdef Py_ssize_t rows = out.shape[0], k = out.shape[1], r
    cdef double keep
    cdef uint32_t cut32
    _threads("dropout", nthreads)
    dropout_cut(p, &keep, &cut32)
    if bits.shape[0] < rows * k:
        raise ValueError(f"dropout: bits must hold >= {rows * k} draws (out is "
                         f"({rows}, {k})), got {bits.shape[0]}")
    if rows == 0 or k == 0:
        return
    with nogil:
        for r in prange(rows, schedule="static", num_threads=nthreads, use_threads_if=nthreads > 1):
            mask_fill(&bits[r * k], &out[r, 0], k, <floating> keep, cut32)


def dropout_masks(object bit_generator, uint32_t[::1] bits, list outs, double p):
    """random_bits(bit_generator, bits), then dropout_mask(bits[at:at + out.size],
    out, p) for each C-contiguous 2-D float array of outs in turn (at: the sizes
    of the arrays before it), in one call: the same values."""
    cdef Py_ssize_t at = 0, n
    cdef double keep
    cdef uint32_t cut32
    cdef float[:, ::1] o32
    cdef double[:, ::1] o64
    dropout_cut(p, &keep, &cut32)
    if sum([o.size for o in outs]) > bits.shape[0]:
        raise ValueError(f"dropout: bits must hold >= {sum([o.size for o in outs])} draws, "
                         f"got {bits.shape[0]}")
    random_bits(bit_generator, bits)
    for o in outs:
        n = o.size
        if n == 0:
            continue
        if o.dtype.itemsize == 4:
            o32 = o
            with nogil:
                mask_fill(&bits[at], &o32[0, 0], n, <float> keep, cut32)
        else:
            o64 = o
            with nogil:
                mask_fill(&bits[at], &o64[0, 0], n, keep, cut32)
        at += n


def random_bits(object bit_generator, uint32_t[::1] out):
    """Fill out with 32-bit random draws without allocating: one 64-bit draw of the
    numpy BitGenerator (under its lock) keys a SplitMix64 counter stream (Steele,
    Lea and Flood's generator: a Weyl sequence through a 64-bit finaliser), each
    of whose outputs gives two draws. The generator advances by one draw per call."""
    cdef Py_ssize_t n = out.shape[0]
    cdef bitgen_t *rng
    cdef uint64_t key
    require_simd()
    capsule = getattr(bit_generator, "capsule", None)
    if capsule is None or not PyCapsule_IsValid(capsule, "BitGenerator"):
        raise TypeError(f"random_bits: bit_generator must be a numpy BitGenerator, got "
                        f"{type(bit_generator).__name__}")
    rng = <bitgen_t *> PyCapsule_GetPointer(capsule, "BitGenerator")
    with bit_generator.lock:
        key = rng.next_uint64(rng.state)
    if n == 0:
        return
    with nogil:
        attnx_splitmix_fill(key, &out[0], n)
