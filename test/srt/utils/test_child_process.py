"""Child processes stop only when told (or orphaned), and clean up the IPC directory when orphaned."""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest
import zmq

from sglang.srt.entrypoints.engine_processes import describe_exit, wait_ready
from sglang.srt.errors import ConfigError
from sglang.srt.utils.process import (
    ignore_sigint,
    mark_stopping,
    prepare_child_process,
    stop_requested,
    stop_signals_deferred,
)
from test.helpers.benchmark_child import ROOT
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


def _ignores_a_pending_sigint(conn) -> None:
    held = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, ())
    conn.recv()  # the parent has sent its SIGINT
    pending = signal.SIGINT in signal.sigpending()
    ignore_sigint()
    after = (signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, ()), signal.SIGINT in signal.sigpending())
    conn.send({"held": held, "pending": pending, "after": after})


# Run as a fresh process's first spawn: the resource tracker then starts inside it, and that start
# unblocks SIGINT in the spawning thread unless it happened before the block.
_FIRST_SPAWN = """
import multiprocessing as mp, os, signal
from sglang.srt.utils.process import stop_signals_deferred
from test.srt.utils.test_child_process import _ignores_a_pending_sigint
parent, child = mp.get_context("spawn").Pipe()
proc = mp.get_context("spawn").Process(target=_ignores_a_pending_sigint, args=(child,))
with stop_signals_deferred():
    proc.start()
child.close()  # a child that died answers EOFError, not silence
assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, ())  # the spawner's mask is back
os.kill(proc.pid, signal.SIGINT)  # its interpreter is still starting: a Ctrl-C to the group
parent.send("sent")
print(parent.recv())
proc.join()
print(proc.exitcode)
"""


def test_a_child_spawned_with_sigint_held_starts_quietly_through_a_ctrl_c():
    """Without the hold, a SIGINT during a child's interpreter start-up or unpickling prints a
    KeyboardInterrupt traceback; held, it stays pending until ignore_sigint discards it."""
    done = subprocess.run([sys.executable, "-c", _FIRST_SPAWN], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.stderr == "" and done.returncode == 0, done.stderr
    report, exitcode = done.stdout.splitlines()
    assert report == str({"held": True, "pending": True, "after": (False, False)})
    assert exitcode == "0"


def test_a_ctrl_c_taken_by_another_thread_waits_for_the_end_of_the_spawn():
    """In a server, OpenBLAS's thread may take the process's SIGINT; the KeyboardInterrupt it raises
    in the main thread comes after the block (the spawn has written its child's target), not in it."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=time.sleep, args=(2.0,), daemon=True).start()  # does not block SIGINT
    steps = []
    try:
        with pytest.raises(KeyboardInterrupt):
            with stop_signals_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.3)  # the interpreter runs Python handlers between bytecodes: long past
                steps.append("spawned")
        assert steps == ["spawned"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, ())
    finally:
        signal.signal(signal.SIGINT, previous)


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
