/* Small float32 GEMMs without packing, for the products BLAS is far from peak on.
 *
 * A SequenceModel on real-data shapes (d_model 32-64, a few hundred rows per batch)
 * multiplies matrices of 10^4-10^6 multiply-adds. OpenBLAS packs both operands
 * into its panel layout before every product; at these sizes the copies cost a
 * third of its time, and the weight gradients (op(A) = X^T: a few dozen output rows,
 * hundreds of rows summed) run at half its peak. Here each product is a loop of
 * register tiles reading the operands where they lie (A element by element through
 * any row / k stride, B row by row), the FMA chains in k order, so that no copy is
 * made but B^T's (up to ATTNX_GS_PACK elements, on the stack).
 *
 * Measured at the Sunspots model's shapes (AMD Zen 3, AVX2, one thread; scipy's
 * OpenBLAS 0.3.30 Haswell kernels): 1.1-1.4x OpenBLAS on X W and dY W^T of 256 rows,
 * 1.5-2.3x on X^T dY; from about 10^7 multiply-adds OpenBLAS's cache blocking wins,
 * and attnx_gs_wanted sends those products there.
 *
 * AVX2+FMA only (dispatch level 1), through a per-function target attribute: the
 * portable build and the AVX-512 level keep BLAS, whose results the accuracy tables
 * of the AVX-512 level were measured with. Included by attnx/_blas.pyx. */
#ifndef ATTNX_GEMM_SMALL_H
#define ATTNX_GEMM_SMALL_H
#include <stddef.h>
#include <string.h>

#include "attnx_math.h"   /* attnx_level(): the dispatch state of the including module */

/* largest B^T (k * n elements) packed on the stack */
#define ATTNX_GS_PACK 8192

/* Whether a product of this shape goes to the tiles rather than BLAS (op(B) has
 * n >= 8 columns: one vector; narrower outputs keep BLAS). */
static inline int attnx_gs_wanted(int ta, ptrdiff_t m, ptrdiff_t n, ptrdiff_t k)
{
    const double work = (double) m * (double) n * (double) k;
    if (n < 8)
        return 0;
    if (work <= 1.6e6)
        return 1;
    /* X^T dY: few output rows, many summed, where BLAS runs at half its peak: the
     * tiles win while a chunk of B (k rows of 16 floats) stays in L1 (k <= 512), or
     * C is small (measured on Zen 3: 64 x 192 x 512 1.19x, 64 x 64 x 832 1.29x;
     * 64 x 128 x 928 0.81x, left to BLAS) */
    return ta && work <= 1.6e7 && (k <= 512 || (k <= 1024 && m * n <= 4096));
}

/* Whether the AVX-512 tiles run on this CPU: Intel's only, where the rule below was
 * measured. On AMD's Zen 4 a 512-bit FMA issues once a cycle, not twice, and no AMD
 * core was at hand to measure the tiles against OpenBLAS there: it keeps BLAS, as
 * before (1 yes, 0 no; computed once, the same value in every thread). */
static int attnx_gs512_vendor = -1;
static inline int attnx_gs512_cpu(void)
{
    if (attnx_gs512_vendor < 0) {
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
        __builtin_cpu_init();
        attnx_gs512_vendor = __builtin_cpu_is("intel") ? 1 : 0;
#else
        attnx_gs512_vendor = 0;
#endif
    }
    return attnx_gs512_vendor;
}

/* The AVX-512 rule, measured with benchmarks/small_gemm.py --level 2 on an Intel Xeon
 * (Sapphire Rapids class, two 512-bit FMA units), one thread, against OpenBLAS 0.3.30's
 * SkylakeX sgemm (benchmarks/results/small_gemm_avx512_2026-12-02.md). The tiles win
 * where op(B) is narrow and short: X W and dY W^T while a k x n panel of B is at most
 * 12288 floats (48 KB: 1.05-1.8x at d_model 32-64, 256-16384 rows; from 16384 floats
 * or n = 256 BLAS wins, to 0.65x at d_model 256), X W_2 (n <= 64, k <= 256: 1.02-1.1x),
 * and X^T dY of at most 16384 outputs in blocks of 256 rows (1.1-2.3x; a product of
 * fewer than 4096 outputs over 256 rows ties). */
static inline int attnx_gs512_wanted(int ta, int tb, ptrdiff_t m, ptrdiff_t n, ptrdiff_t k)
{
    if (n < 16 || !attnx_gs512_cpu())
        return 0;
    if (ta)
        return !tb && m * n <= 16384 && (k >= 1024 || m * n >= 4096);
    if (n * k <= 12288)
        return m <= 2048 || n * k <= 4096;
    return !tb && n <= 64 && k <= 256;
}

