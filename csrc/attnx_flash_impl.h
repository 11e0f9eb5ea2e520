/* Fused attention tile kernels for one element type and one instruction-set level.
 *
 * Included several times by attnx_flash.h, once per (type, level), with:
 *   FL_T       float or double
 *   FL_NAME(x) x with the (type, level) suffix appended
 *   FL_ATTR    the function attribute of the level (target("avx2,fma"), ...)
 *   FL_VEC     1: register tiles as GCC/Clang vector types; 0: plain C loops
 *              (the portable path, any C99 compiler)
 *   FL_MAXARG  -> FL_EXPLO/FL_EXPHI etc. (set by attnx_flash.h per type)
 *
 * Layout conventions. Every "B" operand of the small products is packed into
 * per-thread scratch with rows padded to a multiple of the narrow tile width
 * (FL_NRN elements, 32 bytes) and zero padding, so the tiles never need a
 * column remainder; "A" operands are read one element at a time (broadcast)
 * through a row stride and a k stride, so A may be any strided view (a
 * transposed P or dS block costs nothing). C tiles are padded the same way.
 */

/* ---------------------------------------------------------------- exp */

/* exp(x) as a polynomial after range reduction x = n ln2 + r, |r| <= ln2/2,
 * written branch-free so the loops around it vectorise. NaN in gives NaN out;
 * x below FL_EXPLO (-inf, a masked score) gives exactly 0. */
FL_ATTR static inline FL_T FL_NAME(fl_exp)(FL_T x)
{
    FL_T xc = x < FL_EXPLO ? FL_EXPLO : x;
    xc = xc > FL_EXPHI ? FL_EXPHI : xc;
    xc = (x != x) ? (FL_T) 0 : xc;          /* keep NaN out of the integer part */
    FL_T t = xc * (FL_T) 1.44269504088896340735992468100189214;   /* x / ln2 */
    FL_T big = t + FL_MAGIC;                /* round to nearest, n in the low bits */
    FL_T fn = big - FL_MAGIC;
    FL_T r = xc - fn * FL_LN2HI;
    r = r - fn * FL_LN2LO;
    FL_T p = FL_POLY(r);
    FL_UINT bits;
    memcpy(&bits, &big, sizeof bits);
    bits = (bits + FL_BIAS) << FL_MANT;     /* 2^n: the high bits of big shift out */
    FL_T two_n;
    memcpy(&two_n, &bits, sizeof bits);
    FL_T out = p * two_n;
    out = x < FL_EXPLO ? (FL_T) 0 : out;
    return (x != x) ? x : out;
}

/* max over s[0:n], NaN-propagating (a NaN score must poison its row, not vanish). */
FL_ATTR static inline FL_T FL_NAME(fl_rowmax)(const FL_T *s, int n, FL_T m)
{
    int j;
    int nan = 0;
    FL_SIMD_RED(max, m)
    for (j = 0; j < n; j++)
        m = s[j] > m ? s[j] : m;
    FL_SIMD_RED(|, nan)
    for (j = 0; j < n; j++)
        nan |= (s[j] != s[j]);
    return nan ? (FL_T) NAN : m;
}

/* s[j] = exp(s[j] - m) in place, returns the sum (exp and sum in one pass). */
FL_ATTR static inline FL_T FL_NAME(fl_expsum)(FL_T *s, int n, FL_T m)
{
    int j;
    FL_T sum = 0;
    FL_SIMD_RED(+, sum)
    for (j = 0; j < n; j++) {
        FL_T e = FL_NAME(fl_exp)(s[j] - m);
        s[j] = e;
        sum += e;
    }
    return sum;
}

/* s[j] = exp(s[j] - m) in place. */
FL_ATTR static inline void FL_NAME(fl_expsub)(FL_T *s, int n, FL_T m)
{
    int j;
    FL_SIMD
    for (j = 0; j < n; j++)
        s[j] = FL_NAME(fl_exp)(s[j] - m);
}

/* ---------------------------------------------------------------- tiles */

#if FL_VEC
typedef FL_T FL_NAME(vw) __attribute__((vector_size(64), aligned(sizeof(FL_T)), may_alias));
typedef FL_T FL_NAME(vn) __attribute__((vector_size(32), aligned(sizeof(FL_T)), may_alias));
#define FL_VW FL_NAME(vw)
#define FL_VN FL_NAME(vn)
#endif

/* C[0:mr, 0:NR] (=|+=) alpha * A[0:mr, 0:kd] B[0:kd, 0:NR] for one register tile.
 * A(r, k) = a[r*ar + k*ak]; B rows contiguous (ldb); mr <= MR rows are valid
 * (the missing rows re-read row 0 and are not stored). */
