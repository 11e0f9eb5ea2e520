/* Fused attention tile kernels for one element type and one instruction-set level.
 *
 * Included several times by attnx_flash.h, once per (type, level), with:
 *   FL_T       float or double
 *   FL_NAME(x) x with the (type, level) suffix appended
 *   FL_ATTR    the function attribute of the level (target("avx2,fma"), ...)
 *   FL_VEC     1: register tiles as GCC/Clang vector types; 0: plain C loops
 *              (the portable path, any C99 compiler)
 *   FL_T2LO, FL_T2HI, FL_POLY2, FL_LOG2E, FL_MAGIC, ...: the exp's constants (attnx_flash.h)
 *
 * Layout conventions. Every "B" operand of the small products is packed into
 * per-thread scratch with rows padded to a multiple of the narrow tile width
 * (FL_NRN elements, 32 bytes) and zero padding, so the tiles never need a
 * column remainder; "A" operands are read one element at a time (broadcast)
 * through a row stride and a k stride, so A may be any strided view (a
 * transposed P or dS block costs nothing). C tiles are padded the same way.
 */

/* ---------------------------------------------------------------- exp */

/* 2^t for the softmax: exp(s - m) is evaluated as 2^t with t = s log2(e) - m log2(e)
 * (one FMA, no separate subtraction), t = n + r with |r| <= 1/2 and 2^r a
 * polynomial. Against exp(s - m) computed as before (subtract, clamp, reduce with
 * ln2 split in two) this drops three operations per element, a fifth of the
 * softmax's vector work. The price is the rounding of t: a relative error of
 * about 2^-24 |s - m| (float32), i.e. an absolute error below 3e-8 on any
 * probability (e^x |x| <= 1/e for x <= 0), as small as the float32 rounding of
 * s - m itself. t below FL_T2LO (exp below ~1e-38 / 1e-308, and -inf) gives
 * exactly 0; NaN gives NaN. */
FL_ATTR static inline FL_T FL_NAME(fl_pow2)(FL_T t)
{
    FL_T tc = t < FL_T2LO ? FL_T2LO : t;
    tc = tc > FL_T2HI ? FL_T2HI : tc;
    tc = (t != t) ? (FL_T) 0 : tc;          /* keep NaN out of the integer part */
    FL_T big = tc + FL_MAGIC;               /* round to nearest, n in the low bits */
    FL_T fn = big - FL_MAGIC;
    FL_T r = tc - fn;                       /* exact */
    FL_T p = FL_POLY2(r);
    FL_UINT bits;
    memcpy(&bits, &big, sizeof bits);
    bits = (bits + FL_BIAS) << FL_MANT;     /* 2^n: the high bits of big shift out */
    FL_T two_n;
    memcpy(&two_n, &bits, sizeof bits);
    FL_T out = p * two_n;
    out = t < FL_T2LO ? (FL_T) 0 : out;
    return (t != t) ? t : out;
}

#if FL_VEC
/* native vectors: 32 bytes (AVX2, and the narrow tile), FL_VWBYTES for the wide tile */
typedef FL_T FL_NAME(v32) __attribute__((vector_size(32), aligned(sizeof(FL_T)), may_alias));
typedef FL_T FL_NAME(vwide) __attribute__((vector_size(FL_VWBYTES), aligned(sizeof(FL_T)),
                                           may_alias));
#if defined(ATTNX_FL_X86)
/* fl_pow2 on a 32-byte vector (AVX2, and the narrow vector of the AVX-512 build),
 * for the kernels' t = (s - m) log2 e <= 0 (m the row's max or log-sum-exp) only:
 * no clamps. Below FL_T2LO (-inf included) the integer part is garbage and one
 * and-not zeroes the lane; NaN fails that compare and reaches the result through
 * r and the polynomial; the upper clamp was for t > 0, which never comes. The
 * exponent bias rides in the rounding constant (FL_MAGIC + FL_BIAS: the low bits
 * of big are n + bias, so 2^n is big's bits shifted). float32: 12 operations per
 * vector where the clamped form took 15; exp_array at level 1 (AVX2, this build)
 * 0.326 -> 0.282 ns per float32 element. VT: __m256 or __m256d, S: ps or pd,
 * CVT/SHIFT: the integer view and shift on lanes of that width. */
#define FL_VPOW2_AVX2(VT, S, CVT, SHIFT)                                              \
FL_ATTR static inline FL_NAME(v32) FL_NAME(fl_vpow2)(FL_NAME(v32) tv)                   \
{                                                                                     \
    const VT t = (VT) tv;                                                             \
    const VT below = _mm256_cmp_##S(t, _mm256_set1_##S(FL_T2LO), _CMP_LT_OQ);          \
    const VT magic = _mm256_set1_##S(FL_MAGIC + FL_BIAS);                             \
    const VT big = _mm256_add_##S(t, magic);                                          \
    const VT r = _mm256_sub_##S(t, _mm256_sub_##S(big, magic));                       \
    const VT p = FL_POLY2(r);                                                         \
    const __m256i bits = SHIFT(CVT(big), FL_MANT);                                    \
    const VT out = _mm256_mul_##S(p, _mm256_castsi256_##S(bits));                     \
    return (FL_NAME(v32)) _mm256_andnot_##S(below, out);                              \
}
#if FL_NRN == 8
FL_VPOW2_AVX2(__m256, ps, _mm256_castps_si256, _mm256_slli_epi32)
#else
FL_VPOW2_AVX2(__m256d, pd, _mm256_castpd_si256, _mm256_slli_epi64)
#endif
#undef FL_VPOW2_AVX2
#else
#error "the vector builds of the fused kernels are x86 only (FL_VEC needs ATTNX_FL_X86)"
#endif
#if FL_SCALEF_PS || FL_SCALEF_PD
/* AVX-512, the wide vector: vrndscale for the rounding and vscalef for p * 2^n
 * (one instruction each in place of the magic-number round and the integer
 * exponent build) and a zeroing mask for t below FL_T2LO (no lower clamp needed:
 * those lanes are discarded). No upper clamp either: vscalef overflows to inf by
 * itself, and the kernels' t = (s - m) log2 e is <= 0 (m is the row's max or
 * log-sum-exp); NaN passes through every step. Same results as fl_vpow2 for
 * t <= FL_T2HI. Instantiated for float32 only (VT __m512, MT __mmask16, S ps):
 * float64 uses the table version below. */
#define FL_VPOW2W_AVX512(VT, MT, S)                                                   \
FL_ATTR static inline FL_NAME(vwide) FL_NAME(fl_vpow2w)(FL_NAME(vwide) tw)            \
{                                                                                     \
    const VT t = (VT) tw;                                                             \
    const MT keep = _mm512_cmp_##S##_mask(t, _mm512_set1_##S(FL_T2LO), _CMP_NLT_UQ);   \
    const VT fn = _mm512_roundscale_##S(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); \
    const VT r = _mm512_sub_##S(t, fn);                                               \
    const VT p = FL_POLY2(r);                                                         \
    return (FL_NAME(vwide)) _mm512_maskz_scalef_##S(keep, p, fn);                     \
}
#if FL_SCALEF_PS
FL_VPOW2W_AVX512(__m512, __mmask16, ps)
#else
/* float64: t = n + j/16 + r with |r| <= 1/32, 2^(j/16) from a 16-entry table held in
 * two registers (one vpermt2pd), 2^r a degree-6 polynomial (FL_POLY16M1) in place of
 * FL_POLY2's degree 11: 13 vector operations per vector where the degree-12 Taylor
 * series took 17; exp_array 0.74 -> 0.58 ns per element, and the exp was about a
 * fifth of a float64 training step at d_head 8 (8.4 M of them). vrndscale rounds to a
 * multiple of 1/16 and vscalef takes floor(fn) as the power of two, so the table
 * index is 16 fn mod 16, read from the low bits of 16 fn + FL_MAGIC (its two's
 * complement for negative fn: -2.375 = -3 + 10/16). t = 0 gives exactly 1 (table
 * entry and polynomial both 1). */