#ifdef ATTNX_HAVE_AVX2_PATH
#include <immintrin.h>
#define ATTNX_GS_ATTR __attribute__((target("avx2,fma")))
/* keeps a vector live past its last FMA (see FL_KEEP in attnx_flash_impl.h: without
 * it GCC writes the dying operand and copies accumulators between registers) */
#define ATTNX_GS_KEEP(x) __asm__("" : : "v"(x))
#define ATTNX_GS_UNROLL _Pragma("GCC unroll 16")

/* C[0:mr, 0:8 NV] = alpha A[0:mr, 0:kd] B[0:kd, 0:8 NV] + beta C (beta 0: C not read),
 * A(r, k) = a[r ar + k ak], B rows at b + k ldb. The last vector of columns holds
 * `nlast` (1..8) valid lanes; PART: it is partial (masked loads and stores, so no
 * element past the operands is touched). mr <= MR rows are valid (the missing ones
 * re-read row 0 and are not stored). Each of the MR x NV accumulators is one FMA
 * chain over k in order. */
#define ATTNX_GS_TILE(NAME, MR, NV, PART)                                               \
ATTNX_GS_ATTR static inline void NAME(ptrdiff_t kd, const float *restrict a,            \
        ptrdiff_t ar, ptrdiff_t ak, int mr, const float *restrict b, ptrdiff_t ldb,     \
        float *restrict c, ptrdiff_t ldc, float alpha, float beta, int nlast)           \
{                                                                                       \
    __m256 acc[MR][NV];                                                                 \
    const float *ap[MR];                                                                \
    const __m256i msk = _mm256_cmpgt_epi32(_mm256_set1_epi32(nlast),                    \
                                           _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));  \
    int r, u;                                                                           \
    ptrdiff_t k;                                                                        \
    (void) msk;                                                                         \
    ATTNX_GS_UNROLL                                                                     \
    for (r = 0; r < MR; r++) {                                                          \
        ap[r] = a + (r < mr ? r : 0) * ar;                                              \
        ATTNX_GS_UNROLL                                                                 \
        for (u = 0; u < NV; u++)                                                        \
            acc[r][u] = _mm256_setzero_ps();                                            \
    }                                                                                   \
    for (k = 0; k < kd; k++) {                                                          \
        __m256 bv[NV];                                                                  \
        ATTNX_GS_UNROLL                                                                 \
        for (u = 0; u < NV; u++)                                                        \
            bv[u] = (PART && u == NV - 1) ? _mm256_maskload_ps(b + k * ldb + 8 * u, msk) \
                                          : _mm256_loadu_ps(b + k * ldb + 8 * u);       \
        ATTNX_GS_UNROLL                                                                 \
        for (r = 0; r < MR; r++) {                                                      \
            const __m256 av = _mm256_broadcast_ss(ap[r] + k * ak);                      \
            ATTNX_GS_UNROLL                                                             \
            for (u = 0; u < NV; u++)                                                    \
                acc[r][u] = _mm256_fmadd_ps(av, bv[u], acc[r][u]);                      \
            if (NV > 1)                                                                 \
                ATTNX_GS_KEEP(av);                                                      \
        }                                                                               \
        ATTNX_GS_UNROLL                                                                 \
        for (u = 0; u < NV; u++)                                                        \
            ATTNX_GS_KEEP(bv[u]);                                                       \
    }                                                                                   \
    const __m256 al = _mm256_set1_ps(alpha), be = _mm256_set1_ps(beta);                 \
    ATTNX_GS_UNROLL                                                                     \
    for (r = 0; r < MR; r++) {                                                          \
        if (r >= mr)                                                                    \
            break;                                                                      \
        ATTNX_GS_UNROLL                                                                 \
        for (u = 0; u < NV; u++) {                                                      \
            float *cr = c + r * ldc + 8 * u;                                            \
            __m256 v = alpha == 1.0f ? acc[r][u] : _mm256_mul_ps(al, acc[r][u]);        \
            if (PART && u == NV - 1) {                                                  \
                if (beta != 0.0f)                                                       \
                    v = _mm256_fmadd_ps(be, _mm256_maskload_ps(cr, msk), v);            \
                _mm256_maskstore_ps(cr, msk, v);                                        \
            } else {                                                                    \
                if (beta != 0.0f)                                                       \
                    v = _mm256_fmadd_ps(be, _mm256_loadu_ps(cr), v);                    \
                _mm256_storeu_ps(cr, v);                                                \
            }                                                                           \
        }                                                                               \
    }                                                                                   \
}

