"""The HTTP processes of a text-model server stay small: no torch in them (#29).

One server on the bundled model with --tokenizer-worker-num 2, so both kinds of HTTP process are
measured: the server process (HTTP worker 0, which also launched the others) and an extra worker.
Requests go over fresh connections, which SO_REUSEPORT spreads over both. Before #29 each was
~297 MB (torch came with three constant strings and with AutoTokenizer); the detokenizer, which
never imported torch, is ~35 MB.
"""

from __future__ import annotations

import os
import sys

import pytest
import requests

from test.helpers.server import ServerProcess
from test.helpers.watch import rss_mb

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "benchmark"))
from rss_sampler import server_processes  # noqa: E402

pytestmark = pytest.mark.slow

HTTP_RSS_LIMIT_MB = 150


def maps_torch(pid: int) -> bool:
    with open(f"/proc/{pid}/maps") as f:
        return "libtorch" in f.read()


def test_http_processes_of_a_text_model_hold_no_torch():
    with ServerProcess("--tokenizer-worker-num", "2") as s:
        s.wait_healthy()
        for i in range(40):  # each on its own connection: both workers serve some
            body = {"input": [f"request {i}: a sentence to embed"] * 8, "model": "m"}
            r = requests.post(s.base_url + "/v1/embeddings", json=body, timeout=60)
            assert r.status_code == 200, r.text
        assert requests.post(s.base_url + "/embed", json={"inputs": "x"}, timeout=60).status_code == 200
        assert requests.post(s.base_url + "/tokenize", json={"inputs": "x"}, timeout=60).status_code == 200
        procs = server_processes(s.proc.pid)
        http = {role: pid for role, pid in procs.items() if role.startswith("http")}
        assert set(http) == {"http", "http-1"}, procs
        sizes = {role: round(rss_mb(pid), 1) for role, pid in http.items()}
        print(f"HTTP process RSS (MB): {sizes}; detokenizer {rss_mb(procs['detokenizer']):.1f}")
        assert not [role for role, pid in http.items() if maps_torch(pid)], "torch is loaded in an HTTP process"
        assert maps_torch(procs["scheduler"])  # the check sees torch where it is
        assert all(mb <= HTTP_RSS_LIMIT_MB for mb in sizes.values()), sizes
