/* Elementwise helpers for the attnx kernels: a vectorisable float exp and the
 * row softmax (forward and backward) used by attention.
 *
 * The float32 exp is a range-reduced polynomial (2^n * p(r), |r| <= ln2/2),
 * within ~2 ulp of expf. The scalar versions here are the portable baseline;
 * attnx_simd.h adds AVX2+FMA versions chosen at run time (CPUID), so a wheel
 * built for plain x86-64 still runs everywhere. float64 keeps libm's exp: the
 * float64 path is the accuracy reference.
 *
 * Sizes and offsets are ptrdiff_t (Py_ssize_t on every platform CPython runs
 * on): a row of more than 2^31 elements must not wrap.
 *
 * Special values are the same at every SIMD level: NaN in gives NaN out (exp,
 * row max, softmax), exp(-inf) = 0, exp(+inf) = +inf.
 */
#ifndef ATTNX_MATH_H
#define ATTNX_MATH_H

#include <math.h>
#include <string.h>
#include <stddef.h>
#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#endif


#if defined(_OPENMP) || defined(ATTNX_OMP_SIMD)
#define ATTNX_PRAGMA(x) _Pragma(#x)
#define ATTNX_SIMD_SUM(v) ATTNX_PRAGMA(omp simd reduction(+:v))
#define ATTNX_SIMD_MAX(v) ATTNX_PRAGMA(omp simd reduction(max:v))
#define ATTNX_SIMD _Pragma("omp simd")
#else
#define ATTNX_SIMD_SUM(v)
#define ATTNX_SIMD_MAX(v)
#define ATTNX_SIMD
#endif

#if defined(__GNUC__)
#define ATTNX_UNUSED __attribute__((unused))
#else
#define ATTNX_UNUSED
#endif

