"""Hyper-parameter search on a Dask cluster: joblib's "dask" backend under GridSearchCV.

The test starts a distributed.LocalCluster of two worker processes with one
thread each, pins BLAS and OpenMP to one thread per worker (and checks that from
inside the workers with threadpoolctl), runs the search there and compares it
with the same search run serially in this process. Without dask.distributed
the test skips, unless ATTNX_REQUIRE_DASK=1 (CI), where that is a failure.
"""
import logging
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import attnx

ROOT = Path(attnx.__file__).resolve().parent.parent
from dask_checks import ONE_THREAD
from dask_checks import require_dask as _require


def _threads_in_worker():
    """Run inside a worker: the thread pools attnx would use there."""
    import attnx
    from attnx.runtime._threads import num_threads
    from threadpoolctl import threadpool_info

    pools = [(p["internal_api"], p["num_threads"]) for p in threadpool_info()]
    env = {k: os.environ.get(k) for k in ONE_THREAD}
    return {"pools": pools, "env": env, "attnx_threads": num_threads(),
            "attnx_file": attnx.__file__}


def test_grid_search_on_a_dask_cluster_equals_the_serial_search():
    _require("dask")
    dist = _require("distributed")
    joblib = _require("joblib")
    sklearn_ms = pytest.importorskip("sklearn.model_selection")
    from threadpoolctl import threadpool_limits

    X, Y = attnx.datasets.max_position_task(96, 5, 4, random_state=0)
    X, Y = X.astype(np.float64), Y.astype(np.float64)
    est = attnx.AttentionRegressor(epochs=4, batch_size=16, random_state=0, dtype=np.float64)
    grid = {"lr": [0.003, 0.03], "n_heads": [1, 2], "options__causal": [False, True]}

    with threadpool_limits(1):  # the workers' thread count: the same arithmetic here
        serial = sklearn_ms.GridSearchCV(est, grid, cv=3).fit(X, Y)

    env = dict(ONE_THREAD, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    with dist.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, env=env,
                           dashboard_address=":0", silence_logs=logging.ERROR) as cluster, \
            dist.Client(cluster) as client:
        # by value: the workers import attnx, not this test module (tests.distributed.*)
        cloudpickle = pytest.importorskip("cloudpickle")
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
        try:
            info = client.run(_threads_in_worker)
        finally:
            cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        assert len(info) == 2
        for worker, rep in info.items():
            assert rep["env"] == ONE_THREAD, (worker, rep)
            assert rep["attnx_threads"] == 1, (worker, rep)
            assert rep["pools"] and all(n == 1 for _, n in rep["pools"]), (worker, rep)
            assert Path(rep["attnx_file"]).resolve().parent == ROOT / "attnx"
        with dist.get_task_stream(client) as tasks, joblib.parallel_backend("dask"):
            search = sklearn_ms.GridSearchCV(est, grid, cv=3, n_jobs=-1).fit(X, Y)
        workers = {t["worker"] for t in tasks.data}
    assert len(tasks.data) > 0 and len(workers) == 2  # the fits ran on both workers

    n = len(serial.cv_results_["params"])
    assert n == 8 and search.cv_results_["params"] == serial.cv_results_["params"]
    for k in range(3):
        key = f"split{k}_test_score"
        np.testing.assert_array_equal(search.cv_results_[key], serial.cv_results_[key])
    assert search.best_params_ == serial.best_params_
    np.testing.assert_array_equal(search.best_estimator_.model_.params.flat,
                                  serial.best_estimator_.model_.params.flat)
    # not a degenerate grid: the settings really score differently
    assert len(set(serial.cv_results_["mean_test_score"])) == n
