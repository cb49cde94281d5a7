"""Auth, limits, CORS, request ids, /metrics, request logs and the request deadline, on a real server."""

from __future__ import annotations

import concurrent.futures as cf
import json
import time

import numpy as np
import pytest
import requests

from test.helpers.prom import parse, value
from test.helpers.waiting import wait_until

pytestmark = pytest.mark.slow
SECRET_TEXT = "the-secret-input-text-that-must-never-be-logged"


def _post(server, payload=None, headers=None, data=None, **kw):
    h = {**server.headers, **(headers or {})}
    if data is None:
        return requests.post(server.base_url + "/v1/embeddings", json=payload, headers=h, timeout=60, **kw)
    return requests.post(server.base_url + "/v1/embeddings", data=data, headers=h, timeout=60, **kw)


def _error(r, status):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


def test_every_route_but_health_needs_the_key(hardened_server):
    s = hardened_server
    assert requests.get(s.base_url + "/health", timeout=5).status_code == 200
    key = s.api_key
    for method, path in [
        ("POST", "/v1/embeddings"),
        ("GET", "/v1/models"),
        ("GET", "/metrics"),
        ("GET", "/model_info"),
        ("GET", "/openapi.json"),
        ("GET", "/docs"),
        ("GET", "/nope"),
    ]:
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": key},
            {"Authorization": f"Bearer {key}x"},
        ):
            r = requests.request(method, s.base_url + path, json={"input": "x"}, headers=headers, timeout=10)
            err = _error(r, 401)
            assert err["type"] == "authentication_error" and r.headers["www-authenticate"] == "Bearer"
    assert requests.get(s.base_url + "/v1/models", headers=s.headers, timeout=10).status_code == 200
    assert requests.get(s.base_url + "/nope", headers=s.headers, timeout=10).status_code == 404


def test_openai_client_with_and_without_the_key(hardened_server):
    import openai

    good = openai.OpenAI(base_url=hardened_server.base_url + "/v1", api_key=hardened_server.api_key)
    res = good.embeddings.create(input=["hello there"], model="all-MiniLM-L6-v2")
    assert len(res.data[0].embedding) == 384
    bad = openai.OpenAI(base_url=hardened_server.base_url + "/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.embeddings.create(input="x", model="all-MiniLM-L6-v2")


def test_body_size_and_batch_size_limits_are_413(hardened_server):
    s = hardened_server
    err = _error(_post(s, {"input": "word " * 20000}), 413)  # ~100 KB with Content-Length
    assert "--max-payload-bytes" in err["message"]

    def chunks():  # no Content-Length: counted as it streams
        yield b'{"input": "'
        for _ in range(20):
            yield b"word " * 1000
        yield b'"}'

    _error(_post(s, data=chunks(), headers={"content-type": "application/json"}), 413)
    err = _error(_post(s, {"input": ["a"] * 9}), 413)
    assert "--max-client-batch-size" in err["message"] and err["param"] == "input"
    for _ in range(5):  # this server's --request-timeout is 1.5 s: on a loaded machine, a 504 means "try again"
        r = _post(s, {"input": ["a"] * 8})
        if r.status_code != 504:
            break
        time.sleep(1.0)
    assert r.status_code == 200, r.text[:300]


@pytest.mark.parametrize(
    "body,ctype,status",
    [
        (b'{"input": "x"}', "text/plain", 415),
        (b"input=x", "application/x-www-form-urlencoded", 415),
        (b'{"input": "\xff\xfe bad utf-8"}', "application/json", 400),
        (b"[" * 30_000 + b"]" * 30_000, "application/json", 400),
        (b'{"input": ' + b"[" * 5000 + b"]" * 5000 + b"}", "application/json", 400),
        (b'{"input": "\\ud800 lone surrogate"}', "application/json", 400),
        (b'{"input": [123456789012345678901234567890]}', "application/json", 400),
        (b'{"input": NaN}', "application/json", 400),
        (b"", "application/json", 400),
    ],
)
def test_hostile_bodies_get_4xx_in_openai_shape(hardened_server, body, ctype, status):
    _error(_post(hardened_server, data=body, headers={"content-type": ctype}), status)


def test_json_without_content_type_is_refused(hardened_server):
    """A browser can POST without Content-Type cross-origin with no CORS preflight: 415."""
    err = _error(_post(hardened_server, data=b'{"input": "no content type"}'), 415)
    assert "application/json" in err["message"]


def test_cors_opens_only_for_the_configured_origin(hardened_server):
    url = hardened_server.base_url + "/v1/embeddings"
    pre = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}
    ok = requests.options(url, headers={"Origin": "https://app.example", **pre}, timeout=10)
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == "https://app.example"
    evil = requests.options(url, headers={"Origin": "https://evil.example", **pre}, timeout=10)
    assert evil.status_code == 400 and "access-control-allow-origin" not in evil.headers
    r = _post(hardened_server, {"input": "x"}, headers={"Origin": "https://app.example"})
    assert r.headers["access-control-allow-origin"] == "https://app.example"
    assert "x-request-id" in r.headers["access-control-expose-headers"]


def test_request_id_and_timing_headers(hardened_server):
    r = _post(hardened_server, {"input": "timing"}, headers={"x-request-id": "my-id-42"})
    assert r.status_code == 200 and r.headers["x-request-id"] == "my-id-42"
    total, queue, infer = (float(r.headers[h]) for h in ("x-total-time", "x-queue-time", "x-inference-time"))
    assert total >= infer > 0 and total >= queue >= 0
    generated = _post(hardened_server, {"input": "no id"}).headers["x-request-id"]
    assert len(generated) == 32 and int(generated, 16) >= 0
    assert len(requests.get(hardened_server.base_url + "/v1/models", timeout=5).headers["x-request-id"]) == 32