static inline int attnx_max_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static inline int attnx_thread_id(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* max that keeps a NaN: once m is NaN it stays NaN ("v > NaN" is false), and
 * a NaN v replaces m. The plain "v > m ? v : m" drops NaNs depending on where
 * they sit, which would make the answer depend on the SIMD width. */
#define ATTNX_MAXN(m, v) ((((v) > (m)) || ((v) != (v))) ? (v) : (m))

/* exp(x) for float, written so the loop around it vectorises. Inputs below
 * -87 (including -inf, the masked score) give exactly 0, inputs above 88.75
 * give +inf, NaN gives NaN. 2^n is applied as two factors 2^(n/2) 2^(n - n/2),
 * both normal floats for every n in [-126, 128], so exp(88.7) is finite and
 * exp(88.73) overflows to inf as it should. */
#define ATTNX_EXPF_LO (-87.0f)
#define ATTNX_EXPF_HI 88.75f
static inline float attnx_expf(float x)
{
    const float lo = ATTNX_EXPF_LO, hi = ATTNX_EXPF_HI;
    /* NaN compares false and lands on lo: no float->int conversion of a NaN
     * below (undefined behaviour); the NaN is put back at the end */
    float xc = x >= lo ? (x <= hi ? x : hi) : lo;
    float fx = xc * 1.44269504088896341f;           /* x / ln 2 */
    int32_t n = (int32_t)(fx + (fx >= 0.0f ? 0.5f : -0.5f));  /* round to nearest */
    float fn = (float)n;
    /* r = x - n ln2, ln2 split in two for precision */
    float r = xc - fn * 0.693359375f;
    r = r + fn * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t n1 = n / 2;
    union { int32_t i; float f; } s1, s2;
    s1.i = (n1 + 127) << 23;
    s2.i = (n - n1 + 127) << 23;
    float out = p * s1.f * s2.f;
    return x < lo ? 0.0f : (x > hi ? INFINITY : (x == x ? out : x));
}

/* Row softmax in place over s[0:n_valid], zeros in s[n_valid:n].
 * Keys with keymask[j] != 0 are excluded (keymask may be NULL). A row with no
 * key left becomes all zeros (never NaN). */
ATTNX_UNUSED static void attnx_softmax_row_f32_scalar(float *s, ptrdiff_t n, ptrdiff_t n_valid,
                                                      const uint8_t *keymask)
{
    ptrdiff_t j;
    float mx = -INFINITY, sum = 0.0f;
    if (keymask) {
        for (j = 0; j < n_valid; j++)
            if (keymask[j]) s[j] = -INFINITY;
    }
    for (j = 0; j < n_valid; j++) mx = ATTNX_MAXN(mx, s[j]);
    if (mx == -INFINITY) n_valid = 0;
    ATTNX_SIMD_SUM(sum)
    for (j = 0; j < n_valid; j++) {
        float e = attnx_expf(s[j] - mx);
        s[j] = e;
        sum += e;
    }
    if (n_valid > 0) {
        float inv = 1.0f / sum;
        ATTNX_SIMD
        for (j = 0; j < n_valid; j++) s[j] *= inv;
    }
    for (j = n_valid; j < n; j++) s[j] = 0.0f;
}

ATTNX_UNUSED static void attnx_softmax_row_f64_scalar(double *s, ptrdiff_t n, ptrdiff_t n_valid,
                                                      const uint8_t *keymask)
{
    ptrdiff_t j;
    double mx = -INFINITY, sum = 0.0;
    if (keymask) {
        for (j = 0; j < n_valid; j++)
            if (keymask[j]) s[j] = -INFINITY;
    }
    for (j = 0; j < n_valid; j++) mx = ATTNX_MAXN(mx, s[j]);
    if (mx == -INFINITY) n_valid = 0;
    for (j = 0; j < n_valid; j++) {
        double e = exp(s[j] - mx);
        s[j] = e;
        sum += e;
    }
    if (n_valid > 0) {
        double inv = 1.0 / sum;
        for (j = 0; j < n_valid; j++) s[j] *= inv;
    }
    for (j = n_valid; j < n; j++) s[j] = 0.0;
}

/* Softmax backward in place: da <- a * (da - sum_j da_j a_j) over [0, n_valid);
 * entries past n_valid have a = 0 and so get 0. */
#define ATTNX_SOFTMAX_BWD(NAME, T)                                          \
ATTNX_UNUSED static void NAME(const T *a, T *da, ptrdiff_t n, ptrdiff_t n_valid) \
{                                                                           \
    ptrdiff_t j;                                                            \
    T dot = 0;                                                              \
    ATTNX_SIMD_SUM(dot)                                                     \
    for (j = 0; j < n_valid; j++) dot += da[j] * a[j];                      \
    ATTNX_SIMD                                                              \
    for (j = 0; j < n_valid; j++) da[j] = a[j] * (da[j] - dot);             \
    for (j = n_valid; j < n; j++) da[j] = 0;                                \
}
ATTNX_SOFTMAX_BWD(attnx_softmax_bwd_row_f32_scalar, float)
ATTNX_SOFTMAX_BWD(attnx_softmax_bwd_row_f64, double)

/* Building blocks of the blocked (online-softmax) attention path.
 * rowmax: max of s[0:n] (-inf when empty or all -inf).
 * expsub_sum: s[j] <- exp(s[j] - mx) in place, returns the sum (mx finite). */
ATTNX_UNUSED static float attnx_rowmax_f32_scalar(const float *s, ptrdiff_t n)
{
    float mx = -INFINITY;
    for (ptrdiff_t j = 0; j < n; j++) mx = ATTNX_MAXN(mx, s[j]);
    return mx;
}

ATTNX_UNUSED static float attnx_expsub_sum_f32_scalar(float *s, ptrdiff_t n, float mx)
{
    float sum = 0.0f;
    for (ptrdiff_t j = 0; j < n; j++) { s[j] = attnx_expf(s[j] - mx); sum += s[j]; }
    return sum;
}

ATTNX_UNUSED static double attnx_rowmax_f64(const double *s, ptrdiff_t n)
{
    double mx = -INFINITY;
    for (ptrdiff_t j = 0; j < n; j++) mx = ATTNX_MAXN(mx, s[j]);
    return mx;
}

ATTNX_UNUSED static double attnx_expsub_sum_f64_scalar(double *s, ptrdiff_t n, double mx)
{
    double sum = 0.0;
    for (ptrdiff_t j = 0; j < n; j++) { s[j] = exp(s[j] - mx); sum += s[j]; }
    return sum;
}

/* The dropout masks' random bits: a SplitMix64 counter stream keyed by one 64-bit
 * draw (z_i = mix(key + (i + 1) * golden) for i = 0, 1, ...), each z giving two
 * 32-bit draws, low half first: out[2i] = (uint32) z_i, out[2i + 1] = z_i >> 32.
 * Integer arithmetic: every SIMD level gives the same bits. first: the index of
 * out[0]'s z (even offsets only; 0 for a whole fill). */
static inline uint64_t attnx_splitmix_z(uint64_t key, uint64_t i)
{
    uint64_t z = key + (i + 1) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

ATTNX_UNUSED static void attnx_splitmix_fill_scalar(uint64_t key, uint64_t first, uint32_t *out,
                                                    ptrdiff_t n)
{
    ptrdiff_t i;
    for (i = 0; 2 * i + 1 < n; i++) {
        uint64_t z = attnx_splitmix_z(key, first + (uint64_t)i);
        out[2 * i] = (uint32_t)z;
        out[2 * i + 1] = (uint32_t)(z >> 32);
    }
    if (n & 1)
        out[n - 1] = (uint32_t)attnx_splitmix_z(key, first + (uint64_t)(n / 2));
}

/* SiLU's backward on one row: dh *= sg * (1 + h * (1 - sg)) (sg = sigmoid(h)).
 * float32: dh * sg in float, the factor and the product with it in double, then
 * rounded to float (the arithmetic of the MLP's original loop, kept so that
 * results stay the same bit for bit); the SIMD versions in attnx_simd.h. Not
 * inlined: the SIMD versions call these for their tails, and inlined into an
 * AVX2+FMA function the compiler would contract h * (1 - sg) + 1 into an FMA. */
#if defined(__GNUC__) || defined(__clang__)
#define ATTNX_NOINLINE __attribute__((noinline))
#else
#define ATTNX_NOINLINE
#endif
ATTNX_UNUSED ATTNX_NOINLINE static void attnx_silu_bwd_row_f32_scalar(const float *h, const float *sg,
                                                       float *dh, ptrdiff_t n)
{
    for (ptrdiff_t j = 0; j < n; j++)
        dh[j] = (float)((double)(dh[j] * sg[j]) * (1.0 + (double)h[j] * (1.0 - (double)sg[j])));
}

ATTNX_UNUSED ATTNX_NOINLINE static void attnx_silu_bwd_row_f64_scalar(const double *h, const double *sg,
                                                       double *dh, ptrdiff_t n)
{
    for (ptrdiff_t j = 0; j < n; j++)
        dh[j] = dh[j] * sg[j] * (1.0 + h[j] * (1.0 - sg[j]));
}

/* Any NaN or inf? Tests the exponent bits (all ones) as integers, one pass, no
 * early exit needed. The portable versions; attnx_simd.h adds AVX2 ones (x86-64's
 * baseline SSE2 has no 64-bit integer compare, so the float64 loop here ran one
 * element at a time: 13 GB/s, a twentieth of a float64 seed training step's
 * serial time at 2 threads) and the dispatching entry points. */
ATTNX_UNUSED static int attnx_any_nonfinite_f32_scalar(const float *x, ptrdiff_t n)
{
    const uint32_t *u = (const uint32_t *)x;
    uint32_t bad = 0;
    ptrdiff_t i;
    for (i = 0; i < n; i++) bad |= ((u[i] & 0x7f800000u) == 0x7f800000u);
    return bad != 0;
}

ATTNX_UNUSED static int attnx_any_nonfinite_f64_scalar(const double *x, ptrdiff_t n)
{
    const uint64_t *u = (const uint64_t *)x;
    uint64_t bad = 0;
    ptrdiff_t i;
    for (i = 0; i < n; i++)
        bad |= ((u[i] & 0x7ff0000000000000ull) == 0x7ff0000000000000ull);
    return bad != 0;
}

/* Mean squared error of y against t over n elements: returns sum((y - t)^2) / n
 * with the differences and their squares in float64, kept in 8 interleaved
 * partial sums (element i goes to sum i mod 8; the tail after the last multiple of
 * 8 to sum 0) added in order at the end, and writes dy = (y - t) g in the
 * element type. The SIMD versions (attnx_simd.h) keep exactly this order and
 * never fuse the multiply-add, so every level returns the same bits. */
#define ATTNX_MSE_SCALAR(T, SUF)                                                      \
ATTNX_UNUSED static double attnx_mse_##SUF##_scalar(const T *y, const T *t, T *dy,      \
                                                    ptrdiff_t n, T g)                 \
{                                                                                     \
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, total = 0.0, diff;                      \
    ptrdiff_t i, n8 = n - n % 8;                                                      \
    int u;                                                                            \
    for (i = 0; i < n8; i += 8)                                                       \
        for (u = 0; u < 8; u++) {                                                     \
            diff = (double) y[i + u] - (double) t[i + u];                             \
            acc[u] += diff * diff;                                                    \
            dy[i + u] = (T) ((y[i + u] - t[i + u]) * g);                              \
        }                                                                             \
    for (i = n8; i < n; i++) {                                                        \
        diff = (double) y[i] - (double) t[i];                                         \
        acc[0] += diff * diff;                                                        \
        dy[i] = (T) ((y[i] - t[i]) * g);                                              \
    }                                                                                 \
    for (u = 0; u < 8; u++)                                                           \
        total += acc[u];                                                              \
    return total / (double) n;                                                        \
}
ATTNX_MSE_SCALAR(float, f32)
ATTNX_MSE_SCALAR(double, f64)
#undef ATTNX_MSE_SCALAR

#include "attnx_simd.h"

#endif