/* 6 x 2 vectors: 12 chains, enough for two FMA ports at 4-5 cycles' latency; 4 x 2
 * for the last rows (32 = 4 x 6 + 2 x 4: a 6-row tile over 2 rows wasted a third);
 * 8 x 1 for a last chunk of at most 8 columns */
ATTNX_GS_TILE(attnx_gs_tile6_full, 6, 2, 0)
ATTNX_GS_TILE(attnx_gs_tile6_part, 6, 2, 1)
ATTNX_GS_TILE(attnx_gs_tile4_full, 4, 2, 0)
ATTNX_GS_TILE(attnx_gs_tile4_part, 4, 2, 1)
ATTNX_GS_TILE(attnx_gs_tile8_full, 8, 1, 0)
ATTNX_GS_TILE(attnx_gs_tile8_part, 8, 1, 1)

/* rows [0, m) of one chunk of 16 columns (nlast valid in its second vector) */
ATTNX_GS_ATTR static void attnx_gs_chunk16(ptrdiff_t m, ptrdiff_t k, const float *a,
        ptrdiff_t ar, ptrdiff_t ak, const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc,
        float alpha, float beta, int nlast)
{
    ptrdiff_t i = 0;
    while (i < m) {
        const ptrdiff_t left = m - i;
        int mr;
        if (left <= 8 && left != 5 && left != 6) {
            mr = left < 4 ? (int) left : 4;
            if (nlast == 8)
                attnx_gs_tile4_full(k, a + i * ar, ar, ak, mr, b, ldb, c + i * ldc, ldc,
                                    alpha, beta, 8);
            else
                attnx_gs_tile4_part(k, a + i * ar, ar, ak, mr, b, ldb, c + i * ldc, ldc,
                                    alpha, beta, nlast);
        } else {
            mr = left < 6 ? (int) left : 6;
            if (nlast == 8)
                attnx_gs_tile6_full(k, a + i * ar, ar, ak, mr, b, ldb, c + i * ldc, ldc,
                                    alpha, beta, 8);
            else
                attnx_gs_tile6_part(k, a + i * ar, ar, ak, mr, b, ldb, c + i * ldc, ldc,
                                    alpha, beta, nlast);
        }
        i += mr;
    }
}

/* C (m, n) = alpha op(A) op(B) + beta C, row-major, op(A) (m, k), op(B) (k, n);
 * ta / tb: the operand is stored transposed. 0 (nothing done) when B^T does not fit
 * the stack buffer; the caller then runs BLAS. */
ATTNX_GS_ATTR static int attnx_sgemm_small_avx2(int ta, int tb, ptrdiff_t m, ptrdiff_t n,
        ptrdiff_t k, float alpha, const float *a, ptrdiff_t lda, const float *b,
        ptrdiff_t ldb, float beta, float *c, ptrdiff_t ldc)
{
    float bt[ATTNX_GS_PACK];
    const ptrdiff_t ar = ta ? 1 : lda, ak = ta ? lda : 1;
    const float *bp = b;
    ptrdiff_t ldp = ldb, j, kk;
    if (tb) {                       /* B^T (k, n) from B (n, k): rows of B in columns */
        if (k * n > ATTNX_GS_PACK)
            return 0;
        for (j = 0; j < n; j++) {
            const float *bj = b + j * ldb;
            for (kk = 0; kk < k; kk++)
                bt[kk * n + j] = bj[kk];
        }
        bp = bt;
        ldp = n;
    }
    for (j = 0; n - j > 8; j += 16)
        attnx_gs_chunk16(m, k, a, ar, ak, bp + j, ldp, c + j, ldc, alpha, beta,
                         n - j >= 16 ? 8 : (int) (n - j - 8));
    if (j < n) {                    /* a last chunk of 1..8 columns */
        const int nlast = (int) (n - j);
        ptrdiff_t i;
        for (i = 0; i < m; i += 8) {
            const int mr = m - i < 8 ? (int) (m - i) : 8;
            if (nlast == 8)
                attnx_gs_tile8_full(k, a + i * ar, ar, ak, mr, bp + j, ldp, c + i * ldc + j,
                                    ldc, alpha, beta, 8);
            else
                attnx_gs_tile8_part(k, a + i * ar, ar, ak, mr, bp + j, ldp, c + i * ldc + j,
                                    ldc, alpha, beta, nlast);
        }
    }
    return 1;
}

