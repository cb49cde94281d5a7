"""#27 items 3-5 on a real server (bundled MiniLM): TEI /tokenize and /decode bounded and off the
event loop, per-token answers refused up front over --max-response-bytes, and a large allowed
/embed_all answered without the HTTP process holding copies of it."""

from __future__ import annotations

import threading
import time

import orjson
import pytest
import requests

from test.helpers.prom import parse, value
from test.helpers.server import ServerProcess

pytestmark = pytest.mark.slow
ROW_TEXT = "hello " * 252  # 254 tokens with [CLS] and [SEP]
JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def server(default_server):
    return default_server  # conftest.py: shared with the other modules that need no flags


def _post(server, path, payload, timeout=120):
    return requests.post(server.base_url + path, json=payload, timeout=timeout)


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def _forwards(server) -> float:
    scrape = requests.get(server.base_url + "/metrics", timeout=10).text
    return value(parse(scrape), "sglang_forward_duration_seconds_count")


class HealthWatch:
    """Polls /health from a thread while a request runs; the slowest answer it saw."""

    def __init__(self, server) -> None:
        self.url, self.worst, self.count = server.base_url + "/health", 0.0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            requests.get(self.url, timeout=10).raise_for_status()
            self.worst, self.count = max(self.worst, time.monotonic() - t0), self.count + 1
            time.sleep(0.05)

    def __enter__(self) -> "HealthWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(15)


def _tei_error(r, status: int) -> dict:
    assert r.status_code == status, r.text[:300]
    body = r.json()
    assert set(body) == {"error", "error_type"}, body
    return body


def test_tokenize_over_the_batch_limit_is_refused_fast(server):
    t0 = time.monotonic()
    r = _post(server, "/tokenize", {"inputs": ["a"] * 200_000})
    elapsed = time.monotonic() - t0
    body = _tei_error(r, 413)  # as /embed answers too many inputs
    assert "--max-client-batch-size" in body["error"] and elapsed < 3, (elapsed, body)
    embed = _tei_error(_post(server, "/embed", {"inputs": ["a"] * 2049}), 413)
    assert embed["error_type"] == body["error_type"]
    ok = _post(server, "/tokenize", {"inputs": ["hello world"] * 2048})
    assert ok.status_code == 200 and len(ok.json()) == 2048 and ok.json()[0][1]["text"] == "hello"


def test_tokenize_answer_over_the_response_limit_is_refused(server):
    # 2,048 inputs of 702 tokens (a 7 MB body): ~90 MB of SimpleTokens, over the 64 MiB default.
    t0 = time.monotonic()
    with HealthWatch(server) as watch:
        r = _post(server, "/tokenize", {"inputs": ["word " * 700] * 2048})
    body = _tei_error(r, 413)
    assert "--max-response-bytes" in body["error"], body
    assert time.monotonic() - t0 < 30 and watch.worst < 1.0, (time.monotonic() - t0, watch.worst)


def test_decode_many_lists_is_refused_and_a_large_one_keeps_health_answering(server):
    body = orjson.dumps({"ids": [[7592]] * 1_000_000})  # 8 MB: the count is checked before validation
    with HealthWatch(server) as watch:
        t0 = time.monotonic()
        r = requests.post(server.base_url + "/decode", data=body, headers=JSON, timeout=60)
        elapsed = time.monotonic() - t0
    assert "--max-client-batch-size" in _tei_error(r, 413)["error"]
    assert elapsed < 5 and watch.worst < 1.0, (elapsed, watch.worst)
    # The most a request may carry: 2,048 lists of the model's context (256 ids here), 0.5 M ids.
    context = requests.get(server.base_url + "/info", timeout=10).json()["max_input_length"]
    lists = [[7592, 2088] * (context // 2)] * 2048
    with HealthWatch(server) as watch:
        t0 = time.monotonic()
        r = _post(server, "/decode", {"ids": lists})
        elapsed = time.monotonic() - t0
    assert r.status_code == 200, r.text[:300]
    out = r.json()
    assert len(out) == 2048 and out[0].startswith("hello world hello world")
    assert watch.count >= 3 and watch.worst < 1.0, (elapsed, watch.count, watch.worst)
    over = _post(server, "/decode", {"ids": [[7592] * (context + 1)] * 2048})
    assert "token ids" in _tei_error(over, 413)["error"]


@pytest.mark.parametrize(
    "path, payload",
    [
        ("/embed_all", {"inputs": [ROW_TEXT] * 128}),
        ("/pooling", {"input": [ROW_TEXT] * 128, "task": "token_embed"}),
    ],
)
def test_per_token_answer_over_the_limit_is_refused_before_any_model_work(server, path, payload):
    before = _forwards(server)
    t0 = time.monotonic()
    r = _post(server, path, payload)
    elapsed = time.monotonic() - t0
    assert r.status_code == 413, r.text[:300]
    text = r.text
    assert "--max-response-bytes" in text and elapsed < 1.0, (elapsed, text)
    assert _forwards(server) == before, "the model ran for a refused request"


def test_large_allowed_embed_all_keeps_the_http_process_small(server):
    pid = server.proc.pid
    _post(server, "/embed_all", {"inputs": ["warm up"]})
    time.sleep(1)  # the warm-up's memory settles before the baseline is read
    base = _rss_mb(pid)
    peak = [base]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss_mb(pid))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    r = _post(server, "/embed_all", {"inputs": [ROW_TEXT] * 50}, timeout=300)  # ~56 MB of JSON
    assert r.status_code == 200, r.text[:300]
    size = len(r.content)
    rows = r.json()
    assert len(rows) == 50 and len(rows[0]) == 254 and len(rows[0][0]) == 384
    del r, rows
    time.sleep(3)  # still sampling: a late peak counts, and `after` is read once the memory settled
    done.set()
    sampler.join(5)
    after = _rss_mb(pid)
    assert size > 50e6
    assert peak[0] - base < 300 and after - base < 100, (base, peak[0], after)


def test_multi_vector_embeddings_are_sized_in_their_answer_format(tmp_path):
    """ColBERT rows on /v1/embeddings: JSON over the limit is 413 before any forward pass, the same
    request as base64 (~2.4x smaller) is answered."""
    from test.helpers.tiny_encoders import COLBERT_DIM, build_tiny_stanford_colbert

    limit = 50_000
    model = build_tiny_stanford_colbert(str(tmp_path / "colbert"))
    with ServerProcess("--model-path", model, "--max-response-bytes", str(limit), "--cpu-threads", "1") as s:
        one = _post(s, "/v1/embeddings", {"input": "word " * 50}).json()["data"][0]
        tokens = len(one["token_ids"])  # per document, as the checkpoint's own length rules make it
        n = int(1.5 * limit / (tokens * (COLBERT_DIM * 13 + 10))) + 1  # JSON ~1.5x the limit
        docs = ["word " * 50] * n
        before = _forwards(s)
        t0 = time.monotonic()
        r = _post(s, "/v1/embeddings", {"input": docs})
        assert r.status_code == 413 and time.monotonic() - t0 < 1.0, r.text[:300]
        err = r.json()["error"]
        assert "--max-response-bytes" in err["message"] and "base64" in err["message"], err
        assert _forwards(s) == before
        ok = _post(s, "/v1/embeddings", {"input": docs, "encoding_format": "base64"})
        assert ok.status_code == 200 and len(ok.content) < limit, ok.text[:300]
        assert len(ok.json()["data"]) == n and len(ok.json()["data"][0]["token_ids"]) == tokens
