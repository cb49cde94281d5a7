"""Faults on the real server: SIGKILL of the server, an engine process dying under load, and a
graceful drain on a process-group SIGTERM."""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import requests

from test.helpers.kill_load import KillLoad
from test.helpers.procs import running
from test.helpers.server import ServerProcess
from test.helpers.waiting import wait_until

pytestmark = pytest.mark.slow
LONG = "the quick brown fox jumps over the lazy dog " * 25  # ~226 tokens


def _by_name(server: ServerProcess, prefix: str) -> int:
    for pid in server.children():
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().startswith(prefix):
                    return pid
        except FileNotFoundError:
            pass
    raise AssertionError(f"no child named {prefix}*")


def test_sigkill_of_the_server_takes_children_and_ipc_dir_along():
    s = ServerProcess()
    try:
        children = s.children()
        ipc_dir = s.ipc_dir()
        assert len(children) >= 2 and os.path.isdir(ipc_dir)
        os.kill(s.proc.pid, signal.SIGKILL)
        s.proc.wait(5)
        t0 = time.monotonic()
        assert wait_until(lambda: not running(children), 5.0), f"orphans left: {running(children)}"
        assert wait_until(lambda: not os.path.exists(ipc_dir), 2.0), "the IPC directory was left behind"
        print(f"\nchildren gone {time.monotonic() - t0:.2f} s after SIGKILL")
    finally:
        s.stop()
        for pid in running(s.children()):
            os.kill(pid, signal.SIGKILL)


def test_detokenizer_death_fails_every_request_with_503_and_exits_1():
    """Two HTTP workers: requests on either get 503 at once (the second via the engine-dead signal)."""
    s = ServerProcess("--tokenizer-worker-num", "2", "--max-batch-size", "4")
    load = KillLoad(s.base_url, lambda i: [f"{i} {LONG}"] * 2)
    health: list[tuple[float, object]] = []

    def prober() -> None:
        while not load.stop.is_set():
            try:
                code = requests.get(s.base_url + "/health", timeout=2).status_code
            except requests.RequestException:
                code = "down"
            health.append((time.monotonic(), code))
            time.sleep(0.05)

    probe = threading.Thread(target=prober)
    load.start()
    probe.start()
    try:
        load.wait_running()
        victim = _by_name(s, "sglang-detok")
        k = load.mark_kill()
        os.kill(victim, signal.SIGKILL)
        assert s.proc.wait(15) == 1
    finally:
        load.join()
        probe.join(30)
        s.stop()
    results = load.results
    in_flight = load.in_flight_at_kill()
    assert in_flight, "no request was in flight when the detokenizer died"
    for t0, t1, outcome in in_flight:
        assert outcome in (200, 503), outcome  # answered, never dropped or hung
        assert t1 - k < 3.0, f"an in-flight request took {t1 - k:.1f} s to fail"
    assert any(o == 503 for _, _, o in in_flight)
    print(f"\nin flight at the kill: {[(o, round(t1 - k, 2)) for _, t1, o in in_flight]}")
    later = [o for t0, _, o in results if t0 > k]
    assert all(o == 503 or isinstance(o, str) for o in later), later  # 503, or refused once exited
    first_bad = next((t for t, code in health if t > k and code != 200), None)
    assert first_bad is not None and first_bad - k < 1.0, "/health stayed 200 for over a second"
    log = open(s.log_path).read()
    assert "sglang-detokenizer exited unexpectedly (killed by SIGKILL" in log
    assert "exiting with status 1" in log
    assert " http-1] ERROR failing in-flight and new requests with 503" in log  # the second worker was told


def test_group_sigterm_drains_in_flight_requests_then_exits_0():
    s = ServerProcess("--graceful-timeout", "30", "--max-batch-size", "4", "--log-requests")
    children = s.children()
    ipc_dir = s.ipc_dir()

    # 8 requests x 6 inputs of ~226 tokens in batches of 4: seconds of work on 2 cores, so some is
    # still running well after the signal even on a quiet machine (with 2 inputs each, everything
    # could finish 0.17 s after it)
    def one(i: int):
        r = requests.post(s.base_url + "/v1/embeddings", json={"input": [f"{i} {LONG}"] * 6}, timeout=60)
        return r, time.monotonic()

    try:
        with cf.ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(one, i) for i in range(8)]
            assert wait_until(lambda: s.in_flight() >= 8, 30), "the 8 requests never were all in flight"
            sig_time = time.monotonic()
            os.killpg(s.proc.pid, signal.SIGTERM)  # like systemd: every process of the group at once
            assert wait_until(lambda: "finishing in-flight requests" in Path(s.log_path).read_text(), 10)  # draining
            try:
                late = requests.post(s.base_url + "/v1/embeddings", json={"input": "late"}, timeout=5).status_code
            except requests.ConnectionError:
                late = "refused"
            done = [f.result(timeout=60) for f in futures]
        for r, _ in done:
            assert r.status_code == 200, r.text
            assert len(r.json()["data"]) == 6
        assert max(t for _, t in done) > sig_time + 0.2, "nothing was in flight at SIGTERM"
        assert late in (503, "refused")
        assert s.proc.wait(30) == 0
        assert wait_until(lambda: not running(children), 5.0)
        assert not os.path.exists(ipc_dir)
        assert "finishing in-flight requests" in open(s.log_path).read()
    finally:
        s.stop()
