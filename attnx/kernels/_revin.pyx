"""Kernel of RevIN, reversible instance normalisation for the time-series layers: each
series (sequence b, channel c) normalised by its mean and standard deviation over its
valid steps, an optional per-channel affine map, and the inverse (de-normalisation)
for outputs. Forward beside backward.

Buffers, key padding masks, argument checks and the thread policy as in attnx.kernels._embed
(see its docstring); the sums over the batch of gamma's and beta's gradients run in a
fixed order, so results do not depend on the thread count.
"""
import numpy as np
cimport numpy as cnp
from cython.parallel cimport prange
from libc.math cimport sqrt
from libc.stdint cimport uint8_t
from libc.string cimport memset

from attnx.kernels._blas cimport floating
from attnx.kernels._kernel_checks import (check as _check, disjoint as _disjoint,
                                  threads as _threads, batch as _batch)

cnp.import_array()


# ---- RevIN: instance normalisation and its inverse ---------------------------------
# stats (2, B, C): stats[0] = mean, stats[1] = std = sqrt(var + eps) of series (b, c)
# over its valid steps (population variance); affine (2, C): gamma, beta, or None.
# A kernel takes one call's sizes (Shape) and its buffers (Bufs): C-contiguous, in the
# call's float type (the `tag` argument's), NULL where not given.
cdef struct Shape:
    Py_ssize_t nb, t, c     # batch, steps (forward, backward) or horizon (denorm), channels
    double eps              # eps (forward) or eps2 (denorm)
    bint acc                # add dgamma, dbeta into daffine instead of writing them
    int nth                 # the prange threads

cdef struct Bufs:
    const void *x           # (nb, t, c) x (forward, backward) or yn (denorm)
    const void *dout        # (nb, t, c) dxn (backward) or dy (denorm backward)
    const uint8_t *km       # (nb, t) padding mask, or NULL
    const void *aff         # (2, c) gamma, beta, or NULL
    const void *st          # (2, nb, c) mean, std (read)
    const void *dst         # (2, nb, c) backward: gradients reaching mean and std, or NULL
    void *out               # (nb, t, c) xn, dx, y or dyn
    void *st_out            # (2, nb, c) forward: stats; denorm backward: dstats
    void *daff              # (2, c) dgamma, dbeta, or NULL


cdef inline void _put_affine(floating *daff, Py_ssize_t c, Py_ssize_t j, double dg,
                             double dbe, bint acc) noexcept nogil:
    """Channel j's dgamma and dbeta into daffine (2, c) (added when acc)."""
    if acc:
        daff[j] += <floating> dg
        daff[c + j] += <floating> dbe
    else:
        daff[j] = <floating> dg
        daff[c + j] = <floating> dbe


cdef void _rv_fwd(floating *tag, const Shape *sh, const Bufs *bf) noexcept nogil:
    cdef Py_ssize_t nb = sh.nb, t = sh.t, c = sh.c, p, b, j, tt, cnt
    cdef double s, mu, sd, g, be, eps = sh.eps
    cdef int nth = sh.nth
    cdef const floating *x = <const floating *> bf.x
    cdef const uint8_t *km = bf.km
    cdef const floating *aff = <const floating *> bf.aff
    cdef floating *xn = <floating *> bf.out
    cdef floating *st = <floating *> bf.st_out
    for p in prange(nb * c, schedule="static", num_threads=nth, use_threads_if=nth > 1):
        b = p // c
        j = p % c
        s = 0
        cnt = 0
        for tt in range(t):
            if km == NULL or not km[b * t + tt]:
                s = s + x[(b * t + tt) * c + j]
                cnt = cnt + 1
        mu = s / cnt if cnt > 0 else 0.0
        s = 0
        for tt in range(t):
            if km == NULL or not km[b * t + tt]:
                s = s + (x[(b * t + tt) * c + j] - mu) * (x[(b * t + tt) * c + j] - mu)
        sd = sqrt((s / cnt if cnt > 0 else 0.0) + eps)
        st[b * c + j] = <floating> mu
        st[(nb + b) * c + j] = <floating> sd
        mu = st[b * c + j]          # normalise with the stored values, as backward reads them
        sd = st[(nb + b) * c + j]
        g = aff[j] if aff != NULL else 1.0
        be = aff[c + j] if aff != NULL else 0.0
        for tt in range(t):
            if km == NULL or not km[b * t + tt]:
                xn[(b * t + tt) * c + j] = <floating> ((x[(b * t + tt) * c + j] - mu) / sd * g
                                                       + be)
            else:
                xn[(b * t + tt) * c + j] = 0


