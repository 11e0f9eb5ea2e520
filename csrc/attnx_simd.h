/* AVX2+FMA and AVX-512F versions of the float32 softmax kernels, picked at run time.
 *
 * Included by attnx_math.h after the scalar versions. The AVX2 functions are
 * compiled with a target attribute (not -mavx2 for the whole file), and the
 * public entry points test the CPU once and fall back to the scalar code, so
 * the extension stays loadable on any x86-64 (and on other architectures,
 * where only the scalar code is compiled).
 */
#ifndef ATTNX_SIMD_H
#define ATTNX_SIMD_H

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define ATTNX_HAVE_AVX2_PATH 1
#include <immintrin.h>

#define ATTNX_AVX2 __attribute__((target("avx2,fma")))

/* The exp of attnx_expf, 8 lanes: same range limits, same special values. */
ATTNX_AVX2 static inline __m256 attnx_exp8(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(ATTNX_EXPF_LO), hi = _mm256_set1_ps(ATTNX_EXPF_HI);
    /* max/min return their second operand when one is NaN: NaN lanes become lo
     * here (no garbage integer below) and get their NaN back at the end */
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 fx = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* 2^n as 2^(n>>1) * 2^(n - (n>>1)), both normal for n in [-126, 128] */
    const __m256i bias = _mm256_set1_epi32(127);
    __m256i n = _mm256_cvtps_epi32(fx);
    __m256i n1 = _mm256_srai_epi32(n, 1);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_add_epi32(_mm256_sub_epi32(n, n1), bias), 23));
    __m256 out = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    /* below the range (masked scores are -inf): exactly zero; above: +inf; NaN: NaN */
    out = _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), out);
    out = _mm256_blendv_ps(out, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
    return _mm256_blendv_ps(out, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

ATTNX_AVX2 static inline float attnx_hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

ATTNX_AVX2 static inline float attnx_hmax8(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

ATTNX_AVX2 static float attnx_rowmax_f32_avx2(const float *s, ptrdiff_t n)
{
    ptrdiff_t j;
    __m256 vmx = _mm256_set1_ps(-INFINITY), vnan = _mm256_setzero_ps();
    for (j = 0; j + 8 <= n; j += 8) {
        __m256 v = _mm256_loadu_ps(s + j);
        vmx = _mm256_max_ps(vmx, v);
        vnan = _mm256_or_ps(vnan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    /* max_ps loses a NaN that a later lane value replaces: tracked apart */
    float mx = _mm256_movemask_ps(vnan) ? NAN : attnx_hmax8(vmx);
    for (; j < n; j++) mx = ATTNX_MAXN(mx, s[j]);
    return mx;
}

ATTNX_AVX2 static float attnx_expsub_sum_f32_avx2(float *s, ptrdiff_t n, float mx)
{
    ptrdiff_t j;
    __m256 vm = _mm256_set1_ps(mx), acc = _mm256_setzero_ps();
    for (j = 0; j + 8 <= n; j += 8) {
        __m256 e = attnx_exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
        _mm256_storeu_ps(s + j, e);
        acc = _mm256_add_ps(acc, e);
    }
    float sum = attnx_hsum8(acc);
    for (; j < n; j++) { s[j] = attnx_expf(s[j] - mx); sum += s[j]; }
    return sum;
}

ATTNX_AVX2 static void attnx_softmax_row_f32_avx2(float *s, ptrdiff_t n, ptrdiff_t n_valid,
                                                  const uint8_t *keymask)
{
    ptrdiff_t j;
    if (keymask) {
        for (j = 0; j < n_valid; j++)
            if (keymask[j]) s[j] = -INFINITY;
    }
    float mx = attnx_rowmax_f32_avx2(s, n_valid);
    if (mx == -INFINITY) n_valid = 0;
    if (n_valid > 0) {
        float inv = 1.0f / attnx_expsub_sum_f32_avx2(s, n_valid, mx);
        __m256 vinv = _mm256_set1_ps(inv);
        for (j = 0; j + 8 <= n_valid; j += 8)
            _mm256_storeu_ps(s + j, _mm256_mul_ps(_mm256_loadu_ps(s + j), vinv));
        for (; j < n_valid; j++) s[j] *= inv;
    }
    for (j = n_valid; j < n; j++) s[j] = 0.0f;
}

ATTNX_AVX2 static void attnx_softmax_bwd_row_f32_avx2(const float *a, float *da, ptrdiff_t n,
                                                      ptrdiff_t n_valid)
{
    ptrdiff_t j;
    __m256 acc = _mm256_setzero_ps();
    for (j = 0; j + 8 <= n_valid; j += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(da + j), _mm256_loadu_ps(a + j), acc);
    float dot = attnx_hsum8(acc);
    for (; j < n_valid; j++) dot += da[j] * a[j];
    __m256 vd = _mm256_set1_ps(dot);
    for (j = 0; j + 8 <= n_valid; j += 8)
        _mm256_storeu_ps(da + j, _mm256_mul_ps(_mm256_loadu_ps(a + j),
                                               _mm256_sub_ps(_mm256_loadu_ps(da + j), vd)));
    for (; j < n_valid; j++) da[j] = a[j] * (da[j] - dot);
    for (j = n_valid; j < n; j++) da[j] = 0.0f;
}

/* float64 exp: x = n ln2 + r, |r| <= ln2/2 (ln2 split in two, Cody-Waite), then
 * exp(r) by its Taylor series to r^13 (truncation < 1e-17 relative), then 2^n. */
#define ATTNX_EXP_D_COEF {1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0,   \
    1.0 / 3628800.0, 1.0 / 362880.0, 1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0,       \
    1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0}
#define ATTNX_LN2_HI 6.93147180369123816490e-01
#define ATTNX_LN2_LO 1.90821492927058770002e-10

/* Range as libm's exp: below -745.2 the result rounds to 0; between there and
 * -708.4 it is subnormal, which the two-factor scaling below produces with one
 * rounding. Above 709.8: +inf. */
#define ATTNX_EXP_LO (-745.2)
#define ATTNX_EXP_HI 709.8
ATTNX_AVX2 static inline __m256d attnx_exp4d(__m256d x)
{
    static const double c[14] = ATTNX_EXP_D_COEF;
    const __m256d lo = _mm256_set1_pd(ATTNX_EXP_LO), hi = _mm256_set1_pd(ATTNX_EXP_HI);
    __m256d xc = _mm256_min_pd(_mm256_max_pd(x, lo), hi);   /* NaN -> lo, see attnx_exp8 */
    __m256d fn = _mm256_round_pd(_mm256_mul_pd(xc, _mm256_set1_pd(1.4426950408889634074)),
                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256d r = _mm256_fnmadd_pd(fn, _mm256_set1_pd(ATTNX_LN2_HI), xc);
    r = _mm256_fnmadd_pd(fn, _mm256_set1_pd(ATTNX_LN2_LO), r);
    __m256d p = _mm256_set1_pd(c[0]);
    for (int i = 1; i < 14; i++) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(c[i]));
    /* 2^n in two normal factors, n in [-1075, 1024] */
    const __m256i bias = _mm256_set1_epi64x(1023);
    __m128i n = _mm256_cvtpd_epi32(fn);
    __m128i n1 = _mm_srai_epi32(n, 1);
    __m256d s1 = _mm256_castsi256_pd(_mm256_slli_epi64(
        _mm256_add_epi64(_mm256_cvtepi32_epi64(n1), bias), 52));
    __m256d s2 = _mm256_castsi256_pd(_mm256_slli_epi64(
        _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm_sub_epi32(n, n1)), bias), 52));
    __m256d out = _mm256_mul_pd(_mm256_mul_pd(p, s1), s2);
    out = _mm256_andnot_pd(_mm256_cmp_pd(x, lo, _CMP_LT_OQ), out);
    out = _mm256_blendv_pd(out, _mm256_set1_pd(INFINITY), _mm256_cmp_pd(x, hi, _CMP_GT_OQ));
    return _mm256_blendv_pd(out, x, _mm256_cmp_pd(x, x, _CMP_UNORD_Q));
}

ATTNX_AVX2 static double attnx_expsub_sum_f64_avx2(double *s, ptrdiff_t n, double mx)
{
    ptrdiff_t j;
    __m256d vm = _mm256_set1_pd(mx), acc = _mm256_setzero_pd();
    for (j = 0; j + 4 <= n; j += 4) {
        __m256d e = attnx_exp4d(_mm256_sub_pd(_mm256_loadu_pd(s + j), vm));
        _mm256_storeu_pd(s + j, e);
        acc = _mm256_add_pd(acc, e);
    }
    double t[4];
    _mm256_storeu_pd(t, acc);
    double sum = (t[0] + t[1]) + (t[2] + t[3]);
    for (; j < n; j++) { s[j] = exp(s[j] - mx); sum += s[j]; }
    return sum;
}

ATTNX_AVX2 static void attnx_exp_array_f32_avx2(const float *x, float *y, ptrdiff_t n)
{
    ptrdiff_t i;
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, attnx_exp8(_mm256_loadu_ps(x + i)));
    for (; i < n; i++) y[i] = attnx_expf(x[i]);
}

/* ---- AVX-512F versions: the same algorithms, 16 lanes ---------------------- */
#define ATTNX_AVX512 __attribute__((target("avx512f")))

ATTNX_AVX512 static inline __m512 attnx_exp16(__m512 x)
{
    const __m512 lo = _mm512_set1_ps(ATTNX_EXPF_LO), hi = _mm512_set1_ps(ATTNX_EXPF_HI);
    __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);    /* NaN -> lo, see attnx_exp8 */
    __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), xc);
    r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    const __m512i bias = _mm512_set1_epi32(127);
    __m512i n = _mm512_cvtps_epi32(fx);
    __m512i n1 = _mm512_srai_epi32(n, 1);
    __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
    __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_add_epi32(_mm512_sub_epi32(n, n1), bias), 23));
    __m512 out = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
    out = _mm512_maskz_mov_ps((__mmask16)~_mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), out);
    out = _mm512_mask_mov_ps(out, _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ),
                             _mm512_set1_ps(INFINITY));
    return _mm512_mask_mov_ps(out, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

ATTNX_AVX512 static float attnx_rowmax_f32_avx512(const float *s, ptrdiff_t n)
{
    ptrdiff_t j;
    __m512 vmx = _mm512_set1_ps(-INFINITY);
    __mmask16 nan = 0;
    for (j = 0; j + 16 <= n; j += 16) {
        __m512 v = _mm512_loadu_ps(s + j);
        vmx = _mm512_max_ps(vmx, v);
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    }
    float mx = nan ? NAN : _mm512_reduce_max_ps(vmx);
    for (; j < n; j++) mx = ATTNX_MAXN(mx, s[j]);
    return mx;
}

ATTNX_AVX512 static float attnx_expsub_sum_f32_avx512(float *s, ptrdiff_t n, float mx)
{
    ptrdiff_t j;
    __m512 vm = _mm512_set1_ps(mx), acc = _mm512_setzero_ps();
    for (j = 0; j + 16 <= n; j += 16) {
        __m512 e = attnx_exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), vm));
        _mm512_storeu_ps(s + j, e);
        acc = _mm512_add_ps(acc, e);
    }
    if (j < n) {  /* the ragged end under a lane mask */
        __mmask16 m = (__mmask16)((1u << (n - j)) - 1u);
        __m512 e = attnx_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), vm));
        e = _mm512_maskz_mov_ps(m, e);
        _mm512_mask_storeu_ps(s + j, m, e);
        acc = _mm512_add_ps(acc, e);
    }
    return _mm512_reduce_add_ps(acc);
}

