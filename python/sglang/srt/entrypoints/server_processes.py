"""Every process of a server: each served model's engine (EngineProcesses), and the extra HTTP workers.

Models load side by side when the machine's free memory holds all their weights at once (one
progress line per model), and are watched one by one: a model whose scheduler or detokenizer dies
is reported alone (`on_model_death`), so the server keeps serving the others, and is started again
in place, with the same sockets, after a back-off (RESTART_DELAYS); the HTTP processes' sockets
reconnect by themselves and `on_model_revived` says it serves again. The HTTP workers learn which
models are dead from a marker file in each model's IPC directory (`dead_marker`).
"""

from __future__ import annotations

import heapq
import logging
import multiprocessing as mp
import os
import queue
import signal
import threading
import time
from multiprocessing.connection import wait as mp_wait
from typing import Callable, Optional

from sglang.srt.configs.served_models import ServedModel, model_label
from sglang.srt.entrypoints.child_start import StartingChild, start_child
from sglang.srt.entrypoints.engine_processes import EngineProcesses, describe_exit, wait_ready
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.process import ENGINE_DEAD_SIGNAL, ENGINE_DEATH_GRACE, terminate_processes

logger = logging.getLogger(__name__)

# An extra HTTP worker's process target: (server_args, models, worker_id, ready_pipe, parent_pid).
HttpWorkerEntry = Callable[..., None]
DEAD_MARKER = "engine-dead"
# Seconds before each attempt to start a dead model's engine again (then the last, for ever).
RESTART_DELAYS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


def dead_marker(ipc_dir: str) -> str:
    """The file whose presence tells an HTTP worker that this model's engine died."""
    return os.path.join(ipc_dir, DEAD_MARKER)


