"""Kernels for the time-series layers around the transformer blocks: sliding windows
(patch embedding, convolutional stem), max pooling over time, a class token, and
instance normalisation with de-normalised outputs (RevIN). Forward beside backward.

Buffers are C-contiguous numpy arrays of one float dtype (float32 or float64) per
call, batched as (B, T, C) with the time steps of a sequence contiguous; the caller
passes every output and scratch buffer (nothing is allocated here). Each entry point
checks types, dtypes, shapes, contiguity, writability and that no output overlaps an
input (ValueError or TypeError naming the argument) before it releases the GIL.

Key padding masks are (B, T) uint8, 1 = padded, or None. A sequence's valid length
t_b is one past its last unpadded step; steps from t_b on are padding whatever they
hold, and a padded step is never read (it may hold NaN).

Thread policy as in attnx._seq: the caller passes `nthreads` for the prange loops.
Reductions over the batch (class token, RevIN's gamma and beta) run in a fixed order,
so results do not depend on the thread count.
"""
import numpy as np
from cython.parallel cimport prange
from libc.math cimport sqrt
from libc.stdint cimport uint8_t, int64_t

from attnx._blas cimport floating

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
PAD_MODES = ("zeros", "replicate")


# ---- argument checks (Python, before any nogil work) -------------------------------
cdef object _dtype_of(str what, str name, a):
    """The float dtype of input a, which every other float buffer of the call shares."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{what}: {name} must be a numpy array, got {type(a).__name__}")
    if a.dtype not in _FLOATS:
        raise ValueError(f"{what}: {name} must be float32 or float64, got {a.dtype}")
    return a.dtype


def _check(str what, str name, a, dt, tuple shape, bint out=False, bint optional=False):
    """TypeError/ValueError naming `name` unless a is a C-contiguous ndarray of dtype dt
    and this shape (-1 = any extent), writeable when it is an output. None passes when
    optional."""
    if a is None:
        if optional:
            return
        raise TypeError(f"{what}: {name} must be a numpy array, got None")
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{what}: {name} must be a numpy array, got {type(a).__name__}")
    if a.dtype != dt:
        raise ValueError(f"{what}: {name} must have dtype {np.dtype(dt)}, got {a.dtype}")
    if a.ndim != len(shape) or any(s >= 0 and a.shape[i] != s for i, s in enumerate(shape)):
        want = "(" + ", ".join("any" if s < 0 else str(s) for s in shape) + ")"
        raise ValueError(f"{what}: {name} must have shape {want}, got {a.shape}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{what}: {name} must be C-contiguous")
    if out and not a.flags.writeable:
        raise ValueError(f"{what}: {name} is an output and must be writeable")


cdef _disjoint(str what, list outs, list ins):
    """ValueError when an output buffer may overlap an input or another output
    ((name, array) pairs; None entries are skipped)."""
    cdef Py_ssize_t i, j
    for i in range(len(outs)):
        if outs[i][1] is None:
            continue
        for j in range(len(ins)):
            if ins[j][1] is not None and np.may_share_memory(outs[i][1], ins[j][1]):
                raise ValueError(f"{what}: output {outs[i][0]} overlaps input {ins[j][0]}")
        for j in range(i + 1, len(outs)):
            if outs[j][1] is not None and np.may_share_memory(outs[i][1], outs[j][1]):
                raise ValueError(f"{what}: outputs {outs[i][0]} and {outs[j][0]} overlap")


cdef _threads(str what, nthreads):
    if nthreads < 1:
        raise ValueError(f"{what}: nthreads must be >= 1, got {nthreads}")


def _batch(str what, str name, a, nthreads, bint out=False):
    """(dtype, (B, T, D)) of the call's leading 3-D float buffer a, after checking it
    and nthreads."""
    dt = _dtype_of(what, name, a)
    _check(what, name, a, dt, (-1, -1, -1), out=out)
    _threads(what, nthreads)
    return dt, a.shape


cdef Py_ssize_t _int(str what, str name, v, Py_ssize_t lo) except? -1:
    """v as an integer >= lo (bool and float refused), else TypeError/ValueError."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{what}: {name} must be an integer, got {type(v).__name__}")
    if v < lo:
        raise ValueError(f"{what}: {name} must be >= {lo}, got {v}")
    return v


