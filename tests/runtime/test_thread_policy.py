"""The thread policy's decisions (attnx.runtime._threads, attnx.runtime._cpus): the count chosen per
shape, per environment (OpenMP limits, CPU quota, MPI ranks, joblib workers, other
Python threads in attnx, other processes' load) and under the explicit override. No
timings: each test checks what the policy decides from what it is shown."""
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import attnx
from attnx.runtime import _cpus, _threads


@pytest.fixture
def automatic(monkeypatch):
    """The automatic policy on a 2-CPU process whatever this machine is, with a load
    reading the test sets (idle CPUs)."""
    state = {"idle": 2.0}

    class FakeLoad:
        def idle(self):
            return state["idle"]

    monkeypatch.setattr(_threads, "_USABLE", 2)
    monkeypatch.setattr(_threads, "_load", FakeLoad())
    with _threads.fixed_threads(None), threadpool_limits(limits=2, user_api="openmp"):
        yield state


def test_small_work_runs_on_one_thread(automatic):
    assert _threads.threads_for(_threads.MIN_PARALLEL_MACS - 1) == 1
    assert _threads.threads_for(_threads.MIN_PARALLEL_MACS) == 2


def test_busy_machine_gets_one_thread(automatic):
    big = 100 * _threads.MIN_PARALLEL_MACS
    for idle, want in ((2.0, 2), (1.8, 2), (1.6, 1), (1.0, 1), (0.0, 1)):
        automatic["idle"] = idle
        assert _threads.threads_for(big) == want, idle


def test_no_load_reading_goes_by_work(automatic, monkeypatch):
    automatic["idle"] = None
    assert _threads.threads_for(100 * _threads.MIN_PARALLEL_MACS) == 2
    assert _threads.threads_for(10.0) == 1


def test_openmp_limit_caps_the_count(automatic):
    with threadpool_limits(limits=1, user_api="openmp"):
        assert _threads.num_threads() == 1
        assert _threads.threads_for(1e12) == 1


def test_explicit_count_wins_over_work_and_load(automatic):
    automatic["idle"] = 0.0
    with _threads.fixed_threads(3):
        assert _threads.get_num_threads() == 3
        assert _threads.threads_for(1.0) == 3
        assert _threads.num_threads() == 3
    assert _threads.get_num_threads() is None


@pytest.mark.parametrize("bad, exc", [(0, ValueError), (-2, ValueError), (1.5, TypeError),
                                      (True, TypeError), ("2", TypeError)])
def test_set_num_threads_rejects_bad_counts(bad, exc):
    with pytest.raises(exc, match="n must be"):
        attnx.set_num_threads(bad)
    assert attnx.get_num_threads() is None


def test_python_threads_in_attnx_share_the_cpus(automatic):
    """While another Python thread is inside an attnx call, this one gets half."""
    big = 100 * _threads.MIN_PARALLEL_MACS
    inside, leave, seen = threading.Event(), threading.Event(), []

    def other():
        with _threads.blas_single():
            inside.set()
            leave.wait(timeout=60)

    t = threading.Thread(target=other)
    t.start()
    try:
        assert inside.wait(timeout=60)
        seen.append(_threads.threads_for(big))
    finally:
        leave.set()
        t.join(timeout=60)
    assert seen == [1]
    assert _threads.threads_for(big) == 2


def test_usable_cpus_from_affinity_quota_and_ranks():
    assert _cpus.usable(cpus=8, quota=None, ranks=1) == 8
    assert _cpus.usable(cpus=8, quota=2.0, ranks=1) == 2
    assert _cpus.usable(cpus=8, quota=0.4, ranks=1) == 1
    assert _cpus.usable(cpus=8, quota=None, ranks=4) == 2
    assert _cpus.usable(cpus=2, quota=None, ranks=4) == 1


@pytest.mark.parametrize("files, want", [
    ({"/sys/fs/cgroup/cpu.max": "max 100000\n"}, None),
    ({"/sys/fs/cgroup/cpu.max": "150000 100000\n"}, 1.5),
    ({"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1", "/sys/fs/cgroup/cpu/cpu.cfs_period_us":
      "100000"}, None),
    ({"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "400000\n",
      "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n"}, 4.0),
    ({}, None),
])
def test_cgroup_quota(files, want):
    assert _cpus.cgroup_quota(files.get) == want


