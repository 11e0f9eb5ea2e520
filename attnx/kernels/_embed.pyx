"""Kernels for the time-series layers around the transformer blocks: sliding windows
(patch embedding, convolutional stem), max pooling over time and a class token
(instance normalisation, RevIN, is in attnx.kernels._revin). Forward beside backward.

Buffers are C-contiguous numpy arrays of one float dtype (float32 or float64) per
call, batched as (B, T, C) with the time steps of a sequence contiguous; the caller
passes every output and scratch buffer (nothing is allocated here). Each entry point
checks types, dtypes, shapes, contiguity, writability and that no output overlaps an
input (ValueError or TypeError naming the argument) before it releases the GIL.

Key padding masks are (B, T) uint8, 1 = padded, or None. A sequence's valid length
t_b is one past its last unpadded step; steps from t_b on are padding whatever they
hold, and a padded step is never read (it may hold NaN).

The loops are pointer-level cores (declared in attnx/kernels/_embed.pxd) that the def
entries below and the whole-model pass (attnx.kernels._model_pass) both call.

Thread policy as in attnx.kernels._seq: the caller passes `nthreads` for the prange loops.
Reductions over the batch (class token, RevIN's gamma and beta) run in a fixed order,
so results do not depend on the thread count.
"""
import numpy as np
cimport numpy as cnp
from cython.parallel cimport prange
from libc.stdint cimport uint8_t, int64_t

from attnx.kernels._blas cimport floating
from attnx.kernels._kernel_checks import (dtype_of as _dtype_of, check as _check,
                                  disjoint as _disjoint, threads as _threads, batch as _batch,
                                  int_at_least as _int)

cnp.import_array()

PAD_MODES = ("zeros", "replicate")


cdef inline Py_ssize_t _valid_len(const uint8_t[:, ::1] km, Py_ssize_t b,
                                  Py_ssize_t t) noexcept nogil:
    """One past the last unpadded step of sequence b (t when km is None)."""
    if km is None:
        return t
    while t > 0 and km[b, t - 1]:
        t -= 1
    return t


# ---- sliding windows: unfold (forward) and fold-add (backward) ---------------------
cdef inline Py_ssize_t _vlen(const uint8_t *km, Py_ssize_t b, Py_ssize_t t) noexcept nogil:
    """_valid_len on a (B, t) mask pointer (NULL: t)."""
    cdef const uint8_t *row
    if km == NULL:
        return t
    row = km + b * t
    while t > 0 and row[t - 1]:
        t -= 1
    return t


cdef inline void *_data(object a):
    """The data of a checked C-contiguous array, NULL for None."""
    return NULL if a is None else cnp.PyArray_DATA(<cnp.ndarray> a)


cdef inline Py_ssize_t _source(const Geom *g, const uint8_t *km, Py_ssize_t b,
                               Py_ssize_t i, Py_ssize_t tb) noexcept nogil:
    """The step of sequence b (valid length tb) that padded position i reads, or -1 for
    a zero: i itself inside [0, tb), the nearest end step with replicate padding, and
    -1 for zero padding or a padded step."""
    if i < 0 or i >= tb:
        if not g.rep or tb == 0:
            return -1
        i = 0 if i < 0 else tb - 1
    if km != NULL and km[b * g.t + i]:
        return -1
    return i


cdef void unfold(const Geom *g, const floating *x, const uint8_t *km, floating *u,
                 int nth) noexcept nogil:
    cdef Py_ssize_t b, n, l, j, src, tb, c = g.c, w = g.l * g.c
    for b in prange(g.nb, schedule="static", num_threads=nth, use_threads_if=nth > 1):
        tb = _vlen(km, b, g.t)
        for n in range(g.n):
            for l in range(g.l):
                src = _source(g, km, b, n * g.s + l - g.pl, tb)
                if src >= 0:
                    for j in range(c):
                        u[(b * g.n + n) * w + l * c + j] = x[(b * g.t + src) * c + j]
                else:
                    for j in range(c):
                        u[(b * g.n + n) * w + l * c + j] = 0


