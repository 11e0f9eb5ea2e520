"""Test hooks: what the tests reach below the public API, kept out of the production
modules. Nothing in attnx imports this module.

gemm_into       the row-major BLAS GEMM of attnx.kernels._blas on NumPy arrays
exp_f32/exp_f64 the softmax exp of csrc/attnx_math.h over an array
flash_exp       the fused kernels' softmax exp (attnx.kernels._flash's dispatch state)
set_block_sizes the blocked attention path's block sizes (attnx.kernels._attnargs)
adamw_reference a plain prange AdamW loop: the oracle for attnx.kernels._optim's SIMD kernel
simd_detach / simd_reattach   this module's own dispatch state, to show that an
                unattached module refuses to run (attnx.kernels._ops.require_simd)
"""
from cython.parallel cimport prange
from libc.math cimport sqrt

import numpy as np

from attnx.kernels._blas cimport floating, gemm
from attnx.kernels._ops cimport (simd_attach, require_simd, attnx_set_level, attnx_get_level,
                         attnx_dispatched_levels)
from attnx.kernels._flash cimport exp_shifted
from attnx.kernels._attnargs cimport set_blocked_sizes
from attnx.kernels._optim cimport check_adamw_args
from attnx.kernels._blas import check_blas_int

cdef extern from "attnx_math.h" nogil:
    void attnx_exp_array_f32(const float *x, float *y, Py_ssize_t n)
    void attnx_exp_array_f64(const double *x, double *y, Py_ssize_t n)

simd_attach()


def dispatch_state():
    """(SIMD level attached to this module, bit mask of levels whose kernels ran here)."""
    return attnx_get_level(), attnx_dispatched_levels()


def simd_detach():
    """Put this module's dispatch state back to "not attached" (-1)."""
    attnx_set_level(-1)


def simd_reattach():
    """Attach this module's dispatch state again (what every kernel module does at import)."""
    simd_attach()


def set_block_sizes(Py_ssize_t bq, Py_ssize_t bk):
    """Query and key block sizes of the blocked path. They are read when a workspace
    shape is made (attnx.kernels._attnargs.AttnShape) and are part of the layers' workspace
    keys, so the next forward makes scratch of the new size."""
    set_blocked_sizes(bq, bk)


def gemm_into(bint ta, bint tb, floating[:, ::1] a, floating[:, ::1] b,
              floating[:, ::1] c, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k,
              double alpha=1.0, double beta=0.0):
    """c[:m, :n] = alpha * op(a)[:m, :k] @ op(b)[:k, :n] + beta * c.

    The leading dimensions are the row lengths of a, b and c, which may exceed
    the matrix widths; only the leading sub-blocks are read and written.
    """
    if a.shape[0] * a.shape[1] == 0 or b.shape[0] * b.shape[1] == 0:
        raise ValueError("empty operands")
    if (ta and (a.shape[0] < k or a.shape[1] < m)) or (not ta and (a.shape[0] < m or a.shape[1] < k)):
        raise ValueError("a is too small for op(a) of shape (m, k)")
    if (tb and (b.shape[0] < n or b.shape[1] < k)) or (not tb and (b.shape[0] < k or b.shape[1] < n)):
        raise ValueError("b is too small for op(b) of shape (k, n)")
    if c.shape[0] < m or c.shape[1] < n:
        raise ValueError("c is too small for (m, n)")
    check_blas_int("gemm_into", ("m", m), ("n", n), ("k", k), ("lda", a.shape[1]),
                   ("ldb", b.shape[1]), ("ldc", c.shape[1]))
    with nogil:
        gemm(ta, tb, m, n, k, <floating> alpha, &a[0, 0], a.shape[1],
             &b[0, 0], b.shape[1], <floating> beta, &c[0, 0], c.shape[1])


def exp_f64(const double[::1] x):
    """The float64 exp used by softmax, over an array."""
    return exp_array(x, False, 0.0)


def exp_f32(const float[::1] x):
    """The float32 exp used by softmax, over an array."""
    return exp_array(x, False, 0.0)


def flash_exp(const floating[::1] x, double shift=0.0):
    """exp(x - shift) over an array with the fused kernels' softmax exp at the level
    attnx.kernels._flash runs (the kernels call it with shift = the row's max or log-sum-exp,
    so x - shift <= 0 there)."""
    return exp_array(x, True, shift)


cdef object exp_array(const floating[::1] x, bint flash, double shift):
    """A new array of exp(x) by the softmax exp of csrc/attnx_math.h at this module's
    level, or (flash) of exp(x - shift) by attnx.kernels._flash's."""
    if not flash:
        require_simd()
    out = np.empty(x.shape[0], dtype=np.float32 if floating is float else np.float64)
    cdef floating[::1] o = out
    if x.shape[0] == 0:
        return out
    with nogil:
        if flash:
            exp_shifted(&x[0], &o[0], x.shape[0], shift)
        elif floating is float:
            attnx_exp_array_f32(&x[0], &o[0], x.shape[0])
        else:
            attnx_exp_array_f64(&x[0], &o[0], x.shape[0])
    return out


def adamw_reference(floating[::1] p, const floating[::1] g, floating[::1] m,
                    floating[::1] v, double lr, double beta1, double beta2, double eps,
                    double weight_decay, long step, int nthreads):
    """One AdamW update of flat buffers as a plain loop in torch.optim.AdamW's order of
    operations (no SIMD): the oracle attnx.kernels._optim.adamw_step is tested against."""
    cdef Py_ssize_t i, n = p.shape[0]
    check_adamw_args(n, g.shape[0], m.shape[0], v.shape[0], step, nthreads)
    cdef double bc1 = 1.0 - beta1 ** step
    cdef double bc2_sqrt = sqrt(1.0 - beta2 ** step)
    cdef floating decay = <floating> (1.0 - lr * weight_decay)
    cdef floating step_size = <floating> (lr / bc1)
    cdef floating w1 = <floating> (1.0 - beta1)
    cdef floating b2 = <floating> beta2, w2 = <floating> (1.0 - beta2)
    cdef floating inv_bc2 = <floating> bc2_sqrt, epsf = <floating> eps
    cdef floating gi, denom
    with nogil:
        for i in prange(n, schedule="static", num_threads=nthreads if n >= 65536 else 1):
            gi = g[i]
            p[i] = p[i] * decay
            m[i] = m[i] + (gi - m[i]) * w1
            v[i] = v[i] * b2 + gi * gi * w2
            denom = sqrt(v[i]) / inv_bc2 + epsf
            p[i] = p[i] - step_size * m[i] / denom