ATTNX_AVX512 static void attnx_softmax_row_f32_avx512(float *s, ptrdiff_t n, ptrdiff_t n_valid,
                                                      const uint8_t *keymask)
{
    ptrdiff_t j;
    if (keymask) {
        for (j = 0; j < n_valid; j++)
            if (keymask[j]) s[j] = -INFINITY;
    }
    float mx = attnx_rowmax_f32_avx512(s, n_valid);
    if (mx == -INFINITY) n_valid = 0;
    if (n_valid > 0) {
        __m512 inv = _mm512_set1_ps(1.0f / attnx_expsub_sum_f32_avx512(s, n_valid, mx));
        for (j = 0; j + 16 <= n_valid; j += 16)
            _mm512_storeu_ps(s + j, _mm512_mul_ps(_mm512_loadu_ps(s + j), inv));
        for (; j < n_valid; j++) s[j] *= _mm512_cvtss_f32(inv);
    }
    for (j = n_valid; j < n; j++) s[j] = 0.0f;
}

ATTNX_AVX512 static void attnx_softmax_bwd_row_f32_avx512(const float *a, float *da, ptrdiff_t n,
                                                          ptrdiff_t n_valid)
{
    ptrdiff_t j;
    __m512 acc = _mm512_setzero_ps();
    for (j = 0; j + 16 <= n_valid; j += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(da + j), _mm512_loadu_ps(a + j), acc);
    float dot = _mm512_reduce_add_ps(acc);
    for (; j < n_valid; j++) dot += da[j] * a[j];
    __m512 vd = _mm512_set1_ps(dot);
    for (j = 0; j + 16 <= n_valid; j += 16)
        _mm512_storeu_ps(da + j, _mm512_mul_ps(_mm512_loadu_ps(a + j),
                                               _mm512_sub_ps(_mm512_loadu_ps(da + j), vd)));
    for (; j < n_valid; j++) da[j] = a[j] * (da[j] - dot);
    for (j = n_valid; j < n; j++) da[j] = 0.0f;
}