cdef void fold(const Geom *g, const floating *du, const uint8_t *km, floating *dx,
               int nth) noexcept nogil:
    cdef Py_ssize_t b, n, l, j, src, tb, tt, c = g.c, w = g.l * g.c
    for b in prange(g.nb, schedule="static", num_threads=nth, use_threads_if=nth > 1):
        tb = _vlen(km, b, g.t)
        for tt in range(g.t):
            for j in range(c):
                dx[(b * g.t + tt) * c + j] = 0
        for n in range(g.n):
            for l in range(g.l):
                src = _source(g, km, b, n * g.s + l - g.pl, tb)
                if src >= 0:
                    for j in range(c):
                        dx[(b * g.t + src) * c + j] += du[(b * g.n + n) * w + l * c + j]


def same_padding(kernel_size):
    """(left, right) zero padding that keeps T outputs for a stride-1 window of this
    length, split as torch.nn.Conv1d(padding='same') does: left = (k - 1) // 2."""
    cdef Py_ssize_t k = _int("same_padding", "kernel_size", kernel_size, 1)
    return (k - 1) // 2, k - 1 - (k - 1) // 2


cdef class Windows:
    """Windows of length patch_len every stride steps over a (B, T, C) input padded
    with pad_left steps before and pad_right after, unfolded into rows (B, N, L*C)
    with row (b, n) = the window's steps in time order, channels fastest:
    u[b, n, l*C + c] = x_padded[b, n*stride + l - pad_left, c],
    N = (T + pad_left + pad_right - patch_len) // stride + 1.

    A patch embedding (PatchTST) or a 1-D convolution over time is then one GEMM
    u (B*N, L*C) @ W (L*C, d) + b over all rows (attnx.kernels._seq.linear_forward);
    W[l*C + c, o] is torch's Conv1d weight[o, c, l].

    pad_mode "zeros" reads zeros outside the sequence; "replicate" repeats its first
    step on the left and its last valid step (t_b - 1, per sequence) on the right:
    PatchTST pads the end with `stride` copies of the last value, which is
    Windows(patch_len, stride, pad_right=stride, pad_mode="replicate").
    Padded steps (key mask set) read as zero in either mode.
    """
    cdef readonly Py_ssize_t patch_len, stride, pad_left, pad_right
    cdef readonly str pad_mode

    def __init__(self, patch_len, stride=1, pad_left=0, pad_right=0, pad_mode="zeros"):
        self.patch_len = _int("Windows", "patch_len", patch_len, 1)
        self.stride = _int("Windows", "stride", stride, 1)
        self.pad_left = _int("Windows", "pad_left", pad_left, 0)
        self.pad_right = _int("Windows", "pad_right", pad_right, 0)
        if pad_mode not in PAD_MODES:
            raise ValueError(f"Windows: pad_mode must be one of {PAD_MODES}, got {pad_mode!r}")
        self.pad_mode = pad_mode

    def __repr__(self):
        return (f"Windows(patch_len={self.patch_len}, stride={self.stride}, "
                f"pad_left={self.pad_left}, pad_right={self.pad_right}, "
                f"pad_mode={self.pad_mode!r})")

    def count(self, t):
        """N, the number of windows over t steps; ValueError when patch_len exceeds t
        (a window must fit in the sequence itself, padding aside)."""
        cdef Py_ssize_t tt = _int("Windows", "t", t, 1)
        if self.patch_len > tt:
            raise ValueError(f"Windows: patch_len {self.patch_len} is longer than the "
                             f"sequence ({tt} steps); use patch_len <= {tt}")
        return (tt + self.pad_left + self.pad_right - self.patch_len) // self.stride + 1

    cdef Geom _geom(self, str what, str name, x, bint out):
        """The call's sizes from x (B, T, C) (checked as `name`), N from T."""
        cdef Geom g
        _check(what, name, x, x.dtype, (-1, -1, -1), out=out)
        g.nb, g.t, g.c = x.shape[0], x.shape[1], x.shape[2]
        g.n = self.count(g.t)
        g.l, g.s, g.pl, g.pr = self.patch_len, self.stride, self.pad_left, self.pad_right
        g.rep = self.pad_mode == "replicate"
        return g

    def forward(self, x, km, u, nthreads=1):
        """u (B, N, L*C) = the windows of x (B, T, C); km (B, T) uint8 or None."""
        cdef str what = "windows"
        dt = _dtype_of(what, "x", x)
        cdef Geom g = self._geom(what, "x", x, False)
        _threads(what, nthreads)
        _check(what, "key mask", km, np.uint8, (g.nb, g.t), optional=True)
        _check(what, "u", u, dt, (g.nb, g.n, g.l * g.c), out=True)
        _disjoint(what, [("u", u)], [("x", x), ("key mask", km)])
        cdef bint f32 = dt == np.float32
        cdef int nth = nthreads
        cdef void *xp = _data(x)
        cdef void *kp = _data(km)
        cdef void *up = _data(u)
        with nogil:
            if f32:
                unfold(&g, <const float *> xp, <const uint8_t *> kp, <float *> up, nth)
            else:
                unfold(&g, <const double *> xp, <const uint8_t *> kp, <double *> up, nth)

    def backward(self, du, km, dx, nthreads=1):
        """dx (B, T, C) = the fold of du (B, N, L*C): each window row added back onto
        the steps it read (replicated end steps collect every copy); zero on padded
        steps. dx is overwritten."""
        cdef str what = "windows backward"
        dt = _dtype_of(what, "dx", dx)
        cdef Geom g = self._geom(what, "dx", dx, True)
        _threads(what, nthreads)
        _check(what, "key mask", km, np.uint8, (g.nb, g.t), optional=True)
        _check(what, "du", du, dt, (g.nb, g.n, g.l * g.c))
        _check(what, "dx", dx, dt, (g.nb, g.t, g.c), out=True)
        _disjoint(what, [("dx", dx)], [("du", du), ("key mask", km)])
        cdef bint f32 = dt == np.float32
        cdef int nth = nthreads
        cdef void *dup = _data(du)
        cdef void *kp = _data(km)
        cdef void *dxp = _data(dx)
        with nogil:
            if f32:
                fold(&g, <const float *> dup, <const uint8_t *> kp, <float *> dxp, nth)
            else:
                fold(&g, <const double *> dup, <const uint8_t *> kp, <double *> dxp, nth)

    def mask(self, km, out):
        """out (B, N) uint8 = the key padding mask of the windows, from the steps' km
        (B, T) (None: every window valid). Window n of sequence b is padded when it lies
        past the windows of the sequence on its own, n >= (t_b + pad_left + pad_right
        - patch_len) // stride + 1, or when it holds steps of the sequence and every one
        of them is padded. A window of padding only (before n reaches that bound) stays
        valid, as PatchTST's end patch does; a sequence with no valid step has none."""
        cdef str what = "windows mask"
        cdef Py_ssize_t b, n, l, i, tb, nbw, nb, t, nwin
        cdef bint real, valid
        cdef uint8_t[:, ::1] o
        cdef const uint8_t[:, ::1] k
        if not isinstance(out, np.ndarray) or out.ndim != 2:
            raise ValueError(f"{what}: out must be a 2-D uint8 array (B, N)")
        nb = out.shape[0]
        _check(what, "key mask", km, np.uint8, (nb, -1), optional=True)
        t = km.shape[1] if km is not None else -1
        if t < 0:
            _check(what, "out", out, np.uint8, (nb, -1), out=True)
            out[...] = 0
            return
        nwin = self.count(t)
        _check(what, "out", out, np.uint8, (nb, nwin), out=True)
        _disjoint(what, [("out", out)], [("key mask", km)])
        o = out
        k = km
        with nogil:
            for b in range(nb):
                tb = _valid_len(k, b, t)
                nbw = tb + self.pad_left + self.pad_right - self.patch_len
                nbw = nbw // self.stride + 1 if nbw >= 0 and tb > 0 else 0
                for n in range(nwin):
                    real = False
                    valid = False
                    for l in range(self.patch_len):
                        i = n * self.stride + l - self.pad_left
                        if 0 <= i < tb:
                            real = True
                            if not k[b, i]:
                                valid = True
                                break
                    o[b, n] = 0 if n < nbw and (valid or not real) else 1


