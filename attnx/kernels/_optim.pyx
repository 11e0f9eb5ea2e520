"""AdamW over one flat parameter buffer, vectorised (AVX2+FMA / AVX-512F at run time).

The update is memory-bound once vectorised (four streams read, three written),
but the plain C loop is not vectorised at all: sqrt may set errno, so without
-fno-math-errno (not a flag attnx builds with) the compiler keeps one scalar
sqrt call per element. The SIMD versions call the vector square root
explicitly, in functions compiled with per-function target attributes (no
-march flag), chosen by attnx's one dispatch mechanism (this module's
attnx_simd.h state, attached at import to the level attnx.kernels._ops detected; ATTNX_SIMD
caps it); the portable C loop stays for other CPUs and is tested.
"""
from cython.parallel cimport prange
from libc.math cimport sqrt
from libc.stdint cimport int64_t

cdef extern from *:
    """
    #include <math.h>
    #include <stddef.h>
    #include "attnx_math.h"   /* attnx_level(): this module's dispatch state */

    /* Coefficients of one step, already in the element type's precision. */
    #define ATTNX_ADAMW_ARGS(T) T *restrict p, const T *restrict g, T *restrict m,          \\
        T *restrict v, ptrdiff_t n, T decay, T w1, T b2, T w2, T step, T bc2, T eps

    /* p <- p*decay; m <- m + (g - m)*w1; v <- v*b2 + g*g*w2;
     * p <- p - step*m / (sqrt(v)/bc2 + eps)   (torch.optim.AdamW's order) */
    #define ATTNX_ADAMW_SCALAR(T, SQRT)                                                 \\
        for (; i < n; i++) {                                                            \\
            T gi = g[i];                                                                \\
            T pi = p[i] * decay;                                                        \\
            T mi = m[i] + (gi - m[i]) * w1;                                             \\
            T vi = v[i] * b2 + gi * gi * w2;                                            \\
            m[i] = mi;                                                                  \\
            v[i] = vi;                                                                  \\
            p[i] = pi - step * mi / (SQRT(vi) / bc2 + eps);                             \\
        }

    static void attnx_adamw_f32_c(ATTNX_ADAMW_ARGS(float))
    { ptrdiff_t i = 0; ATTNX_ADAMW_SCALAR(float, sqrtf) }
    static void attnx_adamw_f64_c(ATTNX_ADAMW_ARGS(double))
    { ptrdiff_t i = 0; ATTNX_ADAMW_SCALAR(double, sqrt) }

    #if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
    #include <immintrin.h>
    #define ATTNX_OPT_X86 1

    /* One vector body per (type, width): V vector type, S suffix, L lanes. */
    #define ATTNX_ADAMW_VEC(NAME, TGT, T, V, S, L, SQRTS)                               \\
    __attribute__((target(TGT))) static void NAME(ATTNX_ADAMW_ARGS(T))                \\
    {                                                                                   \\
        ptrdiff_t i = 0;                                                                \\
        const V vdecay = S##_set1(decay), vw1 = S##_set1(w1), vb2 = S##_set1(b2);       \\
        const V vw2 = S##_set1(w2), vstep = S##_set1(step), vbc2 = S##_set1(bc2);       \\
        const V veps = S##_set1(eps);                                                   \\
        for (; i + L <= n; i += L) {                                                    \\
            V gi = S##_loadu(g + i), mi = S##_loadu(m + i), vi = S##_loadu(v + i);      \\
            V pi = S##_mul(S##_loadu(p + i), vdecay);                                   \\
            mi = S##_fmadd(S##_sub(gi, mi), vw1, mi);                                   \\
            vi = S##_fmadd(S##_mul(gi, gi), vw2, S##_mul(vi, vb2));                     \\
            S##_storeu(m + i, mi);                                                      \\
            S##_storeu(v + i, vi);                                                      \\
            V den = S##_add(S##_div(S##_sqrt(vi), vbc2), veps);                         \\
            S##_storeu(p + i, S##_sub(pi, S##_div(S##_mul(vstep, mi), den)));           \\
        }                                                                               \\
        ATTNX_ADAMW_SCALAR(T, SQRTS)                                                    \\
    }

    #define _mm256s_set1 _mm256_set1_ps
    #define _mm256s_loadu _mm256_loadu_ps
    #define _mm256s_storeu _mm256_storeu_ps
    #define _mm256s_mul _mm256_mul_ps
    #define _mm256s_sub _mm256_sub_ps
    #define _mm256s_add _mm256_add_ps
    #define _mm256s_div _mm256_div_ps
    #define _mm256s_sqrt _mm256_sqrt_ps
    #define _mm256s_fmadd _mm256_fmadd_ps
    #define _mm256d_set1 _mm256_set1_pd
    #define _mm256d_loadu _mm256_loadu_pd
    #define _mm256d_storeu _mm256_storeu_pd
    #define _mm256d_mul _mm256_mul_pd
    #define _mm256d_sub _mm256_sub_pd
    #define _mm256d_add _mm256_add_pd
    #define _mm256d_div _mm256_div_pd
    #define _mm256d_sqrt _mm256_sqrt_pd
    #define _mm256d_fmadd _mm256_fmadd_pd
    #define _mm512s_set1 _mm512_set1_ps
    #define _mm512s_loadu _mm512_loadu_ps
    #define _mm512s_storeu _mm512_storeu_ps
    #define _mm512s_mul _mm512_mul_ps
    #define _mm512s_sub _mm512_sub_ps
    #define _mm512s_add _mm512_add_ps
    #define _mm512s_div _mm512_div_ps
    #define _mm512s_sqrt _mm512_sqrt_ps
    #define _mm512s_fmadd _mm512_fmadd_ps
    #define _mm512d_set1 _mm512_set1_pd
    #define _mm512d_loadu _mm512_loadu_pd
    #define _mm512d_storeu _mm512_storeu_pd
    #define _mm512d_mul _mm512_mul_pd
    #define _mm512d_sub _mm512_sub_pd
    #define _mm512d_add _mm512_add_pd
    #define _mm512d_div _mm512_div_pd
    #define _mm512d_sqrt _mm512_sqrt_pd
    #define _mm512d_fmadd _mm512_fmadd_pd

    ATTNX_ADAMW_VEC(attnx_adamw_f32_avx2, "avx2,fma", float, __m256, _mm256s, 8, sqrtf)
    ATTNX_ADAMW_VEC(attnx_adamw_f64_avx2, "avx2,fma", double, __m256d, _mm256d, 4, sqrt)
    ATTNX_ADAMW_VEC(attnx_adamw_f32_avx512, "avx512f,avx2,fma", float, __m512, _mm512s, 16,
                    sqrtf)
    ATTNX_ADAMW_VEC(attnx_adamw_f64_avx512, "avx512f,avx2,fma", double, __m512d, _mm512d, 8,
                    sqrt)
    #endif

    static void attnx_adamw_f32(ATTNX_ADAMW_ARGS(float))
    {
    #ifdef ATTNX_OPT_X86
        int attnx_adamw_level = attnx_level();
        if (attnx_adamw_level == 2) {
            attnx_adamw_f32_avx512(p, g, m, v, n, decay, w1, b2, w2, step, bc2, eps); return; }
        if (attnx_adamw_level == 1) {
            attnx_adamw_f32_avx2(p, g, m, v, n, decay, w1, b2, w2, step, bc2, eps); return; }
    #endif
        attnx_adamw_f32_c(p, g, m, v, n, decay, w1, b2, w2, step, bc2, eps);
    }

    static void attnx_adamw_f64(ATTNX_ADAMW_ARGS(double))
    {
    #ifdef ATTNX_OPT_X86
        int attnx_adamw_level = attnx_level();
        if (attnx_adamw_level == 2) {
            attnx_adamw_f64_avx512(p, g, m, v, n, decay, w1, b2, w2, step, bc2, eps); return; }
        if (attnx_adamw_level == 1) {
            attnx_adamw_f64_avx2(p, g, m, v, n, decay, w1, b2, w2, step, bc2, eps); return; }
    #endif
        attnx_adamw_f64_c(p, g, m, v, n, decay, w1, b2, w2, step, bc2, eps);
    }
    """
    void attnx_adamw_f32(float *p, const float *g, float *m, float *v, Py_ssize_t n,
                         float decay, float w1, float b2, float w2, float step, float bc2,
                         float eps) noexcept nogil
    void attnx_adamw_f64(double *p, const double *g, double *m, double *v, Py_ssize_t n,
                         double decay, double w1, double b2, double w2, double step,
                         double bc2, double eps) noexcept nogil

