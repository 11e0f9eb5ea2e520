"""The row-major gemm wrapper against numpy.matmul."""
import itertools

import numpy as np
import pytest

from attnx._testing import gemm_into


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
