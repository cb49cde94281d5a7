"""One model's engine processes: start the scheduler replica(s) and the detokenizer, wait for
READY, watch them, stop them.

Shared by the HTTP server (one per served model, entrypoints/server_processes.py) and the offline
Engine, so both run the very same processes.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing as mp
import os
import signal
import threading
import time
from multiprocessing.connection import wait as mp_wait
from typing import Callable, Optional

from sglang.srt.configs.model_info import ModelInfo, ReplicaInfo
from sglang.srt.entrypoints.child_start import StartingChild, start_child
from sglang.srt.errors import ConfigError
from sglang.srt.model_executor.replica_slots import plan_slots
from sglang.srt.renderer.detokenizer_manager import run_detokenizer_process
from sglang.srt.scheduler.scheduler_process import replica_name, run_scheduler_process
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.allocator import AllocatorPlan, openmp_wait_env, plan_allocator
from sglang.srt.utils.heartbeat import HeartbeatReader, heartbeat_interval
from sglang.srt.utils.network import PortArgs
from sglang.srt.utils.process import mark_stopping, terminate_processes

logger = logging.getLogger(__name__)
# What a scheduler imports while the model is checked: torch, the model code, and transformers'
# config machinery (its first AutoConfig scans every model module's exports: ~1.4 s). What is left
# for it once told to run is loading the weights (MiniLM: ~0.2 s).
SCHEDULER_PRELOAD = ("torch", "sglang.srt.model_executor.model_runner", "transformers.models.auto.configuration_auto")


class EngineProcesses:
    """One model's engine: its scheduler replica(s) and its detokenizer, with their own sockets."""

    def __init__(
        self, server_args: ServerArgs, port_args: Optional[PortArgs] = None, label: Optional[str] = None
    ) -> None:
        self.server_args = server_args
        self.label_name = label
        self.label = f"model {label}: " if label else ""  # start-up lines of a server with several models
        self.port_args = port_args or PortArgs.create()
        self.procs: list[mp.Process] = []
        self.model_info: Optional[ModelInfo] = None
        self._readers: dict[str, tuple] = {}
        self._stopping = False  # shutdown() is stopping the children
        self._draining = False  # SIGTERM/SIGINT: the HTTP processes finish their requests first
        self._watcher: Optional[threading.Thread] = None
        self._starting: list[tuple[StartingChild, dict]] = []  # prestart()ed, not told to run yet
        self._allocator_plan = plan_allocator(server_args.cpu_allocator)
        self._slots = plan_slots(server_args.dp_size)

    def start(self) -> ModelInfo:
        """Spawn the scheduler replica(s) and the detokenizer, block until all report READY, and
        return the model info (with every replica's placement)."""
        self.spawn()
        return self.wait_ready()

    def prestart(self) -> None:
        """Start the processes importing torch and the model code while the caller still checks
        the model (entrypoints/child_start.py); spawn() tells them to go, shutdown() stops them."""
        if not self._starting:
            self._starting = self._start_children()

    def spawn(self) -> None:
        """Start the processes without waiting for them (a server with several models loads them
        side by side, then waits: entrypoints/server_processes.py)."""
        try:
            children = self._starting or self._start_children()
            self._starting = []
            for child, extra in children:
                self.procs.append(child.proc)
                self._readers[child.name] = (child.ready, child.proc)
                child.run(server_args=self.server_args, port_args=self.port_args, parent_pid=os.getpid(), **extra)
        except BaseException:
            self.kill()
            raise

    def _start_children(self) -> list[tuple[StartingChild, dict]]:
        """Each process started (replicas in rank order, then the detokenizer), with what it is
        told besides the model, sockets and parent."""
        scheduler_env = scheduler_environment(self._allocator_plan)  # the allocator's preload, OpenMP's spin count
        children = [
            (
                start_child(f"sglang-{replica_name(slot)}", run_scheduler_process, scheduler_env, SCHEDULER_PRELOAD),
                {"slot": slot, "allocator_plan": self._allocator_plan},
            )
            for slot in self._slots
        ]
        return children + [(start_child("sglang-detokenizer", run_detokenizer_process, {}), {})]

    def wait_ready(self) -> ModelInfo:
        """Block until every spawned process reported READY (a ConfigError and a full stop if one
        fails or times out)."""
        try:
            infos = []
            for name, (reader, proc) in self._readers.items():
                msg = wait_ready(name.removeprefix("sglang-"), reader, proc, self.server_args.startup_timeout)
                if "model_info" in msg:
                    infos.append(msg["model_info"])
            self.model_info = merge_replica_infos(infos)
        except BaseException:
            self.kill()
            raise
        self._readers.clear()
        for replica in self.model_info.replicas:
            pid = self.procs[replica.dp_rank].pid  # spawned in rank order, the detokenizer last
            logger.info("%sreplica %d: %s, pid %s", self.label, replica.dp_rank, describe_replica(replica), pid)
        return self.model_info

    def begin_stop(self) -> None:
        """SIGTERM/SIGINT reached the server: the engine keeps serving the HTTP processes' drain.

        The scheduler and detokenizer keep running until shutdown() (they ignore a process-group
        SIGTERM while we live, see utils/process.py); a stall is no longer worth a kill.
        """
        self._draining = True

    def watch(self, on_death: Callable[[str], None]) -> None:
        """Call `on_death(reason)` from a thread if a process dies before shutdown() stops it, or
        stalls past --watchdog-exit-timeout (it is killed first). A death during a drain is a crash too."""
        exit_after = self.server_args.watchdog_exit_timeout
        heartbeats = HeartbeatReader(self.port_args.ipc_dir)

        def _run() -> None:
            watched = [p.sentinel for p in self.procs]
            while True:
                ready = mp_wait(watched, timeout=heartbeat_interval(exit_after) if exit_after > 0 else None)
                if self._stopping:
                    return
                if not ready:
                    reason = None if self._draining else self._kill_stalled(heartbeats, exit_after)
                    if reason is not None:
                        on_death(reason)
                        return
                    continue
                proc = next(p for p in self.procs if p.sentinel == ready[0])
                proc.join(1.0)
                reason = f"{proc.name} exited unexpectedly ({describe_exit(proc.exitcode)})"
                logger.error("%s%s", self.label, reason)
                on_death(reason)
                return

        self._watcher = threading.Thread(target=_run, name="engine-watch", daemon=True)
        self._watcher.start()

    def _kill_stalled(self, heartbeats: HeartbeatReader, exit_after: float) -> Optional[str]:
        """SIGKILL an engine process stalled past `exit_after` seconds; the reason, or None."""
        stalled = heartbeats.stalled(exit_after)
        if not stalled:
            return None
        beat, _ = stalled[0]
        reason = f"{beat.describe(time.monotonic())} (--watchdog-exit-timeout {exit_after:g} s)"
        logger.error("%s: killing it", reason)
        for p in self.procs:
            if p.name == f"sglang-{beat.name}" and p.pid is not None and p.is_alive():
                os.kill(p.pid, signal.SIGKILL)  # a stopped process ignores SIGTERM until continued
        return reason

    def alive(self) -> bool:
        return bool(self.procs) and all(p.is_alive() for p in self.procs)

    def kill(self) -> None:
        """SIGKILL whatever is left of these processes, keeping the sockets' directory: a failed
        start-up (the caller stops the rest), or a dead model's engine about to be started again."""
        self._stopping = True
        self._discard_starting()
        for p in self.procs:
            if p.is_alive():
                p.kill()
        for p in self.procs:
            p.join(5.0)
        for reader, _ in self._readers.values():
            reader.close()
        self._readers.clear()

    def _discard_starting(self) -> None:
        for child, _ in self._starting:
            child.discard()
        self._starting = []

    def shutdown(self) -> None:
        """Stop the scheduler(s) and the detokenizer and remove the sockets (idempotent)."""
        self._stopping = True
        self._discard_starting()
        mark_stopping(self.port_args.ipc_dir)
        terminate_processes(self.procs)
        for reader, _ in self._readers.values():
            reader.close()
        self._readers.clear()
        self.port_args.cleanup()


