"""Metrics that add up and engine health on a real server with two HTTP workers (issue #15 items
11, 13 and 15): one scrape reports both workers, every gauge returns to idle after aborts and
disconnects, and a stopped scheduler turns /health 503 and then exits the server non-zero.

One server for the module; the last test stops its scheduler (keep it last).
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import socket
import threading
import time

import pytest
import requests

from test.helpers.procs import running
from test.helpers.prom import parse, value
from test.helpers.server import ServerProcess
from test.helpers.waiting import wait_until

pytestmark = pytest.mark.slow
LONG = "the quick brown fox jumps over the lazy dog " * 25  # ~226 tokens
# ~60 tokens: a batch of them stays far below the watchdog limits even on a busy machine.
TEXT = "the quick brown fox jumps over the lazy dog " * 6
WATCHDOG, WATCHDOG_EXIT = 1.5, 5.0


@pytest.fixture(scope="module")
def server():
    args = ("--tokenizer-worker-num", "2", "--max-batch-size", "4", "--watchdog-timeout", str(WATCHDOG),
            "--watchdog-exit-timeout", str(WATCHDOG_EXIT))  # fmt: skip
    with ServerProcess(*args) as s:
        yield s


def _scrape(s) -> dict:
    with requests.Session() as sess:  # a new connection: any of the two workers may answer
        return parse(sess.get(s.base_url + "/metrics", timeout=10).text)


def test_one_scrape_counts_the_requests_of_both_workers(server):
    """Item 15: 40 requests on 40 connections (the kernel spreads them over both workers); every
    scrape, whichever worker answers it, shows all 40 and all their tokens."""
    base = _scrape(server)

    def one(i):
        with requests.Session() as sess:
            return sess.post(server.base_url + "/v1/embeddings", json={"input": [f"text {i}"] * 2}, timeout=30)

    with cf.ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(one, range(40)))
    assert all(r.status_code == 200 for r in responses)
    tokens = sum(r.json()["usage"]["prompt_tokens"] for r in responses)
    ok = dict(route="/v1/embeddings", status="200")
    for _ in range(6):
        m = _scrape(server)
        assert value(m, "sglang_http_requests_total", **ok) - value(base, "sglang_http_requests_total", **ok) == 40
        assert value(m, "sglang_prompt_tokens_total") - value(base, "sglang_prompt_tokens_total") == tokens
        assert value(m, "sglang_embedding_inputs_total") - value(base, "sglang_embedding_inputs_total") == 80
        count = "sglang_request_duration_seconds_count"
        assert value(m, count) - value(base, count) == 40
        assert value(m, "sglang_batch_size_sum") - value(base, "sglang_batch_size_sum") == 80  # each batch once


def test_every_gauge_is_back_to_idle_after_aborts_and_disconnects(server):
    """Item 13: 48 requests of 8 inputs whose clients give up after 0.3 s (aborts while queued),
    and 10 clients that leave mid-body; once quiet, the queue gauge is 0 and only the scrape itself
    is in flight."""

    def impatient(i):
        try:
            requests.post(server.base_url + "/v1/embeddings", json={"input": [f"{i} {TEXT}"] * 8}, timeout=0.3)
        except requests.RequestException:
            pass

    with cf.ThreadPoolExecutor(16) as pool:
        list(pool.map(impatient, range(48)))
    for _ in range(10):
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(
                b"POST /v1/embeddings HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                b'Content-Length: 500\r\n\r\n{"input": '
            )

    def idle() -> bool:
        m = _scrape(server)
        return value(m, "sglang_queue_length") == 0 and value(m, "sglang_http_requests_in_flight") == 1

    assert wait_until(idle, 15.0, interval=0.3), _scrape(server)
    m = _scrape(server)
    assert value(m, "sglang_http_requests_total", route="/v1/embeddings", status="499") >= 10
    assert value(m, "sglang_http_requests_total", route="/v1/embeddings", status="500") == 0


def test_a_stopped_scheduler_turns_health_503_then_the_server_exits_1(server):
    """Item 11: SIGSTOP the scheduler with a request in flight: /health answers 503 within the
    watchdog timeout (it used to stay 200), the request gets 503 and the server exits 1 after the
    exit timeout, leaving no process behind."""
    children = server.children()
    scheduler = next(p for p in children if open(f"/proc/{p}/comm").read().startswith("sglang-schedule"))
    # Idle first (a batch still running from the last test could itself be slow on a busy machine).
    assert requests.post(server.base_url + "/v1/embeddings", json={"input": "idle?"}, timeout=60).status_code == 200
    assert requests.get(server.base_url + "/health", timeout=5).status_code == 200
    outcome = []

    def in_flight():
        try:
            r = requests.post(server.base_url + "/v1/embeddings", json={"input": [LONG] * 4}, timeout=60)
            outcome.append(r.status_code)
        except requests.RequestException as e:
            outcome.append(type(e).__name__)

    os.kill(scheduler, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        t = threading.Thread(target=in_flight)
        t.start()

        first = []

        def unhealthy() -> bool:
            try:
                r = requests.get(server.base_url + "/health", timeout=2)
            except requests.RequestException:
                return False
            if r.status_code == 503:
                first.append(r.text)
            return r.status_code == 503

        assert wait_until(unhealthy, WATCHDOG + 3.0, interval=0.2), "/health stayed 200 with a stopped scheduler"
        health_after = time.monotonic() - stopped
        r = requests.get(server.base_url + "/health", timeout=2)
        assert "scheduler" in r.json()["error"]["message"] and "--watchdog-timeout" in r.json()["error"]["message"]
        assert server.proc.wait(WATCHDOG_EXIT + 10) == 1
        exited_after = time.monotonic() - stopped
        t.join(10)
    finally:
        if running([scheduler]):
            os.kill(scheduler, signal.SIGKILL)
    print(f"\n/health 503 after {health_after:.1f} s ({first[0]}), exit 1 after {exited_after:.1f} s")
    assert health_after >= WATCHDOG - 0.5 and exited_after >= WATCHDOG_EXIT - 0.5
    assert outcome == [503], outcome
    assert wait_until(lambda: not running(children), 5.0), running(children)
    log = open(server.log_path).read()
    assert "--watchdog-exit-timeout" in log and "exiting with status 1" in log