cdef inline Py_ssize_t _valid_len(const uint8_t[:, ::1] km, Py_ssize_t b,
                                  Py_ssize_t t) noexcept nogil:
    """One past the last unpadded step of sequence b (t when km is None)."""
    if km is None:
        return t
    while t > 0 and km[b, t - 1]:
        t -= 1
    return t


# ---- sliding windows: unfold (forward) and fold-add (backward) ---------------------
cdef struct Geom:
    Py_ssize_t nb, t, c, n      # batch, time steps, channels, windows per sequence
    Py_ssize_t l, s, pl, pr     # window length, stride, left and right padding
    bint rep                    # padding replicates the sequence's end steps


cdef inline Py_ssize_t _source(const Geom *g, const uint8_t[:, ::1] km, Py_ssize_t b,
                               Py_ssize_t i, Py_ssize_t tb) noexcept nogil:
    """The step of sequence b (valid length tb) that padded position i reads, or -1 for
    a zero: i itself inside [0, tb), the nearest end step with replicate padding, and
    -1 for zero padding or a padded step."""
    if i < 0 or i >= tb:
        if not g.rep or tb == 0:
            return -1
        i = 0 if i < 0 else tb - 1
    if km is not None and km[b, i]:
        return -1
    return i


cdef void _unfold(const Geom *g, const floating[:, :, ::1] x, const uint8_t[:, ::1] km,
                  floating[:, :, ::1] u, int nth) noexcept:
    cdef Py_ssize_t b, n, l, j, src, tb, c = g.c
    with nogil:
        for b in prange(g.nb, schedule="static", num_threads=nth):
            tb = _valid_len(km, b, g.t)
            for n in range(g.n):
                for l in range(g.l):
                    src = _source(g, km, b, n * g.s + l - g.pl, tb)
                    if src >= 0:
                        for j in range(c):
                            u[b, n, l * c + j] = x[b, src, j]
                    else:
                        for j in range(c):
                            u[b, n, l * c + j] = 0


cdef void _fold(const Geom *g, const floating[:, :, ::1] du, const uint8_t[:, ::1] km,
                floating[:, :, ::1] dx, int nth) noexcept:
    cdef Py_ssize_t b, n, l, j, src, tb, tt, c = g.c
    with nogil:
        for b in prange(g.nb, schedule="static", num_threads=nth):
            tb = _valid_len(km, b, g.t)
            for tt in range(g.t):
                for j in range(c):
                    dx[b, tt, j] = 0
            for n in range(g.n):
                for l in range(g.l):
                    src = _source(g, km, b, n * g.s + l - g.pl, tb)
                    if src >= 0:
                        for j in range(c):
                            dx[b, src, j] += du[b, n, l * c + j]


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
    u (B*N, L*C) @ W (L*C, d) + b over all rows (attnx._seq.linear_forward);
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
        if dt == np.float32:
            _unfold[float](&g, x, km, u, nthreads)
        else:
            _unfold[double](&g, x, km, u, nthreads)

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
        if dt == np.float32:
            _fold[float](&g, du, km, dx, nthreads)
        else:
            _fold[double](&g, du, km, dx, nthreads)

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
cdef void _maxpool(const floating[:, :, ::1] h, const uint8_t[:, ::1] km,
                   floating[:, ::1] pooled, int64_t[:, ::1] idx, int nth) noexcept:
    cdef Py_ssize_t nb = h.shape[0], t = h.shape[1], d = h.shape[2], b, tt, j
    cdef bint first
    with nogil:
        for b in prange(nb, schedule="static", num_threads=nth):
            first = True
            for tt in range(t):
                if km is not None and km[b, tt]:
                    continue
                if first:
                    for j in range(d):
                        pooled[b, j] = h[b, tt, j]
                        idx[b, j] = tt
                    first = False
                else:
                    for j in range(d):
                        if h[b, tt, j] > pooled[b, j]:
                            pooled[b, j] = h[b, tt, j]
                            idx[b, j] = tt
            if first:   # no valid step
                for j in range(d):
                    pooled[b, j] = 0
                    idx[b, j] = -1


