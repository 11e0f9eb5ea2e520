"""The row-major gemm wrapper against numpy.matmul."""
import itertools

import numpy as np
import pytest

from attnx.kernels._testing import gemm_into


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ta,tb", list(itertools.product([False, True], repeat=2)))
@pytest.mark.parametrize("pad", [0, 3])
def test_gemm_matches_matmul(dtype, ta, tb, pad, rng):
    m, n, k = 7, 5, 4
    # operands stored with extra columns: leading dimension > matrix width
    a_full = rng.normal(size=((k, m + pad) if ta else (m, k + pad))).astype(dtype)
    b_full = rng.normal(size=((n, k + pad) if tb else (k, n + pad))).astype(dtype)
    c_full = rng.normal(size=(m, n + pad)).astype(dtype)
    c0 = c_full.copy()
    a = a_full[:, :m] if ta else a_full[:, :k]
    b = b_full[:, :k] if tb else b_full[:, :n]
    opa = a.T if ta else a
    opb = b.T if tb else b
    gemm_into(ta, tb, a_full, b_full, c_full, m, n, k, alpha=0.5, beta=2.0)
    expect = 0.5 * np.matmul(opa.astype(np.float64), opb) + 2.0 * c0[:, :n]
    tol = 1e-5 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(c_full[:, :n], expect, rtol=tol, atol=tol)
    # the padding columns of C are untouched
    np.testing.assert_array_equal(c_full[:, n:], c0[:, n:])


def test_gemm_rejects_small_buffers():
    a = np.zeros((2, 2))
    with pytest.raises(ValueError):
        gemm_into(False, False, a, a, a, 3, 2, 2)


# Shapes on both sides of the small-GEMM tiles' edges (csrc/attnx_gemm_small.h):
# columns around the 8- and 16-wide chunks of level 1 and the 16- and 32-wide ones of
# level 2 (masked last vector), rows around the 6-, 4- and 8-row tiles, k = 0 (C = beta
# C) and k odd; level 2's X^T dY in blocks of 256 rows (k 300, 1100); n < 8 and large
# products go to BLAS. At SIMD levels 1 and 2 the float32 ones run on the tiles where
# the rules send them, elsewhere on BLAS: the same test holds for all.
SMALL_SHAPES = [(1, 8, 1), (5, 9, 3), (6, 15, 7), (7, 16, 0), (8, 17, 33), (13, 24, 2),
                (10, 31, 16), (29, 33, 5), (64, 40, 128), (3, 96, 256), (256, 32, 32),
                (9, 200, 60), (64, 64, 300), (17, 33, 1100), (40, 48, 513)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ta,tb", list(itertools.product([False, True], repeat=2)))
@pytest.mark.parametrize("m,n,k", SMALL_SHAPES)
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (0.5, 1.0), (1.0, 2.0), (-1.5, 0.0)])
def test_small_products(dtype, ta, tb, m, n, k, alpha, beta, rng):
    pad = 3   # leading dimensions larger than the widths; C's extra columns kept
    a_full = rng.normal(size=((max(k, 1), m + pad) if ta else (m, k + pad))).astype(dtype)
    b_full = rng.normal(size=((n, k + pad) if tb else (max(k, 1), n + pad))).astype(dtype)
    c_full = rng.normal(size=(m, n + pad)).astype(dtype)
    if beta == 0:
        c_full[:, :n] = np.nan    # beta 0: C is not read (BLAS's rule)
    c0 = c_full.copy()
    opa = (a_full[:k, :m].T if ta else a_full[:, :k]).astype(np.float64)
    opb = (b_full[:, :k].T if tb else b_full[:k, :n]).astype(np.float64)
    expect = alpha * (opa @ opb)
    if beta != 0:
        expect += beta * c0[:, :n]
    gemm_into(ta, tb, a_full, b_full, c_full, m, n, k, alpha=alpha, beta=beta)
    tol = 2e-5 * max(1.0, np.sqrt(k)) if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(c_full[:, :n], expect, rtol=tol, atol=tol)
    np.testing.assert_array_equal(c_full[:, n:], c0[:, n:])


def test_small_products_beyond_the_packing_buffer(rng):
    """op(B) = B^T with k * n past the tiles' stack buffer (8192 elements) is left to
    BLAS, and a product as large as BLAS's cache blocking wins on too: both still right."""
    for m, n, k in [(4, 128, 80), (200, 96, 160)]:
        a = rng.normal(size=(m, k)).astype(np.float32)
        b = rng.normal(size=(n, k)).astype(np.float32)
        c = np.empty((m, n), np.float32)
        gemm_into(False, True, a, b, c, m, n, k)
        np.testing.assert_allclose(c, a.astype(np.float64) @ b.T, rtol=1e-4, atol=1e-4)