/* ---- AVX-512 (level 2): the same loops on 16-float vectors.
 * On a core with two 512-bit FMA units (Intel Xeon, Sapphire Rapids class) OpenBLAS's
 * SkylakeX sgemm packs op(A) for every call: at the attention projections of
 * d_model 64 (4096 x 192 x 64) it ran at 100 GF/s of the core's 170, the copies a
 * fifth of its time. 8 x 2 vectors keep 16 FMA chains in flight (two ports at 4
 * cycles need 8); 8 x 1 takes a last chunk of at most 16 columns. The partial last
 * vector is a masked load and store, so no element past the operands is touched. */
#define ATTNX_GS512_ATTR __attribute__((target("avx512f,avx2,fma")))
#define ATTNX_GS512_PACK 16384
#define ATTNX_GS512_KB 256      /* rows of A and B per block of X^T dY */

#define ATTNX_GS512_TILE(NAME, MR, NV, PART)                                            \
ATTNX_GS512_ATTR static inline void NAME(ptrdiff_t kd, const float *restrict a,         \
        ptrdiff_t ar, ptrdiff_t ak, int mr, const float *restrict b, ptrdiff_t ldb,     \
        float *restrict c, ptrdiff_t ldc, float alpha, float beta, __mmask16 msk)       \
{                                                                                       \
    __m512 acc[MR][NV];                                                                 \
    const float *ap[MR];                                                                \
    int r, u;                                                                           \
    ptrdiff_t k;                                                                        \
    (void) msk;                                                                         \
    ATTNX_GS_UNROLL                                                                     \
    for (r = 0; r < MR; r++) {                                                          \
        ap[r] = a + (r < mr ? r : 0) * ar;                                              \
        ATTNX_GS_UNROLL                                                                 \
        for (u = 0; u < NV; u++)                                                        \
            acc[r][u] = _mm512_setzero_ps();                                            \
    }                                                                                   \
    for (k = 0; k < kd; k++) {                                                          \
        __m512 bv[NV];                                                                  \
        ATTNX_GS_UNROLL                                                                 \
        for (u = 0; u < NV; u++)                                                        \
            bv[u] = (PART && u == NV - 1) ? _mm512_maskz_loadu_ps(msk, b + k * ldb + 16 * u) \
                                          : _mm512_loadu_ps(b + k * ldb + 16 * u);      \
        ATTNX_GS_UNROLL                                                                 \
        for (r = 0; r < MR; r++) {                                                      \
            const __m512 av = _mm512_set1_ps(ap[r][k * ak]);                            \
            ATTNX_GS_UNROLL                                                             \
            for (u = 0; u < NV; u++)                                                    \
                acc[r][u] = _mm512_fmadd_ps(av, bv[u], acc[r][u]);                      \
            if (NV > 1)                                                                 \
                ATTNX_GS_KEEP(av);                                                      \
        }                                                                               \
        ATTNX_GS_UNROLL                                                                 \
        for (u = 0; u < NV; u++)                                                        \
            ATTNX_GS_KEEP(bv[u]);                                                       \
    }                                                                                   \
    const __m512 al = _mm512_set1_ps(alpha), be = _mm512_set1_ps(beta);                 \
    ATTNX_GS_UNROLL                                                                     \
    for (r = 0; r < MR; r++) {                                                          \
        if (r >= mr)                                                                    \
            break;                                                                      \
        ATTNX_GS_UNROLL                                                                 \
        for (u = 0; u < NV; u++) {                                                      \
            float *cr = c + r * ldc + 16 * u;                                           \
            __m512 v = alpha == 1.0f ? acc[r][u] : _mm512_mul_ps(al, acc[r][u]);        \
            if (PART && u == NV - 1) {                                                  \
                if (beta != 0.0f)                                                       \
                    v = _mm512_fmadd_ps(be, _mm512_maskz_loadu_ps(msk, cr), v);         \
                _mm512_mask_storeu_ps(cr, msk, v);                                      \
            } else {                                                                    \
                if (beta != 0.0f)                                                       \
                    v = _mm512_fmadd_ps(be, _mm512_loadu_ps(cr), v);                    \
                _mm512_storeu_ps(cr, v);                                                \
            }                                                                           \
        }                                                                               \
    }                                                                                   \
}

ATTNX_GS512_TILE(attnx_gs512_tile8x2_full, 8, 2, 0)
ATTNX_GS512_TILE(attnx_gs512_tile8x2_part, 8, 2, 1)
ATTNX_GS512_TILE(attnx_gs512_tile8x1_full, 8, 1, 0)
ATTNX_GS512_TILE(attnx_gs512_tile8x1_part, 8, 1, 1)