# ---- max pooling over the valid steps ----------------------------------------------
cdef void maxpool_fwd(const floating *h, const uint8_t *km, floating *pooled, int64_t *idx,
                      Py_ssize_t nb, Py_ssize_t t, Py_ssize_t d, int nth) noexcept nogil:
    cdef Py_ssize_t b, tt, j
    cdef bint first
    for b in prange(nb, schedule="static", num_threads=nth, use_threads_if=nth > 1):
        first = True
        for tt in range(t):
            if km != NULL and km[b * t + tt]:
                continue
            if first:
                for j in range(d):
                    pooled[b * d + j] = h[(b * t + tt) * d + j]
                    idx[b * d + j] = tt
                first = False
            else:
                for j in range(d):
                    if h[(b * t + tt) * d + j] > pooled[b * d + j]:
                        pooled[b * d + j] = h[(b * t + tt) * d + j]
                        idx[b * d + j] = tt
        if first:   # no valid step
            for j in range(d):
                pooled[b * d + j] = 0
                idx[b * d + j] = -1


cdef void maxpool_bwd(const floating *dpooled, const int64_t *idx, floating *dh,
                      Py_ssize_t nb, Py_ssize_t t, Py_ssize_t d, int nth) noexcept nogil:
    cdef Py_ssize_t b, tt, j
    for b in prange(nb, schedule="static", num_threads=nth, use_threads_if=nth > 1):
        for tt in range(t):
            for j in range(d):
                dh[(b * t + tt) * d + j] = 0
        for j in range(d):
            if idx[b * d + j] >= 0:
                dh[(b * t + idx[b * d + j]) * d + j] = dpooled[b * d + j]


