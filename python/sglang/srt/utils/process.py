"""Child-process plumbing: parent-death detection, signal set-up, process-tree stop.

The scheduler and detokenizer stop only when the server process asks them to (after it has
drained its in-flight requests) or when it is gone. A SIGTERM sent to the whole process group
(systemd, `timeout`, `kill -- -PGID`) is therefore ignored by them while the server process lives
and has not asked: otherwise they would die under requests the server is still finishing.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import sys
import threading
import time
from multiprocessing import resource_tracker
from typing import Any, Callable, Iterator, Optional

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
STOP_MARKER = "stopping"  # created in the IPC directory when the parent stops its children on purpose
# The server process -> its extra HTTP workers: the scheduler or detokenizer died (entrypoints/http_worker.py).
ENGINE_DEAD_SIGNAL = signal.SIGUSR2
# Seconds an HTTP process then keeps its open connections to answer them 503 before it stops
# (frontend/http/engine_death.py); the server process waits that long, plus a margin, for the workers.
ENGINE_DEATH_GRACE = 2.0


@contextlib.contextmanager
def stop_signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM wait for the end of the block: for spawning children and for imports.

    Children spawned inside start with SIGINT blocked (the mask survives fork and exec): a Ctrl-C
    to the process group while a child's interpreter starts or unpickles its target (importing the
    target's module) stays pending until the child's `ignore_sigint` discards it, instead of
    printing a KeyboardInterrupt traceback.

    In the main thread, this process's own SIGINT/SIGTERM handlers run after the block: another
    thread (OpenBLAS's, which numpy's import starts) may take the signal, and the exception a
    handler raises would break into whatever runs. In a spawn, between starting a child and writing
    it its pickled target (the child dies of "Ran out of input"); in an import, inside a library
    that wraps it (pydantic raises a SchemaError) or after which CPython exits by SIGINT even though
    the KeyboardInterrupt was caught (it marks one raised during an extension module's import as
    unhandled)."""
    # The resource tracker's first start (inside the first spawn) unblocks SIGINT in the calling
    # thread: started before the block, it cannot undo it.
    resource_tracker.ensure_running()
    handlers: dict[int, Callable] = {}
    caught: list[tuple[int, Any]] = []
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            if callable(signal.getsignal(sig)):
                handlers[sig] = signal.signal(sig, lambda signum, frame: caught.append((signum, frame)))
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        # Unmasked first: a signal pending here meets the recorder, and is replayed below.
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        for signum, frame in caught:  # the first handler that raises ends the replay
            handlers[signum](signum, frame)


def ignore_sigint() -> None:
    """A spawned child's first step: Ctrl-C reaches the whole process group, and the server process
    stops its children itself. Ignoring SIGINT discards one pending since the spawn."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def set_parent_death_signal(sig: int = signal.SIGTERM) -> None:
    """Ask Linux to signal this process when its parent dies (no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except OSError:
        pass


def set_process_name(name: str) -> None:
    """Name this process for ps/top (`sglang-schedule`, ...: Linux keeps 15 bytes; no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)
    except OSError:
        pass


def mark_stopping(ipc_dir: str) -> None:
    """Tell the children that the SIGTERM they are about to get is meant (see module doc)."""
    try:
        with open(os.path.join(ipc_dir, STOP_MARKER), "w"):
            pass
    except OSError:
        pass  # the directory is gone: children treat that as a stop request too


def stop_requested(ipc_dir: Optional[str]) -> bool:
    if ipc_dir is None:
        return True
    return not os.path.isdir(ipc_dir) or os.path.exists(os.path.join(ipc_dir, STOP_MARKER))


def exit_orphaned(parent_pid: int, ipc_dir: Optional[str]) -> None:
    """The server process is gone (perhaps SIGKILLed): remove the IPC directory it left, and exit."""
    logger.warning("parent process %d is gone; exiting", parent_pid)
    if ipc_dir is not None:
        shutil.rmtree(ipc_dir, ignore_errors=True)
    os._exit(1)


def watch_parent(parent_pid: int, ipc_dir: Optional[str] = None, interval: float = 0.5) -> None:
    """Exit when the parent is gone: a second line of defence next to PDEATHSIG.

    PDEATHSIG fires when the *thread* that forked us exits, and not at all on some platforms, so a
    slow poll of getppid() makes sure no child outlives the server.
    """

    def _run() -> None:
        while True:
            time.sleep(interval)
            if os.getppid() != parent_pid:
                exit_orphaned(parent_pid, ipc_dir)

    threading.Thread(target=_run, name="parent-watch", daemon=True).start()


class SignalWakeup:
    """A socket that turns readable when a signal reaches this process, for a loop's poller.

    CPython runs a Python signal handler in the main thread, at its next bytecode. When the kernel
    hands the signal to another thread (a library's worker: torch's, the tokenizer's), a main thread
    blocked in a poll sleeps on until its timeout: a scheduler idle in zmq's poll took 2 s to stop,
    or was killed after 5 s. CPython writes every signal's number to the wakeup fd, whichever thread
    took it; with the reading end in the poller the poll returns and the handler runs.
    """

    def __init__(self) -> None:
        self._reader, self._writer = socket.socketpair()
        self._reader.setblocking(False)
        self._writer.setblocking(False)
        signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)

    def fileno(self) -> int:
        return self._reader.fileno()

    def woke(self, ready: list) -> None:
        """Read what the signals wrote, so that it is not seen again, when a zmq Poller's `ready`
        list names this socket (by its fd, as pyzmq gives a non-zmq entry back)."""
        if not any(entry == self.fileno() for entry, _ in ready):
            return
        try:
            while self._reader.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass


def prepare_child_process(
    parent_pid: int, ipc_dir: Optional[str] = None, on_stop: Optional[list[Callable[[], None]]] = None
) -> SignalWakeup:
    """Common set-up for the scheduler and detokenizer processes. `on_stop`: callables (the caller
    may add to the list later) run before a requested stop exits, e.g. to flush queued trace spans.
    The SignalWakeup returned belongs in the process's poller (see its doc)."""
    import multiprocessing

    set_process_name(multiprocessing.current_process().name)  # "sglang-scheduler" -> ps: sglang-schedule
    # Ctrl-C reaches the whole process group; only the parent handles it and then stops us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def on_sigterm(*_) -> None:
        if os.getppid() != parent_pid:
            exit_orphaned(parent_pid, ipc_dir)  # PDEATHSIG: the parent died
        if stop_requested(ipc_dir):
            # Nothing is left to flush (the server drained first); skipping interpreter teardown
            # (torch, the model) makes the stop take milliseconds instead of seconds.
            for fn in on_stop or ():
                try:
                    fn()
                except Exception:
                    pass
            logging.shutdown()
            os._exit(0)
        logger.info("SIGTERM ignored: the server process finishes its requests first, then stops this one")

    signal.signal(signal.SIGTERM, on_sigterm)
    wakeup = SignalWakeup()
    set_parent_death_signal(signal.SIGTERM)
    watch_parent(parent_pid, ipc_dir)
    return wakeup


def terminate_processes(procs, timeout: float = 5.0) -> None:
    """SIGTERM, wait, then SIGKILL whatever is left."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            logger.warning("process %s did not stop; killing it", p.name)
            p.kill()
            p.join(1.0)