FL_ATTR static inline FL_NAME(vwide) FL_NAME(fl_vpow2w)(FL_NAME(vwide) tw)
{
    const __m512d t = (__m512d) tw;
    const __m512d tab_lo = (__m512d) {FL_TAB16_LO}, tab_hi = (__m512d) {FL_TAB16_HI};
    const __mmask8 keep = _mm512_cmp_pd_mask(t, _mm512_set1_pd(FL_T2LO), _CMP_NLT_UQ);
    const __m512d fn = _mm512_roundscale_pd(t, (4 << 4) | _MM_FROUND_TO_NEAREST_INT
                                               | _MM_FROUND_NO_EXC);
    const __m512d r = _mm512_sub_pd(t, fn);
    const __m512d big = _mm512_fmadd_pd(fn, _mm512_set1_pd(16.0), _mm512_set1_pd(FL_MAGIC));
    const __m512d tab = _mm512_permutex2var_pd(tab_lo, _mm512_castpd_si512(big), tab_hi);
    /* 2^(j/16) 2^r as T + T (2^r - 1): the polynomial's rounding stays in the small
     * term, so the result is within about one ulp */
    const __m512d q = FL_POLY16M1(r);
    return (FL_NAME(vwide)) _mm512_maskz_scalef_pd(keep, _mm512_fmadd_pd(tab, q, tab), fn);
}
#endif
#undef FL_VPOW2W_AVX512
#else  /* AVX2: the wide vector is the 32-byte one */
FL_ATTR static inline FL_NAME(vwide) FL_NAME(fl_vpow2w)(FL_NAME(vwide) t)
{
    return (FL_NAME(vwide)) FL_NAME(fl_vpow2)((FL_NAME(v32)) t);
}
#endif

typedef FL_T FL_NAME(v16) __attribute__((vector_size(16)));

/* sum of the lanes by folding halves (a few shuffles, not one extract per lane) */
FL_ATTR static inline FL_T FL_NAME(fl_hsum32)(FL_NAME(v32) v)
{
    FL_NAME(v16) lo, hi;
    memcpy(&lo, &v, 16);
    memcpy(&hi, (char *) &v + 16, 16);
    lo += hi;
    FL_T out = 0;
    for (int u = 0; u < (int) (16 / sizeof(FL_T)); u++)
        out += lo[u];
    return out;
}

FL_ATTR static inline FL_T FL_NAME(fl_hsumw)(FL_NAME(vwide) v)
{
#if FL_SCALEF_PS
    /* the memcpy halves below made GCC keep fl_expsum's running sum on the stack
     * (a store and reload in its loop-carried chain, the hottest spot of the
     * float32 AVX-512 forward) */
    return _mm512_reduce_add_ps((__m512) v);
#elif FL_SCALEF_PD
    return _mm512_reduce_add_pd((__m512d) v);
#endif
    FL_NAME(v32) lo, hi;
    if (sizeof(v) == 32) {
        memcpy(&lo, &v, 32);
        return FL_NAME(fl_hsum32)(lo);
    }
    memcpy(&lo, &v, 32);
    memcpy(&hi, (char *) &v + 32, 32);
    return FL_NAME(fl_hsum32)(lo + hi);
}
#endif

/* max over s[0:n] and m. A NaN may or may not win the max (vectorised max
 * instructions differ); either way it reaches the row's sum through exp, which
 * propagates it. The one place it could vanish is a row whose max is -inf (every
 * other key masked): fl_hasnan checks that case only. */
FL_ATTR static inline FL_T FL_NAME(fl_rowmax)(const FL_T *s, int n, FL_T m)
{
    int j;
    FL_SIMD_RED(max, m)
    for (j = 0; j < n; j++)
        m = s[j] > m ? s[j] : m;
    return m;
}

FL_ATTR static inline int FL_NAME(fl_hasnan)(const FL_T *s, int n)
{
    int j, nan = 0;
    for (j = 0; j < n; j++)
        nan |= (s[j] != s[j]);
    return nan;
}

/* s[j] = 2^(s[j] c - mt) in place, returns the sum (exp and sum in one pass).
 * With c = log2 e and mt = m log2 e this is exp(s[j] - m) (see fl_pow2); the
 * kernels pass c = scale log2 e for unscaled scores Q K^T, so the softmax's
 * scale costs nothing (it rides on the FMA that forms t) and the score tiles
 * store their accumulators as they are. */
FL_ATTR static inline FL_T FL_NAME(fl_expsum)(FL_T *s, int n, FL_T c, FL_T mt)
{
    int j = 0;
    FL_T sum = 0;
#if FL_VEC
    typedef FL_NAME(v32) V;
    typedef FL_NAME(vwide) W;
    const int vl = (int) (sizeof(V) / sizeof(FL_T)), wl = (int) (sizeof(W) / sizeof(FL_T));
    if (wl > vl) {
        W accw = (W) {0};
        for (; j + wl <= n; j += wl) {
            W e = FL_NAME(fl_vpow2w)(*(W *) (s + j) * c - mt);
            *(W *) (s + j) = e;
            accw += e;
        }
        sum += FL_NAME(fl_hsumw)(accw);
    }
    if (j + vl <= n) {              /* (no lane reduction of an empty accumulator) */
        V acc = (V) {0};
        for (; j + vl <= n; j += vl) {
            V e = FL_NAME(fl_vpow2)(*(V *) (s + j) * c - mt);
            *(V *) (s + j) = e;
            acc += e;
        }
        sum += FL_NAME(fl_hsum32)(acc);
    }
#endif
    for (; j < n; j++) {
        FL_T e = FL_NAME(fl_pow2)(s[j] * c - mt);
        s[j] = e;
        sum += e;
    }
    return sum;
}

/* s[j] = 2^(s[j] c - mt) in place (as fl_expsum, without the sum). */
FL_ATTR static inline void FL_NAME(fl_expsub)(FL_T *s, int n, FL_T c, FL_T mt)
{
    int j = 0;
#if FL_VEC
    typedef FL_NAME(v32) V;
    typedef FL_NAME(vwide) W;
    const int vl = (int) (sizeof(V) / sizeof(FL_T)), wl = (int) (sizeof(W) / sizeof(FL_T));
    if (wl > vl)
        for (; j + wl <= n; j += wl)
            *(W *) (s + j) = FL_NAME(fl_vpow2w)(*(W *) (s + j) * c - mt);
    for (; j + vl <= n; j += vl)
        *(V *) (s + j) = FL_NAME(fl_vpow2)(*(V *) (s + j) * c - mt);
#endif
    for (; j < n; j++)
        s[j] = FL_NAME(fl_pow2)(s[j] * c - mt);
}

/* ---------------------------------------------------------------- tiles */