cdef void _maxpool_bwd(const floating[:, ::1] dpooled, const int64_t[:, ::1] idx,
                       floating[:, :, ::1] dh, int nth) noexcept:
    cdef Py_ssize_t nb = dh.shape[0], t = dh.shape[1], d = dh.shape[2], b, tt, j
    with nogil:
        for b in prange(nb, schedule="static", num_threads=nth):
            for tt in range(t):
                for j in range(d):
                    dh[b, tt, j] = 0
            for j in range(d):
                if idx[b, j] >= 0:
                    dh[b, idx[b, j], j] = dpooled[b, j]


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
    if dt == np.float32:
        _maxpool[float](h, km, pooled, idx, nthreads)
    else:
        _maxpool[double](h, km, pooled, idx, nthreads)


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
    if dt == np.float32:
        _maxpool_bwd[float](dpooled, idx, dh, nthreads)
    else:
        _maxpool_bwd[double](dpooled, idx, dh, nthreads)


# ---- class token -------------------------------------------------------------------
cdef void _cls(const floating[:, :, ::1] h, const floating[::1] cls, floating[:, :, ::1] out,
               int nth) noexcept:
    cdef Py_ssize_t nb = h.shape[0], t = h.shape[1], d = h.shape[2], b, tt, j
    with nogil:
        for b in prange(nb, schedule="static", num_threads=nth):
            for j in range(d):
                out[b, 0, j] = cls[j]
            for tt in range(t):
                for j in range(d):
                    out[b, tt + 1, j] = h[b, tt, j]


cdef void _cls_bwd(const floating[:, :, ::1] dout, floating[:, :, ::1] dh, floating[::1] dcls,
                   bint acc, int nth) noexcept:
    cdef Py_ssize_t nb = dh.shape[0], t = dh.shape[1], d = dh.shape[2], b, tt, j
    with nogil:
        for b in prange(nb, schedule="static", num_threads=nth):
            for tt in range(t):
                for j in range(d):
                    dh[b, tt, j] = dout[b, tt + 1, j]
        if not acc:
            for j in range(d):
                dcls[j] = 0
        for b in range(nb):   # fixed order: the same sum at any thread count
            for j in range(d):
                dcls[j] += dout[b, 0, j]


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
    if dt == np.float32:
        _cls[float](h, cls, out, nthreads)
    else:
        _cls[double](h, cls, out, nthreads)


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
    if dt == np.float32:
        _cls_bwd[float](dout, dh, dcls, accumulate, nthreads)
    else:
        _cls_bwd[double](dout, dh, dcls, accumulate, nthreads)


cdef void _first(const floating[:, :, ::1] h, floating[:, ::1] pooled, int nth) noexcept:
    cdef Py_ssize_t nb = pooled.shape[0], d = pooled.shape[1], b, j
    with nogil:
        for b in prange(nb, schedule="static", num_threads=nth):
            for j in range(d):
                pooled[b, j] = h[b, 0, j]


cdef void _first_bwd(const floating[:, ::1] dpooled, floating[:, :, ::1] dh,
                     int nth) noexcept:
    cdef Py_ssize_t nb = dh.shape[0], t1 = dh.shape[1], d = dh.shape[2], b, tt, j
    with nogil:
        for b in prange(nb, schedule="static", num_threads=nth):
            for j in range(d):
                dh[b, 0, j] = dpooled[b, j]
            for tt in range(1, t1):
                for j in range(d):
                    dh[b, tt, j] = 0


def cls_pool_forward(h, pooled, nthreads=1):
    """pooled (B, D) = h[:, 0] of the blocks' output h (B, T+1, D): the class token's row."""
    cdef str what = "class token pooling"
    dt, (nb, t1, d) = _batch(what, "h", h, nthreads)
    _check(what, "pooled", pooled, dt, (nb, d), out=True)
    _disjoint(what, [("pooled", pooled)], [("h", h)])
    if dt == np.float32:
        _first[float](h, pooled, nthreads)
    else:
        _first[double](h, pooled, nthreads)


def cls_pool_backward(dpooled, dh, nthreads=1):
    """dh (B, T+1, D) = dpooled (B, D) on row 0 of each sequence, zero elsewhere."""
    cdef str what = "class token pooling backward"
    dt, (nb, t1, d) = _batch(what, "dh", dh, nthreads, out=True)
    _check(what, "dpooled", dpooled, dt, (nb, d))
    _disjoint(what, [("dh", dh)], [("dpooled", dpooled)])
    if dt == np.float32:
        _first_bwd[float](dpooled, dh, nthreads)
    else:
        _first_bwd[double](dpooled, dh, nthreads)


