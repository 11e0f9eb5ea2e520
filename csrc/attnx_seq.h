/* Row kernels of the sequence model's LayerNorm and dropout masks, float and double.
 *
 * The row sums are written as `omp simd` reductions so that they vectorise
 * (several partial sums instead of one serial chain of dependent adds, which
 * would leave the row latency-bound). Reductions stay in the row's own type,
 * as torch's CPU LayerNorm does for float32.
 */
#ifndef ATTNX_SEQ_H
#define ATTNX_SEQ_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#if defined(_OPENMP) || defined(ATTNX_OMP_SIMD)
#define ATTNX_SEQ_PRAGMA(x) _Pragma(#x)
#define ATTNX_SEQ_SUM(v) ATTNX_SEQ_PRAGMA(omp simd reduction(+:v))
#define ATTNX_SEQ_SUM2(v, w) ATTNX_SEQ_PRAGMA(omp simd reduction(+:v, w))
#define ATTNX_SEQ_SIMD ATTNX_SEQ_PRAGMA(omp simd)
#else
#define ATTNX_SEQ_SUM(v)
#define ATTNX_SEQ_SUM2(v, w)
#define ATTNX_SEQ_SIMD
#endif

/* y = (x - mean) * rs * g + b with rs = 1 / sqrt(var + eps) (biased variance);
 * stores mean and rs. */
#define ATTNX_SEQ_LN_FWD(T, NAME, SQRT)                                          \
static inline void NAME(const T *x, const T *g, const T *b, T *y, ptrdiff_t d,   \
                        T eps, T *mean_out, T *rs_out)                           \
{                                                                                \
    T s = 0, v = 0, mu, rs;                                                      \
    ptrdiff_t j;                                                                 \
    ATTNX_SEQ_SUM(s)                                                             \
    for (j = 0; j < d; j++) s += x[j];                                           \
    mu = s / (T)d;                                                               \
    ATTNX_SEQ_SUM(v)                                                             \
    for (j = 0; j < d; j++) { T c = x[j] - mu; v += c * c; }                     \
    rs = (T)1 / SQRT(v / (T)d + eps);                                            \
    ATTNX_SEQ_SIMD                                                               \
    for (j = 0; j < d; j++) y[j] = (x[j] - mu) * rs * g[j] + b[j];               \
    *mean_out = mu;                                                              \
    *rs_out = rs;                                                                \
}

/* dx = rs * (dy g - mean(dy g) - xhat * mean(dy g xhat)) (+ add[j] when add is
 * not NULL); pg[j] += dy xhat and pb[j] += dy (this thread's gain/bias sums). */
#define ATTNX_SEQ_LN_BWD(T, NAME)                                                \
static inline void NAME(const T *dy, const T *x, const T *g, T mu, T rs, T *dx,  \
                        const T *add, T *pg, T *pb, ptrdiff_t d)                 \
{                                                                                \
    T m1 = 0, m2 = 0;                                                            \
    ptrdiff_t j;                                                                 \
    ATTNX_SEQ_SUM2(m1, m2)                                                       \
    for (j = 0; j < d; j++) {                                                    \
        T xh = (x[j] - mu) * rs, gy = dy[j] * g[j];                              \
        m1 += gy;                                                                \
        m2 += gy * xh;                                                           \
        pg[j] += dy[j] * xh;                                                     \
        pb[j] += dy[j];                                                          \
    }                                                                            \
    m1 /= (T)d;                                                                  \
    m2 /= (T)d;                                                                  \
    if (add) {                                                                   \
        ATTNX_SEQ_SIMD                                                           \
        for (j = 0; j < d; j++)                                                  \
            dx[j] = rs * (dy[j] * g[j] - m1 - (x[j] - mu) * rs * m2) + add[j];   \
    } else {                                                                     \
        ATTNX_SEQ_SIMD                                                           \
        for (j = 0; j < d; j++)                                                  \
            dx[j] = rs * (dy[j] * g[j] - m1 - (x[j] - mu) * rs * m2);            \
    }                                                                            \
}

/* Dropout multipliers: out[i] = keep where the 32-bit draw bits[i] >= cut, else 0.
 * The unsigned comparison is made a signed one (both sides offset by 2^31), which
 * baseline SSE2 vectorises. */
#define ATTNX_SEQ_MASK_FILL(T, NAME)                                             \
static inline void NAME(const uint32_t *bits, T *out, ptrdiff_t n, T keep,      \
                        uint32_t cut)                                            \
{                                                                                \
    const int32_t c = (int32_t)(cut ^ 0x80000000u);                              \
    ptrdiff_t i;                                                                 \
    ATTNX_SEQ_SIMD                                                               \
    for (i = 0; i < n; i++)                                                      \
        out[i] = ((int32_t)(bits[i] ^ 0x80000000u) >= c) ? keep : (T)0;          \
}

ATTNX_SEQ_MASK_FILL(float, attnx_mask_fill_f32)
ATTNX_SEQ_MASK_FILL(double, attnx_mask_fill_f64)
ATTNX_SEQ_LN_FWD(float, attnx_ln_fwd_f32, sqrtf)
ATTNX_SEQ_LN_FWD(double, attnx_ln_fwd_f64, sqrt)
ATTNX_SEQ_LN_BWD(float, attnx_ln_bwd_f32)
ATTNX_SEQ_LN_BWD(double, attnx_ln_bwd_f64)

#endif
