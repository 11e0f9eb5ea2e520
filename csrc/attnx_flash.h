/* Fused ("flash") attention for small heads: scores, online softmax and the
 * products with V (and the backward's dP, dS, dQ, dK, dV) one tile at a time,
 * without the (Tq, Tk) score block ever leaving a per-thread L1-sized scratch.
 *
 * Why: at d_head = 8..32 a per-head BLAS call multiplies with an inner
 * dimension of 8..32, where OpenBLAS spends most of its time packing and the
 * score block makes a round trip to memory between the two GEMMs and the
 * softmax. Here each product is a register-tiled loop over a block small
 * enough for L1, and the softmax (scale, max, exp, sum) runs on the block
 * while it is there.
 *
 * Three builds of the same code (attnx_flash_impl.h): portable C loops
 * (level 0), AVX2+FMA (level 1) and AVX-512F (level 2), the last two through
 * per-function target attributes so the extension needs no -march flag and
 * loads on any x86-64. The level is the module's attnx_simd.h dispatch state
 * (simd_attach() at import: the level attnx._ops detected, ATTNX_SIMD caps it).
 */
#ifndef ATTNX_FLASH_H
#define ATTNX_FLASH_H
#define FL_PAIR 0   /* key-pair tiles: float32 AVX-512 only (redefined there) */

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "attnx_math.h"   /* attnx_level(): the module's dispatch state */

#include "attnx_flash_sizes.h"

#if defined(_OPENMP) || defined(ATTNX_OMP_SIMD)
#define FL_PRAGMA(x) _Pragma(#x)
#define FL_SIMD_RED(op, v) FL_PRAGMA(omp simd reduction(op:v))
#define FL_SIMD _Pragma("omp simd")
#else
#define FL_SIMD_RED(op, v)
#define FL_SIMD
#endif

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define ATTNX_FL_X86 1
#include <immintrin.h>
#endif
#define FL_SCALEF_PS 0   /* exp through vscalefps/pd: the AVX-512 builds only (redefined */
#define FL_SCALEF_PD 0   /* there) */


/* ================================================================ float32 */
#define FL_T float
#define FL_UINT uint32_t
#define FL_MAGIC 12582912.0f             /* 1.5 * 2^23 */
#define FL_BIAS 127u
#define FL_MANT 23
/* 2^r on |r| <= 1/2 with p(0) = 1 exactly, degree 5, fitted here for the least
 * maximum relative error: 9.1e-8 in exact arithmetic, 1.9e-7 evaluated in float32 */
#define FL_POLY2(r) (1.0f + (r) * (0.693147004f + (r) * (0.240222424f + (r) * (0.0555073358f   \
                     + (r) * (0.00967151299f + (r) * 0.00132647273f)))))
#define FL_LOG2E 1.44269504f
#define FL_T2LO (-125.0f)                /* 2^-125: e^-86.6 */
#define FL_T2HI 127.0f
#define FL_NRN FL_NRN_f32

#define FL_NAME(x) x##_f32_c
#define FL_ATTR
#define FL_VEC 0
#define FL_MRW 4
#define FL_NRW 16
#define FL_MRN 4
#include "attnx_flash_impl.h"
#undef FL_NAME
#undef FL_ATTR
#undef FL_VEC
#undef FL_MRW
#undef FL_NRW
#undef FL_MRN

#ifdef ATTNX_FL_X86
#define FL_NAME(x) x##_f32_avx2
#define FL_ATTR __attribute__((target("avx2,fma")))
#define FL_VWBYTES 32
#define FL_VEC 1
#define FL_MRW 6
#define FL_NRW 16
#define FL_MRN 8
#include "attnx_flash_impl.h"
#undef FL_NAME
#undef FL_ATTR
#undef FL_VEC
#undef FL_MRW
#undef FL_NRW
#undef FL_MRN
#undef FL_VWBYTES

#undef FL_PAIR
#undef FL_SCALEF_PS
#define FL_NAME(x) x##_f32_avx512
#define FL_PAIR 1
#define FL_SCALEF_PS 1
#define FL_ATTR __attribute__((target("avx512f,avx2,fma")))
#define FL_VWBYTES 64
#define FL_VEC 1
#define FL_MRW 8
#define FL_NRW 32
#define FL_MRN 8
#define FL_MRM 16
#include "attnx_flash_impl.h"
#undef FL_NAME
#undef FL_ATTR
#undef FL_VEC
#undef FL_MRW
#undef FL_NRW
#undef FL_MRN
#undef FL_MRM
#undef FL_VWBYTES
#undef FL_PAIR
#define FL_PAIR 0
#undef FL_SCALEF_PS
#define FL_SCALEF_PS 0
#endif

