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
    for bad in ("0.1", 0.1 + 0j, np.True_, None, [0.1]):  # the message names the argument
        with pytest.raises(ValueError, match="noise"):
            datasets.mixing_task(5, noise=bad)
    with pytest.raises(TypeError, match="dtype"):
        datasets.max_position_task(5, dtype=np.int32)


# ---- sliding_windows -------------------------------------------------------------
def test_sliding_windows_of_a_1d_series():
    s = np.arange(10)
    X, y = datasets.sliding_windows(s, window=3)
    assert X.shape == (7, 3, 1) and y.shape == (7,) and X.dtype == np.float64
    np.testing.assert_array_equal(X[0, :, 0], [0, 1, 2])
    np.testing.assert_array_equal(X[-1, :, 0], [6, 7, 8])
    np.testing.assert_array_equal(y, np.arange(3, 10))
    X2, y2 = datasets.sliding_windows(s.astype(np.float32), window=4, horizon=3)
    assert X2.shape == (4, 4, 1) and y2.shape == (4, 3) and X2.dtype == np.float32
    np.testing.assert_array_equal(y2[1], [5, 6, 7])
    for i in range(4):  # every window is followed by its own future
        np.testing.assert_array_equal(np.concatenate([X2[i, :, 0], y2[i]]), s[i:i + 7])


def test_sliding_windows_of_a_multivariate_series_leaves_it_alone():
    rng = np.random.default_rng(0)
    s = rng.normal(size=(20, 3))
    before = s.copy()
    X, y = datasets.sliding_windows(s, window=5)
    assert X.shape == (15, 5, 3) and y.shape == (15, 3)
    np.testing.assert_array_equal(y[2], s[7])
    X[:] = 0  # new arrays, not views of the series
    np.testing.assert_array_equal(s, before)
    _, yh = datasets.sliding_windows(s, window=5, horizon=2)
    assert yh.shape == (14, 2, 3)
    np.testing.assert_array_equal(yh[0], s[5:7])


def test_sliding_windows_checks_its_arguments():
    with pytest.raises(ValueError, match=r"too short for window=8 and horizon=3.*11"):
        datasets.sliding_windows(np.arange(10.0), 8, horizon=3)
    with pytest.raises(ValueError, match="window"):
        datasets.sliding_windows(np.arange(10.0), 0)
    with pytest.raises(TypeError, match="horizon"):
        datasets.sliding_windows(np.arange(10.0), 2, horizon=1.5)
    with pytest.raises(ValueError, match="NaN"):
        datasets.sliding_windows(np.array([1.0, np.nan, 2.0, 3.0]), 2)
    with pytest.raises(ValueError, match=r"\(T,\) or \(T, n_features\)"):
        datasets.sliding_windows(np.zeros((4, 2, 2)), 2)
    with pytest.raises(TypeError, match="series must hold real numbers"):
        datasets.sliding_windows(np.array(["a", "b", "c"]), 1)
