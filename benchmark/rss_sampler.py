"""Resident memory of every process of one server, sampled from /proc, and the growth verdict.

Used by bench_soak.py and by the soak test (test/srt/entrypoints/test_memory_soak_e2e.py).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

# /proc/PID/comm of the server's processes (Linux keeps 15 bytes: utils/process.py) -> role
ROLES = {"sglang-schedule": "scheduler", "sglang-detokeni": "detokenizer"}


def rss_mb(pid: int) -> Optional[float]:
    """Resident set size from /proc/PID/status (VmRSS), in MB; None when the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def memory_mb(pid: int) -> Optional[tuple[float, float]]:
    """(RSS, PSS) of a process in MB, from /proc/<pid>/smaps_rollup; None when it is gone."""
    found: dict[str, float] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("Rss", "Pss"):
                    found[key] = int(rest.split()[0]) / 1024
    except OSError:
        return None
    return (found["Rss"], found["Pss"]) if len(found) == 2 else None


def cpu_seconds(pid: int) -> Optional[float]:
    """User + system CPU time a process (all its threads) has used, from /proc/PID/stat; None when gone.

    On a shared machine wall-clock throughput swings with the neighbours' load; work per CPU-second
    of the scheduler is the steadier measure of what an allocator setting costs.
    """
    try:
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> Optional[tuple[str, int]]:
    """(comm, session id) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    comm = raw[raw.index("(") + 1 : raw.rindex(")")]
    return comm, int(raw[raw.rindex(")") + 2 :].split()[3])


def server_processes(server_pid: int) -> dict[str, int]:
    """role -> pid for the server process (`http`) and every sglang child in its session.

    The benchmark starts the server in a session of its own, so its children are the processes
    of that session. Several processes of one role (data-parallel schedulers) are `scheduler`,
    `scheduler-2`, ... in pid order; compilers and other helpers are left out.
    """
    found: dict[str, int] = {"http": server_pid}
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == server_pid:
            continue
        stat = _stat(int(name))
        if stat is not None and stat[1] == server_pid:
            members.append((int(name), stat[0]))
    for pid, comm in sorted(members):
        if comm in ROLES:
            role = ROLES[comm]
        elif comm.startswith("sglang-sched-"):  # a data-parallel replica: sglang-sched-<dp_rank>
            role = "scheduler"
        elif comm.startswith("sglang-http-"):
            role = comm.removeprefix("sglang-")
        else:
            continue
        key, n = role, 2
        while key in found:
            key, n = f"{role}-{n}", n + 1
        found[key] = pid
    return found


@dataclass
class RssLog:
    """Samples (seconds since start, role -> MB) taken every `interval` seconds by a thread."""

    server_pid: int
    interval: float = 10.0
    samples: list[tuple[float, dict[str, float]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.start_time = time.monotonic()

    def sample(self) -> dict[str, float]:
        row = {role: mb for role, pid in server_processes(self.server_pid).items() if (mb := rss_mb(pid)) is not None}
        self.samples.append((time.monotonic() - self.start_time, row))
        return row

    def start(self) -> "RssLog":
        def run() -> None:
            while not self._stop.wait(self.interval):
                self.sample()

        self.sample()
        self._thread = threading.Thread(target=run, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()

    def roles(self) -> list[str]:
        seen: dict[str, None] = {}
        for _, row in self.samples:
            seen.update(dict.fromkeys(row))
        return list(seen)

    def series(self, role: str) -> list[tuple[float, float]]:
        return [(t, row[role]) for t, row in self.samples if role in row]


@dataclass(frozen=True)
class Growth:
    role: str
    baseline_mb: float  # median of the samples in the first `window` seconds after the warm-up
    final_mb: float  # median of the samples in the last `window` seconds of the run
    peak_mb: float  # highest sample after the warm-up

    @property
    def ratio(self) -> float:
        return self.final_mb / self.baseline_mb - 1.0


def growth(series: list[tuple[float, float]], warmup: float, window: float, role: str = "") -> Optional[Growth]:
    """How much a process grew after the warm-up: the median of the first window after it against
    the median of the last window of the run (single samples swing with the batch that happened to
    be running), plus the peak after the warm-up; None without samples. The baseline is taken after
    the warm-up, not in its last window: the scheduler's RSS still rises then (oneDNN's kernel cache
    and the allocator's pool filling), and that is what the warm-up is there to leave out."""
    if not series:
        return None
    end = series[-1][0]
    base = [mb for t, mb in series if warmup <= t <= warmup + window] or [series[0][1]]
    final = [mb for t, mb in series if t >= end - window] or [series[-1][1]]
    after = [mb for t, mb in series if t >= warmup] or final
    return Growth(role, statistics.median(base), statistics.median(final), max(after))