ATTNX_AVX512 static inline __m512d attnx_exp8d(__m512d x)
{
    static const double c[14] = ATTNX_EXP_D_COEF;
    const __m512d lo = _mm512_set1_pd(ATTNX_EXP_LO), hi = _mm512_set1_pd(ATTNX_EXP_HI);
    __m512d xc = _mm512_min_pd(_mm512_max_pd(x, lo), hi);   /* NaN -> lo, see attnx_exp8 */
    __m512d fn = _mm512_roundscale_pd(_mm512_mul_pd(xc, _mm512_set1_pd(1.4426950408889634074)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512d r = _mm512_fnmadd_pd(fn, _mm512_set1_pd(ATTNX_LN2_HI), xc);
    r = _mm512_fnmadd_pd(fn, _mm512_set1_pd(ATTNX_LN2_LO), r);
    __m512d p = _mm512_set1_pd(c[0]);
    for (int i = 1; i < 14; i++) p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(c[i]));
    const __m512i bias = _mm512_set1_epi64(1023);
    __m256i n = _mm512_cvtpd_epi32(fn);
    __m256i n1 = _mm256_srai_epi32(n, 1);
    __m512d s1 = _mm512_castsi512_pd(_mm512_slli_epi64(
        _mm512_add_epi64(_mm512_cvtepi32_epi64(n1), bias), 52));
    __m512d s2 = _mm512_castsi512_pd(_mm512_slli_epi64(
        _mm512_add_epi64(_mm512_cvtepi32_epi64(_mm256_sub_epi32(n, n1)), bias), 52));
    __m512d out = _mm512_mul_pd(_mm512_mul_pd(p, s1), s2);
    out = _mm512_maskz_mov_pd((__mmask8)~_mm512_cmp_pd_mask(x, lo, _CMP_LT_OQ), out);
    out = _mm512_mask_mov_pd(out, _mm512_cmp_pd_mask(x, hi, _CMP_GT_OQ),
                             _mm512_set1_pd(INFINITY));
    return _mm512_mask_mov_pd(out, _mm512_cmp_pd_mask(x, x, _CMP_UNORD_Q), x);
}

ATTNX_AVX512 static double attnx_expsub_sum_f64_avx512(double *s, ptrdiff_t n, double mx)
{
    ptrdiff_t j;
    __m512d vm = _mm512_set1_pd(mx), acc = _mm512_setzero_pd();
    for (j = 0; j + 8 <= n; j += 8) {
        __m512d e = attnx_exp8d(_mm512_sub_pd(_mm512_loadu_pd(s + j), vm));
        _mm512_storeu_pd(s + j, e);
        acc = _mm512_add_pd(acc, e);
    }
    if (j < n) {
        __mmask8 m = (__mmask8)((1u << (n - j)) - 1u);
        __m512d e = attnx_exp8d(_mm512_sub_pd(_mm512_maskz_loadu_pd(m, s + j), vm));
        e = _mm512_maskz_mov_pd(m, e);
        _mm512_mask_storeu_pd(s + j, m, e);
        acc = _mm512_add_pd(acc, e);
    }
    return _mm512_reduce_add_pd(acc);
}

ATTNX_AVX512 static void attnx_exp_array_f32_avx512(const float *x, float *y, ptrdiff_t n)
{
    ptrdiff_t i;
    for (i = 0; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, attnx_exp16(_mm512_loadu_ps(x + i)));
    for (; i < n; i++) y[i] = attnx_expf(x[i]);
}

/* ---- SiLU: s = h * sigmoid(h), keeping sigmoid(h) for backward (sg NULL: inference) */
ATTNX_AVX2 static void attnx_silu_row_f32_avx2(const float *h, float *s, float *sg, ptrdiff_t n)
{
    ptrdiff_t j;
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    for (j = 0; j + 8 <= n; j += 8) {
        __m256 hv = _mm256_loadu_ps(h + j);
        __m256 g = _mm256_div_ps(one, _mm256_add_ps(one, attnx_exp8(_mm256_sub_ps(zero, hv))));
        if (sg != NULL) _mm256_storeu_ps(sg + j, g);
        _mm256_storeu_ps(s + j, _mm256_mul_ps(hv, g));
    }
    for (; j < n; j++) { float g = 1.0f / (1.0f + attnx_expf(-h[j])); s[j] = h[j] * g; if (sg != NULL) sg[j] = g; }
}

ATTNX_AVX512 static void attnx_silu_row_f32_avx512(const float *h, float *s, float *sg, ptrdiff_t n)
{
    ptrdiff_t j;
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    for (j = 0; j + 16 <= n; j += 16) {
        __m512 hv = _mm512_loadu_ps(h + j);
        __m512 g = _mm512_div_ps(one, _mm512_add_ps(one, attnx_exp16(_mm512_sub_ps(zero, hv))));
        if (sg != NULL) _mm512_storeu_ps(sg + j, g);
        _mm512_storeu_ps(s + j, _mm512_mul_ps(hv, g));
    }
    for (; j < n; j++) { float g = 1.0f / (1.0f + attnx_expf(-h[j])); s[j] = h[j] * g; if (sg != NULL) sg[j] = g; }
}

ATTNX_AVX2 static void attnx_silu_row_f64_avx2(const double *h, double *s, double *sg, ptrdiff_t n)
{
    ptrdiff_t j;
    const __m256d one = _mm256_set1_pd(1.0), zero = _mm256_setzero_pd();
    for (j = 0; j + 4 <= n; j += 4) {
        __m256d hv = _mm256_loadu_pd(h + j);
        __m256d g = _mm256_div_pd(one, _mm256_add_pd(one, attnx_exp4d(_mm256_sub_pd(zero, hv))));
        if (sg != NULL) _mm256_storeu_pd(sg + j, g);
        _mm256_storeu_pd(s + j, _mm256_mul_pd(hv, g));
    }
    for (; j < n; j++) { double g = 1.0 / (1.0 + exp(-h[j])); s[j] = h[j] * g; if (sg != NULL) sg[j] = g; }
}

ATTNX_AVX512 static void attnx_silu_row_f64_avx512(const double *h, double *s, double *sg, ptrdiff_t n)
{
    ptrdiff_t j;
    const __m512d one = _mm512_set1_pd(1.0), zero = _mm512_setzero_pd();
    for (j = 0; j + 8 <= n; j += 8) {
        __m512d hv = _mm512_loadu_pd(h + j);
        __m512d g = _mm512_div_pd(one, _mm512_add_pd(one, attnx_exp8d(_mm512_sub_pd(zero, hv))));
        if (sg != NULL) _mm512_storeu_pd(sg + j, g);
        _mm512_storeu_pd(s + j, _mm512_mul_pd(hv, g));
    }
    for (; j < n; j++) { double g = 1.0 / (1.0 + exp(-h[j])); s[j] = h[j] * g; if (sg != NULL) sg[j] = g; }
}
/* SplitMix64 (attnx_splitmix_fill_scalar), 4 or 8 streams at once. AVX2 and
 * AVX-512F have no 64-bit multiply (AVX-512DQ does): a * b mod 2^64 from 32-bit
 * products, lo(a) lo(b) + ((hi(a) lo(b) + lo(a) hi(b)) << 32). Each 64-bit lane is
 * stored little-endian, which is the two 32-bit draws in their order. */
ATTNX_AVX2 static inline __m256i attnx_mul64x4(__m256i a, __m256i b)
{
    __m256i lo = _mm256_mul_epu32(a, b);
    __m256i mid = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                   _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
    return _mm256_add_epi64(lo, _mm256_slli_epi64(mid, 32));
}

ATTNX_AVX2 static void attnx_splitmix_fill_avx2(uint64_t key, uint64_t first, uint32_t *out,
                                                ptrdiff_t n)
{
    const uint64_t golden = 0x9E3779B97F4A7C15ULL;
    const __m256i c1 = _mm256_set1_epi64x((long long)0xBF58476D1CE4E5B9ULL);
    const __m256i c2 = _mm256_set1_epi64x((long long)0x94D049BB133111EBULL);
    const __m256i step = _mm256_set1_epi64x((long long)(4 * golden));
    uint64_t b = key + (first + 1) * golden;
    __m256i z0 = _mm256_set_epi64x((long long)(b + 3 * golden), (long long)(b + 2 * golden),
                                   (long long)(b + golden), (long long)b);
    ptrdiff_t i;
    for (i = 0; 2 * i + 8 <= n; i += 4) {
        __m256i z = z0;
        z = attnx_mul64x4(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), c1);
        z = attnx_mul64x4(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), c2);
        z = _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
        _mm256_storeu_si256((__m256i *)(out + 2 * i), z);
        z0 = _mm256_add_epi64(z0, step);
    }
    attnx_splitmix_fill_scalar(key, first + (uint64_t)i, out + 2 * i, n - 2 * i);
}