cdef void _rv_bwd(floating *tag, const Shape *sh, const Bufs *bf) noexcept nogil:
    cdef Py_ssize_t nb = sh.nb, t = sh.t, c = sh.c, b, j, tt, cnt
    cdef double sa, sb, mu, sd, g, xh, dg, dbe, dmu, dsd
    cdef int nth = sh.nth
    cdef const floating *dxn = <const floating *> bf.dout
    cdef const floating *x = <const floating *> bf.x
    cdef const uint8_t *km = bf.km
    cdef const floating *aff = <const floating *> bf.aff
    cdef const floating *st = <const floating *> bf.st
    cdef const floating *dst = <const floating *> bf.dst
    cdef floating *dx = <floating *> bf.out
    cdef floating *daff = <floating *> bf.daff
    # one channel per iteration, the batch inside in order: gamma's and beta's sums
    # over the batch then need no scratch and do not depend on the thread count
    for j in prange(c, schedule="static", num_threads=nth, use_threads_if=nth > 1):
        g = aff[j] if aff != NULL else 1.0
        dg = 0
        dbe = 0
        for b in range(nb):
            mu = st[b * c + j]
            sd = st[(nb + b) * c + j]
            sa = 0      # sum of dxn over the valid steps
            sb = 0      # sum of dxn * xhat
            cnt = 0
            for tt in range(t):
                if km == NULL or not km[b * t + tt]:
                    xh = (x[(b * t + tt) * c + j] - mu) / sd
                    sa = sa + dxn[(b * t + tt) * c + j]
                    sb = sb + dxn[(b * t + tt) * c + j] * xh
                    cnt = cnt + 1
            dg = dg + sb
            dbe = dbe + sa
            dmu = dst[b * c + j] if dst != NULL else 0.0
            dsd = dst[(nb + b) * c + j] if dst != NULL else 0.0
            for tt in range(t):
                if km == NULL or not km[b * t + tt]:
                    xh = (x[(b * t + tt) * c + j] - mu) / sd
                    # through xhat (mean and std depend on every valid step) and
                    # through the stored mean and std that the de-normalisation used
                    dx[(b * t + tt) * c + j] = <floating> (
                        g * (dxn[(b * t + tt) * c + j] - sa / cnt - xh * sb / cnt) / sd
                        + (dmu + dsd * xh) / cnt)
                else:
                    dx[(b * t + tt) * c + j] = 0
        if daff != NULL:
            _put_affine(daff, c, j, dg, dbe, sh.acc)


cdef void _rv_den(floating *tag, const Shape *sh, const Bufs *bf) noexcept nogil:
    cdef Py_ssize_t nb = sh.nb, h = sh.t, c = sh.c, b, j, tt
    cdef double scale, shift, eps2 = sh.eps
    cdef int nth = sh.nth
    cdef const floating *yn = <const floating *> bf.x
    cdef const floating *aff = <const floating *> bf.aff
    cdef const floating *st = <const floating *> bf.st
    cdef floating *y = <floating *> bf.out
    for b in prange(nb, schedule="static", num_threads=nth, use_threads_if=nth > 1):
        for j in range(c):
            # y = (yn - beta) / (gamma + eps2) * std + mean = yn * scale + shift
            scale = st[(nb + b) * c + j]
            shift = st[b * c + j]
            if aff != NULL:
                scale = scale / (aff[j] + eps2)
                shift = shift - aff[c + j] * scale
            for tt in range(h):
                y[(b * h + tt) * c + j] = <floating> (yn[(b * h + tt) * c + j] * scale + shift)