from attnx.kernels._blas cimport floating
from attnx.kernels._ops cimport simd_attach, require_simd, attnx_get_level, attnx_dispatched_levels

simd_attach()


def dispatch_state():
    """(SIMD level attached to this module, bit mask of levels whose kernels ran here)."""
    return attnx_get_level(), attnx_dispatched_levels()


cdef int check_adamw_args(Py_ssize_t n, Py_ssize_t ng, Py_ssize_t nm, Py_ssize_t nv,
                          long step, int nthreads) except -1:
    """ValueError unless p (n elements), g, m and v have one length, step >= 1 and
    nthreads >= 1 (the AdamW step's arguments; also attnx.kernels._testing.adamw_reference's)."""
    if ng != n or nm != n or nv != n:
        raise ValueError(f"p, g, m and v must have one length, got {n}, {ng}, {nm}, {nv}")
    if step < 1:
        raise ValueError(f"step must be >= 1, got {step}")
    if nthreads < 1:
        raise ValueError(f"nthreads must be >= 1, got {nthreads}")
    return 0


# elements per thread's slab: below 2 slabs the update runs on one thread
cdef Py_ssize_t SLAB = 1 << 16


def adamw_step(floating[::1] p, const floating[::1] g, floating[::1] m, floating[::1] v,
               double lr, double beta1, double beta2, double eps, double weight_decay,
               long step, int nthreads=1):
    """One AdamW update of the flat buffers p (params), m, v (moments) from g, in
    torch.optim.AdamW's order of operations; `nthreads` OpenMP threads split the
    buffer into contiguous slabs (the caller's thread policy)."""
    cdef Py_ssize_t n = p.shape[0]
    require_simd()
    check_adamw_args(n, g.shape[0], m.shape[0], v.shape[0], step, nthreads)
    if n == 0:
        return
    cdef double decay = 1.0 - lr * weight_decay
    cdef Py_ssize_t nslab = (n + SLAB - 1) // SLAB, t, lo, hi
    if nthreads > nslab:
        nthreads = <int> nslab
    with nogil:
        for t in prange(nthreads, schedule="static", num_threads=nthreads, use_threads_if=nthreads > 1):
            lo = n * t // nthreads
            hi = n * (t + 1) // nthreads
            _update(&p[lo], &g[lo], &m[lo], &v[lo], hi - lo, decay, lr, beta1, beta2, eps,
                    step)