def max_pool_forward(h, km, pooled, idx, nthreads=1):
    """pooled (B, D) = the maximum of h (B, T, D) over each sequence's valid steps
    (km (B, T) uint8, 1 = padded, or None), idx (B, D) int64 = the step it came from
    (the first on ties); a sequence with no valid step gets 0 and index -1."""
    cdef str what = "max pooling"
    dt, (nb, t, d) = _batch(what, "h", h, nthreads)
    _check(what, "key mask", km, np.uint8, (nb, t), optional=True)
    _check(what, "pooled", pooled, dt, (nb, d), out=True)
    _check(what, "idx", idx, np.int64, (nb, d), out=True)
    _disjoint(what, [("pooled", pooled), ("idx", idx)], [("h", h), ("key mask", km)])
    cdef void *hp = _data(h)
    cdef void *kmp = _data(km)
    cdef void *pooledp = _data(pooled)
    cdef void *idxp = _data(idx)
    cdef bint f32 = dt == np.float32
    cdef int nth = nthreads
    cdef Py_ssize_t n0 = nb, n1 = t, n2 = d
    with nogil:
        if f32:
            maxpool_fwd(<const float *> hp, <const uint8_t *> kmp, <float *> pooledp,
                        <int64_t *> idxp, n0, n1, n2, nth)
        else:
            maxpool_fwd(<const double *> hp, <const uint8_t *> kmp, <double *> pooledp,
                        <int64_t *> idxp, n0, n1, n2, nth)


