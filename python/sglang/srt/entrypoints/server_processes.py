"""Every process of a server: each served model's engine (EngineProcesses), and the extra HTTP workers.

Models load side by side when the machine's free memory holds all their weights at once (one
progress line per model), and are watched one by one: a model whose scheduler or detokenizer dies
is reported alone (`on_model_death`), so the server keeps serving the others; the HTTP workers
learn which model died from a marker file in that model's IPC directory (`dead_marker`).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import threading
import time
from multiprocessing.connection import wait as mp_wait
from typing import Callable

from sglang.srt.configs.served_models import ServedModel, model_label
from sglang.srt.entrypoints.engine_processes import EngineProcesses, describe_exit, wait_ready
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.process import ENGINE_DEAD_SIGNAL, ENGINE_DEATH_GRACE, terminate_processes

logger = logging.getLogger(__name__)

# An extra HTTP worker's process target: (server_args, models, worker_id, ready_pipe, parent_pid).
HttpWorkerEntry = Callable[..., None]
DEAD_MARKER = "engine-dead"


def dead_marker(ipc_dir: str) -> str:
    """The file whose presence tells an HTTP worker that this model's engine died."""
    return os.path.join(ipc_dir, DEAD_MARKER)


class ServerProcesses:
    def __init__(self, server_args: ServerArgs, models: list[ServerArgs]) -> None:
        self.server_args = server_args
        several = len(models) > 1
        self.engines = [EngineProcesses(m, label=model_label(m) if several else None) for m in models]
        self.http_procs: list[mp.Process] = []
        self.served: list[ServedModel] = []
        self._stopping = False
        self._draining = False

    @property
    def ipc_dir(self) -> str:
        """The server's own directory (the first model's): metrics files, the HTTP workers' parent watch."""
        return self.engines[0].port_args.ipc_dir

    def start(self) -> list[ServedModel]:
        """Start every model's engine and wait until all are ready (all stopped if one fails)."""
        together = len(self.engines) > 1 and fits_in_memory([e.server_args for e in self.engines])
        if len(self.engines) > 1:
            how = "side by side" if together else "one after another (their weights exceed the free memory)"
            logger.info("loading %d models %s", len(self.engines), how)
        try:
            began = time.monotonic()
            if together:
                for engine in self.engines:
                    logger.info("model %s: loading", model_label(engine.server_args))
                    engine.spawn()
            for engine in self.engines:
                if not together:
                    began = time.monotonic()
                    logger.info("model %s: loading", model_label(engine.server_args))
                    engine.spawn()
                info = engine.wait_ready()
                self.served.append(ServedModel(engine.server_args, engine.port_args, info))
                logger.info("model %s: ready (%.1f s)", model_label(engine.server_args), time.monotonic() - began)
        except BaseException:
            self.shutdown()
            raise
        return self.served

    def start_http_workers(self, worker_entry: HttpWorkerEntry) -> None:
        """Spawn the extra HTTP + tokenizer processes (worker ids 1..N-1) and wait until they serve.

        `worker_entry` is the process's target (http_worker.run_http_worker_process), handed in by
        the launch sequence so that this module knows nothing of HTTP.
        """
        ctx = mp.get_context("spawn")
        pending = []
        for worker_id in range(1, self.server_args.tokenizer_worker_num):
            reader, writer = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=worker_entry,
                name=f"sglang-http-{worker_id}",
                args=(self.server_args, self.served, worker_id, writer, os.getpid()),
                daemon=True,
            )
            proc.start()
            writer.close()
            self.http_procs.append(proc)
            pending.append((f"http-{worker_id}", reader, proc))
        for name, reader, proc in pending:
            wait_ready(name, reader, proc, self.server_args.startup_timeout)

    def watch(self, on_model_death: Callable[[int, str], None], on_http_death: Callable[[str], None]) -> None:
        """From threads: `on_model_death(index, reason)` when a model's engine dies or stalls (each
        model at most once), `on_http_death(reason)` when an extra HTTP worker dies outside a drain."""
        for index, engine in enumerate(self.engines):
            engine.watch(lambda reason, i=index: self._model_died(i, reason, on_model_death))
        if self.http_procs:
            threading.Thread(target=self._watch_http, args=(on_http_death,), name="http-watch", daemon=True).start()

    def _model_died(self, index: int, reason: str, on_model_death: Callable[[int, str], None]) -> None:
        if self._stopping:
            return
        if len(self.engines) > 1:
            reason = f"model {self.engines[index].server_args.served_model_name}: {reason}"
        try:
            with open(dead_marker(self.engines[index].port_args.ipc_dir), "w") as f:
                f.write(reason)
        except OSError:
            pass
        on_model_death(index, reason)

    def _watch_http(self, on_http_death: Callable[[str], None], grace: float = 0.3) -> None:
        """HTTP workers exiting while we drain are expected (they drained too). A SIGTERM sent to
        the whole process group reaches a worker maybe a moment before us, hence the short grace
        before calling its exit a crash."""
        watched = {p.sentinel: p for p in self.http_procs}
        while watched:
            ready = mp_wait(list(watched))
            proc = watched.pop(ready[0])
            if not self._draining:
                time.sleep(grace)
            if self._stopping:
                return
            if self._draining:
                continue
            proc.join(1.0)
            reason = f"{proc.name} exited unexpectedly ({describe_exit(proc.exitcode)})"
            logger.error(reason)
            on_http_death(reason)
            return

    def notify_http_workers(self) -> None:
        """Tell the extra HTTP workers a model's engine died (they read which from the markers)."""
        for p in self.http_procs:
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, ENGINE_DEAD_SIGNAL)

    def begin_stop(self) -> None:
        """SIGTERM/SIGINT: the HTTP workers drain too, the engines keep serving them (called from
        the signal handler; shutdown() stops the engines)."""
        self._draining = True
        for engine in self.engines:
            engine.begin_stop()
        for p in self.http_procs:
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, signal.SIGTERM)

    def shutdown(self) -> None:
        """Stop the HTTP workers (letting them finish a drain), then every model's engine."""
        self._stopping = True
        if self.http_procs:
            grace = self.server_args.graceful_timeout
            # Told to stop already: by begin_stop() (let them drain) or notify_http_workers() (their
            # requests have failed; they answer their open connections 503 for ENGINE_DEATH_GRACE).
            drain = (grace + 5.0 if grace > 0 else None) if self._draining else ENGINE_DEATH_GRACE + 1.5
            deadline = None if drain is None else time.monotonic() + drain
            for p in self.http_procs:
                p.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            terminate_processes(self.http_procs)
        for engine in self.engines:
            engine.shutdown()


def fits_in_memory(models: list[ServerArgs]) -> bool:
    """Whether all models' weights fit in the free memory at once, with room for a load's peak
    (a model briefly holds its file pages and its tensors). Unknown sizes (hub ids) count as 0;
    GPU models load into device memory and always go together."""
    if all(m.device == "cuda" for m in models):
        return True
    free = available_memory()
    if free is None:
        return True
    return sum(2 * weight_bytes(m.model_path) for m in models) < 0.8 * free


def weight_bytes(model_path: str) -> int:
    """Bytes of a local checkpoint's weight files (0 when it is not a local directory)."""
    if not os.path.isdir(model_path):
        return 0
    total = 0
    for dirpath, _, files in os.walk(model_path):
        for name in files:
            if name.endswith((".safetensors", ".bin", ".pt", ".pth")):
                try:
                    total += os.path.getsize(os.path.join(dirpath, name))
                except OSError:
                    pass
    return total


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo, in bytes (None off Linux)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
