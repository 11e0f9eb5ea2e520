"""Run under `mpiexec -n P python -m mpi4py faults.py MODE`: one rank fails, and then?

Modes (the failing rank is the last one):
  bad_input   its shard holds a NaN: fit's input check fails there;
  mismatch    it passes another learning rate than the other ranks;
  step_error  its loss computation raises in the 4th training step;
  diverge     its shard holds huge targets, so the global loss overflows;
  dropout     every rank asks for dropout, which comm's exact mode does not support;
  classifier_bad_input   a balanced classifier; its shard holds a NaN, so it fails
              before the others exchange their labels (classes_ from every rank);
  kill        it kills itself (SIGKILL) in the 20th step of a long fit;
  hang        it sleeps forever inside a step (run with MPIEXEC_TIMEOUT); every rank writes
              its pid to rank<r>.pid in the working directory when its fit starts, and the
              last one writes hanging.pid when it starts sleeping;
  interrupt   it gets a Ctrl-C (SIGINT) in the 20th step of a long fit: every rank must stop
              after the same step, with identical weights ("STOPPED t digest");
  interrupt2  it gets two Ctrl-C inside the 20th step (the second raises KeyboardInterrupt
              there): every rank must drop that step and stop, with identical weights.
Every rank that raises prints one line "RAISED <class>: <message>" and exits with
status 3; the pytest side checks that every rank printed the same line.
"""
import hashlib
import os
import signal
import sys
import time
import warnings

import numpy as np
from mpi4py import MPI

import attnx
import attnx.layers.losses

COMM = MPI.COMM_WORLD
RANK, P = COMM.Get_rank(), COMM.Get_size()
LAST = P - 1


def main(mode):
    X, Y = attnx.datasets.max_position_task(24 * P, 5, 4, random_state=0)
    X, Y = (a[24 * RANK:24 * (RANK + 1)].astype(np.float64) for a in (X, Y))
    params = dict(epochs=3, batch_size=8, lr=0.01, random_state=0, dtype=np.float64)
    if mode == "dropout":  # on every rank: refused before any training in exact mode
        params.update(d_model=8, dropout=0.1, options={"distributed": "exact"})
    if mode in ("kill", "hang", "interrupt", "interrupt2"):
        params["epochs"] = 10**6  # would run for hours: the fault must end it
    if RANK == LAST:
        if mode in ("bad_input", "classifier_bad_input"):
            X[3, 2, 1] = np.nan
        elif mode == "mismatch":
            params["lr"] = 0.02
        elif mode == "diverge":
            Y *= 1e160  # finite, but its squared error overflows
        elif mode == "step_error":
            real, calls = attnx.layers.losses.mse_loss, [0]

            def failing(*a, **k):
                calls[0] += 1
                if calls[0] == 4:
                    raise MemoryError("simulated failure inside the loss")
                return real(*a, **k)

            attnx.layers.losses.mse_loss = failing
        elif mode in ("kill", "interrupt"):  # 20 steps into the fit
            real, calls = attnx.layers.losses.mse_loss, [0]
            sig = signal.SIGKILL if mode == "kill" else signal.SIGINT

            def signalled(*a, **k):
                calls[0] += 1
                if calls[0] == 20:
                    os.kill(os.getpid(), sig)
                return real(*a, **k)

            attnx.layers.losses.mse_loss = signalled
        elif mode == "interrupt2":
            real, calls = attnx.layers.losses.mse_loss, [0]

            def twice(*a, **k):
                calls[0] += 1
                if calls[0] == 20:
                    os.kill(os.getpid(), signal.SIGINT)  # the guard notes it
                    os.kill(os.getpid(), signal.SIGINT)  # raises KeyboardInterrupt here
                return real(*a, **k)

            attnx.layers.losses.mse_loss = twice
        elif mode == "hang":
            real, calls = attnx.layers.losses.mse_loss, [0]

            def hanging(*a, **k):
                calls[0] += 1
                if calls[0] == 4:
                    _write_pid("hanging.pid")
                    time.sleep(10**6)
                return real(*a, **k)

            attnx.layers.losses.mse_loss = hanging
    est = attnx.AttentionRegressor(2, **params)
    if mode == "classifier_bad_input":
        est = attnx.AttentionClassifier(2, class_weight="balanced", **params)
        Y = (X[:, :, 0].sum(axis=1) > 0).astype(int)
    if mode == "hang":
        _write_pid(f"rank{RANK}.pid")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est.fit(X, Y, comm=COMM)
    except Exception as exc:
        print(f"RAISED {type(exc).__name__}: {exc}", flush=True)
        sys.exit(3)
    if mode in ("interrupt", "interrupt2"):
        digest = hashlib.blake2b(est.model_.params.flat.tobytes(), digest_size=8).hexdigest()
        warned = any("interrupted" in str(w.message) for w in caught)
        print(f"STOPPED t={est.optimizer_.t} {digest} warned={warned}", flush=True)
        return
    print("FINISHED", flush=True)


def _write_pid(name):
    """This process's pid in `name` (written whole, then renamed: never read half-written)."""
    with open(name + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(name + ".tmp", name)


if __name__ == "__main__":
    main(sys.argv[1])