ATTNX_AVX512 static inline __m512i attnx_mul64x8(__m512i a, __m512i b)
{
    __m512i lo = _mm512_mul_epu32(a, b);
    __m512i mid = _mm512_add_epi64(_mm512_mul_epu32(_mm512_srli_epi64(a, 32), b),
                                   _mm512_mul_epu32(a, _mm512_srli_epi64(b, 32)));
    return _mm512_add_epi64(lo, _mm512_slli_epi64(mid, 32));
}

ATTNX_AVX512 static void attnx_splitmix_fill_avx512(uint64_t key, uint64_t first,
                                                    uint32_t *out, ptrdiff_t n)
{
    const uint64_t golden = 0x9E3779B97F4A7C15ULL;
    const __m512i c1 = _mm512_set1_epi64((long long)0xBF58476D1CE4E5B9ULL);
    const __m512i c2 = _mm512_set1_epi64((long long)0x94D049BB133111EBULL);
    const __m512i step = _mm512_set1_epi64((long long)(8 * golden));
    uint64_t b = key + (first + 1) * golden;
    __m512i z0 = _mm512_add_epi64(
        _mm512_set1_epi64((long long)b),
        _mm512_set_epi64((long long)(7 * golden), (long long)(6 * golden),
                         (long long)(5 * golden), (long long)(4 * golden),
                         (long long)(3 * golden), (long long)(2 * golden),
                         (long long)golden, 0));
    ptrdiff_t i;
    for (i = 0; 2 * i + 16 <= n; i += 8) {
        __m512i z = z0;
        z = attnx_mul64x8(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)), c1);
        z = attnx_mul64x8(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)), c2);
        z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
        _mm512_storeu_si512((void *)(out + 2 * i), z);
        z0 = _mm512_add_epi64(z0, step);
    }
    attnx_splitmix_fill_scalar(key, first + (uint64_t)i, out + 2 * i, n - 2 * i);
}

