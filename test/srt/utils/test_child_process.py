"""Child processes stop only when told (or orphaned), and clean up the IPC directory when orphaned."""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import signal
import tempfile
import threading
import time

import pytest
import zmq

from sglang.srt.entrypoints.engine_processes import describe_exit, wait_ready
from sglang.srt.errors import ConfigError
from sglang.srt.utils.process import mark_stopping, prepare_child_process, stop_requested
from test.helpers.procs import is_running
from test.helpers.waiting import wait_until

pytestmark = pytest.mark.slow  # every test here spawns child processes


def _child(parent_pid: int, ipc_dir: str, ready=None) -> None:
    prepare_child_process(parent_pid, ipc_dir)
    if ready is not None:
        ready.set()  # its handlers are installed
    while True:
        time.sleep(0.05)


def _idle_loop_signal_elsewhere(parent_pid: int, ipc_dir: str, ready, register_wakeup: bool) -> None:
    """A main thread blocked in a poll with no timeout (an idle scheduler) while the kernel must hand
    SIGTERM to another thread: the main thread blocks it, a helper thread does not."""
    wakeup = prepare_child_process(parent_pid, ipc_dir)
    threading.Thread(target=lambda: time.sleep(3600), daemon=True).start()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    poller = zmq.Poller()
    idle = zmq.Context().socket(zmq.PULL)  # no peer: never readable
    poller.register(idle, zmq.POLLIN)
    if register_wakeup:
        poller.register(wakeup, zmq.POLLIN)
    ready.set()
    while True:
        wakeup.woke(poller.poll())


def _middle(ipc_dir: str, conn, ready) -> None:
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=_child, args=(os.getpid(), ipc_dir, ready))
    p.start()
    conn.send(p.pid)
    p.join()


def _killed_while_loading(ready_pipe) -> None:
    os.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer does to a scheduler loading a model


def _never_ready(ready_pipe) -> None:
    time.sleep(30)


def test_sigterm_is_ignored_until_the_parent_marks_stopping():
    ipc_dir = tempfile.mkdtemp(prefix="sglang-childtest-")
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    p = ctx.Process(target=_child, args=(os.getpid(), ipc_dir, ready))
    p.start()
    try:
        assert ready.wait(60)  # its handlers are installed (spawn re-imports: slow on a loaded machine)
        os.kill(p.pid, signal.SIGTERM)  # e.g. systemd signalling the whole group during a drain
        p.join(0.8)
        assert p.is_alive()
        assert not stop_requested(ipc_dir)
        mark_stopping(ipc_dir)
        assert stop_requested(ipc_dir)
        p.terminate()
        p.join(5)
        assert p.exitcode == 0
    finally:
        if p.is_alive():
            p.kill()
        shutil.rmtree(ipc_dir, ignore_errors=True)


@pytest.mark.parametrize("register_wakeup", [True, False])
def test_a_stop_reaches_a_main_thread_asleep_in_a_poll(register_wakeup):
    """CPython runs the SIGTERM handler in the main thread only; taken by another thread, the
    signal wakes the poll through the SignalWakeup socket (without it, the poll sleeps on)."""
    ipc_dir = tempfile.mkdtemp(prefix="sglang-childtest-")
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    p = ctx.Process(target=_idle_loop_signal_elsewhere, args=(os.getpid(), ipc_dir, ready, register_wakeup))
    p.start()
    try:
        assert ready.wait(60)
        mark_stopping(ipc_dir)
        p.terminate()
        p.join(3.0)
        if register_wakeup:
            assert p.exitcode == 0
        else:  # the control: the same child without the socket in its poller does not stop
            assert p.is_alive()
    finally:
        if p.is_alive():
            p.kill()
            p.join(5)
        shutil.rmtree(ipc_dir, ignore_errors=True)


def test_orphaned_child_exits_and_removes_the_ipc_dir():
    ipc_dir = tempfile.mkdtemp(prefix="sglang-childtest-")
    ctx = mp.get_context("spawn")
    reader, writer = ctx.Pipe(duplex=False)
    ready = ctx.Event()
    middle = ctx.Process(target=_middle, args=(ipc_dir, writer, ready))
    middle.start()
    child_pid = reader.recv()
    assert ready.wait(60)  # the child watches its parent now (spawn re-imports: slow on a loaded machine)
    os.kill(middle.pid, signal.SIGKILL)  # the "server" dies without any cleanup
    middle.join(5)
    assert wait_until(lambda: not is_running(child_pid), 5.0), "orphaned child still running"
    assert wait_until(lambda: not os.path.exists(ipc_dir), 2.0), "orphaned child left the IPC dir behind"


def test_exit_codes_in_words():
    assert describe_exit(3) == "exit code 3"
    assert "SIGKILL" in describe_exit(-9) and "out-of-memory" in describe_exit(-9)
    assert describe_exit(-15) == "killed by SIGTERM"
    assert describe_exit(None) == "still running"


@pytest.mark.parametrize(
    "target,timeout,fragment",
    [
        (
            _killed_while_loading,
            60.0,
            "The scheduler process exited during start-up (killed by SIGKILL (possibly "
            "the kernel's out-of-memory killer))",
        ),
        (_never_ready, 0.5, "The scheduler process did not start within"),
    ],
)
def test_start_up_failures_end_in_one_clear_error(target, timeout, fragment):
    ctx = mp.get_context("spawn")
    reader, writer = ctx.Pipe(duplex=False)
    p = ctx.Process(target=target, args=(writer,))  # the child holds the pipe's write end, as in start()
    p.start()
    writer.close()
    try:
        with pytest.raises(ConfigError) as e:
            wait_ready("scheduler", reader, p, timeout)
        assert fragment in str(e.value) and "\n" not in str(e.value)
    finally:
        p.kill()
        p.join(5)
