"""A --dp-size 2 server whose replica is SIGKILLed under 32 clients (#27 item 8): every request the
server received gets an HTTP answer (200, or 503 naming the dead replica) before it exits 1; a
client may find the port closed (connection refused: nothing was sent), never a reset."""

from __future__ import annotations

import collections
import json
import os
import signal
import threading
import time

import pytest
import requests

from test.helpers.procs import pids_by_name, running
from test.helpers.server import ServerProcess
from test.helpers.waiting import wait_until

pytestmark = pytest.mark.slow
LONG = "the quick brown fox jumps over the lazy dog " * 25  # ~226 tokens
CLIENTS = 32
MAX_REQUESTS = 300  # per client: the loops are bounded even if the server never exits


def _root(exc: BaseException) -> BaseException:
    """The innermost cause of a requests exception (ConnectionRefusedError, ConnectionResetError...)."""
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        inner = exc.__cause__ or exc.__context__
        if inner is None and exc.args and isinstance(exc.args[-1], BaseException):
            inner = exc.args[-1]
        if inner is None:
            break
        exc = inner
    return exc


class Clients:
    """`CLIENTS` closed-loop clients on kept-alive connections; each stops once it has started a
    request 0.5 s after the kill, or after MAX_REQUESTS. `results`: (start, end, outcome, body)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.results: list[tuple[float, float, object, str]] = []
        self.kill_time: list[float] = []
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(CLIENTS)]

    def _run(self, i: int) -> None:
        with requests.Session() as sess:
            for _ in range(MAX_REQUESTS):
                t0 = time.monotonic()
                try:
                    r = sess.post(self.base_url + "/v1/embeddings", json={"input": [f"{i} {LONG}"] * 2}, timeout=20)
                    outcome, body = r.status_code, r.text
                except requests.RequestException as e:
                    outcome, body = type(_root(e)).__name__, str(e)
                self.results.append((t0, time.monotonic(), outcome, body))
                if self.kill_time and t0 > self.kill_time[0] + 0.5:
                    return

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def join(self) -> None:
        for t in self.threads:
            t.join(60)


def test_a_replica_sigkilled_under_32_clients_answers_every_request_before_exit_1():
    s = ServerProcess("--dp-size", "2", "--max-batch-size", "8")
    children = s.children()
    victim = pids_by_name(s.children())["sglang-sched-1"]
    clients = Clients(s.base_url)
    clients.start()
    try:
        assert wait_until(lambda: len(clients.results) >= len(clients.threads), 60), "the load never got going"
        clients.kill_time.append(time.monotonic())
        k = clients.kill_time[0]
        os.kill(victim, signal.SIGKILL)
        assert s.proc.wait(20) == 1
        exited = time.monotonic()
    finally:
        clients.join()
        s.stop()
    results = clients.results
    outcomes = collections.Counter(o for _, _, o, _ in results)
    print(f"\nexit {exited - k:.2f} s after the kill; outcomes {dict(outcomes)}")
    assert all(o == 200 for t0, t1, o, _ in results if t1 < k), "requests failed before the kill"
    in_flight = [(t1 - k, o, body) for t0, t1, o, body in results if t0 < k < t1]
    slowest = max((dt for dt, _, _ in in_flight), default=0.0)
    print(f"{len(in_flight)} in flight at the kill, answered within {slowest:.3f} s")
    assert len(in_flight) >= CLIENTS // 2, f"only {len(in_flight)} requests were in flight at the kill"
    assert any(o == 503 for _, o, _ in in_flight)
    for dt, outcome, body in in_flight:
        assert outcome in (200, 503), (outcome, body)  # answered: never reset, dropped or hung
        assert dt < 2.0, f"an in-flight request took {dt:.2f} s to be answered"
    for _, _, outcome, body in results:
        if outcome == 503:  # a JSON reason naming the dead replica
            assert "sglang-scheduler-1 exited unexpectedly" in json.loads(body)["error"]["message"], body
    # Every request either got an HTTP answer or found the port closed (nothing sent).
    unanswered = {o for o in outcomes if not isinstance(o, int) and o != "ConnectionRefusedError"}
    assert not unanswered, {o: outcomes[o] for o in unanswered}
    assert exited - k < 8.0, f"the server took {exited - k:.1f} s to exit"
    assert wait_until(lambda: not running(children), 5.0), f"orphans left: {running(children)}"
    log = open(s.log_path).read()
    assert "sglang-scheduler-1 exited unexpectedly (killed by SIGKILL" in log
    assert "exiting with status 1" in log
