"""attnx.datasets: the find-the-maximum copy task and the fixed-attention mixing task."""
import numpy as np
import pytest

from attnx import datasets


def test_max_position_task_copies_the_argmax_row_everywhere():
    X, Y = datasets.max_position_task(40, seq_len=7, d_model=5, random_state=3)
    assert X.shape == Y.shape == (40, 7, 5)
    assert X.dtype == Y.dtype == np.float32
    for i in range(40):
        p = int(np.argmax(X[i, :, 0]))
        for t in range(7):
            np.testing.assert_array_equal(Y[i, t], X[i, p])
    # Y owns its memory (not a broadcast view): writing to it is allowed
    Y[0, 0, 0] = 1.0


def test_tasks_are_seeded_and_deterministic():
    a = datasets.max_position_task(10, 4, 3, random_state=1)
    b = datasets.max_position_task(10, 4, 3, random_state=1)
    c = datasets.max_position_task(10, 4, 3, random_state=2)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[0], c[0])
    m1 = datasets.mixing_task(10, 4, 3, random_state=5)
    m2 = datasets.mixing_task(10, 4, 3, random_state=5)
    np.testing.assert_array_equal(m1[1], m2[1])
    m3 = datasets.mixing_task(10, 4, 3, random_state=6)
    assert not np.array_equal(m1[1], m3[1])


def test_mixing_task_is_a_row_softmax_mix_plus_noise():
    X, Y, A = datasets.mixing_task(200, seq_len=6, d_model=4, noise=0.05, random_state=0,
                                   dtype=np.float64, return_mixing=True)
    assert X.dtype == np.float64 and A.shape == (6, 6)
    assert np.all(A > 0)
    np.testing.assert_allclose(A.sum(axis=1), 1.0, rtol=1e-12)
    resid = Y - np.einsum("ts,nsd->ntd", A, X)
    assert abs(resid.std() - 0.05) < 0.005       # the noise level asked for
    assert abs(resid.mean()) < 0.005
    X0, Y0, A0 = datasets.mixing_task(20, 6, 4, noise=0.0, random_state=0, dtype=np.float64,
                                      return_mixing=True)
    np.testing.assert_allclose(Y0, np.einsum("ts,nsd->ntd", A0, X0), rtol=1e-12, atol=1e-15)


def test_dataset_arguments_are_checked():
    with pytest.raises(ValueError, match="n_samples"):
        datasets.max_position_task(0)
    with pytest.raises(TypeError, match="seq_len"):
        datasets.mixing_task(5, seq_len=2.5)
    with pytest.raises(ValueError, match="noise"):
        datasets.mixing_task(5, noise=-1.0)
    with pytest.raises(TypeError, match="dtype"):
        datasets.max_position_task(5, dtype=np.int32)