#undef FL_T
#undef FL_UINT
#undef FL_MAGIC
#undef FL_BIAS
#undef FL_MANT
#undef FL_POLY2
#undef FL_LOG2E
#undef FL_T2LO
#undef FL_T2HI
#undef FL_NRN

/* ================================================================ float64 */
#define FL_T double
#define FL_UINT uint64_t
#define FL_MAGIC 6755399441055744.0      /* 1.5 * 2^52 */
#define FL_BIAS 1023u
#define FL_MANT 52
/* 2^r on |r| <= 1/2 with p(0) = 1 exactly, degree 11, fitted here (Remez, relative
 * error, 60 digits) for the least maximum relative error: 1.8e-17 in exact
 * arithmetic, so the evaluation's rounding (~1 ulp) is all that shows. Against the
 * Taylor series of e^(r ln2) to degree 12 it had replaced, the same accuracy with
 * two operations fewer per element (no multiply by ln2, one term less): the exp is
 * about a fifth of a float64 training step at d_head 8. */
#define FL_POLY2(r) (1.0 + (r) * (0.6931471805599457 + (r) * (0.24022650695910097            \
    + (r) * (0.05550410866479039 + (r) * (0.009618129107607003 + (r) * (0.0013333558153440046 \
    + (r) * (0.00015403530441572409 + (r) * (1.525272738512514e-05                          \
    + (r) * (1.3215442675165306e-06 + (r) * (1.018064768508801e-07                          \
    + (r) * (7.072570443654733e-09 + (r) * 4.0780683688485906e-10)))))))))))
#define FL_LOG2E 1.44269504088896340736
/* the AVX-512 exp (fl_vpow2w): 2^(j/16), j = 0..15, and 2^r - 1 on |r| <= 1/32 (2^r to
 * degree 6 fitted as FL_POLY2, relative error 7.1e-18 in exact arithmetic, without
 * its constant term) */
#define FL_TAB16_LO 1.0, 1.0442737824274138, 1.0905077326652577, 1.1387886347566916,        \
    1.189207115002721, 1.241857812073484, 1.2968395546510096, 1.3542555469368927
#define FL_TAB16_HI 1.4142135623730951, 1.4768261459394993, 1.5422108254079407,             \
    1.6104903319492543, 1.681792830507429, 1.7562521603732995, 1.8340080864093424,         \
    1.9152065613971474
#define FL_POLY16M1(r) ((r) * (0.6931471805599468 + (r) * (0.24022650695910167          \
    + (r) * (0.055504108651954584 + (r) * (0.00961812910205419 + (r) * (0.0013333820232793493 \
    + (r) * 0.00015404211651573344))))))
#define FL_T2LO (-1021.0)                /* 2^-1021: e^-707.7 */
#define FL_T2HI 1023.0
#define FL_NRN FL_NRN_f64

#define FL_NAME(x) x##_f64_c
#define FL_ATTR
#define FL_VEC 0
#define FL_MRW 4
#define FL_NRW 8
#define FL_MRN 4
#include "attnx_flash_impl.h"
#undef FL_NAME
#undef FL_ATTR
#undef FL_VEC
#undef FL_MRW
#undef FL_NRW
#undef FL_MRN

#ifdef ATTNX_FL_X86
#define FL_NAME(x) x##_f64_avx2
#define FL_ATTR __attribute__((target("avx2,fma")))
#define FL_VWBYTES 32
#define FL_VEC 1
#define FL_MRW 4
#define FL_NRW 8
#define FL_MRN 8
#include "attnx_flash_impl.h"
#undef FL_NAME
#undef FL_ATTR
#undef FL_VEC
#undef FL_MRW
#undef FL_NRW
#undef FL_MRN
#undef FL_VWBYTES

