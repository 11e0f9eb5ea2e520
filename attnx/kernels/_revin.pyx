"""Kernel of RevIN, reversible instance normalisation for the time-series layers: each
series (sequence b, channel c) normalised by its mean and standard deviation over its
valid steps, an optional per-channel affine map, and the inverse (de-normalisation)
for outputs. Forward beside backward.

Buffers, key padding masks, argument checks and the thread policy as in attnx.kernels._embed
(see its docstring); the sums over the batch of gamma's and beta's gradients run in a
fixed order, so results do not depend on the thread count.
"""
import numpy as np
from cython.parallel cimport prange
from libc.math cimport sqrt
from libc.stdint cimport uint8_t

from attnx.kernels._blas cimport floating
from attnx.kernels._kernel_checks import (check as _check, disjoint as _disjoint,
                                  threads as _threads, batch as _batch)


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
        for p in prange(nb * c, schedule="static", num_threads=nth, use_threads_if=nth > 1):
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
        for j in prange(c, schedule="static", num_threads=nth, use_threads_if=nth > 1):
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
        for b in prange(nb, schedule="static", num_threads=nth, use_threads_if=nth > 1):
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
        for j in prange(c, schedule="static", num_threads=nth, use_threads_if=nth > 1):
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

    def forward(self, x, km, affine, xn, stats, nthreads=1, bint check=True):
        """xn (B, T, C) and stats (2, B, C) from x (B, T, C), km (B, T) uint8 or None.
        A series with no valid step gets mean 0 and std sqrt(eps).
        check=False skips the argument checks (SequenceModel's own buffers, checked
        when they were made); the typed arguments still refuse wrong dtypes."""
        cdef str what = "RevIN"
        if not check:
            if x.dtype == np.float32:
                _rv_fwd[float](x, km, affine, xn, stats, self.eps, nthreads)
            else:
                _rv_fwd[double](x, km, affine, xn, stats, self.eps, nthreads)
            return
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
                 nthreads=1, bint check=True):
        """dx (B, T, C) from dxn, through xhat and through the mean and std, with dstats
        (2, B, C) the gradients reaching mean and std from denorm_backward (None when
        the outputs are not de-normalised); daffine (2, C) gets dgamma, dbeta (added
        when accumulate). dx is zero on padded steps. check: as forward's."""
        cdef str what = "RevIN backward"
        if not check:
            if x.dtype == np.float32:
                _rv_bwd[float](dxn, x, km, affine, stats, dstats, dx, daffine, accumulate,
                               nthreads)
            else:
                _rv_bwd[double](dxn, x, km, affine, stats, dstats, dx, daffine, accumulate,
                                nthreads)
            return
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

    def denorm(self, yn, affine, stats, y, nthreads=1, bint check=True):
        """y (B, H, C) = (yn - beta) / (gamma + eps2) * std + mean, stats from forward.
        check: as forward's."""
        cdef str what = "RevIN denorm"
        if not check:
            if yn.dtype == np.float32:
                _rv_den[float](yn, affine, stats, y, self.eps2, nthreads)
            else:
                _rv_den[double](yn, affine, stats, y, self.eps2, nthreads)
            return
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
                        nthreads=1, bint check=True):
        """dyn (B, H, C) = dy * std / (gamma + eps2); dstats (2, B, C) = the gradients
        reaching the mean (sum of dy over H) and the std, for backward; daffine gets
        dgamma, dbeta (added when accumulate). check: as forward's."""
        cdef str what = "RevIN denorm backward"
        if not check:
            if yn.dtype == np.float32:
                _rv_den_bwd[float](dy, yn, affine, stats, dyn, daffine, dstats, self.eps2,
                                   accumulate, nthreads)
            else:
                _rv_den_bwd[double](dy, yn, affine, stats, dyn, daffine, dstats, self.eps2,
                                    accumulate, nthreads)
            return
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