cdef void _rv_den_bwd(floating *tag, const Shape *sh, const Bufs *bf) noexcept nogil:
    cdef Py_ssize_t nb = sh.nb, h = sh.t, c = sh.c, b, j, tt
    cdef double g, be, ge, sd, z, sdy, sdz, dg, dbe, eps2 = sh.eps
    cdef int nth = sh.nth
    cdef const floating *dy = <const floating *> bf.dout
    cdef const floating *yn = <const floating *> bf.x
    cdef const floating *aff = <const floating *> bf.aff
    cdef const floating *st = <const floating *> bf.st
    cdef floating *dyn = <floating *> bf.out
    cdef floating *daff = <floating *> bf.daff
    cdef floating *dst = <floating *> bf.st_out
    for j in prange(c, schedule="static", num_threads=nth, use_threads_if=nth > 1):
        g = aff[j] if aff != NULL else 1.0
        be = aff[c + j] if aff != NULL else 0.0
        ge = g + eps2 if aff != NULL else 1.0
        dg = 0
        dbe = 0
        for b in range(nb):
            sd = st[(nb + b) * c + j]
            sdy = 0     # sum of dy: the mean's gradient
            sdz = 0     # sum of dy * z, z = (yn - beta) / (gamma + eps2): the std's
            for tt in range(h):
                z = (yn[(b * h + tt) * c + j] - be) / ge
                sdy = sdy + dy[(b * h + tt) * c + j]
                sdz = sdz + dy[(b * h + tt) * c + j] * z
                dyn[(b * h + tt) * c + j] = <floating> (dy[(b * h + tt) * c + j] * sd / ge)
            dst[b * c + j] = <floating> sdy
            dst[(nb + b) * c + j] = <floating> sdz
            # dy/dgamma = -z std / (gamma + eps2), dy/dbeta = -std / (gamma + eps2)
            dg = dg - sdz * sd / ge
            dbe = dbe - sdy * sd / ge
        if daff != NULL:
            _put_affine(daff, c, j, dg, dbe, sh.acc)


cdef void *_at(str what, str name, object a, object dt, int ndim, bint write) except? NULL:
    """a's data (NULL for None) once it is what the kernel reads: a C-contiguous
    ndarray of ndim dimensions and dtype dt, writeable when written (the checks that
    remain with check=False; ValueError naming the argument)."""
    if a is None:
        return NULL
    if not isinstance(a, cnp.ndarray):
        raise TypeError(f"{what}: {name} must be a numpy array, got {type(a).__name__}")
    if a.dtype != dt or a.ndim != ndim or not a.flags.c_contiguous:
        raise ValueError(f"{what}: {name} must be a C-contiguous {ndim}-d {np.dtype(dt)} "
                         f"array, got {a.ndim}-d {a.dtype}"
                         + ("" if a.flags.c_contiguous else " (not C-contiguous)"))
    if write and not a.flags.writeable:
        raise ValueError(f"{what}: {name} is an output and must be writeable")
    return cnp.PyArray_DATA(<cnp.ndarray> a)


