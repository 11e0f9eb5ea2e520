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
#endif  /* ATTNX_HAVE_AVX2_PATH */

/* The small-GEMM path when this module's level is AVX2 and the shape is one it wins
 * on: 1 when C was computed, 0 to run BLAS instead. */
static inline int attnx_sgemm_small(int ta, int tb, ptrdiff_t m, ptrdiff_t n, ptrdiff_t k,
                                    float alpha, const float *a, ptrdiff_t lda,
                                    const float *b, ptrdiff_t ldb, float beta, float *c,
                                    ptrdiff_t ldc)
{
#ifdef ATTNX_HAVE_AVX2_PATH
    if (attnx_gs_wanted(ta, m, n, k) && attnx_level() == 1)
        return attnx_sgemm_small_avx2(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#else
    (void) ta; (void) tb; (void) m; (void) n; (void) k; (void) alpha; (void) a;
    (void) lda; (void) b; (void) ldb; (void) beta; (void) c; (void) ldc;
#endif
    return 0;
}

#endif /* ATTNX_GEMM_SMALL_H */