def max_pool_backward(dpooled, idx, dh, nthreads=1):
    """dh (B, T, D) = dpooled (B, D) put on the step idx chose, zero elsewhere
    (overwritten; index -1 contributes nothing)."""
    cdef str what = "max pooling backward"
    dt, (nb, t, d) = _batch(what, "dh", dh, nthreads, out=True)
    _check(what, "dpooled", dpooled, dt, (nb, d))
    _check(what, "idx", idx, np.int64, (nb, d))
    if idx.size and (idx.min() < -1 or idx.max() >= t):
        raise ValueError(f"max pooling backward: idx must lie in [-1, {t}), got "
                         f"[{idx.min()}, {idx.max()}]")
    _disjoint(what, [("dh", dh)], [("dpooled", dpooled), ("idx", idx)])
    cdef void *dpooledp = _data(dpooled)
    cdef void *idxp = _data(idx)
    cdef void *dhp = _data(dh)
    cdef bint f32 = dt == np.float32
    cdef int nth = nthreads
    cdef Py_ssize_t n0 = nb, n1 = t, n2 = d
    with nogil:
        if f32:
            maxpool_bwd(<const float *> dpooledp, <const int64_t *> idxp, <float *> dhp, n0, n1,
                        n2, nth)
        else:
            maxpool_bwd(<const double *> dpooledp, <const int64_t *> idxp, <double *> dhp, n0, n1,
                        n2, nth)


# ---- class token -------------------------------------------------------------------
cdef void cls_fwd(const floating *h, const floating *cls, floating *out, Py_ssize_t nb,
                  Py_ssize_t t, Py_ssize_t d, int nth) noexcept nogil:
    cdef Py_ssize_t b, tt, j
    for b in prange(nb, schedule="static", num_threads=nth, use_threads_if=nth > 1):
        for j in range(d):
            out[b * (t + 1) * d + j] = cls[j]
        for tt in range(t):
            for j in range(d):
                out[(b * (t + 1) + tt + 1) * d + j] = h[(b * t + tt) * d + j]


cdef void cls_bwd(const floating *dout, floating *dh, floating *dcls, Py_ssize_t nb,
                  Py_ssize_t t, Py_ssize_t d, bint acc, int nth) noexcept nogil:
    cdef Py_ssize_t b, tt, j
    for b in prange(nb, schedule="static", num_threads=nth, use_threads_if=nth > 1):
        for tt in range(t):
            for j in range(d):
                dh[(b * t + tt) * d + j] = dout[(b * (t + 1) + tt + 1) * d + j]
    if not acc:
        for j in range(d):
            dcls[j] = 0
    for b in range(nb):   # fixed order: the same sum at any thread count
        for j in range(d):
            dcls[j] += dout[b * (t + 1) * d + j]


def cls_forward(h, cls, out, km=None, out_km=None, nthreads=1):
    """out (B, T+1, D) = the class token cls (D,) at position 0, then h (B, T, D).
    With km (B, T) given, out_km (B, T+1) = 0 (the token is never padded), then km."""
    cdef str what = "class token"
    dt, (nb, t, d) = _batch(what, "h", h, nthreads)
    _check(what, "cls", cls, dt, (d,))
    _check(what, "out", out, dt, (nb, t + 1, d), out=True)
    _check(what, "key mask", km, np.uint8, (nb, t), optional=True)
    if (km is None) != (out_km is None):
        raise ValueError("class token: km and out_km go together (both arrays or both None)")
    _check(what, "out_km", out_km, np.uint8, (nb, t + 1), out=True, optional=True)
    _disjoint(what, [("out", out), ("out_km", out_km)],
              [("h", h), ("cls", cls), ("key mask", km)])
    if km is not None:
        out_km[:, 0] = 0
        out_km[:, 1:] = km
    cdef void *hp = _data(h)
    cdef void *clsp = _data(cls)
    cdef void *outp = _data(out)
    cdef bint f32 = dt == np.float32
    cdef int nth = nthreads
    cdef Py_ssize_t n0 = nb, n1 = t, n2 = d
    with nogil:
        if f32:
            cls_fwd(<const float *> hp, <const float *> clsp, <float *> outp, n0, n1, n2, nth)
        else:
            cls_fwd(<const double *> hp, <const double *> clsp, <double *> outp, n0, n1, n2, nth)