#define FL_UNROLL _Pragma("GCC unroll 16")
/* An empty asm that takes x in a vector register: x counts as live after its last
 * FMA. Without it GCC turns the last FMA of each k step into the form that writes
 * its dying operand (vfmadd132ps: the B vector or the broadcast), so the
 * accumulator changes register each step and 2-4 vector copies per step follow,
 * on the FMA ports (p0/p5 for 512-bit) in llvm-mca's Intel models: see
 * benchmarks/mca.py. No instruction is emitted and no operation changes. */
#define FL_KEEP(x) __asm__("" : : "v"(x))

/* C[0:mr, 0:NV*len(VT)] (=|+=) alpha * A[0:mr, 0:kd] B[0:kd, :] for one register
 * tile of MR rows by NV vectors. A(r, k) = a[r*ar + k*ak]; B rows contiguous
 * (ldb); mr <= MR rows are valid (the missing rows re-read row 0, not stored).
 *
 * Tile shapes (attnx_flash.h): each of the MR x NV accumulators is one FMA chain
 * per k step, and two FMA ports at 4 cycles' latency need at least 2 x 4 = 8
 * independent chains to stay busy. AVX-512: 8 x 2 (wide, 16 chains), 16 x 1
 * (tall, 16), 8 x 1 (narrow 32-byte, 8); AVX2: 6 x 2 (12, float32), 4 x 2 (8:
 * float64, and float32's last rows), 8 x 1 (8). llvm-mca finds none of these loops
 * latency-bound (benchmarks/README.md), so the tiles stay this size.
 * Per k step the wide AVX-512 tile issues 16 FMAs, 2 loads of B and 8 broadcasts
 * of A (loads, 2-3 a cycle): FMA-bound, 8 cycles on two ports. */
#define FL_TILE(NAME, MR, NV, VT)                                                     \
FL_ATTR static inline void FL_NAME(NAME)(int kd, const FL_T *restrict a, ptrdiff_t ar,  \
        ptrdiff_t ak, int mr, const FL_T *restrict b, ptrdiff_t ldb,                  \
        FL_T *restrict c, ptrdiff_t ldc, FL_T alpha, int accumulate)                  \
{                                                                                     \
    const int vl = (int) (sizeof(VT) / sizeof(FL_T));                                 \
    VT acc[MR][NV];                                                                   \
    const FL_T *ap[MR];                                                               \
    int r, k, u;                                                                      \
    FL_UNROLL                                                                         \
    for (r = 0; r < MR; r++) {                                                        \
        ap[r] = a + (r < mr ? r : 0) * ar;                                            \
        FL_UNROLL                                                                     \
        for (u = 0; u < NV; u++)                                                      \
            acc[r][u] = (VT) {0};                                                     \
    }                                                                                 \
    for (k = 0; k < kd; k++) {                                                        \
        VT bv[NV];                                                                    \
        FL_UNROLL                                                                     \
        for (u = 0; u < NV; u++)                                                      \
            bv[u] = *(const VT *) (b + k * ldb + u * vl);                             \
        FL_UNROLL                                                                     \
        for (r = 0; r < MR; r++) {                                                    \
            const VT av = ap[r][k * ak] - (VT) {0};   /* broadcast (x - 0 is x) */    \
            FL_UNROLL                                                                 \
            for (u = 0; u < NV; u++)                                                  \
                acc[r][u] += av * bv[u];                                              \
            if (NV > 1)     /* (one vector: the broadcast rides in the FMA) */        \
                FL_KEEP(av);                                                          \
        }                                                                             \
        FL_UNROLL                                                                     \
        for (u = 0; u < NV; u++)                                                      \
            FL_KEEP(bv[u]);                                                           \
    }                                                                                 \
    FL_UNROLL                                                                         \
    for (r = 0; r < MR; r++) {                                                        \
        if (r < mr) {                                                                 \
            FL_UNROLL                                                                 \
            for (u = 0; u < NV; u++) {                                                \
                VT *cr = (VT *) (c + r * ldc + u * vl);                               \
                *cr = accumulate ? *cr + alpha * acc[r][u] : alpha * acc[r][u];       \
            }                                                                         \
        }                                                                             \
    }                                                                                 \
}

#if FL_VEC
FL_TILE(fl_tile_w, FL_MRW, FL_NRW * (int) sizeof(FL_T) / FL_VWBYTES, FL_NAME(vwide))
FL_TILE(fl_tile_n, FL_MRN, 1, FL_NAME(v32))
#if FL_MRW == 6
/* AVX2 float32: 6-row wide tiles leave a remainder at the row counts the kernels
 * use (32 = 5 x 6 + 2, 16, 8): a full 6-row tile over 2 rows wasted a ninth of
 * every product at d_head 32 and a third of the d_head x keys ones at d_head 8.
 * The last up-to-8 rows go through 4-row tiles instead (8 accumulators, enough to
 * cover the FMA latency): 32 = 4 x 6 + 2 x 4. */
#define FL_MRW4 4
FL_TILE(fl_tile_w4, FL_MRW4, FL_NRW * (int) sizeof(FL_T) / FL_VWBYTES, FL_NAME(vwide))
#endif
#if FL_VWBYTES > 32
/* one wide vector of columns (16 floats / 8 doubles on AVX-512), more rows: the
 * P V and dS K products at d_head 16 (float32) or 8 (float64), which two narrow
 * 32-byte tiles ran at half the vector width (a quarter of the forward's time
 * at B4 T1024 d128 H8) */
#define FL_NRM (FL_VWBYTES / (int) sizeof(FL_T))
FL_TILE(fl_tile_m, FL_MRM, 1, FL_NAME(vwide))
/* The same tile for a full FL_MRM rows: rows r and r + FL_MRM/2 share one row pointer
 * (the second at a fixed offset). With 16 pointers GCC ran out of general registers
 * and kept 6 of them in vector registers, moved back every k step (vmovq on the FMA
 * ports: llvm-mca 11.2 cycles a step for the 8 of the FMA bound). Each accumulator
 * still sums its k terms in order: the same bits as fl_tile_m. */