#undef FL_SCALEF_PD
#define FL_SCALEF_PD 1
#define FL_NAME(x) x##_f64_avx512
#define FL_ATTR __attribute__((target("avx512f,avx2,fma")))
#define FL_VWBYTES 64
#define FL_VEC 1
#define FL_MRW 8
#define FL_NRW 16
#define FL_MRN 8
#define FL_MRM 16
#include "attnx_flash_impl.h"
#undef FL_NAME
#undef FL_ATTR
#undef FL_VEC
#undef FL_MRW
#undef FL_NRW
#undef FL_MRN
#undef FL_MRM
#undef FL_VWBYTES
#undef FL_SCALEF_PD
#define FL_SCALEF_PD 0
#endif

#undef FL_T
#undef FL_UINT
#undef FL_MAGIC
#undef FL_BIAS
#undef FL_MANT
#undef FL_POLY2
#undef FL_POLY16M1
#undef FL_TAB16_LO
#undef FL_TAB16_HI
#undef FL_LOG2E
#undef FL_T2LO
#undef FL_T2HI
#undef FL_NRN

/* ================================================================ dispatch */

/* The level is this module's copy of attnx_simd.h's dispatch state (attnx_level():
 * 0 = portable C, 1 = AVX2+FMA, 2 = AVX-512F), set at import by simd_attach() like
 * every other kernel module's; the Cython entry points refuse to run unattached. */
#ifdef ATTNX_FL_X86
#define FL_DISPATCH(fn, sfx, args)                                                    \
    do {                                                                              \
        int fl_level_ = attnx_level();                                                \
        if (fl_level_ == 2) fn##_##sfx##_avx512 args;                                 \
        else if (fl_level_ == 1) fn##_##sfx##_avx2 args;                              \
        else fn##_##sfx##_c args;                                                     \
    } while (0)
#else
#define FL_DISPATCH(fn, sfx, args) fn##_##sfx##_c args
#endif

#define FL_FWD_PROTO(T, sfx)                                                          \
static void attnx_flash_forward_rows_##sfx(                                           \
        const T *q, ptrdiff_t ldq, const T *k, const T *v, ptrdiff_t ldkv,            \
        T *z, ptrdiff_t ldz, T *lse, int i0, int nq, int tk, int dh, T scale,         \
        int causal, const uint8_t *km, T *ws)                                         \
{                                                                                     \
    FL_DISPATCH(fl_forward_rows, sfx,                                                 \
                (q, ldq, k, v, ldkv, z, ldz, lse, i0, nq, tk, dh, scale, causal, km, ws)); \
}

#define FL_BWD_PROTO(T, sfx)                                                          \
static void attnx_flash_backward_head_##sfx(                                          \
        const T *q, ptrdiff_t ldq, const T *k, const T *v, ptrdiff_t ldkv,            \
        const T *z, const T *dz, ptrdiff_t ldz, const T *lse,                         \
        T *dq, ptrdiff_t lddq, T *dk, T *dv, int tq, int tk, int ka, int kb, int dh,  \
        T scale, int causal, const uint8_t *km, T *ws)                                \
{                                                                                     \
    FL_DISPATCH(fl_backward_head, sfx,                                                \
                (q, ldq, k, v, ldkv, z, dz, ldz, lse, dq, lddq, dk, dv, tq, tk, ka, kb, \
                 dh, scale, causal, km, ws));                                         \
}

FL_FWD_PROTO(float, f32)
FL_FWD_PROTO(double, f64)
FL_BWD_PROTO(float, f32)
FL_BWD_PROTO(double, f64)

/* exp(x - shift) over an array with the softmax exp of the level in use
 * (accuracy tests): 2^(x log2 e - shift log2 e), as the kernels with scale 1. */
static void attnx_flash_exp_f32(const float *x, float *y, ptrdiff_t n, float shift)
{
    ptrdiff_t i, c;
    memcpy(y, x, sizeof(float) * n);
    for (i = 0; i < n; i += c) {
        c = n - i < (1 << 20) ? n - i : (1 << 20);
        FL_DISPATCH(fl_expsub, f32, (y + i, (int) c, 1.44269504f, shift * 1.44269504f));
    }
}

static void attnx_flash_exp_f64(const double *x, double *y, ptrdiff_t n, double shift)
{
    ptrdiff_t i, c;
    memcpy(y, x, sizeof(double) * n);
    for (i = 0; i < n; i += c) {
        c = n - i < (1 << 20) ? n - i : (1 << 20);
        FL_DISPATCH(fl_expsub, f64, (y + i, (int) c, 1.44269504088896340736,
                                          shift * 1.44269504088896340736));
    }
}

#endif /* ATTNX_FLASH_H */
