/* Block sizes and per-thread scratch of the fused attention kernels: the sizes
 * alone, so that the module that sizes every attention buffer (attnx/_attnargs.pyx)
 * needs no kernel code. Included by attnx_flash.h. */
#ifndef ATTNX_FLASH_SIZES_H
#define ATTNX_FLASH_SIZES_H
#include <stddef.h>

/* Query rows and keys per block. BK must be a multiple of the tile widths. */
#define ATTNX_FL_BQ 32
#define ATTNX_FL_BK 128
/* Query blocks that share one sweep over the key blocks (forward and backward). */
#define ATTNX_FL_QG 4
#define ATTNX_FL_PAD(n, w) (((n) + (w) - 1) / (w) * (w))
/* Row stride of the (d_head, keys) transposes (K^T, V^T, dK^T, dV^T): from 256 keys
 * on, one cache line (2 narrow tiles) more than the keys. A tile reads up to
 * d_head rows of them at once; with the bare key count the stride is a power of
 * two at the usual lengths (2048 keys: 8 KB; 16384: 64 KB), every row then falls in
 * the same L1 set and, from 64 KB, into two L2 sets: the tiles thrashed both
 * caches (16384 keys ran 5-7x slower than 8192, for 4x the work). */
#define ATTNX_FL_LDT(tkp, w) ((tkp) >= 256 ? (tkp) + 2 * (w) : (tkp))

/* ---- per-type constants (the narrow tile is 32 bytes wide for both types,
 * so padding does not depend on the level) */
#define FL_NRN_f32 8
#define FL_NRN_f64 4

/* Scratch elements per thread (nrn: the narrow tile width of the type). */
static inline ptrdiff_t attnx_flash_fwd_scratch(int tk, int dh, int nrn)
{
    ptrdiff_t dhp = ATTNX_FL_PAD(dh, nrn), tkp = ATTNX_FL_PAD(tk > 0 ? tk : 1, nrn);
    return (ptrdiff_t) ATTNX_FL_BQ * ATTNX_FL_BK
           + (ptrdiff_t) ATTNX_FL_QG * ATTNX_FL_BQ * (dhp + 2)
           + (ptrdiff_t) dh * ATTNX_FL_LDT(tkp, nrn) + tkp * dhp;
}

static inline ptrdiff_t attnx_flash_bwd_scratch(int tk, int dh, int nrn)
{
    ptrdiff_t dhp = ATTNX_FL_PAD(dh, nrn), tkp = ATTNX_FL_PAD(tk, nrn);
    return 2 * (ptrdiff_t) ATTNX_FL_BQ * ATTNX_FL_BK
           + (ptrdiff_t) ATTNX_FL_QG * ATTNX_FL_BQ * (dhp + 1)
           + 4 * (ptrdiff_t) dh * ATTNX_FL_LDT(tkp, nrn) + tkp * dhp;
}

#endif /* ATTNX_FLASH_SIZES_H */
