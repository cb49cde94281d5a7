"""Child-process plumbing: parent-death detection, signal set-up, process-tree kill."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
import time

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def set_parent_death_signal(sig: int = signal.SIGTERM) -> None:
    """Ask Linux to signal this process when its parent dies (no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except OSError:
        pass


def watch_parent(parent_pid: int, interval: float = 0.5) -> None:
    """Exit when the parent is gone: a second line of defence next to PDEATHSIG.

    PDEATHSIG fires when the *thread* that forked us exits, and not at all on some platforms, so a
    slow poll of getppid() makes sure no child outlives the server.
    """

    def _run() -> None:
        while True:
            time.sleep(interval)
            if os.getppid() != parent_pid:
                logger.warning("parent process %d is gone; exiting", parent_pid)
                os._exit(1)

    threading.Thread(target=_run, name="parent-watch", daemon=True).start()


def prepare_child_process(parent_pid: int) -> None:
    """Common set-up for the scheduler and detokenizer processes."""
    # Ctrl-C reaches the whole process group; only the parent handles it and then stops us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    set_parent_death_signal(signal.SIGTERM)
    watch_parent(parent_pid)


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