#define FL_TILE(NAME, MR, NR, VT)                                                     \
FL_ATTR static inline void FL_NAME(NAME)(int kd, const FL_T *restrict a, ptrdiff_t ar,  \
        ptrdiff_t ak, int mr, const FL_T *restrict b, ptrdiff_t ldb,                  \
        FL_T *restrict c, ptrdiff_t ldc, FL_T alpha, int accumulate)                  \
{                                                                                     \
    VT acc[MR];                                                                       \
    ptrdiff_t ro[MR];                                                                 \
    int r, k;                                                                         \
    for (r = 0; r < MR; r++) {                                                        \
        ro[r] = (r < mr ? r : 0) * ar;                                                \
        acc[r] = (VT) {0};                                                            \
    }                                                                                 \
    for (k = 0; k < kd; k++) {                                                        \
        VT bv = *(const VT *) (b + k * ldb);                                          \
        const FL_T *ak_ = a + k * ak;                                                 \
        for (r = 0; r < MR; r++)                                                      \
            acc[r] += ak_[ro[r]] * bv;                                                \
    }                                                                                 \
    for (r = 0; r < mr; r++) {                                                        \
        VT *cr = (VT *) (c + r * ldc);                                                \
        *cr = accumulate ? *cr + alpha * acc[r] : alpha * acc[r];                     \
    }                                                                                 \
}

#if FL_VEC
FL_TILE(fl_tile_w, FL_MRW, FL_NRW, FL_VW)
FL_TILE(fl_tile_n, FL_MRN, FL_NRN, FL_VN)
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
        for (i = 0; i < m; i += FL_MRW)
            FL_NAME(fl_tile_w)(kd, a + i * ar, ar, ak, m - i < FL_MRW ? m - i : FL_MRW,
                               b + j, ldb, c + i * ldc + j, ldc, alpha, accumulate);
    for (; j < n; j += FL_NRN)
        for (i = 0; i < m; i += FL_MRN)
            FL_NAME(fl_tile_n)(kd, a + i * ar, ar, ak, m - i < FL_MRN ? m - i : FL_MRN,
                               b + j, ldb, c + i * ldc + j, ldc, alpha, accumulate);
}

/* ---------------------------------------------------------------- packing */