def _metrics(server) -> dict:
    r = requests.get(server.base_url + "/metrics", headers=server.headers, timeout=10)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(r.text)


def test_metrics_parse_and_move(hardened_server):
    before = _metrics(hardened_server)
    texts = ["one two three", "four five"]
    r = _post(hardened_server, {"input": texts})
    assert r.status_code == 200
    _post(hardened_server, {"input": ""})  # a 400
    after = _metrics(hardened_server)
    ok = dict(route="/v1/embeddings", status="200")
    assert value(after, "sglang_http_requests_total", **ok) == value(before, "sglang_http_requests_total", **ok) + 1
    bad = dict(route="/v1/embeddings", status="400")
    assert value(after, "sglang_http_requests_total", **bad) == value(before, "sglang_http_requests_total", **bad) + 1
    tokens = r.json()["usage"]["prompt_tokens"]
    assert value(after, "sglang_prompt_tokens_total") == value(before, "sglang_prompt_tokens_total") + tokens
    for family in (
        "sglang_request_duration_seconds",
        "sglang_tokenization_duration_seconds",
        "sglang_queue_duration_seconds",
        "sglang_inference_duration_seconds",
    ):
        assert value(after, family + "_count") == value(before, family + "_count") + 1, family
    # --max-batch-size 2: the two inputs ran as one batch of two.
    assert value(after, "sglang_batch_size_count") > value(before, "sglang_batch_size_count")
    assert value(after, "sglang_batch_size_bucket", le="2.0") == value(after, "sglang_batch_size_count")
    assert "sglang_queue_length" in after and "sglang_http_requests_in_flight" in after
    # Every series, the HTTP side's and the scheduler's, names the model it counts: the served name.
    models = requests.get(hardened_server.base_url + "/v1/models", headers=hardened_server.headers, timeout=10)
    served = models.json()["data"][0]["id"]
    unnamed = [
        (s, labels) for fam in after.values() for s, labels, _ in fam["samples"] if labels.get("model") != served
    ]
    assert served == "all-MiniLM-L6-v2" and not unnamed, unnamed


def test_one_json_log_line_per_request_without_input_text(hardened_server):
    rid = f"log-check-{time.time_ns()}"
    r = _post(hardened_server, {"input": [SECRET_TEXT, "second"]}, headers={"x-request-id": rid})
    assert r.status_code == 200

    def logged() -> bool:  # its line is written whole (the text after the last newline may be partial)
        with open(hardened_server.log_path) as f:
            return any(rid in line for line in f.read().split("\n")[:-1])

    assert wait_until(logged, 5), hardened_server.log()
    with open(hardened_server.log_path) as f:
        lines = f.read().splitlines()
    records = [json.loads(line) for line in lines if line.startswith("{")]
    assert len(records) == len(lines), [line for line in lines if not line.startswith("{")][:5]
    mine = [rec for rec in records if rec.get("request_id") == rid]
    assert len(mine) == 1
    rec = mine[0]
    assert rec["route"] == "/v1/embeddings" and rec["status"] == 200 and rec["inputs"] == 2
    assert rec["prompt_tokens"] == r.json()["usage"]["prompt_tokens"]
    for key in ("queue_ms", "inference_ms", "total_ms", "tokenize_ms", "time", "level"):
        assert key in rec
    assert not any(SECRET_TEXT in line for line in lines)


def test_requests_queued_past_the_deadline_get_504_without_costing_compute(hardened_server):
    """--request-timeout 1.5 and --max-batch-size 2: 64 requests of 8 long inputs (~116k tokens)
    need far more than 1.5 s on any CPU, so the tail of the queue expires and is dropped unrun."""
    long_text = "the quick brown fox jumps over the lazy dog " * 25  # ~226 tokens
    before = _metrics(hardened_server)

    def one(i):
        t0 = time.monotonic()
        r = _post(hardened_server, {"input": [f"{i} {long_text}"] * 8})
        return r, time.monotonic() - t0

    with cf.ThreadPoolExecutor(64) as pool:
        responses = list(pool.map(one, range(64)))
    codes = [r.status_code for r, _ in responses]
    assert set(codes) <= {200, 504}, codes
    assert codes.count(504) > 0, codes
    offered = sum(r.json()["usage"]["prompt_tokens"] for r, _ in responses if r.status_code == 200)
    offered += 8 * 228 * codes.count(504)
    for r, elapsed in responses:
        if r.status_code == 504:
            err = _error(r, 504)
            assert "--request-timeout" in err["message"] and err["type"] == "server_error"
            assert elapsed >= 1.4, f"a 504 after {elapsed:.2f} s: before its deadline"
    after = _metrics(hardened_server)
    computed = value(after, "sglang_batch_tokens_sum") - value(before, "sglang_batch_tokens_sum")
    assert computed < 0.8 * offered, f"{computed} of {offered} tokens computed: expired inputs were run"
    assert (
        value(after, "sglang_http_requests_total", route="/v1/embeddings", status="504")
        - value(before, "sglang_http_requests_total", route="/v1/embeddings", status="504")
    ) == codes.count(504)
    r = _post(hardened_server, {"input": "after the flood"})
    assert r.status_code == 200
    assert abs(np.linalg.norm(np.asarray(r.json()["data"][0]["embedding"])) - 1) < 1e-4