/* SiLU's backward, dh *= sg * (1 + h * (1 - sg)) with sg = sigmoid(h), in the
 * portable code's arithmetic (attnx_silu_bwd_row_*): for float32 the product
 * dh * sg in float, the factor in double, the result rounded to float. Each
 * operation is a separate multiply or add: ATTNX_KEEP stops the compiler from
 * contracting h * (1 - sg) + 1 into an FMA, so every level gives the same bits. */
#define ATTNX_KEEP(v) __asm__("" : "+x"(v))

ATTNX_AVX2 static void attnx_silu_bwd_row_f32_avx2(const float *h, const float *sg, float *dh,
                                                   ptrdiff_t n)
{
    ptrdiff_t j;
    const __m256d one = _mm256_set1_pd(1.0);
    for (j = 0; j + 4 <= n; j += 4) {
        __m128 g = _mm_loadu_ps(sg + j);
        __m128 dg = _mm_mul_ps(_mm_loadu_ps(dh + j), g);
        __m256d u = _mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(h + j)),
                                  _mm256_sub_pd(one, _mm256_cvtps_pd(g)));
        ATTNX_KEEP(u);
        __m256d w = _mm256_mul_pd(_mm256_cvtps_pd(dg), _mm256_add_pd(one, u));
        _mm_storeu_ps(dh + j, _mm256_cvtpd_ps(w));
    }
    attnx_silu_bwd_row_f32_scalar(h + j, sg + j, dh + j, n - j);
}

ATTNX_AVX512 static void attnx_silu_bwd_row_f32_avx512(const float *h, const float *sg,
                                                       float *dh, ptrdiff_t n)
{
    ptrdiff_t j;
    const __m512d one = _mm512_set1_pd(1.0);
    for (j = 0; j + 8 <= n; j += 8) {
        __m256 g = _mm256_loadu_ps(sg + j);
        __m256 dg = _mm256_mul_ps(_mm256_loadu_ps(dh + j), g);
        __m512d u = _mm512_mul_pd(_mm512_cvtps_pd(_mm256_loadu_ps(h + j)),
                                  _mm512_sub_pd(one, _mm512_cvtps_pd(g)));
        ATTNX_KEEP(u);
        __m512d w = _mm512_mul_pd(_mm512_cvtps_pd(dg), _mm512_add_pd(one, u));
        _mm256_storeu_ps(dh + j, _mm512_cvtpd_ps(w));
    }
    attnx_silu_bwd_row_f32_scalar(h + j, sg + j, dh + j, n - j);
}

ATTNX_AVX2 static void attnx_silu_bwd_row_f64_avx2(const double *h, const double *sg,
                                                   double *dh, ptrdiff_t n)
{
    ptrdiff_t j;
    const __m256d one = _mm256_set1_pd(1.0);
    for (j = 0; j + 4 <= n; j += 4) {
        __m256d g = _mm256_loadu_pd(sg + j);
        __m256d dg = _mm256_mul_pd(_mm256_loadu_pd(dh + j), g);
        __m256d u = _mm256_mul_pd(_mm256_loadu_pd(h + j), _mm256_sub_pd(one, g));
        ATTNX_KEEP(u);
        _mm256_storeu_pd(dh + j, _mm256_mul_pd(dg, _mm256_add_pd(one, u)));
    }
    attnx_silu_bwd_row_f64_scalar(h + j, sg + j, dh + j, n - j);
}

ATTNX_AVX512 static void attnx_silu_bwd_row_f64_avx512(const double *h, const double *sg,
                                                       double *dh, ptrdiff_t n)
{
    ptrdiff_t j;
    const __m512d one = _mm512_set1_pd(1.0);
    for (j = 0; j + 8 <= n; j += 8) {
        __m512d g = _mm512_loadu_pd(sg + j);
        __m512d dg = _mm512_mul_pd(_mm512_loadu_pd(dh + j), g);
        __m512d u = _mm512_mul_pd(_mm512_loadu_pd(h + j), _mm512_sub_pd(one, g));
        ATTNX_KEEP(u);
        _mm512_storeu_pd(dh + j, _mm512_mul_pd(dg, _mm512_add_pd(one, u)));
    }
    attnx_silu_bwd_row_f64_scalar(h + j, sg + j, dh + j, n - j);
}
#undef ATTNX_KEEP

/* ---- input checks and the MSE loss (AVX2 at level 1, AVX-512 at level 2) */

/* any element whose exponent bits are all ones (inf or NaN), 32 bytes at a time;
 * the last partial vector goes to the portable loop */
#define ATTNX_NONFINITE_AVX2(T, SUF, LANES, EXPBITS, CMPEQ)                          \
ATTNX_AVX2 static int attnx_any_nonfinite_##SUF##_avx2(const T *x, ptrdiff_t n)         \
{                                                                                     \
    const __m256i m = EXPBITS;                                                        \
    __m256i bad = _mm256_setzero_si256();                                             \
    ptrdiff_t i;                                                                      \
    for (i = 0; i + LANES <= n; i += LANES) {                                         \
        __m256i v = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i)), m);  \
        bad = _mm256_or_si256(bad, CMPEQ(v, m));                                      \
    }                                                                                 \
    return !_mm256_testz_si256(bad, bad) || attnx_any_nonfinite_##SUF##_scalar(x + i, n - i); \
}
ATTNX_NONFINITE_AVX2(float, f32, 8, _mm256_set1_epi32(0x7f800000), _mm256_cmpeq_epi32)
ATTNX_NONFINITE_AVX2(double, f64, 4, _mm256_set1_epi64x(0x7ff0000000000000ll),
                     _mm256_cmpeq_epi64)
#undef ATTNX_NONFINITE_AVX2

/* attnx_mse_*_scalar's sums, lanes 0-3 and 4-7 of two registers; separate multiply
 * and add (no FMA) so that the bits match the portable code. Per type only the
 * group of 8 differs: its differences as two float64 registers, and dy. */
ATTNX_AVX2 static inline void attnx_mse_group_f64(const double *y, const double *t, double *dy,
                                                  double g, __m256d *d0, __m256d *d1)
{
    const __m256d gv = _mm256_set1_pd(g);
    *d0 = _mm256_sub_pd(_mm256_loadu_pd(y), _mm256_loadu_pd(t));
    *d1 = _mm256_sub_pd(_mm256_loadu_pd(y + 4), _mm256_loadu_pd(t + 4));
    _mm256_storeu_pd(dy, _mm256_mul_pd(*d0, gv));
    _mm256_storeu_pd(dy + 4, _mm256_mul_pd(*d1, gv));
}

