"""One server configured almost entirely by SGLANG_* variables: mutual TLS on two HTTP workers,
OpenTelemetry traces to a local OTLP/HTTP receiver, JSON logs with trace ids (HTTP and scheduler), and the
`sglang health` probe the images use as their HEALTHCHECK."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys

import httpx2
import openai
import orjson
import pytest
import requests

from test.helpers.certs import make_pki
from test.helpers.otlp_receiver import OtlpReceiver, spans_named
from test.helpers.server import ServerProcess

pytestmark = pytest.mark.slow

CLIENT_TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN_ID = "00f067aa0ba902b7"
KEY_PASSWORD = "s3cret-pass"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    pki = make_pki(tmp_path_factory.mktemp("pki"), key_password=KEY_PASSWORD)
    env = {
        "SGLANG_SSL_CERTFILE": str(pki.server_cert),
        "SGLANG_SSL_KEYFILE": str(pki.server_key),
        "SGLANG_SSL_KEYFILE_PASSWORD": KEY_PASSWORD,
        "SGLANG_SSL_CA_CERTS": str(pki.ca),
        "SGLANG_TOKENIZER_WORKER_NUM": "2",
        "SGLANG_SERVED_MODEL_NAME": "env-named-model",
        "SGLANG_MAX_BATCH_SIZE": "16",
        "SGLANG_MAX_QUEUE_DELAY": "0.002",
        "SGLANG_LOG_FORMAT": "json",
        "SGLANG_LOG_REQUESTS": "yes",
        "SGLANG_LOG_LEVEL": "debug",  # the scheduler's per-batch line (DEBUG) names its traces
        "SGLANG_CORS_ALLOW_ORIGIN": "https://a.example,https://b.example",
        "SGLANG_PORT": "1",  # the --port flag ServerProcess passes wins over the variable
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    tls = {"verify": str(pki.ca), "cert": (str(pki.client_cert), str(pki.client_key))}
    with OtlpReceiver() as receiver:
        env["SGLANG_OTLP_TRACES_ENDPOINT"] = receiver.endpoint
        with ServerProcess(env=env, tls=tls) as server:
            yield server, pki, receiver, env


def _embed(server, session=None, headers=None) -> requests.Response:
    http = session or requests
    return http.post(
        server.base_url + "/v1/embeddings",
        json={"input": ["hello there", "general kenobi"]},
        headers=headers,
        timeout=60,
        **server.tls,
    )


def _log_lines(server) -> list[dict]:
    with open(server.log_path) as f:
        return [orjson.loads(line) for line in f if line.startswith("{")]


def test_settings_come_from_the_environment_and_flags_win(setup):
    server, _, _, _ = setup
    models = requests.get(server.base_url + "/v1/models", timeout=10, **server.tls).json()
    assert models["data"][0]["id"] == "env-named-model"
    # CORS origins from a comma-separated variable; the port from the flag, not SGLANG_PORT=1.
    r = requests.get(server.base_url + "/v1/models", headers={"Origin": "https://b.example"}, timeout=10, **server.tls)
    assert r.headers.get("access-control-allow-origin") == "https://b.example"
    assert server.base_url.endswith(f":{server.port}") and server.port != 1


def test_every_http_worker_serves_tls_with_client_certificates(setup):
    server, _, _, _ = setup
    served_by: set = set()
    for _ in range(64):  # fresh connections: the kernel spreads them over both workers (by hash)
        with requests.Session() as s:
            r = _embed(server, s)
            assert r.status_code == 200 and len(r.json()["data"]) == 2
        served_by = {
            line["process"]
            for line in _log_lines(server)
            if line.get("route") == "/v1/embeddings" and line.get("status") == 200
        }
        if served_by == {"server", "http-1"}:
            break
    assert served_by == {"server", "http-1"}


def test_tls_refuses_plain_http_and_unknown_clients(setup):
    server, pki, _, _ = setup
    plain = server.base_url.replace("https://", "http://")
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(plain + "/health", timeout=5)
    with pytest.raises((requests.exceptions.SSLError, requests.exceptions.ConnectionError)):
        requests.get(server.base_url + "/health", verify=str(pki.ca), timeout=5)  # no client certificate
    with pytest.raises((requests.exceptions.SSLError, requests.exceptions.ConnectionError)):
        requests.get(
            server.base_url + "/health",
            verify=str(pki.ca),
            cert=(str(pki.stranger_cert), str(pki.stranger_key)),
            timeout=5,
        )
    # The server's certificate is checked by the client too: one from an unknown CA is refused.
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(server.base_url + "/health", cert=(str(pki.client_cert), str(pki.client_key)), timeout=5)


def test_openai_client_over_mutual_tls(setup):
    server, pki, _, _ = setup
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    ctx.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    with httpx2.Client(verify=ctx) as http_client:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", http_client=http_client)
        out = client.embeddings.create(model="env-named-model", input=["over TLS"])
    assert len(out.data) == 1 and len(out.data[0].embedding) == 384


def test_health_probe_reads_the_same_environment(setup):
    server, _, _, env = setup
    probe_env = {**os.environ, **env, "SGLANG_PORT": str(server.port), "SGLANG_HOST": "0.0.0.0"}
    probe = [sys.executable, "-m", "sglang.cli", "health"]
    r = subprocess.run(probe, env=probe_env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"https://127.0.0.1:{server.port}/health: HTTP 200" in r.stdout
    closed = {**probe_env, "SGLANG_PORT": "1"}
    r = subprocess.run(probe, env=closed, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "127.0.0.1:1/health" in r.stderr


def test_one_trace_per_request_across_the_three_processes(setup):
    server, _, receiver, _ = setup
    traceparent = f"00-{CLIENT_TRACE_ID}-{CLIENT_SPAN_ID}-01"
    r = _embed(server, headers={"traceparent": traceparent, "x-request-id": "traced-req-1"})
    assert r.status_code == 200
    names = {"POST /v1/embeddings", "tokenize", "queue", "forward", "render"}
    spans = receiver.wait_for(lambda sp: names <= {s.name for s in sp if s.trace_id == CLIENT_TRACE_ID})
    mine = [s for s in spans if s.trace_id == CLIENT_TRACE_ID]
    (http_span,) = spans_named(mine, "POST /v1/embeddings")
    # The client's span is the parent of ours; every other span is a child of the HTTP span.
    assert http_span.parent_span_id == CLIENT_SPAN_ID and http_span.kind == 2  # SERVER
    assert http_span.attributes["http.response.status_code"] == 200
    assert http_span.attributes["http.route"] == "/v1/embeddings"
    assert http_span.attributes["sglang.request_id"] == "traced-req-1"
    assert http_span.process in ("http-0", "http-1")
    assert http_span.resource["service.name"] == "sglang-embed"
    for name, process in (
        ("tokenize", http_span.process),
        ("queue", "scheduler"),
        ("forward", "scheduler"),
        ("render", "detokenizer"),
    ):
        children = spans_named(mine, name)
        assert children and all(c.parent_span_id == http_span.span_id for c in children), name
        assert all(c.process == process for c in children), (name, [c.process for c in children])
        for c in children:  # within the request, in order of the pipeline
            assert http_span.start_ns <= c.start_ns <= c.end_ns <= http_span.end_ns, name
    (tokenize,) = spans_named(mine, "tokenize")
    assert tokenize.attributes["sglang.inputs"] == 2 and tokenize.attributes["sglang.prompt_tokens"] > 2
    forwards = spans_named(mine, "forward")
    assert sum(f.attributes["sglang.inputs"] for f in forwards) == 2
    for f in forwards:
        assert f.attributes["sglang.batch.size"] >= f.attributes["sglang.inputs"]
        assert f.attributes["sglang.batch.tokens"] >= f.attributes["sglang.tokens"] > 0
        (queue,) = [
            q for q in spans_named(mine, "queue") if q.attributes["sglang.batch.id"] == f.attributes["sglang.batch.id"]
        ]
        assert queue.end_ns <= f.start_ns + 1_000_000  # the wait ends where the forward begins
    # The request's JSON log line names its trace.
    (line,) = [ln for ln in _log_lines(server) if ln.get("request_id") == "traced-req-1"]
    assert line["trace_id"] == CLIENT_TRACE_ID and line["span_id"] == http_span.span_id
    # So does the scheduler's line for each batch that served it, with the forward span's batch id.
    batch_lines = [
        ln for ln in _log_lines(server) if ln["process"] == "scheduler" and CLIENT_TRACE_ID in ln.get("trace_ids", ())
    ]
    assert {ln["batch_id"] for ln in batch_lines} == {f.attributes["sglang.batch.id"] for f in forwards}
    assert all(ln["message"].startswith("batch of ") for ln in batch_lines)


def test_request_without_traceparent_starts_its_own_trace_and_probes_are_not_traced(setup):
    server, _, receiver, _ = setup
    requests.get(server.base_url + "/health", timeout=10, **server.tls)
    r = _embed(server, headers={"x-request-id": "traced-req-2"})
    assert r.status_code == 200
    spans = receiver.wait_for(
        lambda sp: any(
            s.name == "POST /v1/embeddings" and s.attributes.get("sglang.request_id") == "traced-req-2" for s in sp
        )
    )
    (root,) = [s for s in spans if s.attributes.get("sglang.request_id") == "traced-req-2"]
    assert root.parent_span_id == "" and root.trace_id != CLIENT_TRACE_ID
    receiver.wait_for(lambda sp: len(spans_named(sp, "render", root.trace_id)) >= 1)
    assert not [s for s in receiver.snapshot() if s.attributes.get("url.path") == "/health"]
