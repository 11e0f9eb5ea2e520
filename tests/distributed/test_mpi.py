"""Data-parallel fit over MPI: real `mpiexec -n P` jobs started from pytest.

The scripts in tests/mpi/ run under mpiexec (as `python -m mpi4py SCRIPT`, which
aborts the whole job on an uncaught exception instead of leaving the other
ranks waiting). Each job has a timeout: a hang is a failure, never a stuck suite.
Without mpi4py or mpiexec these tests skip, unless ATTNX_REQUIRE_MPI=1 (CI),
where that is a failure.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import attnx
from attnx.estimators._hyper import option
from attnx import distributed

HERE = Path(__file__).resolve().parents[1]   # tests/, whose mpi/ holds the jobs' scripts
ROOT = Path(attnx.__file__).resolve().parent.parent  # the attnx being tested
TIMEOUT = 120  # seconds per job; a healthy job takes a few seconds


def _mpiexec():
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        path = None
    else:
        # the MPICH wheel installs mpiexec next to this Python; use that one, not
        # another MPI's launcher found first on PATH
        near = Path(sys.executable).parent / "mpiexec"
        path = str(near) if near.exists() else shutil.which("mpiexec")
    if path is None:
        if os.environ.get("ATTNX_REQUIRE_MPI") == "1":
            pytest.fail("ATTNX_REQUIRE_MPI=1 but mpi4py or mpiexec is missing "
                        "(pip install 'attnx[mpi]')")
        pytest.skip("mpi4py / mpiexec not installed (pip install 'attnx[mpi]')")
    return path


@pytest.fixture(scope="module")
def mpiexec():
    return _mpiexec()


def mpirun(mpiexec, n, args, cwd, timeout=TIMEOUT):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    # one BLAS thread per rank: P ranks share the machine's cores
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    start = time.monotonic()
    r = subprocess.run([mpiexec, "-n", str(n), sys.executable, *args], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=timeout)
    r.seconds = time.monotonic() - start
    return r


# ---- equality with one process ------------------------------------------------------
@pytest.mark.parametrize("P", [1, 2, 3])
def test_ranks_with_uneven_shards_equal_one_process(mpiexec, tmp_path, P):
    r = mpirun(mpiexec, P, ["-m", "mpi4py", str(HERE / "mpi" / "fit_equal.py"),
                            str(tmp_path)], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(lines) == 1, r.stdout  # only rank 0 reports
    res = json.loads(lines[0][len("RESULT "):])
    assert res["P"] == P
    for name in ("attention_val_es", "transformer_noshuffle", "attention_partial_fit",
                 "random_state_none", "random_state_generator"):
        fig = res[name]
        assert sum(fig["shards"]) > 0 and len(fig["shards"]) == P
        if P > 1:
            assert len(set(fig["shards"])) > 1  # uneven
        for key in ("params_rel", "loss_rel", "val_rel"):
            assert fig.get(key, 0.0) <= 1e-10, (name, fig)
        assert fig["steps"] > 0
    assert "params_rel" in res["attention_val_es"] and "val_rel" in res["attention_val_es"]
    assert res["attention_val_es"]["n_iter"] < 8  # early stopping stopped the fit
    ck = res["checkpoint"]
    assert ck["resume_from"] == P and ck["resume_on"] == max(1, P - 1)
    assert ck["resume_rel"] <= 1e-10


@pytest.mark.parametrize("P", [2, 3])
def test_weights_classifiers_and_ragged_input_equal_one_process(mpiexec, tmp_path, P):
    """Sample weights (some 0), sequence-level targets through d_model, a balanced
    classifier whose first shards lack classes, ragged per-position regression with
    learned positions, ragged per-position classification by partial_fit, and
    missing="mask" with NaN steps in dense and ragged X."""
    r = mpirun(mpiexec, P, ["-m", "mpi4py", str(HERE / "mpi" / "fit_equal_seq.py")], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(lines) == 1, r.stdout
    res = json.loads(lines[0][len("RESULT "):])
    names = ("weighted_sequence_regression", "balanced_classifier", "ragged_per_position",
             "ragged_classifier_partial_fit", "missing_dense", "missing_ragged",
             "epoch_selection", "short_shifted_classifier")
    for name in names:
        fig = res[name]
        assert len(fig["shards"]) == P and fig["steps"] > 0
        assert fig["params_rel"] <= 1e-10 and fig["loss_rel"] <= 1e-10, (name, fig)
    assert res["weighted_sequence_regression"]["val_rel"] <= 1e-10
    assert res["short_shifted_classifier"]["augment_shift"] >= 1   # shifted batches
    assert res["balanced_classifier"]["augment_shift"] is None
    sel = res["epoch_selection"]   # the held-out run of epochs=None ran and chose
    assert sel["held_out_rel"] <= 1e-10 and sel["selected_epochs"] >= 5, sel


# ---- balanced mode (the default) ----------------------------------------------------
def _balanced(mpiexec, tmp_path, P):
    r = mpirun(mpiexec, P, ["-m", "mpi4py", str(HERE / "mpi" / "balanced.py")], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(lines) == 1, r.stdout
    res = json.loads(lines[0][len("RESULT "):])
    assert res["P"] == P
    return res


@pytest.mark.parametrize("P", [1, 2, 3])
def test_balanced_ranks_batch_their_own_shards(mpiexec, tmp_path, P):
    """Each rank's batches hold its own rows, each once per epoch; every rank runs the
    largest shard's steps with identical weights; a second fit repeats the first bit
    for bit; losses and early stopping agree on every rank (checked in the script).
    One rank equals the plain fit bit for bit; P ranks train as well as one process;
    with dropout the ranks draw other masks from one shared generator."""
    res = _balanced(mpiexec, tmp_path, P)
    for name in ("attention", "validation_early_stopping", "transformer",
                 "ragged_classifier_partial_fit"):
        fig = res[name]
        assert len(fig["shards"]) == P and fig["steps"] > 0
        if P > 1:
            assert len(set(fig["shards"])) > 1  # uneven
    att = res["attention"]
    b = -(-8 // P)  # rows per rank per step: ceil(batch_size / P)
    assert att["steps"] == att["n_iter"] * -(-max(att["shards"]) // b)
    assert att["loss_last"] < 0.2 * att["loss_first"]  # it learned
    assert att["mse"] <= 1.5 * att["mse_one"], att  # comparable to one process
    if P == 1:
        assert att["mse"] == att["mse_one"] and att["loss_last"] == att["loss_last_one"]
    assert res["validation_early_stopping"]["n_iter"] < 30  # early stopping acted
    if P == 2:  # another job with the same seed and ranks: the same weights, bit for bit
        again = _balanced(mpiexec, tmp_path, P)
        assert all(again[k]["digest"] == res[k]["digest"] for k in res if k != "P")


# ---- faults ---------------------------------------------------------------------------
FAULTS = {
    "bad_input": ("ValueError", "X contains NaN"),
    "mismatch": ("ValueError", "every rank must use the same hyper-parameters"),
    "step_error": ("MemoryError", "simulated failure inside the loss"),
    "diverge": ("TrainingDivergedError", "training diverged in epoch 1"),
    "dropout": ("ValueError", "cannot be combined with comm"),
    "classifier_bad_input": ("ValueError", "X contains NaN"),
}


@pytest.mark.parametrize("mode", sorted(FAULTS))
def test_one_failing_rank_makes_every_rank_raise_the_same_error(mpiexec, tmp_path, mode):
    P = 3
    r = mpirun(mpiexec, P, ["-m", "mpi4py", str(HERE / "mpi" / "faults.py"), mode], tmp_path)
    # mpiexec may join the ranks' lines: find each report, not each line
    raised = re.findall(r"RAISED ([A-Za-z]+): (.*?)(?=RAISED |\n|$)", r.stdout)
    assert len(raised) == P, r.stdout + r.stderr
    assert len(set(raised)) == 1, raised  # the same class and message on every rank
    cls, text = raised[0]
    assert cls == FAULTS[mode][0] and FAULTS[mode][1] in text, raised[0]
    if mode in ("bad_input", "step_error", "classifier_bad_input"):
        assert f"[rank {P - 1} of {P}]" in text  # names the rank that failed
    assert "FINISHED" not in r.stdout
    assert r.returncode != 0


def test_a_killed_rank_ends_the_job(mpiexec, tmp_path):
    """The last rank SIGKILLs itself in the 20th step of a fit of 10^6 epochs. MPICH's launcher
    sees the process die and terminates the other ranks ("BAD TERMINATION ...
    Killed (signal 9)"); mpiexec returns non-zero within seconds instead of the
    other ranks waiting in the Allreduce forever (TIMEOUT bounds it here)."""
    r = mpirun(mpiexec, 3, ["-m", "mpi4py", str(HERE / "mpi" / "faults.py"), "kill"],
               tmp_path)
    assert r.returncode != 0
    assert "FINISHED" not in r.stdout and "RAISED" not in r.stdout
    assert "signal 9" in r.stdout + r.stderr or "KILLED" in (r.stdout + r.stderr).upper()


def test_a_hanging_rank_is_ended_by_the_launcher_timeout(mpiexec, tmp_path, monkeypatch):
    """A rank that hangs without dying (here: sleeping inside a step) leaves the others
    waiting in the Allreduce; MPICH's MPIEXEC_TIMEOUT (or mpiexec -timeout) ends the whole
    job ("APPLICATION TIMED OUT"): every rank's process is gone when mpiexec returns.

    mpiexec's exit status is not checked: after its timeout hydra kills the proxy, which
    may lose its control connection first ("pmip_cb.c: assert (!closed) failed"); mpiexec
    then holds no exit status and returns 0 (1 run in 15 with three jobs at once on two
    busy cores). The timeout leaves a loaded machine time to start the ranks and reach
    the hang, which the last rank records (hanging.pid)."""
    timeout = 20
    monkeypatch.setenv("MPIEXEC_TIMEOUT", str(timeout))
    r = mpirun(mpiexec, 3, ["-m", "mpi4py", str(HERE / "mpi" / "faults.py"), "hang"], tmp_path)
    out = r.stdout + r.stderr
    assert f"APPLICATION TIMED OUT, TIMEOUT = {timeout}s" in out, out
    assert "FINISHED" not in r.stdout and "RAISED" not in r.stdout, out
    assert (tmp_path / "hanging.pid").exists(), f"the last rank never reached its hang: {out}"
    assert r.seconds < TIMEOUT
    pids = [int((tmp_path / f"rank{k}.pid").read_text()) for k in range(3)]
    assert int((tmp_path / "hanging.pid").read_text()) == pids[2]
    alive = _alive_after(pids, seconds=10)   # reaped by init once their proxy is gone
    assert not alive, f"ranks still running after mpiexec returned: {alive}\n{out}"


def _alive_after(pids, seconds):
    """The pids of `pids` still running (not zombies) after waiting up to `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        alive = [p for p in pids if _running(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def _running(pid):
    if not os.path.isdir("/proc"):   # not Linux: ask the kernel (a zombie counts)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_ctrl_c_on_one_rank_stops_every_rank_after_the_same_step(mpiexec, tmp_path):
    r = mpirun(mpiexec, 3, ["-m", "mpi4py", str(HERE / "mpi" / "faults.py"), "interrupt"],
               tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    stopped = re.findall(r"STOPPED (t=\d+ [0-9a-f]+ warned=(?:True|False))", r.stdout)
    assert len(stopped) == 3 and len(set(stopped)) == 1, r.stdout  # same step, same weights
    assert stopped[0].endswith("warned=True")
    assert stopped[0].startswith("t=20 ")  # the step in which it came


def test_a_second_ctrl_c_inside_a_step_drops_that_step_on_every_rank(mpiexec, tmp_path,
                                                                   monkeypatch):
    """The second Ctrl-C raises KeyboardInterrupt inside the last rank's loss; that rank
    must not leave the others waiting in the step's Allreduce (MPIEXEC_TIMEOUT would
    end such a job): every rank drops step 20 and keeps the weights of step 19."""
    monkeypatch.setenv("MPIEXEC_TIMEOUT", "60")
    r = mpirun(mpiexec, 3, ["-m", "mpi4py", str(HERE / "mpi" / "faults.py"), "interrupt2"],
               tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    stopped = re.findall(r"STOPPED (t=\d+ [0-9a-f]+ warned=(?:True|False))", r.stdout)
    assert len(stopped) == 3 and len(set(stopped)) == 1, r.stdout
    assert stopped[0].startswith("t=19 ") and stopped[0].endswith("warned=True"), stopped


# ---- command line -----------------------------------------------------------------
def test_cli_distributed_train_writes_the_single_process_model(mpiexec, tmp_path):
    X, Y = attnx.datasets.max_position_task(101, 6, 4, random_state=0)
    np.savez(tmp_path / "data.npz", X=X, Y=Y)
    opts = ["train", "data.npz", "--model", "transformer", "--n-layers", "1", "--n-heads", "2",
            "--epochs", "3", "--batch-size", "16", "--lr", "0.01", "--dtype", "float64",
            "--validation-fraction", "0.2", "--exact"]
    r = mpirun(mpiexec, 2, ["-m", "attnx", *opts, "-o", "dist.safetensors", "--distributed"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("wrote dist.safetensors") == 1  # rank 0 alone prints and writes
    assert "over 2 MPI ranks" in r.stdout and "X (101, 6, 4)" in r.stdout
    one = subprocess.run([sys.executable, "-m", "attnx", *opts, "-o", "one.safetensors"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=TIMEOUT,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert one.returncode == 0, one.stderr
    a, b = attnx.load(tmp_path / "dist.safetensors"), attnx.load(tmp_path / "one.safetensors")
    pa, pb = a.model_.params.flat, b.model_.params.flat
    assert np.max(np.abs(pa - pb)) <= 1e-10 * np.max(np.abs(pb))
    np.testing.assert_allclose(a.validation_loss_curve_, b.validation_loss_curve_, rtol=1e-10)
    # the R^2 line is computed from every rank's samples: the same as one process's
    r2 = [re.search(r"R\^2 on the training data: (\S+)", s).group(1)
          for s in (r.stdout, one.stdout)]
    assert r2[0] == r2[1]
    assert option(a, "distributed") == "exact"
    # without --exact: balanced batches, another (reproducible) model
    bal = [o for o in opts if o != "--exact"]
    r = mpirun(mpiexec, 2, ["-m", "attnx", *bal, "-o", "bal.safetensors", "--distributed"],
               tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    c = attnx.load(tmp_path / "bal.safetensors")
    assert option(c, "distributed") == "balanced" and c.n_iter_ == 3
    assert not np.array_equal(c.model_.params.flat, pb)


def test_cli_distributed_reports_a_bad_file_once_and_fails(mpiexec, tmp_path):
    r = mpirun(mpiexec, 2, ["-m", "attnx", "train", "missing.npz", "--distributed"], tmp_path)
    assert r.returncode != 0
    assert r.stderr.count("attnx train: error: cannot read missing.npz") == 1


# ---- pieces that need no mpiexec ------------------------------------------------------
def test_shard_splits_in_rank_order():
    for n in (1, 7, 10, 33):
        for size in (1, 2, 3, 5):
            parts = [distributed.shard(n, r, size) for r in range(size)]
            idx = np.concatenate([np.arange(n)[p] for p in parts])
            np.testing.assert_array_equal(idx, np.arange(n))
            lens = [p.stop - p.start for p in parts]
            assert max(lens) - min(lens) <= 1


def _fake_ranks(counts):
    ranks = []
    for r in range(len(counts)):
        c = distributed.Communicator.__new__(distributed.Communicator)
        c.counts, c.n = list(counts), sum(counts)
        c.n_local, c.offset = counts[r], sum(counts[:r])
        ranks.append(c)
    return ranks


@pytest.mark.parametrize("shuffle", [True, False])
def test_the_ranks_parts_make_up_each_global_batch(rng, shuffle):
    for counts in ([5], [1, 9, 4], [3, 0, 12, 2], [10, 10]):
        n, bs = sum(counts), 4
        order = rng.permutation(n) if shuffle else None
        plan = [(s, min(bs, n - s), None) for s in range(0, n, bs)]
        if shuffle:  # batches in any order, as for ragged data
            plan = [plan[i] for i in rng.permutation(len(plan))]
        ranks = _fake_ranks(counts)
        parts = [c.batches(order, plan) for c in ranks]
        whole = np.arange(n) if order is None else order
        for k, (start, m, t) in enumerate(plan):
            got = []
            for c, (local, p) in zip(ranks, parts):
                s, ml, tl, mg = p[k]
                assert mg == m and tl == t
                rows = np.arange(s, s + ml) if local is None else local[s:s + ml]
                assert np.all((rows >= 0) & (rows < c.n_local))
                got.append(rows + c.offset)
            np.testing.assert_array_equal(np.sort(np.concatenate(got)),
                                          np.sort(whole[start:start + m]))
            assert sum(p[k][1] for _, p in parts) == m
        for c, (_, p) in zip(ranks, parts):
            rows = c.rows(p, bs)
            assert max(ml for _, ml, _, _ in p) <= rows <= bs


def _trainer(dist, rng, bs, shuffle=True):
    from attnx.estimators._training import Trainer
    return Trainer(None, None, rng, None, None, dist, batch_size=bs, shuffle=shuffle,
                   verbose=0)


@pytest.mark.parametrize("ragged", [False, True])
def test_balanced_plans_use_each_shard_row_once_in_equal_step_counts(ragged):
    from types import SimpleNamespace
    for counts, bs in (([5], 4), ([1, 9, 4], 4), ([10, 10], 7), ([3, 12, 2, 8], 8)):
        ranks = _fake_ranks(counts)
        size = len(counts)
        b = -(-bs // size)
        for c in ranks:
            c.exact, c.size = False, size
            c.rank = ranks.index(c)
        steps = max(-(-n // b) for n in counts)
        rngs = [np.random.default_rng(7) for _ in ranks]  # the same state on every rank
        lengths = [np.random.default_rng(c.rank).integers(1, 9, size=c.n_local) if ragged
                   else None for c in ranks]
        for epoch in range(2):
            orders = []
            for c, rng, ln in zip(ranks, rngs, lengths):
                assert c.local_batch(bs) == b and c.steps_per_epoch(bs) == steps
                data = SimpleNamespace(n=c.n_local, lengths=ln)
                order, parts, rows = _trainer(c, rng, bs).epoch_plan(data, bs)
                assert len(parts) == steps
                used = np.concatenate([np.arange(s, s + m) if order is None else order[s:s + m]
                                       for s, m, _, _ in parts])
                np.testing.assert_array_equal(np.sort(used), np.arange(c.n_local))
                assert rows == max(1, min(b, max(m for _, m, _, _ in parts)))
                if ragged:
                    for s, m, t, _ in parts:
                        if m:
                            assert t >= ln[order[s:s + m]].max()
                orders.append(order)
            # the shared generator advanced alike on every rank
            assert len({r.bit_generator.state["state"]["state"] for r in rngs}) == 1
            if size > 1 and counts[0] == counts[1] and not ragged:
                assert not np.array_equal(orders[0], orders[1])  # independent shuffles
        # one rank: the plan of one process (batch_plan with the shared generator itself)
        if size == 1:
            from attnx.estimators._batches import batch_plan
            o1, p1, _ = _trainer(ranks[0], np.random.default_rng(3), bs).epoch_plan(
                SimpleNamespace(n=counts[0], lengths=lengths[0]), bs)
            o2, p2 = batch_plan(counts[0], bs, np.random.default_rng(3), lengths[0])
            np.testing.assert_array_equal(o1, o2)
            assert [p[:3] for p in p1] == p2


def test_distributed_mode_is_checked():
    X = np.zeros((4, 3, 2))
    with pytest.raises(ValueError, match=r"options\['distributed'\] must be one of "
                       r"\('balanced', 'exact'\).*got 'fast'"):
        attnx.AttentionRegressor(epochs=1, options={"distributed": "fast"}).fit(X, X)
    assert option(attnx.TransformerRegressor(), "distributed") == "balanced"


def test_a_state_without_the_parameter_is_refused():
    from attnx.estimators import _state
    from attnx.estimators import ESTIMATORS
    X, Y = attnx.datasets.max_position_task(8, 3, 2, random_state=0)
    est = attnx.AttentionRegressor(epochs=1, random_state=0).fit(X, Y)
    arrays, config = _state.get_state(est, portable=False)
    assert option(_state.new_from_state(arrays, config, ESTIMATORS), "distributed") == "balanced"
    del config["params"]["options"]  # no value is made up for a missing parameter
    with pytest.raises(_state.StateError, match=r"stored parameters are not those of "
                       r"AttentionRegressor: missing \['options'\], unknown \[\]"):
        _state.new_from_state(arrays, config, ESTIMATORS)


def test_comm_must_be_an_mpi_communicator():
    pytest.importorskip("mpi4py")
    X = np.zeros((4, 3, 2))
    with pytest.raises(TypeError, match="comm must be an mpi4py intracommunicator"):
        attnx.AttentionRegressor(epochs=1).fit(X, X, comm="world")
