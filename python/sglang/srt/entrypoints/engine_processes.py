"""Start the scheduler and detokenizer processes, wait for READY, watch them, stop them.

Shared by the HTTP server and the offline Engine so both run the very same processes.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import threading
import time
from multiprocessing.connection import wait as mp_wait
from typing import Callable, Optional

from sglang.srt.managers.detokenizer_manager import run_detokenizer_process
from sglang.srt.managers.scheduler_process import run_scheduler_process
from sglang.srt.server_args import ConfigError, ServerArgs
from sglang.srt.utils.network import PortArgs
from sglang.srt.utils.process import terminate_processes

logger = logging.getLogger(__name__)


class EngineProcesses:
    def __init__(self, server_args: ServerArgs) -> None:
        self.server_args = server_args
        self.port_args = PortArgs.create()
        self.procs: list[mp.Process] = []
        self.model_info: dict = {}
        self._stopping = False
        self._watcher: Optional[threading.Thread] = None

    def start(self) -> dict:
        """Spawn both children and block until they report READY; returns the model info."""
        ctx = mp.get_context("spawn")
        targets = (("scheduler", run_scheduler_process), ("detokenizer", run_detokenizer_process))
        readers = {}
        try:
            for name, target in targets:
                reader, writer = ctx.Pipe(duplex=False)
                proc = ctx.Process(
                    target=target, name=f"sglang-{name}",
                    args=(self.server_args, self.port_args, writer, os.getpid()), daemon=True,
                )
                proc.start()
                writer.close()
                self.procs.append(proc)
                readers[name] = (reader, proc)
            for name, (reader, proc) in readers.items():
                msg = self._wait_ready(name, reader, proc)
                if name == "scheduler":
                    self.model_info = msg["model_info"]
        except BaseException:
            self.shutdown()
            raise
        return self.model_info

    def start_http_workers(self, model_info: dict) -> None:
        """Spawn the extra HTTP + tokenizer processes (worker ids 1..N-1) and wait until they serve."""
        from sglang.srt.entrypoints.http_worker import run_http_worker_process

        ctx = mp.get_context("spawn")
        pending = []
        for worker_id in range(1, self.server_args.tokenizer_worker_num):
            reader, writer = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=run_http_worker_process, name=f"sglang-http-{worker_id}",
                args=(self.server_args, self.port_args, model_info, worker_id, writer, os.getpid()), daemon=True,
            )
            proc.start()
            writer.close()
            self.procs.append(proc)
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
                except EOFError:
                    msg = {"status": "error", "message": f"the {name} process exited during start-up"}
                if msg.get("status") == "ready":
                    return msg
                raise ConfigError(msg.get("message", f"the {name} process failed to start"))
            if proc.sentinel in ready:
                raise ConfigError(f"The {name} process exited during start-up (exit code {proc.exitcode})")

    def begin_stop(self) -> None:
        """We are shutting down on purpose: children exiting from now on are not a failure."""
        self._stopping = True

    def watch(self, on_death: Callable[[str], None], grace: float = 0.3) -> None:
        """Call `on_death(reason)` from a thread if any child dies while we are not stopping.

        A SIGTERM sent to the whole process group (systemd, `timeout`, `kill -- -PGID`) can reach
        a child a moment before it reaches us, hence the short grace before calling it a crash.
        """

        def _run() -> None:
            sentinels = {p.sentinel: p for p in self.procs}
            ready = mp_wait(list(sentinels))
            if not self._stopping:
                time.sleep(grace)
            if self._stopping:
                return
            proc = sentinels[ready[0]]
            reason = f"{proc.name} exited unexpectedly (exit code {proc.exitcode})"
            logger.error(reason)
            on_death(reason)

        self._watcher = threading.Thread(target=_run, name="engine-watch", daemon=True)
        self._watcher.start()

    def alive(self) -> bool:
        return bool(self.procs) and all(p.is_alive() for p in self.procs)

    def shutdown(self) -> None:
        self._stopping = True
        terminate_processes(self.procs)
        self.port_args.cleanup()