FL_ATTR static inline void FL_NAME(fl_tile_mf)(int kd, const FL_T *restrict a, ptrdiff_t ar,
        ptrdiff_t ak, const FL_T *restrict b, ptrdiff_t ldb, FL_T *restrict c,
        ptrdiff_t ldc, FL_T alpha, int accumulate)
{
    typedef FL_NAME(vwide) VT;
    enum { H = FL_MRM / 2 };
    VT acc[FL_MRM];
    const FL_T *ap[H];
    const ptrdiff_t off = H * ar;
    int r, k;
    FL_UNROLL
    for (r = 0; r < H; r++)
        ap[r] = a + r * ar;
    FL_UNROLL
    for (r = 0; r < FL_MRM; r++)
        acc[r] = (VT) {0};
    for (k = 0; k < kd; k++) {
        const VT bv = *(const VT *) (b + k * ldb);
        FL_UNROLL
        for (r = 0; r < H; r++) {
            acc[r] += (ap[r][k * ak] - (VT) {0}) * bv;
            acc[r + H] += (ap[r][k * ak + off] - (VT) {0}) * bv;
        }
        FL_KEEP(bv);
    }
    FL_UNROLL
    for (r = 0; r < FL_MRM; r++) {
        VT *cr = (VT *) (c + r * ldc);
        *cr = accumulate ? *cr + alpha * acc[r] : alpha * acc[r];
    }
}
#endif
#else
/* Portable: the same tiles as plain arrays (the compiler may vectorise them). */
#define FL_TILE_C(NAME, MR, NR)                                                       \
static inline void FL_NAME(NAME)(int kd, const FL_T *restrict a, ptrdiff_t ar,          \
        ptrdiff_t ak, int mr, const FL_T *restrict b, ptrdiff_t ldb,                  \
        FL_T *restrict c, ptrdiff_t ldc, FL_T alpha, int accumulate)                  \
{                                                                                     \
    FL_T acc[MR][NR];                                                                 \
    ptrdiff_t ro[MR];                                                                 \
    int r, k, n;                                                                      \
    for (r = 0; r < MR; r++) {                                                        \
        ro[r] = (r < mr ? r : 0) * ar;                                                \
        for (n = 0; n < NR; n++) acc[r][n] = 0;                                       \
    }                                                                                 \
    for (k = 0; k < kd; k++) {                                                        \
        const FL_T *bk = b + k * ldb;                                                 \
        const FL_T *ak_ = a + k * ak;                                                 \
        for (r = 0; r < MR; r++) {                                                    \
            FL_T av = ak_[ro[r]];                                                     \
            for (n = 0; n < NR; n++) acc[r][n] += av * bk[n];                         \
        }                                                                             \
    }                                                                                 \
    for (r = 0; r < mr; r++)                                                          \
        for (n = 0; n < NR; n++)                                                      \
            c[r * ldc + n] = accumulate ? c[r * ldc + n] + alpha * acc[r][n]          \
                                        : alpha * acc[r][n];                          \
}
FL_TILE_C(fl_tile_w, FL_MRW, FL_NRW)
FL_TILE_C(fl_tile_n, FL_MRN, FL_NRN)
#endif

/* C (m, n) (=|+=) alpha * A (m, kd) B (kd, n), n a multiple of FL_NRN, B and C
 * padded accordingly. Wide tiles over column chunks of FL_NRW, one narrow
 * tile for a remaining FL_NRN chunk; row blocks of the tile heights. */
FL_ATTR static void FL_NAME(fl_gemm)(int m, int n, int kd, const FL_T *a, ptrdiff_t ar,
                                     ptrdiff_t ak, const FL_T *b, ptrdiff_t ldb,
                                     FL_T *c, ptrdiff_t ldc, FL_T alpha, int accumulate)
{
    int i, j;
    for (j = 0; j + FL_NRW <= n; j += FL_NRW)
        for (i = 0; i < m;) {
            const int left = m - i;
#ifdef FL_MRW4
            if (left <= 8 && left != 5 && left != 6) {
                const int mr = left < FL_MRW4 ? left : FL_MRW4;
                FL_NAME(fl_tile_w4)(kd, a + i * ar, ar, ak, mr, b + j, ldb, c + i * ldc + j,
                                    ldc, alpha, accumulate);
                i += mr;
                continue;
            }
#endif
            const int mr = left < FL_MRW ? left : FL_MRW;
            FL_NAME(fl_tile_w)(kd, a + i * ar, ar, ak, mr, b + j, ldb, c + i * ldc + j, ldc,
                               alpha, accumulate);
            i += mr;
        }
#ifdef FL_NRM
    for (; j + FL_NRM <= n; j += FL_NRM)
        for (i = 0; i < m; i += FL_MRM)
            if (m - i >= FL_MRM)
                FL_NAME(fl_tile_mf)(kd, a + i * ar, ar, ak, b + j, ldb, c + i * ldc + j, ldc,
                                    alpha, accumulate);
            else
            FL_NAME(fl_tile_m)(kd, a + i * ar, ar, ak, m - i < FL_MRM ? m - i : FL_MRM,
                               b + j, ldb, c + i * ldc + j, ldc, alpha, accumulate);
#endif
    for (; j < n; j += FL_NRN)
        for (i = 0; i < m; i += FL_MRN)
            FL_NAME(fl_tile_n)(kd, a + i * ar, ar, ak, m - i < FL_MRN ? m - i : FL_MRN,
                               b + j, ldb, c + i * ldc + j, ldc, alpha, accumulate);
}

#if FL_PAIR
/* Key pairs for d_head <= 8 in a 16-lane float vector (AVX-512): a (keys, 8)
 * operand B is packed so that row kk holds keys 2kk and 2kk+1 interleaved,
 * [B(2kk,0), B(2kk+1,0), B(2kk,1), B(2kk+1,1), ...], and A's two elements
 * (r, 2kk), (r, 2kk+1) are broadcast together as one 64-bit pair. Each FMA then
 * does two keys' worth of work on all 16 lanes instead of one key on 8 lanes;
 * the even and odd lanes are added at the end. A's rows must be contiguous in
 * k (ak = 1) and kd even (the caller pads A and B with zeros). */
typedef uint64_t FL_NAME(vu64) __attribute__((vector_size(64)));
typedef int32_t FL_NAME(vi32) __attribute__((vector_size(64)));

FL_ATTR static inline void FL_NAME(fl_tile_pair)(int kd, const FL_T *restrict a, ptrdiff_t ar,
        int mr, const FL_T *restrict bp, FL_T *restrict c, ptrdiff_t ldc, FL_T alpha,
        int accumulate)
{
    typedef FL_NAME(vwide) W;
    W acc[FL_MRN];
    const FL_T *ap[FL_MRN];
    int r, k;
    FL_UNROLL
    for (r = 0; r < FL_MRN; r++) {
        ap[r] = a + (r < mr ? r : 0) * ar;
        acc[r] = (W) {0};
    }
    for (k = 0; k < kd; k += 2) {
        W bv = *(const W *) (bp + (ptrdiff_t) k * 8);
        FL_UNROLL
        for (r = 0; r < FL_MRN; r++) {
            uint64_t pr;
            memcpy(&pr, ap[r] + k, sizeof pr);
            const W pv = (W) ((FL_NAME(vu64)) {0} + pr);
            acc[r] += pv * bv;
            FL_KEEP(pv);            /* no register copies: see FL_TILE */
        }
        FL_KEEP(bv);
    }
    const FL_NAME(vi32) even = {0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14};
    const FL_NAME(vi32) odd = {1, 3, 5, 7, 9, 11, 13, 15, 1, 3, 5, 7, 9, 11, 13, 15};
    FL_UNROLL
    for (r = 0; r < FL_MRN; r++) {
        if (r < mr) {
            W sum = __builtin_shuffle(acc[r], even) + __builtin_shuffle(acc[r], odd);
            FL_NAME(v32) lo, *cr = (FL_NAME(v32) *) (c + r * ldc);
            memcpy(&lo, &sum, sizeof lo);
            *cr = accumulate ? *cr + alpha * lo : alpha * lo;
        }
    }
}

/* C (m, 8) (=|+=) alpha * A (m, kd) B with B packed in key pairs (fl_pack_pairs). */
FL_ATTR static void FL_NAME(fl_gemm_pair)(int m, int kd, const FL_T *a, ptrdiff_t ar,
                                          const FL_T *bp, FL_T *c, ptrdiff_t ldc, FL_T alpha,
                                          int accumulate)
{
    int i;
    kd += kd & 1;
    for (i = 0; i < m; i += FL_MRN)
        FL_NAME(fl_tile_pair)(kd, a + i * ar, ar, m - i < FL_MRN ? m - i : FL_MRN, bp,
                              c + i * ldc, ldc, alpha, accumulate);
}