@pytest.mark.parametrize("env, want", [
    ({}, 1), ({"MPI_LOCALNRANKS": "4"}, 4), ({"OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, 2),
    ({"SLURM_NTASKS_PER_NODE": "3(x2)"}, 3), ({"MPI_LOCALNRANKS": "zero"}, 1),
])
def test_local_ranks(env, want):
    assert _cpus.local_ranks(env) == want


def test_load_sampler_counts_other_processes_not_this_one():
    """Two CPUs; 0.5 s intervals. Other processes' busy time lowers the idle count,
    this process's own CPU time does not, and an interval under MIN_WALL is not read."""
    now, busy, own = [0.0], [0.0], [0.0]
    s = _cpus.LoadSampler([0, 1], interval=0.25, stat=lambda cpus: (busy[0], 2),
                          clock=lambda: now[0], own_cpu=lambda: own[0])
    now[0], busy[0], own[0] = 0.5, 1.0, 1.0          # all of it ours: both CPUs free
    assert s.idle() == pytest.approx(2.0)
    now[0], busy[0], own[0] = 1.0, 2.0, 1.5          # others used 0.5 s of 0.5 s
    assert s.idle() == pytest.approx(1.0)
    now[0], busy[0] = 1.05, 2.1                       # too short: the last value stays
    assert s.idle() == pytest.approx(1.0)
    now[0], busy[0], own[0] = 1.5, 3.5, 1.5          # others now use both CPUs
    assert s.idle() == pytest.approx(0.0)


def test_load_sampler_without_proc_stat():
    s = _cpus.LoadSampler([0, 1], stat=lambda cpus: None)
    assert s.idle() is None


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="no /proc/stat (not Linux)")
def test_this_machine_is_read_from_proc_stat():
    """On this machine's real counters: every CPU of the affinity set is in /proc/stat;
    before MIN_WALL has passed the reading is /proc/loadavg's; after it, the CPUs less
    the busy time of other processes (this one's own CPU time, spent here, not counted)."""
    cpus = _cpus.affinity()
    assert _cpus._proc_stat(cpus)[1] == len(cpus)
    now, busy, own = [0.0], [], []

    def stat(c):
        got = _cpus._proc_stat(c)
        busy.append(got[0])
        return got

    def own_cpu():
        own.append(time.process_time())
        return own[-1]

    s = _cpus.LoadSampler(cpus, interval=0.25, stat=stat, clock=lambda: now[0],
                          own_cpu=own_cpu)
    now[0] = _cpus.MIN_WALL / 2
    early = s.idle()
    assert isinstance(early, float) and 0.0 <= early <= len(cpus)   # from /proc/loadavg
    start = time.process_time()
    x = 0
    while time.process_time() - start < 0.05:      # CPU time of this process
        x += 1
    now[0] = 0.5
    got = s.idle()   # over the interval from the first sample (the short one was not kept)
    others = max(0.0, (busy[-1] - busy[0]) - (own[-1] - own[0])) / 0.5
    assert own[-1] - own[0] >= 0.05
    assert got == pytest.approx(max(0.0, len(cpus) - others), abs=1e-12)


def test_sequence_model_shapes_choose_their_threads(automatic):
    """A small model's steps run on one thread, a large one's on two."""
    small = attnx.SequenceModel(8, 32, 4, n_layers=2, n_outputs=3, random_state=0)
    assert small.forward_macs(16, 8) < _threads.MIN_PARALLEL_MACS
    large = attnx.SequenceModel(8, 128, 4, n_layers=2, n_outputs=3, random_state=0)
    assert large.forward_macs(32, 128) >= _threads.MIN_PARALLEL_MACS
    for model, (nb, t), want in ((small, (16, 8), 1), (large, (32, 128), 2)):
        x = np.zeros((nb, t, 8), np.float32)
        _, threads = model._buffers(nb, t, True)
        assert threads == want
        model.forward(x)
        assert model._last.threads == want


def test_estimator_fit_of_small_sequences_uses_one_thread(automatic, monkeypatch):
    """The digits-sized fit of the thread issue: every call one thread, with BLAS held
    at one thread for the whole fit."""
    chosen = []
    real = _threads.threads_for

    def spy(macs):
        chosen.append(real(macs))
        return chosen[-1]

    from attnx.layers import sequence
    monkeypatch.setattr(sequence, "threads_for", spy)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(64, 8, 8)).astype(np.float32)
    y = rng.integers(0, 3, 64)
    attnx.TransformerClassifier(random_state=0, epochs=2).fit(X, y)
    assert chosen and set(chosen) == {1}
    assert _threads.guard_depth() == 0


def _child(code, cwd, **env):
    full = {k: v for k, v in os.environ.items()
            if k not in ("OMP_NUM_THREADS", "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE",
                         "MV2_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE")}
    full.update(env)
    # from another folder: the checkout's attnx/ (unbuilt sources) must not shadow
    # the attnx under test
    out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                         text=True, check=True, cwd=cwd)
    return out.stdout.split()


def test_environment_of_a_fresh_process(tmp_path):
    """What a process started by a launcher gets: OMP_NUM_THREADS caps every call, MPI
    ranks on one node share its CPUs."""
    code = ("from attnx.runtime import _threads, _cpus; "
            "print(_threads.num_threads(), _threads._USABLE, len(_cpus.affinity()))")
    n, usable, cpus = map(int, _child(code, tmp_path, OMP_NUM_THREADS="1"))
    assert n == 1
    n, usable, cpus = map(int, _child(code, tmp_path, MPI_LOCALNRANKS=str(max(2, cpus))))
    assert usable == 1 and n == 1


def test_joblib_workers_get_their_share(tmp_path):
    """GridSearchCV(n_jobs=k) / joblib's loky workers: each gets cpus // k threads at
    most (joblib sets the workers' OpenMP limit; attnx reads it). In a fresh process
    outside the checkout: loky's workers start in their parent's folder."""
    pytest.importorskip("joblib")
    code = ("import joblib; from attnx.runtime import _cpus, _threads; "
            "got = joblib.Parallel(n_jobs=2, backend='loky')("
            "joblib.delayed(_threads.num_threads)() for _ in range(2)); "
            "print(len(_cpus.affinity()), *got)")
    cpus, *got = map(int, _child(code, tmp_path))
    assert len(got) == 2 and all(1 <= g <= max(1, cpus // 2) for g in got), got


@pytest.mark.parametrize("threads, macs, held", [
    (1, 1e3, False), (1, _threads.BLAS_THREADED_MACS, True), (2, 1e3, True), (1, None, True)])
def test_guard_only_where_blas_could_thread(threads, macs, held):
    """A one-thread call too small for OpenBLAS to thread any product skips the guard;
    a call with attnx threads, or large enough, holds it."""
    guard = _threads.blas_single(threads) if macs is None else _threads.blas_single(threads, macs)
    with guard:
        assert _threads.guard_depth() == int(held)
    assert _threads.guard_depth() == 0