/* out (cols, ldo) = x[0:rows, 0:cols]^T, columns rows..ldo zeroed. */
FL_ATTR static void FL_NAME(fl_pack_t)(const FL_T *x, ptrdiff_t ldx, int rows, int cols,
                                       FL_T *out, ptrdiff_t ldo)
{
    int r, c;
    for (c = 0; c < cols; c++) {
        FL_T *o = out + c * ldo;
        for (r = 0; r < rows; r++)
            o[r] = x[r * ldx + c];
        for (; r < ldo; r++)
            o[r] = 0;
    }
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

/* ---------------------------------------------------------------- forward */

/* One query block of one (sample, head): rows [i0, i0+bq) of Q against every
 * allowed key, streaming key blocks of ATTNX_FL_BK with an online softmax.
 *   q: row i0 of the head (ldq); k, v: row 0 of the head (ldkv); z: row i0 (ldz)
 *   lse: bq per-row log-sum-exp (-inf for a row with no allowed key), or NULL
 *   km: the sample's key padding mask (nonzero = ignored) or NULL
 *   ws: attnx_flash_fwd_scratch(dh) elements of scratch
 * A row with no allowed key gets Z = 0. */
FL_ATTR static void FL_NAME(fl_forward_block)(
        const FL_T *q, ptrdiff_t ldq, const FL_T *k, const FL_T *v, ptrdiff_t ldkv,
        FL_T *z, ptrdiff_t ldz, FL_T *lse, int i0, int bq, int tk, int dh, FL_T scale,
        int causal, const uint8_t *km, FL_T *ws)
{
    const int dhp = ATTNX_FL_PAD(dh, FL_NRN);
    const int bkp = ATTNX_FL_BK;
    FL_T *s = ws;                                   /* (BQ, BK) scores, then P */
    FL_T *kt = s + ATTNX_FL_BQ * bkp;               /* (dh, BK) K^T of the key block */
    FL_T *vp = kt + (ptrdiff_t) dh * bkp;           /* (BK, dhp) V of the key block */
    FL_T *acc = vp + (ptrdiff_t) bkp * dhp;         /* (BQ, dhp) unnormalised Z */
    FL_T *mrow = acc + ATTNX_FL_BQ * dhp;           /* running max */
    FL_T *lrow = mrow + ATTNX_FL_BQ;                /* running sum */
    int r, c, j0, bk, nk;
    int jend = causal ? (i0 + bq < tk ? i0 + bq : tk) : tk;

    for (r = 0; r < bq; r++) {
        mrow[r] = -INFINITY;
        lrow[r] = 0;
    }
    memset(acc, 0, sizeof(FL_T) * bq * dhp);
    for (j0 = 0; j0 < jend; j0 += bk) {
        bk = jend - j0 < ATTNX_FL_BK ? jend - j0 : ATTNX_FL_BK;
        nk = ATTNX_FL_PAD(bk, FL_NRN);
        FL_NAME(fl_pack_t)(k + j0 * ldkv, ldkv, bk, dh, kt, nk);
        FL_NAME(fl_pack)(v + j0 * ldkv, ldkv, bk, dh, vp, dhp);
        /* S = scale Q K^T for the block */
        FL_NAME(fl_gemm)(bq, nk, dh, q, ldq, 1, kt, nk, s, bkp, scale, 0);
        if (causal || km != NULL)
            FL_NAME(fl_mask)(s, bkp, bq, bk, i0, j0, causal, km);
        for (r = 0; r < bq; r++) {
            FL_T *sr = s + r * bkp;
            FL_T mold = mrow[r];
            FL_T mx = FL_NAME(fl_rowmax)(sr, bk, mold);
            if (mx == -INFINITY) {                  /* every key so far is masked */
                memset(sr, 0, sizeof(FL_T) * bk);
                continue;
            }
            FL_T alpha = FL_NAME(fl_exp)(mold - mx);
            FL_T sum = FL_NAME(fl_expsum)(sr, bk, mx);
            lrow[r] = lrow[r] * alpha + sum;
            mrow[r] = mx;
            if (alpha != 1) {
                FL_T *ar = acc + r * dhp;
                for (c = 0; c < dhp; c++)
                    ar[c] *= alpha;
            }
        }
        /* acc += P V */
        FL_NAME(fl_gemm)(bq, dhp, bk, s, bkp, 1, vp, dhp, acc, dhp, 1, 1);
    }
    for (r = 0; r < bq; r++) {
        FL_T l = lrow[r];
        FL_T *zr = z + r * ldz;
        if (l > 0 || l != l) {
            FL_T inv = 1 / l;
            for (c = 0; c < dh; c++)
                zr[c] = acc[r * dhp + c] * inv;
            if (lse != NULL)
                lse[r] = mrow[r] + (FL_T) log(l);
        } else {
            for (c = 0; c < dh; c++)
                zr[c] = 0;
            if (lse != NULL)
                lse[r] = -INFINITY;
        }
    }
}

/* ---------------------------------------------------------------- backward */

/* dQ, dK, dV of one (sample, head) from dZ, with P recomputed block by block
 * from the forward's per-row log-sum-exp:
 *   D = rowsum(dZ * Z); per (query block, key block):
 *   P = exp(scale Q K^T - lse), dV += P^T dZ, dS = P * (dZ V^T - D),
 *   dQ += scale dS K, dK += scale dS^T Q.
 * Pointers as in the forward (all at row 0 of the head); dq shares ldq, dk/dv
 * share ldkv, z/dz share ldz. ws: attnx_flash_bwd_scratch(tk, dh) elements. */
FL_ATTR static void FL_NAME(fl_backward_head)(
        const FL_T *q, ptrdiff_t ldq, const FL_T *k, const FL_T *v, ptrdiff_t ldkv,
        const FL_T *z, const FL_T *dz, ptrdiff_t ldz, const FL_T *lse,
        FL_T *dq, FL_T *dk, FL_T *dv, int tq, int tk, int dh, FL_T scale, int causal,
        const uint8_t *km, FL_T *ws)
{
    const int dhp = ATTNX_FL_PAD(dh, FL_NRN);
    const int tkp = ATTNX_FL_PAD(tk, FL_NRN);
    const int bkp = ATTNX_FL_BK;
    FL_T *p = ws;                                    /* (BQ, BK) P */
    FL_T *dp = p + ATTNX_FL_BQ * bkp;                /* (BQ, BK) dP, then dS */
    FL_T *qp = dp + ATTNX_FL_BQ * bkp;               /* (BQ, dhp) Q block */
    FL_T *dzp = qp + ATTNX_FL_BQ * dhp;              /* (BQ, dhp) dZ block */
    FL_T *dqa = dzp + ATTNX_FL_BQ * dhp;             /* (BQ, dhp) dQ block */
    FL_T *dvec = dqa + ATTNX_FL_BQ * dhp;            /* (BQ) D */
    FL_T *kt = dvec + ATTNX_FL_BQ;                   /* (dh, tkp) K^T */
    FL_T *vt = kt + (ptrdiff_t) dh * tkp;            /* (dh, tkp) V^T */
    FL_T *kp = vt + (ptrdiff_t) dh * tkp;            /* (tk, dhp) K */
    FL_T *dka = kp + (ptrdiff_t) tk * dhp;           /* (tk, dhp) dK */
    FL_T *dva = dka + (ptrdiff_t) tk * dhp;          /* (tk, dhp) dV */
    int i0, bq, j0, bk, nk, jend, r, c, kmax;

    FL_NAME(fl_pack_t)(k, ldkv, tk, dh, kt, tkp);
    FL_NAME(fl_pack_t)(v, ldkv, tk, dh, vt, tkp);
    FL_NAME(fl_pack)(k, ldkv, tk, dh, kp, dhp);
    memset(dka, 0, sizeof(FL_T) * tk * dhp);
    memset(dva, 0, sizeof(FL_T) * tk * dhp);
    for (i0 = 0; i0 < tq; i0 += bq) {
        bq = tq - i0 < ATTNX_FL_BQ ? tq - i0 : ATTNX_FL_BQ;
        FL_NAME(fl_pack)(q + i0 * ldq, ldq, bq, dh, qp, dhp);
        FL_NAME(fl_pack)(dz + i0 * ldz, ldz, bq, dh, dzp, dhp);
        memset(dqa, 0, sizeof(FL_T) * bq * dhp);
        for (r = 0; r < bq; r++) {
            FL_T dd = 0;
            const FL_T *zr = z + (i0 + r) * ldz;
            for (c = 0; c < dh; c++)
                dd += dzp[r * dhp + c] * zr[c];
            dvec[r] = dd;
        }
        jend = causal ? (i0 + bq < tk ? i0 + bq : tk) : tk;
        for (j0 = 0; j0 < jend; j0 += bk) {
            bk = jend - j0 < ATTNX_FL_BK ? jend - j0 : ATTNX_FL_BK;
            nk = ATTNX_FL_PAD(bk, FL_NRN);
            FL_NAME(fl_gemm)(bq, nk, dh, qp, dhp, 1, kt + j0, tkp, p, bkp, scale, 0);
            if (causal || km != NULL)
                FL_NAME(fl_mask)(p, bkp, bq, bk, i0, j0, causal, km);
            for (r = 0; r < bq; r++) {
                FL_T L = lse[i0 + r];
                if (L == -INFINITY)
                    memset(p + r * bkp, 0, sizeof(FL_T) * bk);
                else
                    FL_NAME(fl_expsub)(p + r * bkp, bk, L);
            }
            /* dV[j0:] += P^T dZ : A = P^T, read with row stride 1 and k stride bkp */
            FL_NAME(fl_gemm)(bk, dhp, bq, p, 1, bkp, dzp, dhp, dva + j0 * dhp, dhp, 1, 1);
            /* dP = dZ V^T */
            FL_NAME(fl_gemm)(bq, nk, dh, dzp, dhp, 1, vt + j0, tkp, dp, bkp, 1, 0);
            for (r = 0; r < bq; r++) {
                FL_T dd = dvec[r];
                FL_T *pr = p + r * bkp;
                FL_T *dr = dp + r * bkp;
                FL_SIMD
                for (c = 0; c < bk; c++)
                    dr[c] = pr[c] * (dr[c] - dd);
            }
            /* dQ += scale dS K ; dK[j0:] += scale dS^T Q */
            FL_NAME(fl_gemm)(bq, dhp, bk, dp, bkp, 1, kp + j0 * dhp, dhp, dqa, dhp, scale, 1);
            FL_NAME(fl_gemm)(bk, dhp, bq, dp, 1, bkp, qp, dhp, dka + j0 * dhp, dhp, scale, 1);
        }
        for (r = 0; r < bq; r++)
            for (c = 0; c < dh; c++)
                dq[(i0 + r) * ldq + c] = dqa[r * dhp + c];
    }
    /* causal keys past the last query never get a gradient: their rows stay 0 */
    kmax = tk;
    for (r = 0; r < kmax; r++)
        for (c = 0; c < dh; c++) {
            dk[r * ldkv + c] = dka[r * dhp + c];
            dv[r * ldkv + c] = dva[r * dhp + c];
        }
}

#undef FL_VW
#undef FL_VN