/* out[(k/2)*16 + 2c + (k&1)] = x[k, c] for k < rows, c < cols <= 8; zero elsewhere
 * up to an even number of rows. */
FL_ATTR static void FL_NAME(fl_pack_pairs)(const FL_T *x, ptrdiff_t ldx, int rows, int cols,
                                           FL_T *out)
{
    int k = 0, c;
    int rows2 = rows + (rows & 1);
    if (cols == 8) {
        /* two rows of 8 into one 16-lane vector, interleaved by one permute (the
         * scalar loop below cost ~1000 cycles a head, about 1% of a seed step) */
        typedef FL_NAME(vwide) W;
        const __m512i mix = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19,
                                              4, 20, 5, 21, 6, 22, 7, 23);
        for (; k + 2 <= rows; k += 2) {
            const __m512 a = _mm512_castps256_ps512(
                _mm256_loadu_ps(x + (ptrdiff_t) k * ldx));
            const __m512 b = _mm512_castps256_ps512(
                _mm256_loadu_ps(x + (ptrdiff_t) (k + 1) * ldx));
            *(W *) (out + (ptrdiff_t) (k >> 1) * 16) = (W) _mm512_permutex2var_ps(a, mix, b);
        }
    }
    memset(out + (ptrdiff_t) (k >> 1) * 16, 0, sizeof(FL_T) * (ptrdiff_t) (rows2 - k) * 8);
    for (; k < rows; k++)
        for (c = 0; c < cols; c++)
            out[(ptrdiff_t) (k >> 1) * 16 + 2 * c + (k & 1)] = x[(ptrdiff_t) k * ldx + c];
}
#endif

/* ---------------------------------------------------------------- packing */

/* dst[j, i] = src[i, j] for i < rows, j < cols (row strides lds, ldd). The
 * vector builds move whole 32-byte square blocks (8 floats / 4 doubles per side)
 * through registers, transposed in log2(side) interleaving steps; the edges go
 * one element at a time. The backward transposes K, V in and dK, dV out for every
 * head: one element at a time this was a tenth of its time at d_head 8. */
FL_ATTR static void FL_NAME(fl_transpose)(const FL_T *restrict src, ptrdiff_t lds, int rows,
                                          int cols, FL_T *restrict dst, ptrdiff_t ldd)
{
    int i = 0, j = 0;
#if FL_VEC
    typedef FL_NAME(v32) V;
    enum { VL = 32 / sizeof(FL_T) };
#if FL_NRN == 8
    typedef int32_t M __attribute__((vector_size(32)));
    static const M lo[3] = {{0, 8, 2, 10, 4, 12, 6, 14}, {0, 1, 8, 9, 4, 5, 12, 13},
                            {0, 1, 2, 3, 8, 9, 10, 11}};
    static const M hi[3] = {{1, 9, 3, 11, 5, 13, 7, 15}, {2, 3, 10, 11, 6, 7, 14, 15},
                            {4, 5, 6, 7, 12, 13, 14, 15}};
#else
    typedef int64_t M __attribute__((vector_size(32)));
    static const M lo[2] = {{0, 4, 2, 6}, {0, 1, 4, 5}};
    static const M hi[2] = {{1, 5, 3, 7}, {2, 3, 6, 7}};
#endif
#if FL_NRN == 8
    /* float32: the first of the three interleaving steps rides on the loads (each
     * register takes 4 floats of row u and 4 of row u + 4, one load and one 128-bit
     * insert from memory), the other two are in-lane shuffles: 16 shuffles per 8 x 8
     * block where the three full steps took 24 (and 8 two-source permutes of those
     * on the one shuffle port, p5, of the Intel cores); addresses as pointers, not
     * an int multiply per row */
    (void) lo;
    (void) hi;
    for (i = 0; i + VL <= rows; i += VL) {
        const FL_T *restrict s0 = src + (ptrdiff_t) i * lds;
        for (j = 0; j + VL <= cols; j += VL) {
            __m256 t[8];
            int u, h;
            FL_UNROLL
            for (u = 0; u < 4; u++) {
                const FL_T *r0 = s0 + (ptrdiff_t) u * lds + j, *r4 = r0 + 4 * lds;
                t[u] = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(r0)),
                                            _mm_loadu_ps(r4), 1);
                t[u + 4] = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(r0 + 4)),
                                                _mm_loadu_ps(r4 + 4), 1);
            }
            FL_T *restrict d0 = dst + (ptrdiff_t) j * ldd + i;
            FL_UNROLL
            for (h = 0; h < 2; h++) {
                const __m256 l01 = _mm256_unpacklo_ps(t[4 * h], t[4 * h + 1]);
                const __m256 h01 = _mm256_unpackhi_ps(t[4 * h], t[4 * h + 1]);
                const __m256 l23 = _mm256_unpacklo_ps(t[4 * h + 2], t[4 * h + 3]);
                const __m256 h23 = _mm256_unpackhi_ps(t[4 * h + 2], t[4 * h + 3]);
                FL_T *dh = d0 + (ptrdiff_t) (4 * h) * ldd;
                _mm256_storeu_ps(dh, _mm256_shuffle_ps(l01, l23, 0x44));
                _mm256_storeu_ps(dh + ldd, _mm256_shuffle_ps(l01, l23, 0xEE));
                _mm256_storeu_ps(dh + 2 * ldd, _mm256_shuffle_ps(h01, h23, 0x44));
                _mm256_storeu_ps(dh + 3 * ldd, _mm256_shuffle_ps(h01, h23, 0xEE));
            }
        }
        for (int jj = j; jj < cols; jj++)
            for (int u = 0; u < VL; u++)
                dst[(ptrdiff_t) jj * ldd + i + u] = src[(ptrdiff_t) (i + u) * lds + jj];
    }
#else
    for (i = 0; i + VL <= rows; i += VL) {
        for (j = 0; j + VL <= cols; j += VL) {
            V v[VL], w[VL];
            int u, st, b;
            FL_UNROLL
            for (u = 0; u < VL; u++)
                v[u] = *(const V *) (src + (ptrdiff_t) (i + u) * lds + j);
            /* step st pairs rows u and u + b (b = 2^st): lanes in groups of 2b take
             * their first b from row u and their last b from row u + b */
            FL_UNROLL
            for (st = 0, b = 1; b < VL; st++, b *= 2) {
                FL_UNROLL
                for (u = 0; u < VL; u++) {
                    if (u & b)
                        continue;
                    w[u] = __builtin_shuffle(v[u], v[u + b], lo[st]);
                    w[u + b] = __builtin_shuffle(v[u], v[u + b], hi[st]);
                }
                FL_UNROLL
                for (u = 0; u < VL; u++)
                    v[u] = w[u];
            }
            FL_UNROLL
            for (u = 0; u < VL; u++)
                *(V *) (dst + (ptrdiff_t) (j + u) * ldd + i) = v[u];
        }
        for (int jj = j; jj < cols; jj++)
            for (int u = 0; u < VL; u++)
                dst[(ptrdiff_t) jj * ldd + i + u] = src[(ptrdiff_t) (i + u) * lds + jj];
    }
#endif
#endif
    for (; i < rows; i++)
        for (j = 0; j < cols; j++)
            dst[(ptrdiff_t) j * ldd + i] = src[(ptrdiff_t) i * lds + j];
}

