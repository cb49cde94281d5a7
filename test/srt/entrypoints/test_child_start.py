"""Engine children started early: they import, wait, and run only once told (child_start.py)."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time

import pytest

import sglang
from sglang.srt.entrypoints.child_start import start_child
from sglang.srt.entrypoints.engine_processes import SCHEDULER_PRELOAD, EngineProcesses
from sglang.srt.entrypoints.server_processes import ServerProcesses
from sglang.srt.errors import ConfigError
from sglang.srt.server_args import ServerArgs
from test.helpers.procs import is_running
from test.helpers.waiting import wait_until

pytestmark = pytest.mark.slow  # every test here spawns child processes


def _report(ready_pipe, **kwargs) -> None:
    """A target: what it was given, whether the preloaded module was there before it ran, and the
    environment it was started with."""
    preloaded = "colorsys" in sys.modules
    env = os.environ.get("SGLANG_TEST_ENV")
    ready_pipe.send({"status": "ready", "kwargs": kwargs, "preloaded": preloaded, "env": env})
    ready_pipe.close()


def _write_file(ready_pipe, path: str) -> None:
    with open(path, "w") as f:
        f.write("ran")


def test_a_child_imports_first_and_runs_its_target_with_what_it_is_told():
    child = start_child("sglang-test-child", _report, {"SGLANG_TEST_ENV": "set"}, ("colorsys",))
    try:
        assert child.proc.is_alive()  # waiting to be told
        child.run(server_args="a", port_args="b", parent_pid=os.getpid(), slot=3)
        msg = child.ready.recv()
        assert msg == {
            "status": "ready",
            "kwargs": {"server_args": "a", "port_args": "b", "parent_pid": os.getpid(), "slot": 3},
            "preloaded": True,
            "env": "set",
        }
        assert "SGLANG_TEST_ENV" not in os.environ  # set for the child's start only
        child.proc.join(10)
        assert child.proc.exitcode == 0
    finally:
        child.discard()


def test_a_child_never_told_runs_nothing_and_exits(tmp_path):
    marker = tmp_path / "ran"
    child = start_child("sglang-test-child", _write_file, {}, ("colorsys",))
    child.go.close()  # what the child sees when the server process is gone before telling it
    child.proc.join(60)
    assert child.proc.exitcode == 0 and not marker.exists()
    with pytest.raises(EOFError):
        child.ready.recv()


def test_discard_stops_a_child_at_once_and_a_bad_preload_does_not_stop_one():
    early = start_child("sglang-test-child", _report, {}, SCHEDULER_PRELOAD)
    early.discard()  # still importing torch
    assert early.proc.exitcode is not None
    child = start_child("sglang-test-child", _report, {}, ("sglang_no_such_module", "colorsys"))
    try:
        child.run(parent_pid=1)
        assert child.ready.recv()["preloaded"] is True
    finally:
        child.discard()


def test_prestarted_engine_processes_stop_with_their_directory_on_shutdown():
    before = set(mp.active_children())
    engine = EngineProcesses(ServerArgs())
    engine.prestart()
    started = set(mp.active_children()) - before
    assert sorted(p.name for p in started) == ["sglang-detokenizer", "sglang-scheduler"]
    engine.shutdown()
    assert not any(p.is_alive() for p in started)
    assert not os.path.exists(engine.port_args.ipc_dir)


def test_a_server_prestarts_its_extra_http_workers_and_stops_them_unrun(tmp_path):
    before = set(mp.active_children())
    processes = ServerProcesses(ServerArgs(tokenizer_worker_num=3), [ServerArgs(tokenizer_worker_num=3)])
    processes.prestart(_write_file)
    children = {p.name: p for p in set(mp.active_children()) - before}
    assert sorted(children) == ["sglang-detokenizer", "sglang-http-1", "sglang-http-2", "sglang-scheduler"]
    time.sleep(1.0)
    os.kill(children["sglang-http-1"].pid, signal.SIGINT)  # Ctrl-C reaches the group during start-up
    time.sleep(0.5)
    assert children["sglang-http-1"].is_alive()  # the server process stops its children itself
    processes.shutdown()
    assert not any(p.is_alive() for p in children.values())


def test_an_engine_whose_model_fails_its_check_leaves_no_process(tmp_path):
    (tmp_path / "config.json").write_text('{"architectures": ["FancyNewModel"], "model_type": "bert"}')
    before = set(mp.active_children())
    with pytest.raises(ConfigError, match="FancyNewModel is not supported"):
        sglang.Engine(model_path=str(tmp_path))
    assert set(mp.active_children()) <= before


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except FileNotFoundError:
        return []


def _group_members(pgid: int) -> list[int]:
    """Running processes of the process group `pgid` (the server's children stay in its group)."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and is_running(int(entry)):
            try:
                if os.getpgid(int(entry)) == pgid:
                    members.append(int(entry))
            except ProcessLookupError:
                pass
    return members


# Before uvicorn takes the signals, SIGTERM stops start-up as Ctrl-C does (cli.sigterm_as_ctrl_c); a
# machine fast enough to finish the check first drains instead. Either way: exit 0, quiet, nothing left.
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("children,delay", [(1, 0.1), (3, 0.0)], ids=["importing", "spawning"])
def test_a_server_stopped_while_it_checks_its_model_exits_quietly_and_leaves_nothing(sig, children, delay):
    """Ctrl-C (the whole group) or a SIGTERM to the server process during start-up: no traceback
    from any process, exit 0, no process left. "importing": the check runs, the server process
    imports the HTTP stack (a KeyboardInterrupt inside it became pydantic's SchemaError, or an exit
    by SIGINT). "spawning": the children start their interpreters or unpickle their targets, the
    window a SIGINT held since the spawn covers (cli.py, utils/process.stop_signals_deferred)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sglang.launch_server", "--port", "1", "--log-level", "warning"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        found = wait_until(lambda: len(_children(proc.pid)) >= children, 60.0, interval=0.01)
        assert found, _children(proc.pid)
        time.sleep(delay)
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and err == "", (proc.returncode, err)
        assert wait_until(lambda: not _group_members(proc.pid), 30.0), _group_members(proc.pid)
    finally:
        if _group_members(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
