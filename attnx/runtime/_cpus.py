"""The CPUs an attnx process may use, and how many of them other processes leave idle.

- usable(): CPUs this process may run on (its affinity mask, a cgroup v2 / v1 CPU
  quota), shared among the MPI ranks on this node (MPICH's MPI_LOCALNRANKS, Open MPI's
  OMPI_COMM_WORLD_LOCAL_SIZE, MVAPICH's MV2_COMM_WORLD_LOCAL_SIZE, Slurm's
  SLURM_NTASKS_PER_NODE). Read once per process.
- LoadSampler.idle(): CPUs of this process's set that were idle or busy with this
  process itself over the last interval (from /proc/stat's per-CPU counters, less this
  process's own CPU time), i.e. what another thread of ours could get; None where
  /proc/stat is not there (the policy then goes by work alone).

Nothing here starts a thread or calls into a library: a few small file reads.
"""
from __future__ import annotations

import math
import os
import threading
import time
from typing import Callable

#: environment variables that say how many MPI ranks share this node
LOCAL_RANK_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE",
                   "MV2_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE")


def affinity() -> list[int]:
    """CPU numbers this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return list(range(os.cpu_count() or 1))


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def cgroup_quota(read: Callable[[str], str | None] = _read) -> float | None:
    """CPUs of this process's cgroup CPU quota (cpu.max or cfs_quota/period), if any."""
    v2 = read("/sys/fs/cgroup/cpu.max")
    if v2:
        parts = v2.split()
        if len(parts) == 2 and parts[0] != "max":
            try:
                return max(int(parts[0]) / int(parts[1]), 1e-9)
            except (ValueError, ZeroDivisionError):
                return None
        return None
    quota = read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
    period = read("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
    try:
        q, p = int(quota or ""), int(period or "")
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def local_ranks(environ: "os._Environ[str] | dict[str, str] | None" = None) -> int:
    """MPI ranks (or Slurm tasks) on this node, from their launchers' variables; 1."""
    env = os.environ if environ is None else environ
    for var in LOCAL_RANK_VARS:
        raw = env.get(var, "")
        try:
            n = int(raw.split("(")[0].split(",")[0])
        except ValueError:
            continue
        if n >= 1:
            return n
    return 1


def usable(cpus: int | None = None, quota: float | None = None, ranks: int | None = None
           ) -> int:
    """CPUs for this process: its affinity set, within a cgroup quota, per local rank."""
    n = len(affinity()) if cpus is None else cpus
    q = cgroup_quota() if quota is None else quota
    if q is not None:
        n = min(n, max(1, math.floor(q + 0.5)))
    r = local_ranks() if ranks is None else ranks
    return max(1, n // max(1, r))


def _proc_stat(cpus: list[int]) -> tuple[float, int] | None:
    """(busy seconds summed over `cpus`, number of those CPUs found) from /proc/stat."""
    text = _read("/proc/stat")
    if text is None:
        return None
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    want = set(cpus)
    busy, found = 0, 0
    for line in text.splitlines():
        if not line.startswith("cpu") or line.startswith("cpu "):
            continue
        name, *vals = line.split()
        try:
            cpu = int(name[3:])
        except ValueError:
            continue
        if cpu not in want or len(vals) < 4:
            continue
        v = [int(x) for x in vals[:8]]
        # user nice system idle iowait irq softirq steal: busy = all but idle, iowait
        busy += sum(v) - v[3] - (v[4] if len(v) > 4 else 0)
        found += 1
    return (busy / hz, found) if found else None


#: shortest interval a load reading is taken over (seconds)
MIN_WALL = 0.1


def _running_now(ncpu: int) -> float | None:
    """CPUs free now by /proc/loadavg's count of running threads (this one included)."""
    text = _read("/proc/loadavg")
    try:
        running = int(text.split()[3].split("/")[0]) if text else -1
    except (IndexError, ValueError):
        return None
    return None if running < 1 else float(max(0, ncpu - (running - 1)))


class LoadSampler:
    """CPUs (of `cpus`) that other processes left idle over the last interval.

    idle() re-reads /proc/stat at most every `interval` seconds and returns the value
    of the last complete interval in between; the first call measures from the
    sampler's creation (the import of attnx). Thread-safe."""

    def __init__(self, cpus: list[int] | None = None, interval: float = 0.25,
                 stat: Callable[[list[int]], tuple[float, int] | None] = _proc_stat,
                 clock: Callable[[], float] = time.monotonic,
                 own_cpu: Callable[[], float] = time.process_time) -> None:
        self.cpus = affinity() if cpus is None else cpus
        self.interval, self._stat, self._clock, self._own = interval, stat, clock, own_cpu
        self._lock = threading.Lock()
        self._last: tuple[float, float, float] | None = None
        self._value: float | None = None
        self._take()

    def _take(self) -> None:
        got = self._stat(self.cpus)
        if got is None:
            return
        sample = (self._clock(), got[0], self._own())
        prev = self._last
        if prev is None:
            self._last = sample
            return
        wall = sample[0] - prev[0]
        if wall < MIN_WALL:   # /proc/stat counts in 10 ms ticks: too short to tell
            return
        self._last = sample
        others = max(0.0, (sample[1] - prev[1]) - (sample[2] - prev[2])) / wall
        self._value = max(0.0, len(self.cpus) - others)

    def idle(self) -> float | None:
        """CPUs free for this process (its own busy CPUs count as free), or None."""
        with self._lock:
            if self._last is None:
                return None
            if self._clock() - self._last[0] >= self.interval or self._value is None:
                self._take()
            if self._value is None:   # no interval long enough yet: the running count now
                return _running_now(len(self.cpus))
            return self._value