class ServerProcesses:
    def __init__(self, server_args: ServerArgs, models: list[ServerArgs]) -> None:
        self.server_args = server_args
        several = len(models) > 1
        self.engines = [EngineProcesses(m, label=model_label(m) if several else None) for m in models]
        self.http_procs: list[mp.Process] = []
        self._http_starting: list[StartingChild] = []  # prestart()ed extra HTTP workers, not told to run
        self.served: list[ServedModel] = []
        self._stopping = False
        self._draining = False
        self._ending = False  # every model died: the HTTP workers exit on their own
        self._stop = threading.Event()  # wakes restart back-offs at shutdown
        self._dead: queue.Queue[Optional[int]] = queue.Queue()  # models whose engine is to start again
        self._lock = threading.Lock()  # engines replaced by a restart vs shutdown()
        self._on_model_death: Callable[[int, str], None] = lambda index, reason: None
        self._on_model_revived: Optional[Callable[[int], None]] = None

    @property
    def ipc_dir(self) -> str:
        """The server's own directory (the first model's): metrics files, the HTTP workers' parent watch."""
        return self.engines[0].port_args.ipc_dir

    def prestart(self, worker_entry: Optional[HttpWorkerEntry] = None) -> None:
        """Every model's engine processes begin importing torch and the model code, and the extra
        HTTP workers (`worker_entry`: their target) the HTTP stack, and wait to be told to run
        (entrypoints/child_start.py); start() and start_http_workers() tell them, shutdown() stops
        them."""
        for engine in self.engines:
            engine.prestart()
        if worker_entry is not None and not self._http_starting:
            self._http_starting = self._start_http_children(worker_entry)

    def _http_worker_ids(self) -> range:
        return range(1, self.server_args.tokenizer_worker_num)

    def _start_http_children(self, worker_entry: HttpWorkerEntry) -> list[StartingChild]:
        return [start_child(f"sglang-http-{i}", worker_entry, {}) for i in self._http_worker_ids()]

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
        children = self._http_starting or self._start_http_children(worker_entry)
        self._http_starting = []
        for worker_id, child in zip(self._http_worker_ids(), children):
            self.http_procs.append(child.proc)
            child.run(server_args=self.server_args, models=self.served, worker_id=worker_id, parent_pid=os.getpid())
        for child in children:
            wait_ready(child.name.removeprefix("sglang-"), child.ready, child.proc, self.server_args.startup_timeout)

    def watch(
        self,
        on_model_death: Callable[[int, str], None],
        on_http_death: Callable[[str], None],
        on_model_revived: Optional[Callable[[int], None]] = None,
    ) -> None:
        """From threads: `on_model_death(index, reason)` when a model's engine dies or stalls,
        `on_http_death(reason)` when an extra HTTP worker dies outside a drain. With several models
        and `on_model_revived`, a dead model's engine is started again and `on_model_revived(index)`
        follows once it is ready."""
        self._on_model_death, self._on_model_revived = on_model_death, on_model_revived
        if on_model_revived is not None and len(self.engines) > 1:
            # One long-lived thread starts every restarted engine: a child's parent-death signal
            # (PR_SET_PDEATHSIG) fires when the *thread* that started it ends.
            threading.Thread(target=self._restarter, name="engine-restart", daemon=True).start()
        for index in range(len(self.engines)):
            self._watch_model(index)
        if self.http_procs:
            threading.Thread(target=self._watch_http, args=(on_http_death,), name="http-watch", daemon=True).start()

    def _watch_model(self, index: int) -> None:
        self.engines[index].watch(lambda reason: self._model_died(index, reason))

    def _model_died(self, index: int, reason: str) -> None:
        if self._stopping:
            return
        engine = self.engines[index]
        if len(self.engines) > 1:
            reason = f"model {engine.server_args.served_model_name}: {reason}"
        try:
            with open(dead_marker(engine.port_args.ipc_dir), "w") as f:
                f.write(reason)
        except OSError:
            pass
        self._on_model_death(index, reason)
        self._dead.put(index)

    def _restarter(self) -> None:
        """Start dead models' engines again, each after its back-off: (when, index, attempt) in
        time order, so one model that keeps failing does not hold back another."""
        due: list[tuple[float, int, int]] = []
        while not self._stop.is_set():
            timeout = max(0.0, due[0][0] - time.monotonic()) if due else None
            try:
                index = self._dead.get(timeout=timeout)
                if index is None:  # shutdown()
                    return
                self.engines[index].kill()  # what is left of it (the detokenizer, other replicas)
                heapq.heappush(due, (time.monotonic() + RESTART_DELAYS[0], index, 0))
            except queue.Empty:
                pass
            while due and due[0][0] <= time.monotonic() and not self._stop.is_set():
                _, index, attempt = heapq.heappop(due)
                if not self._start_again(index, attempt) and not self._stop.is_set():
                    delay = RESTART_DELAYS[min(attempt + 1, len(RESTART_DELAYS) - 1)]
                    heapq.heappush(due, (time.monotonic() + delay, index, attempt + 1))

    def _start_again(self, index: int, attempt: int) -> bool:
        """One attempt to start a dead model's engine on its own sockets; whether it serves again."""
        old = self.engines[index]
        name = old.server_args.served_model_name
        with self._lock:
            if self._stop.is_set():
                return False
            logger.info("model %s: starting its engine again (attempt %d)", name, attempt + 1)
            engine = self.engines[index] = EngineProcesses(old.server_args, old.port_args, old.label_name)
            try:
                engine.spawn()
            except Exception as e:  # e.g. out of processes: try again later
                logger.error("model %s: restart failed: %s", name, e)
                return False
        try:
            engine.wait_ready()
        except Exception as e:  # a ConfigError as at start-up; anything else when shutdown() stopped it
            if not self._stop.is_set():
                logger.error("model %s: restart failed: %s", name, e)
            return False
        with self._lock:
            if self._stop.is_set():
                return False
            try:
                os.remove(dead_marker(old.port_args.ipc_dir))
            except OSError:
                pass
            self._watch_model(index)
        logger.info("model %s: serving again", name)
        if self._on_model_revived is not None:
            self._on_model_revived(index)
        return True

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
            if self._stopping or self._ending:  # told to stop, or to fail and exit (every model died)
                return
            if self._draining:
                continue
            proc.join(1.0)
            reason = f"{proc.name} exited unexpectedly ({describe_exit(proc.exitcode)})"
            logger.error(reason)
            on_http_death(reason)
            return

    def end(self) -> None:
        """Every model's engine is dead: the HTTP workers are told to fail and exit (notify), which
        is no crash of theirs."""
        self._ending = True
        self._stop.set()  # no more restarts
        self.notify_http_workers()

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
        self._stop.set()
        self._dead.put(None)
        for child in self._http_starting:
            child.discard()
        self._http_starting = []
        if self.http_procs:
            grace = self.server_args.graceful_timeout
            # Told to stop already: by begin_stop() (let them drain) or notify_http_workers() (their
            # requests have failed; they answer their open connections 503 for ENGINE_DEATH_GRACE).
            drain = (grace + 5.0 if grace > 0 else None) if self._draining else ENGINE_DEATH_GRACE + 1.5
            deadline = None if drain is None else time.monotonic() + drain
            for p in self.http_procs:
                p.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            terminate_processes(self.http_procs)
        with self._lock:  # a restart in progress sees _stopping and gives up; its processes stop here
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