# ---- RevIN: instance normalisation and its inverse ---------------------------------
# stats (2, B, C): stats[0] = mean, stats[1] = std = sqrt(var + eps) of series (b, c)
# over its valid steps (population variance); affine (2, C): gamma, beta, or None.
cdef inline void _put_affine(floating[:, ::1] daff, Py_ssize_t j, double dg, double dbe,
                             bint acc) noexcept nogil:
    """Channel j's dgamma and dbeta into daffine (added when acc)."""
    if acc:
        daff[0, j] += <floating> dg
        daff[1, j] += <floating> dbe
    else:
        daff[0, j] = <floating> dg
        daff[1, j] = <floating> dbe


cdef void _rv_fwd(const floating[:, :, ::1] x, const uint8_t[:, ::1] km,
                  const floating[:, ::1] aff, floating[:, :, ::1] xn, floating[:, :, ::1] st,
                  double eps, int nth) noexcept:
    cdef Py_ssize_t nb = x.shape[0], t = x.shape[1], c = x.shape[2], p, b, j, tt, cnt
    cdef double s, mu, sd, g, be
    with nogil:
        for p in prange(nb * c, schedule="static", num_threads=nth):
            b = p // c
            j = p % c
            s = 0
            cnt = 0
            for tt in range(t):
                if km is None or not km[b, tt]:
                    s = s + x[b, tt, j]
                    cnt = cnt + 1
            mu = s / cnt if cnt > 0 else 0.0
            s = 0
            for tt in range(t):
                if km is None or not km[b, tt]:
                    s = s + (x[b, tt, j] - mu) * (x[b, tt, j] - mu)
            sd = sqrt((s / cnt if cnt > 0 else 0.0) + eps)
            st[0, b, j] = <floating> mu
            st[1, b, j] = <floating> sd
            mu = st[0, b, j]          # normalise with the stored values, as backward reads them
            sd = st[1, b, j]
            g = aff[0, j] if aff is not None else 1.0
            be = aff[1, j] if aff is not None else 0.0
            for tt in range(t):
                if km is None or not km[b, tt]:
                    xn[b, tt, j] = <floating> ((x[b, tt, j] - mu) / sd * g + be)
                else:
                    xn[b, tt, j] = 0


cdef void _rv_bwd(const floating[:, :, ::1] dxn, const floating[:, :, ::1] x,
                  const uint8_t[:, ::1] km, const floating[:, ::1] aff,
                  const floating[:, :, ::1] st, const floating[:, :, ::1] dst,
                  floating[:, :, ::1] dx, floating[:, ::1] daff, bint acc,
                  int nth) noexcept:
    cdef Py_ssize_t nb = x.shape[0], t = x.shape[1], c = x.shape[2], b, j, tt, cnt
    cdef double sa, sb, mu, sd, g, xh, dg, dbe, dmu, dsd
    with nogil:
        # one channel per iteration, the batch inside in order: gamma's and beta's sums
        # over the batch then need no scratch and do not depend on the thread count
        for j in prange(c, schedule="static", num_threads=nth):
            g = aff[0, j] if aff is not None else 1.0
            dg = 0
            dbe = 0
            for b in range(nb):
                mu = st[0, b, j]
                sd = st[1, b, j]
                sa = 0      # sum of dxn over the valid steps
                sb = 0      # sum of dxn * xhat
                cnt = 0
                for tt in range(t):
                    if km is None or not km[b, tt]:
                        xh = (x[b, tt, j] - mu) / sd
                        sa = sa + dxn[b, tt, j]
                        sb = sb + dxn[b, tt, j] * xh
                        cnt = cnt + 1
                dg = dg + sb
                dbe = dbe + sa
                dmu = dst[0, b, j] if dst is not None else 0.0
                dsd = dst[1, b, j] if dst is not None else 0.0
                for tt in range(t):
                    if km is None or not km[b, tt]:
                        xh = (x[b, tt, j] - mu) / sd
                        # through xhat (mean and std depend on every valid step) and
                        # through the stored mean and std that the de-normalisation used
                        dx[b, tt, j] = <floating> (
                            g * (dxn[b, tt, j] - sa / cnt - xh * sb / cnt) / sd
                            + (dmu + dsd * xh) / cnt)
                    else:
                        dx[b, tt, j] = 0
            if daff is not None:
                _put_affine(daff, j, dg, dbe, acc)