/* out (cols, ldo) = x[0:rows, 0:cols]^T, columns rows..ldo zeroed. */
FL_ATTR static void FL_NAME(fl_pack_t)(const FL_T *x, ptrdiff_t ldx, int rows, int cols,
                                       FL_T *out, ptrdiff_t ldo)
{
    int r, c;
    FL_NAME(fl_transpose)(x, ldx, rows, cols, out, ldo);
    for (c = 0; c < cols; c++)
        for (r = rows; r < ldo; r++)
            out[c * ldo + r] = 0;
}

/* out (rows, ldo) = x[0:rows, 0:cols], columns cols..ldo zeroed. */
FL_ATTR static void FL_NAME(fl_pack)(const FL_T *x, ptrdiff_t ldx, int rows, int cols,
                                     FL_T *out, ptrdiff_t ldo)
{
    int r, c;
    for (r = 0; r < rows; r++) {
        FL_T *o = out + r * ldo;
        const FL_T *xr = x + r * ldx;
        for (c = 0; c < cols; c++)
            o[c] = xr[c];
        for (; c < ldo; c++)
            o[c] = 0;
    }
}

/* -inf where key j0+j is padding (km[j0+j] != 0) or, causal, after query i0+r. */
FL_ATTR static void FL_NAME(fl_mask)(FL_T *s, ptrdiff_t lds, int rows, int cols, int i0,
                                     int j0, int causal, const uint8_t *km)
{
    int r, j;
    for (r = 0; r < rows; r++) {
        FL_T *sr = s + r * lds;
        if (causal) {
            int nv = i0 + r + 1 - j0;
            for (j = nv > 0 ? nv : 0; j < cols; j++)
                sr[j] = -INFINITY;
        }
        if (km != NULL)
            for (j = 0; j < cols; j++)
                if (km[j0 + j])
                    sr[j] = -INFINITY;
    }
}

/* -inf in the padding columns [cols, ncols) of each row, so that exp makes them 0
 * and the row operations can run over whole vectors. */
FL_ATTR static inline void FL_NAME(fl_pad_inf)(FL_T *s, ptrdiff_t lds, int rows, int cols,
                                               int ncols)
{
    int r, j;
    if (cols == ncols)
        return;
    for (r = 0; r < rows; r++)
        for (j = cols; j < ncols; j++)
            s[r * lds + j] = -INFINITY;
}

/* The unscaled scores of one (query block, key block): s = Q[0:bq] K^T[:, 0:nk]
 * (the scale is applied inside the exp, see fl_expsum), -inf at masked keys
 * (causal after query qi+r, or padding) and in the padding columns [bk, nk).
 * The forward and the backward (which recomputes P) share it, so both see the
 * same scores. */
FL_ATTR static inline void FL_NAME(fl_scores)(int bq, int bk, int nk, int dh, const FL_T *qb,
                                              ptrdiff_t ldq, const FL_T *ktb, ptrdiff_t ldt,
                                              FL_T *s, ptrdiff_t lds, int qi, int j0,
                                              int causal, const uint8_t *km)
{
    FL_NAME(fl_gemm)(bq, nk, dh, qb, ldq, 1, ktb, ldt, s, lds, 1, 0);
    if (causal || km != NULL)
        FL_NAME(fl_mask)(s, lds, bq, bk, qi, j0, causal, km);
    FL_NAME(fl_pad_inf)(s, lds, bq, bk, nk);
}

/* ---------------------------------------------------------------- forward */

/* Query rows [i0, i0+nq) of one (sample, head) against every allowed key: K^T
 * and V packed once, then query blocks of ATTNX_FL_BQ rows, each streaming key
 * blocks of ATTNX_FL_BK with an online softmax (running max, running sum and
 * an accumulator rescaled when the max grows).
 *   q: row i0 of the head (ldq); k, v: row 0 of the head (ldkv); z: row i0 (ldz)
 *   lse: nq per-row log-sum-exp (-inf for a row with no allowed key), or NULL
 *        when no backward follows (inference: one log per row saved)
 *   km: the sample's key padding mask (nonzero = ignored) or NULL
 *   ws: attnx_flash_fwd_scratch(tk, dh) elements of scratch
 * A row with no allowed key gets Z = 0; a NaN score makes its row NaN. */
