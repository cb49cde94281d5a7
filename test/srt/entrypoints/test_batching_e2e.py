"""Dynamic batching through the real server: two HTTP workers, a tiny queue, overload, idleness."""

from __future__ import annotations

import concurrent.futures as cf
import os
import time

import numpy as np
import pytest
import requests

from test.helpers.server import ServerProcess
from test.helpers.waiting import wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server():
    with ServerProcess("--tokenizer-worker-num", "2", "--max-queue-size", "16", "--max-batch-size", "8") as s:
        yield s


def _post(url, payload, rid=None, session=None):
    headers = {"x-request-id": rid} if rid else {}
    return (session or requests).post(url + "/v1/embeddings", json=payload, headers=headers, timeout=120)


def test_two_workers_every_response_reaches_its_client(server):
    texts = [f"message number {i} about the {['cat', 'river', 'city', 'music'][i % 4]}" for i in range(120)]
    expected = {}
    for i in range(0, len(texts), 8):
        data = _post(server.base_url, {"input": texts[i : i + 8]}).json()["data"]
        for j, d in enumerate(data):
            expected[i + j] = np.asarray(d["embedding"], np.float32)

    def one(i):
        with requests.Session() as s:  # a connection per client, so both workers get traffic
            for _ in range(5):
                r = _post(server.base_url, {"input": texts[i]}, rid=f"client-{i}", session=s)
                if r.status_code != 429:
                    return i, r
                time.sleep(float(r.headers["Retry-After"]) / 10)
            return i, r

    with cf.ThreadPoolExecutor(24) as pool:
        results = list(pool.map(one, range(len(texts))))
    assert len(results) == len(texts)
    for i, r in results:
        assert r.status_code == 200, r.text
        assert r.headers["x-request-id"] == f"client-{i}"
        got = np.asarray(r.json()["data"][0]["embedding"], np.float32)
        assert np.abs(got - expected[i]).max() <= 1e-5, f"client {i} got someone else's vector"
    workers = {p for p in server.children()}
    assert len(workers) >= 4  # scheduler, detokenizer, second HTTP worker (+ resource tracker)


def test_overload_answers_429_with_retry_after_and_recovers(server):
    payload = {"input": ["a moderately long sentence about rivers and mountains and music " * 3] * 8}

    def one(_):
        return _post(server.base_url, payload)

    with cf.ThreadPoolExecutor(48) as pool:
        responses = list(pool.map(one, range(96)))
    codes = [r.status_code for r in responses]
    assert set(codes) <= {200, 429}, codes
    assert codes.count(429) > 0 and codes.count(200) > 0
    rejected = next(r for r in responses if r.status_code == 429)
    assert rejected.headers["Retry-After"] == "1"
    assert rejected.json()["error"]["message"] == "Embedding request queue is full; retry later."
    assert rejected.json()["error"]["type"] == "rate_limit_error"
    assert requests.get(server.base_url + "/health", timeout=5).status_code == 200
    assert _post(server.base_url, {"input": "after the storm"}).status_code == 200


def _cpu_seconds(pids):
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except FileNotFoundError:
            pass
    return total


def test_idle_server_uses_almost_no_cpu(server):
    assert wait_until(lambda: server.in_flight() == 0, 30)  # the previous test's requests are answered
    pids = [server.proc.pid] + server.children()
    before = _cpu_seconds(pids)
    time.sleep(3.0)  # the idle window measured
    used = _cpu_seconds(pids) - before
    assert used < 0.15, f"idle server used {used:.2f} CPU-seconds in 3 s"
