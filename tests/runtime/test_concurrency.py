"""Several Python threads in attnx at once, beside scipy.linalg in another thread.

Shapes are above every OpenMP threshold of the kernels (heads loop: nb*H*Tq*Tk*d_head
>= 1e5; split GEMMs: m*n*k >= 2e5; MLP: rows*d_hidden >= 16384; blocked path), so the
parallel regions and the BLAS guard really run. Results must equal the serial ones
bit for bit, and scipy's BLAS must get its thread count back when attnx is idle.
"""
import threading

import numpy as np
import pytest
import scipy.linalg
from threadpoolctl import threadpool_info, threadpool_limits

import attnx
from attnx.runtime import _threads


def _scipy_blas_threads():
    path = _threads.BLAS_PATH
    counts = [i["num_threads"] for i in threadpool_info()
              if i["user_api"] == "blas" and (path is None or i["filepath"] == path)]
    assert counts, "scipy's BLAS not found by threadpoolctl"
    return counts[0]


def _models():
    return {
        "transformer": attnx.Transformer(64, 4, n_layers=2, bias=True, random_state=0),
        "causal_dense": attnx.MultiHeadAttention(64, 4, causal=True, rope=True,
                                                 attention="dense", random_state=1),
        "blocked": attnx.MultiHeadAttention(32, 2, causal=True, attention="blocked",
                                            random_state=2, dtype=np.float64),
    }


def _inputs(rng):
    return {
        # rows 4*128 = 512, d_hidden 256: every threshold above
        "transformer": [rng.normal(size=(4, 128, 64)).astype(np.float32) for _ in range(2)],
        "causal_dense": [rng.normal(size=(4, 130, 64)).astype(np.float32) for _ in range(2)],
        "blocked": [rng.normal(size=(2, 300, 32)) for _ in range(2)],   # 3 query blocks
    }


@pytest.fixture(autouse=True)
def two_omp_threads():
    """Two OpenMP threads in every attnx call, whatever the shapes, the other Python
    threads in attnx and the machine's load (the explicit override; the automatic
    policy would give these shapes one thread and concurrent callers fewer)."""
    with _threads.fixed_threads(2):
        yield


def _check_threads(errors):
    """Worker threads start from OpenMP's process default: it must be >= 2 here, or
    the parallel regions this file is about would not run."""
    n = _threads.num_threads()
    if n < 2:
        errors.append(AssertionError(f"OpenMP gives this thread {n} thread(s): set "
                                     "OMP_NUM_THREADS>=2 to exercise the parallel regions"))


def test_parallel_regions_are_entered():
    assert _threads.num_threads() >= 2
    errors = []
    t = threading.Thread(target=_check_threads, args=(errors,))
    t.start()
    t.join()
    assert not errors, errors


def test_predict_from_threads_beside_scipy_is_bit_identical(rng):
    models, inputs = _models(), _inputs(rng)
    serial = {k: [models[k].forward(x, grad=False) for x in xs] for k, xs in inputs.items()}
    before = _scipy_blas_threads()
    a = rng.normal(size=(600, 600)) + 600 * np.eye(600)
    b = rng.normal(size=(600, 3))
    expect_solve = scipy.linalg.solve(a, b)
    stop = threading.Event()
    errors, solves = [], [0]
    results = [dict() for _ in range(4)]

    def work(w):
        _check_threads(errors)
        try:
            for rep in range(3):
                for k, xs in inputs.items():
                    for i, x in enumerate(xs):
                        results[w][k, i, rep] = models[k].forward(x, grad=False)
        except Exception as exc:  # reported below
            errors.append(exc)

    def linalg():
        try:
            while not stop.is_set():
                got = scipy.linalg.solve(a, b)
                np.testing.assert_allclose(got, expect_solve, rtol=1e-9, atol=1e-12)
                scipy.linalg.blas.dgemm(1.0, a, a)
                solves[0] += 1
        except Exception as exc:
            errors.append(exc)

    side = threading.Thread(target=linalg)
    side.start()
    workers = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(timeout=600)
    stop.set()
    side.join(timeout=600)
    assert not errors, errors
    assert not any(t.is_alive() for t in workers + [side])
    assert solves[0] > 0
    for w in range(4):
        for k, xs in inputs.items():
            for i in range(len(xs)):
                for rep in range(3):
                    np.testing.assert_array_equal(results[w][k, i, rep], serial[k][i])
    assert _threads.guard_depth() == 0
    assert _scipy_blas_threads() == before


def test_training_in_one_thread_inference_in_others(rng):
    """fit-style steps (forward+backward+AdamW) in one thread while others predict:
    the trained thread's gradients equal a serial run's bit for bit."""
    x = rng.normal(size=(4, 128, 64)).astype(np.float32)
    dy = rng.normal(size=x.shape).astype(np.float32)

    def train():
        model = attnx.Transformer(64, 4, n_layers=1, random_state=3)
        opt = attnx.AdamW(model.params, lr=1e-3)
        for _ in range(3):
            model.forward(x)
            model.backward(dy)
            opt.step(model.grads)
        return model.params.flat.copy()

    expect = train()
    reader = attnx.Transformer(64, 4, n_layers=1, random_state=4)
    ref = reader.forward(x, grad=False)
    got, errors = [None], []

    def trainer():
        try:
            got[0] = train()
        except Exception as exc:
            errors.append(exc)

    def predictor():
        try:
            for _ in range(4):
                np.testing.assert_array_equal(reader.forward(x, grad=False), ref)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=trainer)] + [threading.Thread(target=predictor)
                                                    for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    np.testing.assert_array_equal(got[0], expect)


def test_blas_guard_is_reference_counted():
    """The first attnx call in sets scipy's BLAS to 1 thread, the last one out
    restores it, whatever the order in which the calls finish."""
    ctl = _threads.controller()
    outer = ctl.limit(limits=2)            # a known count to come back to
    _threads._give_back_control()
    try:
        start = _scipy_blas_threads()
        assert start == 2
        entered = [threading.Event() for _ in range(2)]
        release = [threading.Event() for _ in range(2)]
        seen = {}

        def call(i):
            with _threads.blas_single(2):
                entered[i].set()
                release[i].wait(timeout=60)
                seen[i] = _scipy_blas_threads()

        ts = [threading.Thread(target=call, args=(i,)) for i in range(2)]
        for t in ts:
            t.start()
        for e in entered:
            assert e.wait(timeout=60)
        assert _threads.guard_depth() == 2
        assert _scipy_blas_threads() == 1
        release[0].set()            # the first caller leaves while the second is inside
        ts[0].join(timeout=60)
        assert _threads.guard_depth() == 1
        assert _scipy_blas_threads() == 1
        release[1].set()
        ts[1].join(timeout=60)
        assert seen == {0: 1, 1: 1}
        assert _threads.guard_depth() == 0
        assert _scipy_blas_threads() == start
        # the main thread can still set the count afterwards (no thread kept the role)
        with threadpool_limits(limits=1, user_api="blas"):
            assert _scipy_blas_threads() == 1
        assert _scipy_blas_threads() == start
    finally:
        outer.restore_original_limits()
        _threads._give_back_control()
    # a one-thread call holds the guard too: BLAS's pool never runs beside attnx
    with _threads.blas_single(1):
        assert _threads.guard_depth() == 1
        assert _scipy_blas_threads() == 1
    assert _threads.guard_depth() == 0


def test_guard_restores_after_an_error():
    before = _scipy_blas_threads()
    with pytest.raises(ZeroDivisionError):
        with _threads.blas_single(2):
            1 / 0
    assert _threads.guard_depth() == 0
    assert _scipy_blas_threads() == before