def adamw_step_runs(floating[::1] p, const floating[::1] g, floating[::1] m,
                    floating[::1] v, double lr, double beta1, double beta2, double eps,
                    double weight_decay, long step, const int64_t[:, ::1] runs):
    """adamw_step over the runs (k, 3) of the buffers, each row (start, stop,
    decayed): weight decay on the runs with decayed != 0, none on the others; one
    thread, one call for a buffer of many small parameters (bit for bit the
    adamw_step of each run)."""
    cdef Py_ssize_t n = p.shape[0], k = runs.shape[0], i, a, z
    require_simd()
    check_adamw_args(n, g.shape[0], m.shape[0], v.shape[0], step, 1)
    if runs.shape[1] != 3:
        raise ValueError(f"runs must be (k, 3) rows of (start, stop, decayed), got "
                         f"({runs.shape[0]}, {runs.shape[1]})")
    for i in range(k):
        if not 0 <= runs[i, 0] <= runs[i, 1] <= n:
            raise ValueError(f"runs[{i}] = ({runs[i, 0]}, {runs[i, 1]}) is not a range "
                             f"inside the {n} elements")
    cdef double decay = 1.0 - lr * weight_decay
    with nogil:
        for i in range(k):
            a = runs[i, 0]
            z = runs[i, 1]
            if z > a:
                _update(&p[a], &g[a], &m[a], &v[a], z - a,
                        decay if runs[i, 2] != 0 else 1.0, lr, beta1, beta2, eps, step)


cdef void _update(floating *p, const floating *g, floating *m, floating *v, Py_ssize_t n,
                  double decay, double lr, double beta1, double beta2, double eps,
                  long step) noexcept nogil:
    """One AdamW update of n values; decay = 1 - lr * weight_decay (1.0: none). The
    coefficients are computed in double, then rounded to the element type."""
    cdef floating step_size = <floating> (lr / (1.0 - beta1 ** step))
    cdef floating w1 = <floating> (1.0 - beta1)
    cdef floating b2 = <floating> beta2, w2 = <floating> (1.0 - beta2)
    cdef floating bc2 = <floating> sqrt(1.0 - beta2 ** step), epsf = <floating> eps
    if floating is float:
        attnx_adamw_f32(p, g, m, v, n, <float> decay, w1, b2, w2, step_size, bc2, epsf)
    else:
        attnx_adamw_f64(p, g, m, v, n, decay, w1, b2, w2, step_size, bc2, epsf)