def cls_backward(dout, dh, dcls, accumulate=False, nthreads=1):
    """dh (B, T, D) = dout[:, 1:]; dcls (D,) = the sum over the batch of dout[:, 0]
    (added to dcls when accumulate, else written)."""
    cdef str what = "class token backward"
    dt = _dtype_of(what, "dout", dout)
    _check(what, "dout", dout, dt, (-1, -1, -1))
    nb, t1, d = dout.shape
    if t1 < 2:
        raise ValueError(f"{what}: dout must hold the token and at least one step, "
                         f"got {t1} positions")
    _threads(what, nthreads)
    _check(what, "dh", dh, dt, (nb, t1 - 1, d), out=True)
    _check(what, "dcls", dcls, dt, (d,), out=True)
    _disjoint(what, [("dh", dh), ("dcls", dcls)], [("dout", dout)])
    cdef Py_ssize_t t = t1 - 1
    cdef bint acc = accumulate
    cdef void *doutp = _data(dout)
    cdef void *dhp = _data(dh)
    cdef void *dclsp = _data(dcls)
    cdef bint f32 = dt == np.float32
    cdef int nth = nthreads
    cdef Py_ssize_t n0 = nb, n1 = t, n2 = d
    with nogil:
        if f32:
            cls_bwd(<const float *> doutp, <float *> dhp, <float *> dclsp, n0, n1, n2, acc, nth)
        else:
            cls_bwd(<const double *> doutp, <double *> dhp, <double *> dclsp, n0, n1, n2, acc, nth)


cdef void first_fwd(const floating *h, floating *pooled, Py_ssize_t nb, Py_ssize_t t1,
                    Py_ssize_t d, int nth) noexcept nogil:
    cdef Py_ssize_t b, j
    for b in prange(nb, schedule="static", num_threads=nth, use_threads_if=nth > 1):
        for j in range(d):
            pooled[b * d + j] = h[b * t1 * d + j]


cdef void first_bwd(const floating *dpooled, floating *dh, Py_ssize_t nb, Py_ssize_t t1,
                    Py_ssize_t d, int nth) noexcept nogil:
    cdef Py_ssize_t b, tt, j
    for b in prange(nb, schedule="static", num_threads=nth, use_threads_if=nth > 1):
        for j in range(d):
            dh[b * t1 * d + j] = dpooled[b * d + j]
        for tt in range(1, t1):
            for j in range(d):
                dh[(b * t1 + tt) * d + j] = 0


def cls_pool_forward(h, pooled, nthreads=1):
    """pooled (B, D) = h[:, 0] of the blocks' output h (B, T+1, D): the class token's row."""
    cdef str what = "class token pooling"
    dt, (nb, t1, d) = _batch(what, "h", h, nthreads)
    _check(what, "pooled", pooled, dt, (nb, d), out=True)
    _disjoint(what, [("pooled", pooled)], [("h", h)])
    cdef void *hp = _data(h)
    cdef void *pooledp = _data(pooled)
    cdef bint f32 = dt == np.float32
    cdef int nth = nthreads
    cdef Py_ssize_t n0 = nb, n1 = t1, n2 = d
    with nogil:
        if f32:
            first_fwd(<const float *> hp, <float *> pooledp, n0, n1, n2, nth)
        else:
            first_fwd(<const double *> hp, <double *> pooledp, n0, n1, n2, nth)


def cls_pool_backward(dpooled, dh, nthreads=1):
    """dh (B, T+1, D) = dpooled (B, D) on row 0 of each sequence, zero elsewhere."""
    cdef str what = "class token pooling backward"
    dt, (nb, t1, d) = _batch(what, "dh", dh, nthreads, out=True)
    _check(what, "dpooled", dpooled, dt, (nb, d))
    _disjoint(what, [("dh", dh)], [("dpooled", dpooled)])
    cdef void *dpooledp = _data(dpooled)
    cdef void *dhp = _data(dh)
    cdef bint f32 = dt == np.float32
    cdef int nth = nthreads
    cdef Py_ssize_t n0 = nb, n1 = t1, n2 = d
    with nogil:
        if f32:
            first_bwd(<const float *> dpooledp, <float *> dhp, n0, n1, n2, nth)
        else:
            first_bwd(<const double *> dpooledp, <double *> dhp, n0, n1, n2, nth)
