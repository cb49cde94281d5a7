"""Start the scheduler replica(s) and the detokenizer, wait for READY, watch them, stop them.

Shared by the HTTP server and the offline Engine so both run the very same processes.
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
from sglang.srt.errors import ConfigError
from sglang.srt.model_executor.replica_slots import plan_slots
from sglang.srt.renderer.detokenizer_manager import run_detokenizer_process
from sglang.srt.scheduler.scheduler_process import replica_name, run_scheduler_process
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.allocator import child_environment, plan_allocator
from sglang.srt.utils.heartbeat import HeartbeatReader, heartbeat_interval
from sglang.srt.utils.network import PortArgs
from sglang.srt.utils.process import ENGINE_DEAD_SIGNAL, ENGINE_DEATH_GRACE, mark_stopping, terminate_processes

logger = logging.getLogger(__name__)

# An extra HTTP worker's process target: (server_args, port_args, model_info, worker_id, ready_pipe, parent_pid).
HttpWorkerEntry = Callable[..., None]


class EngineProcesses:
    def __init__(self, server_args: ServerArgs) -> None:
        self.server_args = server_args
        self.port_args = PortArgs.create()
        self.procs: list[mp.Process] = []
        self.http_procs: list[mp.Process] = []  # extra HTTP workers (also in procs)
        self.model_info: Optional[ModelInfo] = None
        self._stopping = False  # shutdown() is stopping the children
        self._draining = False  # SIGTERM/SIGINT: HTTP processes finish their requests, then exit
        self._watcher: Optional[threading.Thread] = None

    def start(self) -> ModelInfo:
        """Spawn the scheduler replica(s) and the detokenizer, block until all report READY, and
        return the model info (with every replica's placement)."""
        ctx = mp.get_context("spawn")
        # The scheduler's allocator is preloaded through its environment (utils/allocator.py).
        plan = plan_allocator(self.server_args.cpu_allocator)
        slots = plan_slots(self.server_args.dp_size)
        targets = [(f"sglang-{replica_name(slot)}", run_scheduler_process, (slot, plan), plan.env) for slot in slots]
        targets.append(("sglang-detokenizer", run_detokenizer_process, (), {}))
        readers = {}
        try:
            for name, target, extra, env in targets:
                reader, writer = ctx.Pipe(duplex=False)
                proc = ctx.Process(
                    target=target,
                    name=name,
                    args=(self.server_args, self.port_args, writer, os.getpid(), *extra),
                    daemon=True,
                )
                with child_environment(env):
                    proc.start()
                writer.close()
                self.procs.append(proc)
                readers[name] = (reader, proc)
            infos = []
            for name, (reader, proc) in readers.items():
                msg = self._wait_ready(name.removeprefix("sglang-"), reader, proc)
                if "model_info" in msg:
                    infos.append(msg["model_info"])
            self.model_info = merge_replica_infos(infos)
        except BaseException:
            self.shutdown()
            raise
        for replica in self.model_info.replicas:
            logger.info("replica %d: %s", replica.dp_rank, describe_replica(replica))
        return self.model_info

    def start_http_workers(self, model_info: ModelInfo, worker_entry: HttpWorkerEntry) -> None:
        """Spawn the extra HTTP + tokenizer processes (worker ids 1..N-1) and wait until they serve.

        `worker_entry` is the process's target (http_worker.run_http_worker_process), handed in by
        the launch sequence so that this module, shared with the offline Engine, knows nothing of HTTP.
        """
        ctx = mp.get_context("spawn")
        pending = []
        for worker_id in range(1, self.server_args.tokenizer_worker_num):
            reader, writer = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=worker_entry,
                name=f"sglang-http-{worker_id}",
                args=(self.server_args, self.port_args, model_info, worker_id, writer, os.getpid()),
                daemon=True,
            )
            proc.start()
            writer.close()
            self.procs.append(proc)
            self.http_procs.append(proc)
            pending.append((f"http-{worker_id}", reader, proc))
        for name, reader, proc in pending:
            self._wait_ready(name, reader, proc)

    def _wait_ready(self, name: str, reader, proc: mp.Process) -> dict:
        deadline = time.monotonic() + self.server_args.startup_timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ConfigError(f"The {name} process did not start within {self.server_args.startup_timeout:.0f} s")
            ready = mp_wait([reader, proc.sentinel], timeout=left)
            if reader in ready:
                try:
                    msg = reader.recv()
                except EOFError:  # it died before saying anything: say how
                    proc.join(5.0)
                    raise ConfigError(
                        f"The {name} process exited during start-up ({describe_exit(proc.exitcode)})"
                    ) from None
                if msg.get("status") == "ready":
                    return msg
                raise ConfigError(msg.get("message", f"the {name} process failed to start"))
            if proc.sentinel in ready:
                proc.join(1.0)
                raise ConfigError(f"The {name} process exited during start-up ({describe_exit(proc.exitcode)})")

    def begin_stop(self) -> None:
        """SIGTERM/SIGINT reached the server: the HTTP workers drain too, the engine keeps serving them.

        Called from the signal handler. The scheduler and detokenizer keep running until
        shutdown() (they ignore a process-group SIGTERM while we live, see utils/process.py).
        """
        self._draining = True
        for p in self.http_procs:
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, signal.SIGTERM)

    def notify_engine_dead(self) -> None:
        """Tell the extra HTTP workers the engine died: they fail their requests with 503 and exit."""
        for p in self.http_procs:
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, ENGINE_DEAD_SIGNAL)

    def watch(self, on_death: Callable[[str], None], grace: float = 0.3) -> None:
        """Call `on_death(reason)` from a thread if a child dies before shutdown() stops them, or
        if an engine process stalls past --watchdog-exit-timeout (it is killed first).

        HTTP workers exiting while we drain are expected (they drained too). A SIGTERM sent to the
        whole process group reaches an HTTP worker maybe a moment before us, hence the short grace
        before calling its exit a crash. The scheduler or detokenizer dying during a drain is a crash.
        """
        exit_after = self.server_args.watchdog_exit_timeout
        heartbeats = HeartbeatReader(self.port_args.ipc_dir)

        def _run() -> None:
            watched = {p.sentinel: p for p in self.procs}
            while watched:
                ready = mp_wait(list(watched), timeout=heartbeat_interval(exit_after) if exit_after > 0 else None)
                if self._stopping:
                    return
                if not ready:
                    reason = None if self._draining else self._kill_stalled(heartbeats, exit_after)
                    if reason is not None:
                        on_death(reason)
                        return
                    continue
                proc = watched.pop(ready[0])
                is_http = proc in self.http_procs
                if is_http and not self._draining:
                    time.sleep(grace)
                if self._stopping:
                    return
                if is_http and self._draining:
                    continue
                proc.join(1.0)
                reason = f"{proc.name} exited unexpectedly ({describe_exit(proc.exitcode)})"
                logger.error(reason)
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

    def shutdown(self) -> None:
        """Stop the HTTP workers (letting them finish a drain), then the scheduler and detokenizer."""
        self._stopping = True
        if self.http_procs:
            grace = self.server_args.graceful_timeout
            # Told to stop already: by begin_stop() (let them drain) or notify_engine_dead() (their
            # requests have failed; they answer their open connections 503 for ENGINE_DEATH_GRACE).
            drain = (grace + 5.0 if grace > 0 else None) if self._draining else ENGINE_DEATH_GRACE + 1.5
            deadline = None if drain is None else time.monotonic() + drain
            for p in self.http_procs:
                p.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            terminate_processes(self.http_procs)
        mark_stopping(self.port_args.ipc_dir)
        terminate_processes([p for p in self.procs if p not in self.http_procs])
        self.port_args.cleanup()


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