ATTNX_AVX2 static inline void attnx_mse_group_f32(const float *y, const float *t, float *dy,
                                                  float g, __m256d *d0, __m256d *d1)
{
    const __m256 yv = _mm256_loadu_ps(y), tv = _mm256_loadu_ps(t);
    *d0 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(yv)),
                        _mm256_cvtps_pd(_mm256_castps256_ps128(tv)));
    *d1 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(yv, 1)),
                        _mm256_cvtps_pd(_mm256_extractf128_ps(tv, 1)));
    _mm256_storeu_ps(dy, _mm256_mul_ps(_mm256_sub_ps(yv, tv), _mm256_set1_ps(g)));
}

/* An empty asm that takes x in a vector register and may change it, so the multiply
 * that made x and the add that takes it stay two roundings: GCC fused them into one
 * FMA under an FMA target (-ffp-contract=fast), which the portable code never does. */
#define ATTNX_NO_CONTRACT(x) __asm__("" : "+v"(x))

/* The scalar tail of the vector MSE loops, compiled for the baseline ISA and never
 * inlined into them: under a target with FMA, GCC contracted its multiply and add
 * (part[0] += diff * diff) into one FMA, and levels 1 and 2 lost the portable code's
 * last bit on every loss whose length is not a multiple of 8. */
#define ATTNX_MSE_TAIL(T, SUF)                                                        \
__attribute__((noinline)) static void attnx_mse_tail_##SUF(const T *y, const T *t, T *dy,  \
                                                          ptrdiff_t n, T g, double *part0) \
{                                                                                     \
    double diff;                                                                      \
    for (ptrdiff_t i = 0; i < n; i++) {                                               \
        diff = (double) y[i] - (double) t[i];                                         \
        *part0 += diff * diff;                                                        \
        dy[i] = (T) ((y[i] - t[i]) * g);                                              \
    }                                                                                 \
}
ATTNX_MSE_TAIL(float, f32)
ATTNX_MSE_TAIL(double, f64)
#undef ATTNX_MSE_TAIL

#define ATTNX_MSE_AVX2(T, SUF)                                                        \
ATTNX_AVX2 static double attnx_mse_##SUF##_avx2(const T *y, const T *t, T *dy,          \
                                                ptrdiff_t n, T g)                     \
{                                                                                     \
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd(), d0, d1;               \
    double acc[8], total = 0.0;                                                       \
    ptrdiff_t i;                                                                      \
    for (i = 0; i + 8 <= n; i += 8) {                                                 \
        attnx_mse_group_##SUF(y + i, t + i, dy + i, g, &d0, &d1);                      \
        __m256d q0 = _mm256_mul_pd(d0, d0), q1 = _mm256_mul_pd(d1, d1);              \
        ATTNX_NO_CONTRACT(q0);                                                        \
        ATTNX_NO_CONTRACT(q1);                                                        \
        a0 = _mm256_add_pd(a0, q0);                                                   \
        a1 = _mm256_add_pd(a1, q1);                                                   \
    }                                                                                 \
    _mm256_storeu_pd(acc, a0);                                                        \
    _mm256_storeu_pd(acc + 4, a1);                                                    \
    attnx_mse_tail_##SUF(y + i, t + i, dy + i, n - i, g, acc);                       \
    for (int u = 0; u < 8; u++)                                                       \
        total += acc[u];                                                              \
    return total / (double) n;                                                        \
}
ATTNX_MSE_AVX2(float, f32)
ATTNX_MSE_AVX2(double, f64)
#undef ATTNX_MSE_AVX2

/* The same passes at level 2, 64 bytes a step. The sums keep attnx_mse_*_scalar's
 * eight partial sums (element i in sum i mod 8) in one float64 register, element
 * groups of 8 added in order, multiply and add apart: the bits of levels 0 and 1. */
ATTNX_AVX512 static int attnx_any_nonfinite_f32_avx512(const float *x, ptrdiff_t n)
{
    const __m512i m = _mm512_set1_epi32(0x7f800000);
    __mmask16 bad = 0;
    ptrdiff_t i;
    for (i = 0; i + 16 <= n; i += 16)
        bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_loadu_si512(x + i), m), m);
    return bad != 0 || attnx_any_nonfinite_f32_scalar(x + i, n - i);
}

ATTNX_AVX512 static int attnx_any_nonfinite_f64_avx512(const double *x, ptrdiff_t n)
{
    const __m512i m = _mm512_set1_epi64(0x7ff0000000000000ll);
    __mmask8 bad = 0;
    ptrdiff_t i;
    for (i = 0; i + 8 <= n; i += 8)
        bad |= _mm512_cmpeq_epi64_mask(_mm512_and_si512(_mm512_loadu_si512(x + i), m), m);
    return bad != 0 || attnx_any_nonfinite_f64_scalar(x + i, n - i);
}

/* one group of 8: its differences in float64 (returned) and dy */
ATTNX_AVX512 static inline __m512d attnx_mse_group8_f32(const float *y, const float *t,
                                                        float *dy, float g)
{
    const __m256 yv = _mm256_loadu_ps(y), tv = _mm256_loadu_ps(t);
    _mm256_storeu_ps(dy, _mm256_mul_ps(_mm256_sub_ps(yv, tv), _mm256_set1_ps(g)));
    return _mm512_sub_pd(_mm512_cvtps_pd(yv), _mm512_cvtps_pd(tv));
}

ATTNX_AVX512 static inline __m512d attnx_mse_group8_f64(const double *y, const double *t,
                                                        double *dy, double g)
{
    const __m512d d = _mm512_sub_pd(_mm512_loadu_pd(y), _mm512_loadu_pd(t));
    _mm512_storeu_pd(dy, _mm512_mul_pd(d, _mm512_set1_pd(g)));
    return d;
}

