"""Two real `sglang serve` replicas behind a real nginx running the shipped config
(docker/nginx/sglang-embed.conf.template): load spreads over both, and when one replica is
SIGKILLed mid-stream every request still gets its correct vector from the survivor.

nginx is Debian's nginx-light, installed by `make test` (system-deps); without it this test fails, it does not skip.
"""

from __future__ import annotations

import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests

from test.helpers import prom
from test.helpers.deploy import hpa_pod_metrics
from test.helpers.nginx import NginxProcess
from test.helpers.procs import running
from test.helpers.server import ServerProcess
from test.helpers.texts import load_texts
from test.helpers.waiting import wait_until

pytestmark = pytest.mark.slow

TEXTS = [t for t in load_texts() if len(t) < 400][:40]  # short texts: the test is about routing, not compute


@pytest.fixture(scope="module")
def fleet():
    # One torch thread each: two replicas share the two cores like two pods on one node.
    replicas = [ServerProcess("--cpu-threads", "1", wait=False) for _ in range(2)]
    for r in replicas:
        r.wait_healthy()
    nginx = NginxProcess([f"127.0.0.1:{r.port}" for r in replicas])
    try:
        ref = requests.post(replicas[0].base_url + "/v1/embeddings", json={"input": TEXTS}, timeout=60)
        assert ref.status_code == 200, ref.text
        reference = np.array([d["embedding"] for d in ref.json()["data"]], dtype=np.float32)
        yield replicas, nginx, reference
    finally:
        nginx.stop()
        for r in replicas:
            r.stop()


def embed_through(nginx: NginxProcess, i: int) -> tuple[int, int, np.ndarray]:
    """Request i of a stream: one text, returned as (i, status, vector)."""
    r = requests.post(nginx.base_url + "/v1/embeddings", json={"input": TEXTS[i % len(TEXTS)]}, timeout=60)
    vec = np.array(r.json()["data"][0]["embedding"], dtype=np.float32) if r.status_code == 200 else None
    return i, r.status_code, vec


def served_embeddings(replica: ServerProcess) -> float:
    fams = prom.parse(requests.get(replica.base_url + "/metrics", timeout=10).text)
    return prom.value(fams, "sglang_http_requests_total", route="/v1/embeddings", status="200")


def check_vectors(results, reference: np.ndarray) -> None:
    bad = [
        (i, status)
        for i, status, vec in results
        if status != 200 or not np.allclose(vec, reference[i % len(TEXTS)], atol=1e-4)
    ]
    assert not bad, f"{len(bad)} of {len(results)} requests lost or wrong: {bad[:10]}"


def test_requests_spread_over_both_replicas(fleet):
    replicas, nginx, reference = fleet
    before = [served_embeddings(r) for r in replicas]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: embed_through(nginx, i), range(80)))
    check_vectors(results, reference)
    served = [served_embeddings(r) - b for r, b in zip(replicas, before)]
    assert sum(served) == 80
    assert min(served) >= 15, f"least_conn left a replica nearly idle: {served}"
    for path in ("/health", "/v1/models"):  # non-embedding routes pass through too
        assert requests.get(nginx.base_url + path, timeout=10).status_code == 200
    # What the Kubernetes GPU autoscaler scales on is a metric each replica really serves.
    fams = prom.parse(requests.get(replicas[0].base_url + "/metrics", timeout=10).text)
    assert hpa_pod_metrics() and all(name in fams for name in hpa_pod_metrics())


def test_sigkill_of_one_replica_mid_stream_loses_nothing(fleet):
    replicas, nginx, reference = fleet
    victim, survivor = replicas[1], replicas[0]
    victim_procs = [victim.proc.pid, *victim.children()]
    done = threading.Semaphore(0)
    killed = threading.Event()

    def one(i: int):
        out = embed_through(nginx, i)
        done.release()
        return out

    def killer():
        for _ in range(50):  # a quarter of the stream answered, the rest still to come or in flight
            done.acquire()
        victim.proc.send_signal(signal.SIGKILL)
        killed.set()

    threading.Thread(target=killer, daemon=True).start()
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(200)))
    assert killed.is_set()
    check_vectors(results, reference)
    # The victim's scheduler and detokenizer follow it down; the survivor still serves.
    assert wait_until(lambda: not running(victim_procs), timeout=10), running(victim_procs)
    assert requests.get(survivor.base_url + "/health", timeout=5).status_code == 200
    # nginx's log shows the retries: requests answered only after trying the dead replica.
    victim_addr = f"127.0.0.1:{victim.port}"
    retried = [line for line in nginx.access_log() if f"upstream={victim_addr}, " in line and " 200 " in line]
    assert retried, "no request was retried on the survivor; the kill was not exercised"