FL_ATTR static void FL_NAME(fl_forward_rows)(
        const FL_T *q, ptrdiff_t ldq, const FL_T *k, const FL_T *v, ptrdiff_t ldkv,
        FL_T *z, ptrdiff_t ldz, FL_T *lse, int i0, int nq, int tk, int dh, FL_T scale,
        int causal, const uint8_t *km, FL_T *ws)
{
    const int dhp = ATTNX_FL_PAD(dh, FL_NRN);
    const int bkp = ATTNX_FL_BK;
    const int kall = causal ? (i0 + nq < tk ? i0 + nq : tk) : tk;   /* keys any row sees */
    const int tkp = ATTNX_FL_PAD(kall > 0 ? kall : 1, FL_NRN);
    const int ldt = ATTNX_FL_LDT(tkp, FL_NRN);      /* row stride of K^T */
    FL_T *s = ws;                                   /* (BQ, BK) scores, then P */
    FL_T *acc = s + ATTNX_FL_BQ * bkp;              /* (QG*BQ, dhp) unnormalised Z */
    FL_T *mrow = acc + ATTNX_FL_QG * ATTNX_FL_BQ * dhp;  /* (QG*BQ) running max (unscaled) */
    FL_T *lrow = mrow + ATTNX_FL_QG * ATTNX_FL_BQ;       /* (QG*BQ) running sum */
    FL_T *kt = lrow + ATTNX_FL_QG * ATTNX_FL_BQ;         /* (dh, ldt) K^T */
    FL_T *vp = kt + (ptrdiff_t) dh * ldt;           /* (tkp, dhp) V, when padding is needed */
    const FL_T *vb = v;                             /* V as the B operand of P V */
    ptrdiff_t ldv = ldkv;
    int r, c, j0, bk, nk, ib, bq, jend, ig, g, ng, jmax;
    FL_T mxa[ATTNX_FL_BQ], al[ATTNX_FL_BQ];         /* per row of a block: max, factor */
    const FL_T c2 = scale * FL_LOG2E;               /* exp(scale x) = 2^(c2 x) */

    FL_NAME(fl_pack_t)(k, ldkv, kall, dh, kt, ldt);
#if FL_PAIR
    const int pair = dhp == 8;
    if (pair)
        FL_NAME(fl_pack_pairs)(v, ldkv, kall, dh, vp);
    else
#endif
    if (dh != dhp) {                    /* else V's rows are whole vectors already */
        FL_NAME(fl_pack)(v, ldkv, kall, dh, vp, dhp);
        vb = vp;
        ldv = dhp;
    }
    /* Groups of QG query blocks share each sweep over the key blocks: a block of
     * K^T and V is read once per group, not once per query block (the packed K^T
     * and V of a long sequence, 2 MB each at 16384 keys, do not stay in L2). Each
     * query block still sees its key blocks in the same order, so the results do
     * not depend on the grouping. */
    for (ig = 0; ig < nq; ig += ATTNX_FL_QG * ATTNX_FL_BQ) {
        ng = (nq - ig + ATTNX_FL_BQ - 1) / ATTNX_FL_BQ;
        ng = ng < ATTNX_FL_QG ? ng : ATTNX_FL_QG;
        jmax = 0;
        for (g = 0; g < ng; g++) {
            ib = ig + g * ATTNX_FL_BQ;
            bq = nq - ib < ATTNX_FL_BQ ? nq - ib : ATTNX_FL_BQ;
            jend = causal ? (i0 + ib + bq < tk ? i0 + ib + bq : tk) : tk;
            jmax = jend > jmax ? jend : jmax;
            for (r = 0; r < bq; r++) {
                mrow[g * ATTNX_FL_BQ + r] = -INFINITY;
                lrow[g * ATTNX_FL_BQ + r] = 0;
            }
        }
        memset(acc, 0, sizeof(FL_T) * ng * ATTNX_FL_BQ * dhp);
        for (j0 = 0; j0 < jmax; j0 += ATTNX_FL_BK)
            for (g = 0; g < ng; g++) {
                ib = ig + g * ATTNX_FL_BQ;
                const int qi = i0 + ib;             /* first query row of the block */
                const FL_T *qb = q + (ptrdiff_t) ib * ldq;
                FL_T *accg = acc + (ptrdiff_t) g * ATTNX_FL_BQ * dhp;
                FL_T *mg = mrow + g * ATTNX_FL_BQ, *lg = lrow + g * ATTNX_FL_BQ;
                bq = nq - ib < ATTNX_FL_BQ ? nq - ib : ATTNX_FL_BQ;
                jend = causal ? (qi + bq < tk ? qi + bq : tk) : tk;
                if (j0 >= jend)
                    continue;
                bk = jend - j0 < ATTNX_FL_BK ? jend - j0 : ATTNX_FL_BK;
                nk = ATTNX_FL_PAD(bk, FL_NRN);
                /* S = Q K^T for the block, unscaled (maxima and mrow too) */
                FL_NAME(fl_scores)(bq, bk, nk, dh, qb, ldq, kt + j0, ldt, s, bkp, qi, j0,
                                   causal, km);
                /* each row's new max, then every row's rescale factor exp(mold - max)
                 * in one vector pass (a scalar exp per row cost as much as a tenth
                 * of the block's softmax at 4 key blocks per row), then exp and sum */
                for (r = 0; r < bq; r++) {
                    FL_T *sr = s + r * bkp;
                    FL_T mold = mg[r];
                    FL_T mx = FL_NAME(fl_rowmax)(sr, nk, mold);
                    if (mx == -INFINITY && FL_NAME(fl_hasnan)(sr, nk))
                        mx = (FL_T) NAN;            /* a NaN score among masked keys */
                    mxa[r] = mx;
                    /* (no rescale at a row's first block with a key: factor unused) */
                    al[r] = (mold == -INFINITY || mx == -INFINITY) ? (FL_T) 0 : mold - mx;
                }
                FL_NAME(fl_expsub)(al, bq, c2, 0);
                for (r = 0; r < bq; r++) {
                    FL_T *sr = s + r * bkp;
                    FL_T mold = mg[r], mx = mxa[r];
                    if (mx == -INFINITY) {          /* every key so far is masked */
                        memset(sr, 0, sizeof(FL_T) * nk);
                        continue;
                    }
                    FL_T sum = FL_NAME(fl_expsum)(sr, nk, c2, mx * c2);
                    mg[r] = mx;
                    if (mold == -INFINITY) {
                        /* the row's first block with a key (the only one when Tk <= BK):
                         * nothing to rescale, acc holds only products with zero weights
                         * (which rescaling by exp(-inf) = 0 would leave as they are) */
                        lg[r] = sum;
                        continue;
                    }
                    /* the factor's rounding (t = (mold - mx) scale log2 e) scales acc and the
                     * sum alike, so it cancels in Z = acc / sum */
                    FL_T alpha = al[r];
                    lg[r] = lg[r] * alpha + sum;
                    if (alpha != 1) {
                        FL_T *ar = accg + r * dhp;
                        for (c = 0; c < dhp; c++)
                            ar[c] *= alpha;
                    }
                }
                /* acc += P V */
#if FL_PAIR
                if (pair)
                    FL_NAME(fl_gemm_pair)(bq, bk, s, bkp, vp + (ptrdiff_t) j0 * 8, accg, dhp, 1, 1);
                else
#endif
                FL_NAME(fl_gemm)(bq, dhp, bk, s, bkp, 1, vb + (ptrdiff_t) j0 * ldv, ldv, accg,
                                 dhp, 1, 1);
            }
        for (r = 0; r < nq - ig && r < ATTNX_FL_QG * ATTNX_FL_BQ; r++) {
            FL_T l = lrow[r];
            FL_T *restrict zr = z + (ptrdiff_t) (ig + r) * ldz;
            const FL_T *restrict ar = acc + r * dhp;
            if (l > 0 || l != l) {
                FL_T inv = 1 / l;
                FL_SIMD
                for (c = 0; c < dh; c++)
                    zr[c] = ar[c] * inv;
                if (lse != NULL)
                    lse[ig + r] = mrow[r] * scale + (FL_T) log(l);
            } else {
                for (c = 0; c < dh; c++)
                    zr[c] = 0;
                if (lse != NULL)
                    lse[ig + r] = -INFINITY;
            }
        }
    }
}

/* ---------------------------------------------------------------- backward */

/* dQ, dK, dV of one (sample, head) from dZ, for the keys [ka, kb) only, with P
 * recomputed block by block from the forward's per-row log-sum-exp:
 *   D = rowsum(dZ * Z); per (query block, key block):
 *   P = exp(scale Q K^T - lse), dV += P^T dZ, dS = P * (dZ V^T - D),
 *   dQ += scale dS K, dK += scale dS^T Q (dK and dV kept transposed while they accumulate).
 * dK and dV rows [ka, kb) are complete on return; dq (leading dimension lddq)
 * receives these keys' share of dQ for every query row (0 where a row sees none
 * of them), so a head split into key ranges sums its shares afterwards. ka must
 * be a multiple of ATTNX_FL_BK (the same key blocks as an unsplit head).
 * Pointers as in the forward (all at row 0 of the head); dk/dv share ldkv, z/dz
 * share ldz. ws: attnx_flash_bwd_scratch(tk, dh) elements. */