#define ATTNX_MSE_AVX512(T, SUF)                                                      \
ATTNX_AVX512 static double attnx_mse_##SUF##_avx512(const T *y, const T *t, T *dy,      \
                                                  ptrdiff_t n, T g)                   \
{                                                                                     \
    __m512d acc = _mm512_setzero_pd(), d;                                             \
    double part[8], total = 0.0;                                                      \
    ptrdiff_t i;                                                                      \
    for (i = 0; i + 8 <= n; i += 8) {                                                 \
        d = attnx_mse_group8_##SUF(y + i, t + i, dy + i, g);                          \
        __m512d q = _mm512_mul_pd(d, d);                                              \
        ATTNX_NO_CONTRACT(q);                                                         \
        acc = _mm512_add_pd(acc, q);                                                  \
    }                                                                                 \
    _mm512_storeu_pd(part, acc);                                                      \
    attnx_mse_tail_##SUF(y + i, t + i, dy + i, n - i, g, part);                      \
    for (int u = 0; u < 8; u++)                                                       \
        total += part[u];                                                             \
    return total / (double) n;                                                        \
}
ATTNX_MSE_AVX512(float, f32)
ATTNX_MSE_AVX512(double, f64)
#undef ATTNX_MSE_AVX512

#endif

/* Dispatch level of THIS extension module's copy of the kernels: 0 = portable
 * C, 1 = AVX2+FMA, 2 = AVX-512F; -1 = not attached. Every extension that includes
 * this header gets its own copy of these statics; the CPU is examined once, by
 * attnx._ops (attnx_detect_cpu), and each module copies that level at import
 * through simd_attach() in attnx/_ops.pxd. This is the one dispatch mechanism of
 * attnx (softmax, exp, SiLU, the fused attention kernels, AdamW). A module that
 * never attaches stays at -1 and its Python entry points raise RuntimeError
 * (require_simd() in attnx/_ops.pxd) instead of silently running portable code.
 * attnx_dispatched records which levels' kernels actually ran here (bit L). */
static int attnx_cpu_level = -1;
static int attnx_dispatched = 0;