cdef int _sizes(Shape *sh, object lead, double eps, bint acc, object nthreads) except -1:
    """The call's sizes from its leading (B, T or H, C) buffer, and its settings."""
    sh.nb, sh.t, sh.c = lead.shape[0], lead.shape[1], lead.shape[2]
    sh.eps, sh.acc, sh.nth = eps, acc, nthreads
    return 0


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

    def forward(self, x, km, affine, xn, stats, nthreads=1, bint check=True):
        """xn (B, T, C) and stats (2, B, C) from x (B, T, C), km (B, T) uint8 or None.
        A series with no valid step gets mean 0 and std sqrt(eps).
        check=False skips the argument checks (SequenceModel's own buffers, checked
        when they were made) except each buffer's dtype, dimensions and layout."""
        cdef str what = "RevIN"
        cdef Shape sh
        cdef Bufs bf
        cdef bint f32
        memset(&bf, 0, sizeof(Bufs))
        if check:
            dt, (nb, t, c) = _batch(what, "x", x, nthreads)
            _check(what, "key mask", km, np.uint8, (nb, t), optional=True)
            _check(what, "affine", affine, dt, (2, c), optional=True)
            _check(what, "xn", xn, dt, (nb, t, c), out=True)
            _check(what, "stats", stats, dt, (2, nb, c), out=True)
            _disjoint(what, [("xn", xn), ("stats", stats)],
                      [("x", x), ("key mask", km), ("affine", affine)])
        dt = np.float32 if x.dtype == np.float32 else np.float64
        bf.x = _at(what, "x", x, dt, 3, False)
        bf.km = <const uint8_t *> _at(what, "key mask", km, np.uint8, 2, False)
        bf.aff = _at(what, "affine", affine, dt, 2, False)
        bf.out = _at(what, "xn", xn, dt, 3, True)
        bf.st_out = _at(what, "stats", stats, dt, 3, True)
        _sizes(&sh, x, self.eps, False, nthreads)
        f32 = dt is np.float32
        with nogil:
            if f32:
                _rv_fwd(<float *> NULL, &sh, &bf)
            else:
                _rv_fwd(<double *> NULL, &sh, &bf)

    def backward(self, dxn, x, km, affine, stats, dstats, dx, daffine, accumulate=False,
                 nthreads=1, bint check=True):
        """dx (B, T, C) from dxn, through xhat and through the mean and std, with dstats
        (2, B, C) the gradients reaching mean and std from denorm_backward (None when
        the outputs are not de-normalised); daffine (2, C) gets dgamma, dbeta (added
        when accumulate). dx is zero on padded steps. check: as forward's."""
        cdef str what = "RevIN backward"
        cdef Shape sh
        cdef Bufs bf
        cdef bint f32
        memset(&bf, 0, sizeof(Bufs))
        if check:
            dt, (nb, t, c) = _batch(what, "x", x, nthreads)
            _check(what, "dxn", dxn, dt, (nb, t, c))
            _check(what, "key mask", km, np.uint8, (nb, t), optional=True)
            _check(what, "affine", affine, dt, (2, c), optional=True)
            _check(what, "stats", stats, dt, (2, nb, c))
            _check(what, "dstats", dstats, dt, (2, nb, c), optional=True)
            _check(what, "dx", dx, dt, (nb, t, c), out=True)
            _check(what, "daffine", daffine, dt, (2, c), out=True, optional=True)
            if (affine is None) != (daffine is None):
                raise ValueError(f"{what}: affine and daffine go together (both arrays or "
                                 "both None)")
            _disjoint(what, [("dx", dx), ("daffine", daffine)],
                      [("dxn", dxn), ("x", x), ("key mask", km), ("affine", affine),
                       ("stats", stats), ("dstats", dstats)])
        dt = np.float32 if x.dtype == np.float32 else np.float64
        bf.dout = _at(what, "dxn", dxn, dt, 3, False)
        bf.x = _at(what, "x", x, dt, 3, False)
        bf.km = <const uint8_t *> _at(what, "key mask", km, np.uint8, 2, False)
        bf.aff = _at(what, "affine", affine, dt, 2, False)
        bf.st = _at(what, "stats", stats, dt, 3, False)
        bf.dst = _at(what, "dstats", dstats, dt, 3, False)
        bf.out = _at(what, "dx", dx, dt, 3, True)
        bf.daff = _at(what, "daffine", daffine, dt, 2, True)
        _sizes(&sh, x, 0.0, accumulate, nthreads)
        f32 = dt is np.float32
        with nogil:
            if f32:
                _rv_bwd(<float *> NULL, &sh, &bf)
            else:
                _rv_bwd(<double *> NULL, &sh, &bf)

    def denorm(self, yn, affine, stats, y, nthreads=1, bint check=True):
        """y (B, H, C) = (yn - beta) / (gamma + eps2) * std + mean, stats from forward.
        check: as forward's."""
        cdef str what = "RevIN denorm"
        cdef Shape sh
        cdef Bufs bf
        cdef bint f32
        memset(&bf, 0, sizeof(Bufs))
        if check:
            dt, (nb, h, c) = _batch(what, "yn", yn, nthreads)
            _check(what, "affine", affine, dt, (2, c), optional=True)
            _check(what, "stats", stats, dt, (2, nb, c))
            _check(what, "y", y, dt, (nb, h, c), out=True)
            _disjoint(what, [("y", y)], [("yn", yn), ("affine", affine), ("stats", stats)])
        dt = np.float32 if yn.dtype == np.float32 else np.float64
        bf.x = _at(what, "yn", yn, dt, 3, False)
        bf.aff = _at(what, "affine", affine, dt, 2, False)
        bf.st = _at(what, "stats", stats, dt, 3, False)
        bf.out = _at(what, "y", y, dt, 3, True)
        _sizes(&sh, yn, self.eps2, False, nthreads)
        f32 = dt is np.float32
        with nogil:
            if f32:
                _rv_den(<float *> NULL, &sh, &bf)
            else:
                _rv_den(<double *> NULL, &sh, &bf)

    def denorm_backward(self, dy, yn, affine, stats, dyn, daffine, dstats, accumulate=False,
                        nthreads=1, bint check=True):
        """dyn (B, H, C) = dy * std / (gamma + eps2); dstats (2, B, C) = the gradients
        reaching the mean (sum of dy over H) and the std, for backward; daffine gets
        dgamma, dbeta (added when accumulate). check: as forward's."""
        cdef str what = "RevIN denorm backward"
        cdef Shape sh
        cdef Bufs bf
        cdef bint f32
        memset(&bf, 0, sizeof(Bufs))
        if check:
            dt, (nb, h, c) = _batch(what, "yn", yn, nthreads)
            _check(what, "dy", dy, dt, (nb, h, c))
            _check(what, "affine", affine, dt, (2, c), optional=True)
            _check(what, "stats", stats, dt, (2, nb, c))
            _check(what, "dyn", dyn, dt, (nb, h, c), out=True)
            _check(what, "daffine", daffine, dt, (2, c), out=True, optional=True)
            _check(what, "dstats", dstats, dt, (2, nb, c), out=True)
            if (affine is None) != (daffine is None):
                raise ValueError(f"{what}: affine and daffine go together (both arrays or "
                                 "both None)")
            _disjoint(what, [("dyn", dyn), ("daffine", daffine), ("dstats", dstats)],
                      [("dy", dy), ("yn", yn), ("affine", affine), ("stats", stats)])
        dt = np.float32 if yn.dtype == np.float32 else np.float64
        bf.dout = _at(what, "dy", dy, dt, 3, False)
        bf.x = _at(what, "yn", yn, dt, 3, False)
        bf.aff = _at(what, "affine", affine, dt, 2, False)
        bf.st = _at(what, "stats", stats, dt, 3, False)
        bf.out = _at(what, "dyn", dyn, dt, 3, True)
        bf.daff = _at(what, "daffine", daffine, dt, 2, True)
        bf.st_out = _at(what, "dstats", dstats, dt, 3, True)
        _sizes(&sh, yn, self.eps2, accumulate, nthreads)
        f32 = dt is np.float32
        with nogil:
            if f32:
                _rv_den_bwd(<float *> NULL, &sh, &bf)
            else:
                _rv_den_bwd(<double *> NULL, &sh, &bf)