def scheduler_environment(plan: AllocatorPlan) -> dict[str, str]:
    """What a scheduler replica's environment gets on top of ours: the allocator's preload and
    caps (utils/allocator.py), and OpenMP's spin count unless the operator set a wait policy.
    libgomp reads these once, when the child loads torch, so they must be there at spawn."""
    return {**plan.env, **openmp_wait_env()}


def wait_ready(name: str, reader, proc: mp.Process, timeout: float) -> dict:
    """The READY message of a starting child (a ConfigError when it fails, dies or takes too long)."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ConfigError(f"The {name} process did not start within {timeout:.0f} s")
        ready = mp_wait([reader, proc.sentinel], timeout=left)
        if reader in ready:
            try:
                msg = reader.recv()
            except EOFError:  # it died before saying anything: say how
                proc.join(5.0)
                died = describe_exit(proc.exitcode)
                raise ConfigError(f"The {name} process exited during start-up ({died})") from None
            if msg.get("status") == "ready":
                return msg
            raise ConfigError(msg.get("message", f"the {name} process failed to start"))
        if proc.sentinel in ready:
            proc.join(1.0)
            raise ConfigError(f"The {name} process exited during start-up ({describe_exit(proc.exitcode)})")


def merge_replica_infos(infos: list[ModelInfo]) -> ModelInfo:
    """One ModelInfo for the server: replica 0's, listing every replica's placement."""
    first = infos[0]
    replicas = tuple(r for info in infos for r in info.replicas)
    return dataclasses.replace(first, dp_size=len(infos), replicas=replicas)


def describe_replica(replica: ReplicaInfo) -> str:
    """`cpu (cores 0-1, 2 torch threads)` or `cuda:1`: what the start-up log shows for a replica."""
    if replica.cpu_cores is None:
        return replica.device
    return f"{replica.device} (cores {format_cores(replica.cpu_cores)}, {replica.cpu_threads} torch threads)"


def format_cores(cores: tuple[int, ...]) -> str:
    """(0, 1, 2, 5) -> '0-2,5' (the taskset / cpuset list form)."""
    spans: list[list[int]] = []
    for c in sorted(cores):
        if spans and c == spans[-1][1] + 1:
            spans[-1][1] = c
        else:
            spans.append([c, c])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in spans)


def describe_exit(code: Optional[int]) -> str:
    """A child's exit code in words; a SIGKILL during start-up is most often the OOM killer."""
    if code is None:
        return "still running"
    if code >= 0:
        return f"exit code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    hint = " (possibly the kernel's out-of-memory killer)" if -code == signal.SIGKILL else ""
    return f"killed by {name}{hint}"