/* C (m, n) = alpha op(A) op(B) + beta C on the AVX-512 tiles (as attnx_sgemm_small_avx2) */
ATTNX_GS512_ATTR static int attnx_sgemm_small_avx512(int ta, int tb, ptrdiff_t m, ptrdiff_t n,
        ptrdiff_t k, float alpha, const float *a, ptrdiff_t lda, const float *b,
        ptrdiff_t ldb, float beta, float *c, ptrdiff_t ldc)
{
    float bt[ATTNX_GS512_PACK];
    const ptrdiff_t ar = ta ? 1 : lda, ak = ta ? lda : 1;
    const float *bp = b;
    ptrdiff_t ldp = ldb, i, j, kk;
    if (tb) {                       /* B^T (k, n) from B (n, k): rows of B in columns */
        if (k * n > ATTNX_GS512_PACK)
            return 0;
        for (j = 0; j < n; j++) {
            const float *bj = b + j * ldb;
            for (kk = 0; kk < k; kk++)
                bt[kk * n + j] = bj[kk];
        }
        bp = bt;
        ldp = n;
    }
    if (ta && k > ATTNX_GS512_KB) {
        /* X^T dY over many rows: k in blocks, each added onto C, so that a block of
         * the rows of A and B stays in L2 for every row tile (one pass over all k
         * per tile ran at a third of the FMA rate, from L3) */
        ptrdiff_t k0;
        for (k0 = 0; k0 < k; k0 += ATTNX_GS512_KB)
            attnx_sgemm_small_avx512(ta, 0, m, n, k - k0 < ATTNX_GS512_KB ? k - k0
                                     : ATTNX_GS512_KB, alpha, a + k0 * lda, lda,
                                     bp + k0 * ldp, ldp, k0 ? 1.0f : beta, c, ldc);
        return 1;
    }
    for (j = 0; n - j > 16; j += 32) {
        const int nlast = n - j >= 32 ? 16 : (int) (n - j - 16);
        const __mmask16 msk = (__mmask16) ((1u << nlast) - 1u);
        for (i = 0; i < m; i += 8) {
            const int mr = m - i < 8 ? (int) (m - i) : 8;
            if (nlast == 16)
                attnx_gs512_tile8x2_full(k, a + i * ar, ar, ak, mr, bp + j, ldp,
                                         c + i * ldc + j, ldc, alpha, beta, msk);
            else
                attnx_gs512_tile8x2_part(k, a + i * ar, ar, ak, mr, bp + j, ldp,
                                         c + i * ldc + j, ldc, alpha, beta, msk);
        }
    }
    if (j < n) {                    /* a last chunk of 1..16 columns */
        const int nlast = (int) (n - j);
        const __mmask16 msk = (__mmask16) ((1u << nlast) - 1u);
        for (i = 0; i < m; i += 8) {
            const int mr = m - i < 8 ? (int) (m - i) : 8;
            if (nlast == 16)
                attnx_gs512_tile8x1_full(k, a + i * ar, ar, ak, mr, bp + j, ldp,
                                         c + i * ldc + j, ldc, alpha, beta, msk);
            else
                attnx_gs512_tile8x1_part(k, a + i * ar, ar, ak, mr, bp + j, ldp,
                                         c + i * ldc + j, ldc, alpha, beta, msk);
        }
    }
    return 1;
}
#endif  /* ATTNX_HAVE_AVX2_PATH */

/* The small-GEMM path when this module's level is AVX2 and the shape is one it wins
 * on: 1 when C was computed, 0 to run BLAS instead. */
static inline int attnx_sgemm_small(int ta, int tb, ptrdiff_t m, ptrdiff_t n, ptrdiff_t k,
                                    float alpha, const float *a, ptrdiff_t lda,
                                    const float *b, ptrdiff_t ldb, float beta, float *c,
                                    ptrdiff_t ldc)
{
#ifdef ATTNX_HAVE_AVX2_PATH
    const int level = attnx_level();
    if (level == 1 && attnx_gs_wanted(ta, m, n, k))
        return attnx_sgemm_small_avx2(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (level == 2 && attnx_gs512_wanted(ta, tb, m, n, k))
        return attnx_sgemm_small_avx512(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#else
    (void) ta; (void) tb; (void) m; (void) n; (void) k; (void) alpha; (void) a;
    (void) lda; (void) b; (void) ldb; (void) beta; (void) c; (void) ldc;
#endif
    return 0;
}

#endif /* ATTNX_GEMM_SMALL_H */