FL_ATTR static void FL_NAME(fl_backward_head)(
        const FL_T *q, ptrdiff_t ldq, const FL_T *k, const FL_T *v, ptrdiff_t ldkv,
        const FL_T *z, const FL_T *dz, ptrdiff_t ldz, const FL_T *lse,
        FL_T *dq, ptrdiff_t lddq, FL_T *dk, FL_T *dv, int tq, int tk, int ka, int kb,
        int dh, FL_T scale, int causal, const uint8_t *km, FL_T *ws)
{
    const int nkr = kb - ka;                         /* keys of this range */
    const int dhp = ATTNX_FL_PAD(dh, FL_NRN);
    const int tkp = ATTNX_FL_PAD(nkr > 0 ? nkr : 1, FL_NRN);
    const int ldt = ATTNX_FL_LDT(tkp, FL_NRN);       /* row stride of the transposes */
    const int bkp = ATTNX_FL_BK;
    FL_T *p = ws;                                    /* (BQ, BK) P */
    FL_T *dp = p + ATTNX_FL_BQ * bkp;                /* (BQ, BK) dP, then dS */
    FL_T *dqa = dp + ATTNX_FL_BQ * bkp;              /* (QG*BQ, dhp) dQ of the group */
    FL_T *dvec = dqa + ATTNX_FL_QG * ATTNX_FL_BQ * dhp;  /* (QG*BQ) D */
    FL_T *kt = dvec + ATTNX_FL_QG * ATTNX_FL_BQ;     /* (dh, ldt) K^T of the range */
    FL_T *vt = kt + (ptrdiff_t) dh * ldt;            /* (dh, ldt) V^T */
    FL_T *dkt = vt + (ptrdiff_t) dh * ldt;           /* (dh, ldt) dK^T */
    FL_T *dvt = dkt + (ptrdiff_t) dh * ldt;          /* (dh, ldt) dV^T */
    FL_T *kp = dvt + (ptrdiff_t) dh * ldt;           /* (tkp, dhp) K, when padding is needed */
    const FL_T *kb_ = k + (ptrdiff_t) ka * ldkv;     /* K as the B operand of dS K */
    ptrdiff_t ldkb = ldkv;
    int i0, bq, j0, bk, nk, jend, r, c, ig, g, ng, jmax;
    const FL_T c2 = scale * FL_LOG2E;                /* exp(scale x) = 2^(c2 x) */

    (void) tk;
    if (nkr <= 0)
        return;
    FL_NAME(fl_pack_t)(k + (ptrdiff_t) ka * ldkv, ldkv, nkr, dh, kt, ldt);
    FL_NAME(fl_pack_t)(v + (ptrdiff_t) ka * ldkv, ldkv, nkr, dh, vt, ldt);
#if FL_PAIR
    const int pair = dhp == 8;
    if (pair)
        FL_NAME(fl_pack_pairs)(k + (ptrdiff_t) ka * ldkv, ldkv, nkr, dh, kp);
    else
#endif
    if (dh != dhp) {
        FL_NAME(fl_pack)(k + (ptrdiff_t) ka * ldkv, ldkv, nkr, dh, kp, dhp);
        kb_ = kp;
        ldkb = dhp;
    }
    memset(dkt, 0, sizeof(FL_T) * dh * ldt);
    memset(dvt, 0, sizeof(FL_T) * dh * ldt);
    /* groups of QG query blocks per sweep over the key blocks, as in the forward
     * (each key block's dK and dV still receive the query blocks in order) */
    for (ig = 0; ig < tq; ig += ATTNX_FL_QG * ATTNX_FL_BQ) {
        ng = (tq - ig + ATTNX_FL_BQ - 1) / ATTNX_FL_BQ;
        ng = ng < ATTNX_FL_QG ? ng : ATTNX_FL_QG;
        jmax = ka;
        for (g = 0; g < ng; g++) {
            i0 = ig + g * ATTNX_FL_BQ;
            bq = tq - i0 < ATTNX_FL_BQ ? tq - i0 : ATTNX_FL_BQ;
            jend = causal ? (i0 + bq < kb ? i0 + bq : kb) : kb;
            jmax = jend > jmax ? jend : jmax;
            if (jend > ka)
                for (r = 0; r < bq; r++) {
                    FL_T dd = 0;
                    const FL_T *zr = z + (ptrdiff_t) (i0 + r) * ldz;
                    const FL_T *dzr = dz + (ptrdiff_t) (i0 + r) * ldz;
                    /* a tree sum (in order it was a chain of d_head dependent adds,
                     * a tenth of this function's samples at d_head 8) */
                    FL_SIMD_RED(+, dd)
                    for (c = 0; c < dh; c++)
                        dd += dzr[c] * zr[c];
                    dvec[g * ATTNX_FL_BQ + r] = dd;
                }
        }
        memset(dqa, 0, sizeof(FL_T) * ng * ATTNX_FL_BQ * dhp);
        for (j0 = ka; j0 < jmax; j0 += ATTNX_FL_BK)
            for (g = 0; g < ng; g++) {
                const int jr = j0 - ka;              /* column in the packed range */
                i0 = ig + g * ATTNX_FL_BQ;
                bq = tq - i0 < ATTNX_FL_BQ ? tq - i0 : ATTNX_FL_BQ;
                jend = causal ? (i0 + bq < kb ? i0 + bq : kb) : kb;
                if (j0 >= jend)
                    continue;
                /* Q and dZ are only ever broadcast from (A operands): read in place */
                const FL_T *qb = q + (ptrdiff_t) i0 * ldq;
                const FL_T *dzb = dz + (ptrdiff_t) i0 * ldz;
                const FL_T *dg = dvec + g * ATTNX_FL_BQ;
                FL_T *dqg = dqa + (ptrdiff_t) g * ATTNX_FL_BQ * dhp;
                bk = jend - j0 < ATTNX_FL_BK ? jend - j0 : ATTNX_FL_BK;
                nk = ATTNX_FL_PAD(bk, FL_NRN);
                /* P = exp(scale Q K^T - lse) */
                FL_NAME(fl_scores)(bq, bk, nk, dh, qb, ldq, kt + jr, ldt, p, bkp, i0, j0,
                                   causal, km);
                for (r = 0; r < bq; r++) {
                    FL_T L = lse[i0 + r];
                    if (L == -INFINITY)
                        memset(p + r * bkp, 0, sizeof(FL_T) * nk);
                    else
                        FL_NAME(fl_expsub)(p + r * bkp, nk, c2, L * FL_LOG2E);
                }
                /* dV^T[:, j0:] += dZ^T P: keys along the vector lanes, as in S (a small
                 * d_head would leave most lanes of a (keys, d_head) tile empty) */
                FL_NAME(fl_gemm)(dh, nk, bq, dzb, 1, ldz, p, bkp, dvt + jr, ldt, 1, 1);
                /* dP = dZ V^T */
                FL_NAME(fl_gemm)(bq, nk, dh, dzb, ldz, 1, vt + jr, ldt, dp, bkp, 1, 0);
                for (r = 0; r < bq; r++) {
                    FL_T dd = dg[r];
                    FL_T *pr = p + r * bkp;
                    FL_T *dr = dp + r * bkp;
                    FL_SIMD
                    for (c = 0; c < nk; c++)
                        dr[c] = pr[c] * (dr[c] - dd);
                }
                /* dQ += scale dS K ; dK[j0:] += scale dS^T Q */
#if FL_PAIR
                if (pair)
                    FL_NAME(fl_gemm_pair)(bq, bk, dp, bkp, kp + (ptrdiff_t) jr * 8, dqg, dhp,
                                          scale, 1);
                else
#endif
                FL_NAME(fl_gemm)(bq, dhp, bk, dp, bkp, 1, kb_ + (ptrdiff_t) jr * ldkb, ldkb, dqg,
                                 dhp, scale, 1);
                FL_NAME(fl_gemm)(dh, nk, bq, qb, 1, ldq, dp, bkp, dkt + jr, ldt, scale, 1);
            }
        for (r = 0; r < tq - ig && r < ATTNX_FL_QG * ATTNX_FL_BQ; r++) {
            FL_T *restrict dqr = dq + (ptrdiff_t) (ig + r) * lddq;
            const FL_T *restrict dar = dqa + r * dhp;
            FL_SIMD
            for (c = 0; c < dh; c++)
                dqr[c] = dar[c];
        }
    }
    /* (causal keys past the last query never get a gradient: their rows stay 0) */
    FL_NAME(fl_transpose)(dkt, ldt, dh, nkr, dk + (ptrdiff_t) ka * ldkv, ldkv);
    FL_NAME(fl_transpose)(dvt, ldt, dh, nkr, dv + (ptrdiff_t) ka * ldkv, ldkv);
}

#ifdef FL_NRM
#undef FL_NRM
#endif
#ifdef FL_MRW4
#undef FL_MRW4
#endif
