/* The counting pass of the PPV tokens (attnx/_ppv.pyx): for one channel, one
 * dilation and one of the 84 kernels, each token window's number of steps where
 * the kernel's output is above each bias, with the output computed on the fly.
 *
 *   v(t) = 3 (x[t + o0] + x[t + o1] + x[t + o2]) - a(t) + madd(t)
 *   hits[tok * nq + q] = #{ t in [tok p, min(tok p + p, n)) : v(t) > bias[q] }
 *
 * x is the zero-padded channel (x[t + o] is valid for every step t and tap offset
 * o), a(t) the nine-tap sums, madd(t) 0 or -inf (a missing step: no count). All in
 * double. One pass over the steps computes v once and compares it with every bias
 * (the earlier kernel stored v and read it once per bias).
 *
 * The same results at every SIMD level: 3 s is computed as (s + s) + s, whose
 * first sum is exact, so it is the correctly rounded 3 s whether or not the
 * compiler fuses it into a multiply-add (fma(s, 2, s) rounds once, the same); no
 * product feeds the subtraction, so nothing else can be contracted. The counts
 * are integers. Levels: portable C, AVX2 and AVX-512F by target attributes
 * (compiler-vectorised loops), chosen at run time by the module's attached level
 * (attnx_simd.h; the module calls simd_attach()).
 */
#ifndef ATTNX_PPV_H
#define ATTNX_PPV_H

#include "attnx_math.h"

/* The sizes: n steps, windows of p steps (the last may be shorter), nq biases,
 * and the three tap offsets of weight 2 (steps, relative to t). */
typedef struct {
    ptrdiff_t n, p, nq, o0, o1, o2;
} attnx_ppv_shape;

/* The buffers: x (the padded channel, at its step 0), a, madd (n each), bias (nq)
 * and hits (ceil(n / p) * nq, written). */
typedef struct {
    const double *x, *a, *madd, *bias;
    int64_t *hits;
} attnx_ppv_bufs;

#if defined(_OPENMP) || defined(ATTNX_OMP_SIMD)
#define PPV_SIMD2(a, b) ATTNX_PRAGMA(omp simd reduction(+:a, b))
#else
#define PPV_SIMD2(a, b)
#endif

#define PPV_BODY                                                                    \
{                                                                                   \
    const ptrdiff_t n = s->n, p = s->p, nq = s->nq;                                 \
    const double *x0 = b->x + s->o0, *x1 = b->x + s->o1, *x2 = b->x + s->o2;        \
    const double *a = b->a, *madd = b->madd;                                        \
    ptrdiff_t tok = 0, t0, t, q;                                                    \
    for (t0 = 0; t0 < n; t0 += p, tok++) {                                          \
        const ptrdiff_t t1 = t0 + p < n ? t0 + p : n;                               \
        int64_t *h = b->hits + tok * nq;                                            \
        if (nq == 2) {                                                              \
            const double b0 = b->bias[0], b1 = b->bias[1];                          \
            int64_t h0 = 0, h1 = 0;                                                 \
            PPV_SIMD2(h0, h1)                                                       \
            for (t = t0; t < t1; t++) {                                             \
                const double sum = (x0[t] + x1[t]) + x2[t];                         \
                const double v = (((sum + sum) + sum) - a[t]) + madd[t];            \
                h0 += v > b0;                                                       \
                h1 += v > b1;                                                       \
            }                                                                       \
            h[0] = h0;                                                              \
            h[1] = h1;                                                              \
            continue;                                                               \
        }                                                                           \
        for (q = 0; q < nq; q++) {                                                  \
            const double bq = b->bias[q];                                           \
            int64_t hq = 0;                                                         \
            ATTNX_SIMD_SUM(hq)                                                      \
            for (t = t0; t < t1; t++) {                                             \
                const double sum = (x0[t] + x1[t]) + x2[t];                         \
                const double v = (((sum + sum) + sum) - a[t]) + madd[t];            \
                hq += v > bq;                                                       \
            }                                                                       \
            h[q] = hq;                                                              \
        }                                                                           \
    }                                                                               \
}

static void attnx_ppv_counts_c(const attnx_ppv_shape *s, const attnx_ppv_bufs *b)
PPV_BODY

#ifdef ATTNX_HAVE_AVX2_PATH
__attribute__((target("avx2")))
static void attnx_ppv_counts_avx2(const attnx_ppv_shape *s, const attnx_ppv_bufs *b)
PPV_BODY

__attribute__((target("avx512f,avx2")))
static void attnx_ppv_counts_avx512(const attnx_ppv_shape *s, const attnx_ppv_bufs *b)
PPV_BODY
#endif

#undef PPV_BODY
#undef PPV_SIMD2

/* The counts of one (channel, dilation, kernel) at the module's SIMD level. */
static inline void attnx_ppv_counts(const attnx_ppv_shape *s, const attnx_ppv_bufs *b)
{
#ifdef ATTNX_HAVE_AVX2_PATH
    const int level = attnx_level();
    if (level >= 2) {
        attnx_ppv_counts_avx512(s, b);
        return;
    }
    if (level == 1) {
        attnx_ppv_counts_avx2(s, b);
        return;
    }
#else
    (void)attnx_level();
#endif
    attnx_ppv_counts_c(s, b);
}

#endif /* ATTNX_PPV_H */
