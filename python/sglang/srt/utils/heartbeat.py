"""Engine heartbeats: is each stage alive, and is it getting through its work?

Every engine process (the scheduler, the detokenizer; one file per process, so data-parallel
replicas each have their own) owns a 24-byte file `heartbeat-<name>` in the server's private IPC
directory holding three float64s on the system-wide monotonic clock:

    beat      written every `interval` seconds by a thread: the process is scheduled at all
              (a stopped or frozen process stops beating)
    progress  the last time the stage finished a piece of work, or picked work up while idle
    pending   how much work it holds now (queued inputs; 1 while the detokenizer renders)

A stage is stalled for `max(now - beat, now - progress if pending else 0)` seconds. The HTTP
processes read the files on `/health` (503 past --watchdog-timeout) and the server process's
watcher exits the server past --watchdog-exit-timeout (entrypoints/engine_processes.py).
"""

from __future__ import annotations

import glob
import multiprocessing
import os
import struct
import threading
import time
from dataclasses import dataclass
from typing import Optional

PREFIX = "heartbeat-"
_LAYOUT = struct.Struct("<ddd")  # beat, progress, pending


def heartbeat_interval(watchdog_timeout: float) -> float:
    """How often a stage beats: four beats per timeout, at most one a second."""
    return min(1.0, max(0.05, watchdog_timeout / 4)) if watchdog_timeout > 0 else 1.0


def stage_name() -> str:
    """This engine process's heartbeat name: its process name without `sglang-` (`scheduler`;
    data-parallel replicas named `sglang-scheduler-1` ... get one file each)."""
    return multiprocessing.current_process().name.removeprefix("sglang-")


class Heartbeat:
    """The writing side, owned by one engine process."""

    def __init__(self, ipc_dir: str, name: str, interval: float = 1.0) -> None:
        self.name = name
        self.interval = interval
        self._fd = os.open(os.path.join(ipc_dir, PREFIX + name), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        now = time.monotonic()
        self._beat, self._progress, self._pending = now, now, 0
        self._lock = threading.Lock()
        self._write()

    def _write(self) -> None:
        with self._lock:
            os.pwrite(self._fd, _LAYOUT.pack(self._beat, self._progress, float(self._pending)), 0)

    def start(self) -> "Heartbeat":
        """Beat from a daemon thread every `interval` seconds until the process exits."""

        def run() -> None:
            while True:
                time.sleep(self.interval)
                self.beat()

        threading.Thread(target=run, name=f"heartbeat-{self.name}", daemon=True).start()
        return self

    def beat(self) -> None:
        """The process is running (the thread started by `start` calls this)."""
        self._beat = time.monotonic()
        self._write()

    def set_pending(self, pending: int) -> None:
        """The stage holds `pending` units of work; picking work up while idle starts its clock."""
        if pending > 0 and self._pending == 0:
            self._progress = time.monotonic()
        if pending != self._pending:
            self._pending = pending
            self._write()

    def progressed(self, pending: int) -> None:
        """The stage finished a piece of work and holds `pending` more."""
        self._progress = time.monotonic()
        self._pending = pending
        self._write()


@dataclass(frozen=True)
class StageBeat:
    name: str
    beat: float
    progress: float
    pending: float

    def stalled_for(self, now: float) -> float:
        idle_beat = now - self.beat
        stuck = now - self.progress if self.pending > 0 else 0.0
        return max(idle_beat, stuck, 0.0)

    def describe(self, now: float) -> str:
        if now - self.beat >= self.stalled_for(now):
            return f"the {self.name} process has not answered for {now - self.beat:.1f} s"
        return f"the {self.name} process has made no progress on its work for {now - self.progress:.1f} s"


class HeartbeatReader:
    """The reading side: every stage's heartbeat in an IPC directory."""

    def __init__(self, ipc_dir: str) -> None:
        self.ipc_dir = ipc_dir
        self._fds: dict[str, int] = {}

    def _scan(self) -> None:
        for path in glob.glob(os.path.join(self.ipc_dir, PREFIX + "*")):
            name = os.path.basename(path)[len(PREFIX) :]
            if name not in self._fds:
                try:
                    self._fds[name] = os.open(path, os.O_RDONLY)
                except OSError:
                    pass

    def read(self) -> list[StageBeat]:
        self._scan()
        beats = []
        for name, fd in self._fds.items():
            data = os.pread(fd, _LAYOUT.size, 0)
            if len(data) == _LAYOUT.size:
                beats.append(StageBeat(name, *_LAYOUT.unpack(data)))
        return beats

    def stalled(self, timeout: float, now: Optional[float] = None) -> list[tuple[StageBeat, float]]:
        """The stages stalled for at least `timeout` seconds (none when timeout is 0: off)."""
        if timeout <= 0:
            return []
        now = time.monotonic() if now is None else now
        out = []
        for beat in self.read():
            stalled = beat.stalled_for(now)
            if stalled >= timeout:
                out.append((beat, stalled))
        return out

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