cdef void _rv_den(const floating[:, :, ::1] yn, const floating[:, ::1] aff,
                  const floating[:, :, ::1] st, floating[:, :, ::1] y, double eps2,
                  int nth) noexcept:
    cdef Py_ssize_t nb = yn.shape[0], h = yn.shape[1], c = yn.shape[2], b, j, tt
    cdef double scale, shift
    with nogil:
        for b in prange(nb, schedule="static", num_threads=nth):
            for j in range(c):
                # y = (yn - beta) / (gamma + eps2) * std + mean = yn * scale + shift
                scale = st[1, b, j]
                shift = st[0, b, j]
                if aff is not None:
                    scale = scale / (aff[0, j] + eps2)
                    shift = shift - aff[1, j] * scale
                for tt in range(h):
                    y[b, tt, j] = <floating> (yn[b, tt, j] * scale + shift)


cdef void _rv_den_bwd(const floating[:, :, ::1] dy, const floating[:, :, ::1] yn,
                      const floating[:, ::1] aff, const floating[:, :, ::1] st,
                      floating[:, :, ::1] dyn, floating[:, ::1] daff, floating[:, :, ::1] dst,
                      double eps2, bint acc, int nth) noexcept:
    cdef Py_ssize_t nb = yn.shape[0], h = yn.shape[1], c = yn.shape[2], b, j, tt
    cdef double g, be, ge, sd, z, sdy, sdz, dg, dbe
    with nogil:
        for j in prange(c, schedule="static", num_threads=nth):
            g = aff[0, j] if aff is not None else 1.0
            be = aff[1, j] if aff is not None else 0.0
            ge = g + eps2 if aff is not None else 1.0
            dg = 0
            dbe = 0
            for b in range(nb):
                sd = st[1, b, j]
                sdy = 0     # sum of dy: the mean's gradient
                sdz = 0     # sum of dy * z, z = (yn - beta) / (gamma + eps2): the std's
                for tt in range(h):
                    z = (yn[b, tt, j] - be) / ge
                    sdy = sdy + dy[b, tt, j]
                    sdz = sdz + dy[b, tt, j] * z
                    dyn[b, tt, j] = <floating> (dy[b, tt, j] * sd / ge)
                dst[0, b, j] = <floating> sdy
                dst[1, b, j] = <floating> sdz
                # dy/dgamma = -z std / (gamma + eps2), dy/dbeta = -std / (gamma + eps2)
                dg = dg - sdz * sd / ge
                dbe = dbe - sdy * sd / ge
            if daff is not None:
                _put_affine(daff, j, dg, dbe, acc)