ATTNX_UNUSED static int attnx_detect_cpu(int max_level)
{
    int level = 0;
#ifdef ATTNX_HAVE_AVX2_PATH
    __builtin_cpu_init();
    if (max_level >= 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        level = 1;
    if (max_level >= 2 && level == 1 && __builtin_cpu_supports("avx512f"))
        level = 2;
#else
    (void)max_level;
#endif
    return level;
}

ATTNX_UNUSED static int attnx_set_level(int level)
{
    attnx_cpu_level = level;
    return level;
}

ATTNX_UNUSED static int attnx_get_level(void) { return attnx_cpu_level; }
ATTNX_UNUSED static int attnx_dispatched_levels(void) { return attnx_dispatched; }

/* The level to run now, recorded (a relaxed read-mostly flag: one atomic OR
 * the first time a level runs, then only a load). */
static inline int attnx_level(void)
{
    int level = attnx_cpu_level;
    if (level < 0)      /* not attached: the entry points refuse before this */
        return 0;
#if defined(__GNUC__) || defined(__clang__)
    if (!(__atomic_load_n(&attnx_dispatched, __ATOMIC_RELAXED) & (1 << level)))
        __atomic_fetch_or(&attnx_dispatched, 1 << level, __ATOMIC_RELAXED);
#else
    attnx_dispatched |= 1 << level;
#endif
    return level;
}

ATTNX_UNUSED static void attnx_softmax_row_f32(float *s, ptrdiff_t n, ptrdiff_t n_valid,
                                               const uint8_t *keymask)
{
    int level = attnx_level();
#ifdef ATTNX_HAVE_AVX2_PATH
    if (level == 2) { attnx_softmax_row_f32_avx512(s, n, n_valid, keymask); return; }
    if (level == 1) { attnx_softmax_row_f32_avx2(s, n, n_valid, keymask); return; }
#endif
    (void)level;
    attnx_softmax_row_f32_scalar(s, n, n_valid, keymask);
}

ATTNX_UNUSED static void attnx_softmax_bwd_row_f32(const float *a, float *da, ptrdiff_t n,
                                                   ptrdiff_t n_valid)
{
    int level = attnx_level();
#ifdef ATTNX_HAVE_AVX2_PATH
    if (level == 2) { attnx_softmax_bwd_row_f32_avx512(a, da, n, n_valid); return; }
    if (level == 1) { attnx_softmax_bwd_row_f32_avx2(a, da, n, n_valid); return; }
#endif
    (void)level;
    attnx_softmax_bwd_row_f32_scalar(a, da, n, n_valid);
}

ATTNX_UNUSED static float attnx_rowmax_f32(const float *s, ptrdiff_t n)
{
    int level = attnx_level();
#ifdef ATTNX_HAVE_AVX2_PATH
    if (level == 2) return attnx_rowmax_f32_avx512(s, n);
    if (level == 1) return attnx_rowmax_f32_avx2(s, n);
#endif
    (void)level;
    return attnx_rowmax_f32_scalar(s, n);
}

ATTNX_UNUSED static float attnx_expsub_sum_f32(float *s, ptrdiff_t n, float mx)
{
    int level = attnx_level();
#ifdef ATTNX_HAVE_AVX2_PATH
    if (level == 2) return attnx_expsub_sum_f32_avx512(s, n, mx);
    if (level == 1) return attnx_expsub_sum_f32_avx2(s, n, mx);
#endif
    (void)level;
    return attnx_expsub_sum_f32_scalar(s, n, mx);
}

ATTNX_UNUSED static double attnx_expsub_sum_f64(double *s, ptrdiff_t n, double mx)
{
    int level = attnx_level();
#ifdef ATTNX_HAVE_AVX2_PATH
    if (level == 2) return attnx_expsub_sum_f64_avx512(s, n, mx);
    if (level == 1) return attnx_expsub_sum_f64_avx2(s, n, mx);
#endif
    (void)level;
    return attnx_expsub_sum_f64_scalar(s, n, mx);
}

/* float64 row softmax: the portable code, or max + SIMD exp-sum + scale. */
ATTNX_UNUSED static void attnx_softmax_row_f64(double *s, ptrdiff_t n, ptrdiff_t n_valid,
                                               const uint8_t *keymask)
{
    ptrdiff_t j;
    if (!attnx_cpu_level) { attnx_level(); attnx_softmax_row_f64_scalar(s, n, n_valid, keymask); return; }
    if (keymask) {
        for (j = 0; j < n_valid; j++)
            if (keymask[j]) s[j] = -INFINITY;
    }
    double mx = attnx_rowmax_f64(s, n_valid);
    if (mx == -INFINITY) n_valid = 0;
    if (n_valid > 0) {
        double inv = 1.0 / attnx_expsub_sum_f64(s, n_valid, mx);
        for (j = 0; j < n_valid; j++) s[j] *= inv;
    }
    for (j = n_valid; j < n; j++) s[j] = 0.0;
}

/* exp over a float64 array with the kernels' exp (for accuracy tests). */
ATTNX_UNUSED static void attnx_exp_array_f64(const double *x, double *y, ptrdiff_t n)
{
    for (ptrdiff_t i = 0; i < n; i++) y[i] = x[i];
    for (ptrdiff_t i = 0; i < n; i += 1 << 20) {
        ptrdiff_t len = n - i < (1 << 20) ? n - i : (1 << 20);
        attnx_expsub_sum_f64(y + i, len, 0.0);
    }
}

/* SiLU: the portable float32 path uses attnx_expf too, so that every level
 * shares one exp and its special values. */
ATTNX_UNUSED static void attnx_silu_row_f32(const float *h, float *s, float *sg, ptrdiff_t n)
{
    int level = attnx_level();
#ifdef ATTNX_HAVE_AVX2_PATH
    if (level == 2) { attnx_silu_row_f32_avx512(h, s, sg, n); return; }
    if (level == 1) { attnx_silu_row_f32_avx2(h, s, sg, n); return; }
#endif
    (void)level;
    for (ptrdiff_t j = 0; j < n; j++) { float g = 1.0f / (1.0f + attnx_expf(-h[j])); s[j] = h[j] * g; if (sg != NULL) sg[j] = g; }
}

ATTNX_UNUSED static void attnx_silu_row_f64(const double *h, double *s, double *sg, ptrdiff_t n)
{
    int level = attnx_level();
#ifdef ATTNX_HAVE_AVX2_PATH
    if (level == 2) { attnx_silu_row_f64_avx512(h, s, sg, n); return; }
    if (level == 1) { attnx_silu_row_f64_avx2(h, s, sg, n); return; }
#endif
    (void)level;
    for (ptrdiff_t j = 0; j < n; j++) { double g = 1.0 / (1.0 + exp(-h[j])); s[j] = h[j] * g; if (sg != NULL) sg[j] = g; }
}

ATTNX_UNUSED static void attnx_splitmix_fill(uint64_t key, uint32_t *out, ptrdiff_t n)
{
    int level = attnx_level();
#ifdef ATTNX_HAVE_AVX2_PATH
    if (level == 2) { attnx_splitmix_fill_avx512(key, 0, out, n); return; }
    if (level == 1) { attnx_splitmix_fill_avx2(key, 0, out, n); return; }
#endif
    (void)level;
    attnx_splitmix_fill_scalar(key, 0, out, n);
}

ATTNX_UNUSED static void attnx_silu_bwd_row_f32(const float *h, const float *sg, float *dh,
                                               ptrdiff_t n)
{
    int level = attnx_level();
#ifdef ATTNX_HAVE_AVX2_PATH
    if (level == 2) { attnx_silu_bwd_row_f32_avx512(h, sg, dh, n); return; }
    if (level == 1) { attnx_silu_bwd_row_f32_avx2(h, sg, dh, n); return; }
#endif
    (void)level;
    attnx_silu_bwd_row_f32_scalar(h, sg, dh, n);
}

ATTNX_UNUSED static void attnx_silu_bwd_row_f64(const double *h, const double *sg, double *dh,
                                               ptrdiff_t n)
{
    int level = attnx_level();
#ifdef ATTNX_HAVE_AVX2_PATH
    if (level == 2) { attnx_silu_bwd_row_f64_avx512(h, sg, dh, n); return; }
    if (level == 1) { attnx_silu_bwd_row_f64_avx2(h, sg, dh, n); return; }
#endif
    (void)level;
    attnx_silu_bwd_row_f64_scalar(h, sg, dh, n);
}

#define ATTNX_DISPATCH_LEVELS(RET, NAME, PARAMS, ARGS)                                  \
ATTNX_UNUSED static RET NAME PARAMS                                                   \
{                                                                                     \
    int level = attnx_level();                                                        \
    (void)level;                                                                      \
    ATTNX_IF_AVX2(if (level == 2) return NAME##_avx512 ARGS;)                          \
    ATTNX_IF_AVX2(if (level == 1) return NAME##_avx2 ARGS;)                            \
    return NAME##_scalar ARGS;                                                        \
}
#ifdef ATTNX_HAVE_AVX2_PATH
#define ATTNX_IF_AVX2(x) x
#else
#define ATTNX_IF_AVX2(x)
#endif
ATTNX_DISPATCH_LEVELS(int, attnx_any_nonfinite_f32, (const float *x, ptrdiff_t n), (x, n))
ATTNX_DISPATCH_LEVELS(int, attnx_any_nonfinite_f64, (const double *x, ptrdiff_t n), (x, n))
ATTNX_DISPATCH_LEVELS(double, attnx_mse_f32,
                    (const float *y, const float *t, float *dy, ptrdiff_t n, float g),
                    (y, t, dy, n, g))
ATTNX_DISPATCH_LEVELS(double, attnx_mse_f64,
                    (const double *y, const double *t, double *dy, ptrdiff_t n, double g),
                    (y, t, dy, n, g))
#undef ATTNX_DISPATCH_LEVELS
#undef ATTNX_IF_AVX2

ATTNX_UNUSED static void attnx_exp_array_f32(const float *x, float *y, ptrdiff_t n)
{
    ptrdiff_t i;
    int level = attnx_level();
#ifdef ATTNX_HAVE_AVX2_PATH
    if (level == 2) { attnx_exp_array_f32_avx512(x, y, n); return; }
    if (level == 1) { attnx_exp_array_f32_avx2(x, y, n); return; }
#endif
    (void)level;
    for (i = 0; i < n; i++) y[i] = attnx_expf(x[i]);
}

#endif