cdef class RevIN:
    """Reversible instance normalisation (Kim et al., ICLR 2022) of (B, T, C) inputs.

    forward: each series (b, c) is centred on its mean over the valid steps and divided
    by std = sqrt(var + eps) with the population variance (divide by the count), then
    scaled and shifted per channel, xn = (x - mean) / std * gamma + beta; padded steps
    get 0. The mean and std go to stats (2, B, C).
    denorm: outputs in the input channels' units (B, H, C), for any horizon H, go back
    with y = (yn - beta) / (gamma + eps2) * std + mean.
    affine (2, C) = [gamma; beta], or None for no affine step (then the gradient buffer
    daffine is None too). The reference RevIN uses eps = 1e-5 and eps2 = eps**2.
    Backward order: denorm_backward (writes daffine and dstats, the gradients reaching
    the mean and std), the network, then backward with dstats and accumulate=True.
    """
    cdef readonly double eps, eps2

    def __init__(self, eps=1e-5, eps2=None):
        if not eps > 0:
            raise ValueError(f"RevIN: eps must be > 0, got {eps}")
        eps2 = eps * eps if eps2 is None else eps2
        if not eps2 >= 0:
            raise ValueError(f"RevIN: eps2 must be >= 0, got {eps2}")
        self.eps = eps
        self.eps2 = eps2

    def __repr__(self):
        return f"RevIN(eps={self.eps!r}, eps2={self.eps2!r})"

    def forward(self, x, km, affine, xn, stats, nthreads=1):
        """xn (B, T, C) and stats (2, B, C) from x (B, T, C), km (B, T) uint8 or None.
        A series with no valid step gets mean 0 and std sqrt(eps)."""
        cdef str what = "RevIN"
        dt, (nb, t, c) = _batch(what, "x", x, nthreads)
        _check(what, "key mask", km, np.uint8, (nb, t), optional=True)
        _check(what, "affine", affine, dt, (2, c), optional=True)
        _check(what, "xn", xn, dt, (nb, t, c), out=True)
        _check(what, "stats", stats, dt, (2, nb, c), out=True)
        _disjoint(what, [("xn", xn), ("stats", stats)],
                  [("x", x), ("key mask", km), ("affine", affine)])
        if dt == np.float32:
            _rv_fwd[float](x, km, affine, xn, stats, self.eps, nthreads)
        else:
            _rv_fwd[double](x, km, affine, xn, stats, self.eps, nthreads)

    def backward(self, dxn, x, km, affine, stats, dstats, dx, daffine, accumulate=False,
                 nthreads=1):
        """dx (B, T, C) from dxn, through xhat and through the mean and std, with dstats
        (2, B, C) the gradients reaching mean and std from denorm_backward (None when
        the outputs are not de-normalised); daffine (2, C) gets dgamma, dbeta (added
        when accumulate). dx is zero on padded steps."""
        cdef str what = "RevIN backward"
        dt, (nb, t, c) = _batch(what, "x", x, nthreads)
        _check(what, "dxn", dxn, dt, (nb, t, c))
        _check(what, "key mask", km, np.uint8, (nb, t), optional=True)
        _check(what, "affine", affine, dt, (2, c), optional=True)
        _check(what, "stats", stats, dt, (2, nb, c))
        _check(what, "dstats", dstats, dt, (2, nb, c), optional=True)
        _check(what, "dx", dx, dt, (nb, t, c), out=True)
        _check(what, "daffine", daffine, dt, (2, c), out=True, optional=True)
        if (affine is None) != (daffine is None):
            raise ValueError(f"{what}: affine and daffine go together (both arrays or both None)")
        _disjoint(what, [("dx", dx), ("daffine", daffine)],
                  [("dxn", dxn), ("x", x), ("key mask", km), ("affine", affine),
                   ("stats", stats), ("dstats", dstats)])
        if dt == np.float32:
            _rv_bwd[float](dxn, x, km, affine, stats, dstats, dx, daffine, accumulate,
                               nthreads)
        else:
            _rv_bwd[double](dxn, x, km, affine, stats, dstats, dx, daffine, accumulate,
                                nthreads)

    def denorm(self, yn, affine, stats, y, nthreads=1):
        """y (B, H, C) = (yn - beta) / (gamma + eps2) * std + mean, stats from forward."""
        cdef str what = "RevIN denorm"
        dt, (nb, h, c) = _batch(what, "yn", yn, nthreads)
        _check(what, "affine", affine, dt, (2, c), optional=True)
        _check(what, "stats", stats, dt, (2, nb, c))
        _check(what, "y", y, dt, (nb, h, c), out=True)
        _disjoint(what, [("y", y)], [("yn", yn), ("affine", affine), ("stats", stats)])
        if dt == np.float32:
            _rv_den[float](yn, affine, stats, y, self.eps2, nthreads)
        else:
            _rv_den[double](yn, affine, stats, y, self.eps2, nthreads)

    def denorm_backward(self, dy, yn, affine, stats, dyn, daffine, dstats, accumulate=False,
                        nthreads=1):
        """dyn (B, H, C) = dy * std / (gamma + eps2); dstats (2, B, C) = the gradients
        reaching the mean (sum of dy over H) and the std, for backward; daffine gets
        dgamma, dbeta (added when accumulate)."""
        cdef str what = "RevIN denorm backward"
        dt, (nb, h, c) = _batch(what, "yn", yn, nthreads)
        _check(what, "dy", dy, dt, (nb, h, c))
        _check(what, "affine", affine, dt, (2, c), optional=True)
        _check(what, "stats", stats, dt, (2, nb, c))
        _check(what, "dyn", dyn, dt, (nb, h, c), out=True)
        _check(what, "daffine", daffine, dt, (2, c), out=True, optional=True)
        _check(what, "dstats", dstats, dt, (2, nb, c), out=True)
        if (affine is None) != (daffine is None):
            raise ValueError(f"{what}: affine and daffine go together (both arrays or both None)")
        _disjoint(what, [("dyn", dyn), ("daffine", daffine), ("dstats", dstats)],
                  [("dy", dy), ("yn", yn), ("affine", affine), ("stats", stats)])
        if dt == np.float32:
            _rv_den_bwd[float](dy, yn, affine, stats, dyn, daffine, dstats, self.eps2,
                                   accumulate, nthreads)
        else:
            _rv_den_bwd[double](dy, yn, affine, stats, dyn, daffine, dstats, self.eps2,
                                    accumulate, nthreads)
