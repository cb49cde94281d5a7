"""The pure-ASGI middlewares, driven directly (no server, no sockets)."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from sglang.srt.frontend.http.host_guard import allowed_hosts
from sglang.srt.frontend.http.middleware import (
    ApiKeyAuth,
    BodyLimits,
    DrainGuard,
    HostGuard,
    QueueFullGuard,
    RequestContext,
    ServerLifecycle,
    request_info,
)
from sglang.srt.metrics.server_metrics import ServerMetrics
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.logging_utils import REQUEST_LOGGER


class Echo:
    """An app that reads the whole body and answers 200 with what it saw."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope, receive, send):
        self.calls += 1
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        ctype = dict(scope["headers"]).get(b"content-type", b"").decode()
        request_info(scope).log_fields["inputs"] = 1
        out = json.dumps(
            {"len": len(body), "body": body.decode("latin-1"), "content_type": ctype, "path": scope["path"]}
        ).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": out})


def call(
    app,
    method="POST",
    path="/v1/embeddings",
    headers=None,
    chunks=(b"{}",),
    declare_length=True,
    ctype=True,
    stall=False,
):
    """Drive `app` with one request; `ctype`: send Content-Type: application/json unless headers say;
    `stall`: after the chunks the client neither sends more nor leaves (else it disconnects)."""
    headers = dict(headers or {})
    if ctype and "content-type" not in headers:
        headers["content-type"] = "application/json"
    hdrs = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    if declare_length and not any(k == b"content-length" for k, _ in hdrs):
        hdrs.append((b"content-length", str(sum(map(len, chunks))).encode()))
    pending = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1 or stall} for i, c in enumerate(chunks)
    ]
    sent = []

    async def receive():
        if pending:
            return pending.pop(0)
        if stall:
            await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(msg):
        sent.append(msg)

    scope = {"type": "http", "method": method, "path": path, "headers": hdrs, "client": ("10.0.0.1", 1234)}
    asyncio.run(app(scope, receive, send))
    start = sent[0]
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body, len(pending)


def call_raw(app, chunks):
    """The messages `app` sends for a POST whose client leaves after `chunks`."""
    pending = [{"type": "http.request", "body": c, "more_body": True} for c in chunks]
    sent = []

    async def receive():
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(msg):
        sent.append(msg)

    hdrs = [(b"content-type", b"application/json")]
    scope = {"type": "http", "method": "POST", "path": "/v1/embeddings", "headers": hdrs, "client": ("10.0.0.1", 1)}
    asyncio.run(app(scope, receive, send))
    return sent


def _error(body: bytes) -> dict:
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


def test_api_key_required_except_health():
    inner = Echo()
    app = ApiKeyAuth(inner, "s3cret")
    status, headers, body, _ = call(app)
    assert status == 401 and headers["www-authenticate"] == "Bearer"
    assert _error(body)["type"] == "authentication_error"
    for bad in ("Bearer wrong", "Basic s3cret", "s3cret", "Bearer s3cret2", "Bearer "):
        assert call(app, headers={"Authorization": bad})[0] == 401, bad
    assert call(app, headers={"Authorization": "Bearer s3cret"})[0] == 200
    assert call(app, headers={"Authorization": "bearer  s3cret "})[0] == 200  # scheme is case-insensitive
    assert call(app, method="GET", path="/health")[0] == 200
    assert call(app, method="GET", path="/metrics")[0] == 401
    assert inner.calls == 3


def test_body_limit_by_content_length_and_by_streamed_bytes():
    app = BodyLimits(Echo(), max_bytes=100)
    assert call(app, chunks=(b"x" * 100,))[0] == 200
    status, headers, body, _ = call(app, chunks=(b"x" * 101,))
    assert status == 413 and "--max-payload-bytes" in _error(body)["message"] and headers["connection"] == "close"
    # Chunked (no Content-Length) and a lying Content-Length are counted as the bytes arrive.
    status, _, _, left = call(app, chunks=(b"x" * 60, b"x" * 60, b"x" * 60), declare_length=False)
    assert status == 413
    status, _, _, _ = call(app, headers={"content-length": "10"}, chunks=(b"x" * 60, b"x" * 60))
    assert status == 413
    # A declared size far beyond the limit is refused without reading the body at all.
    _, _, _, left = call(app, headers={"content-length": str(50 << 20)}, chunks=(b"x" * 10,) * 3)
    assert left == 3
    assert call(app, headers={"content-length": "12abc"})[0] == 400
    # GET routes never read bodies, but an oversized declared one is still refused.
    assert call(app, method="GET", path="/v1/models", headers={"content-length": "1000"}, chunks=(b"",))[0] == 413


def test_body_is_replayed_to_the_app_once_read():
    status, _, body, _ = call(BodyLimits(Echo(), 1000), chunks=(b'{"in', b'put": 1}'), declare_length=False)
    assert status == 200 and json.loads(body)["body"] == '{"input": 1}'


@pytest.mark.parametrize(
    "ctype,status",
    [
        ("application/json", 200),
        ("application/json; charset=utf-8", 200),
        ("Application/JSON;charset=UTF8", 200),
        ("application/vnd.api+json", 200),
        ("text/plain", 415),
        ("application/x-www-form-urlencoded", 415),
        ("multipart/form-data; boundary=x", 415),
        ("application/json; charset=latin-1", 415),
        ("", 415),
    ],
)
def test_post_content_type_must_be_json(ctype, status):
    got, _, body, _ = call(BodyLimits(Echo(), 1000), headers={"content-type": ctype})
    assert got == status
    if status == 415:
        assert "application/json" in _error(body)["message"]


def test_missing_content_type_is_refused():
    """A browser may POST without Content-Type cross-origin with no CORS preflight; API clients never do."""
    status, headers, body, _ = call(BodyLimits(Echo(), 1000), ctype=False)
    assert status == 415 and "no Content-Type" in _error(body)["message"] and headers["connection"] == "close"


def test_body_that_does_not_arrive_in_time_is_408():
    app = BodyLimits(Echo(), 1000, timeout=0.2)
    status, headers, body, _ = call(app, chunks=(b'{"in',), declare_length=False, stall=True)
    err = _error(body)
    assert status == 408 and "--body-timeout" in err["message"] and headers["connection"] == "close"
    assert call(app, chunks=(b'{"in', b'put": 1}'), declare_length=False)[0] == 200


def test_client_leaving_mid_body_is_a_499_not_a_500():
    metrics = ServerMetrics("m")
    app = RequestContext(BodyLimits(Echo(), 1000), metrics, lambda: {"/v1/embeddings"})
    sent = call_raw(app, chunks=(b'{"in',))
    assert sent == []  # nobody to answer
    assert metrics.requests.get(route="/v1/embeddings", status="499") == 1
    assert metrics.requests.get(route="/v1/embeddings", status="500") == 0 and metrics.in_flight.get() == 0


@pytest.mark.parametrize(
    "host,ok",
    [
        ("127.0.0.1:30000", True),
        ("localhost:30000", True),
        ("LOCALHOST.", True),
        ("[::1]:30000", True),
        ("127.0.0.1", True),
        ("evil.example:30000", False),
        ("127.0.0.1.evil.example", False),
        ("[::2]:1", False),
    ],
)
def test_host_guard_on_a_loopback_server(host, ok):
    allowed = allowed_hosts(ServerArgs(host="127.0.0.1"))
    inner = Echo()
    status, headers, body, _ = call(HostGuard(inner, allowed), headers={"host": host})
    assert (status == 200) == ok and inner.calls == int(ok)
    if not ok:
        err = _error(body)
        assert status == 400 and err["code"] == "invalid_host" and "--allowed-hosts" in err["message"]
    assert call(HostGuard(Echo(), allowed), method="GET", path="/health", headers={"host": host})[0] == 200


def test_allowed_hosts_defaults_and_patterns():
    assert allowed_hosts(ServerArgs(host="0.0.0.0", api_key="k")) is None  # any: the names are unknown
    assert allowed_hosts(ServerArgs(host="0.0.0.0")) is None
    assert "localhost" in allowed_hosts(ServerArgs(host="::1"))
    assert allowed_hosts(ServerArgs(host="127.0.0.1", allowed_hosts=["*"])) is None
    pats = allowed_hosts(ServerArgs(host="0.0.0.0", allowed_hosts=["api.example.com, *.svc.local"]))
    guard = HostGuard(Echo(), pats)
    for host, status in (("api.example.com:8000", 200), ("a.b.svc.local", 200), ("svc.local", 400), ("x.com", 400)):
        assert call(guard, headers={"host": host})[0] == status


def test_drain_guard_answers_503_once_draining():
    life = ServerLifecycle()
    app = DrainGuard(Echo(), life)
    assert call(app)[0] == 200
    life.draining = True
    status, headers, body, _ = call(app)
    assert status == 503 and "shutting down" in _error(body)["message"] and headers["connection"] == "close"
    assert call(app, method="GET", path="/health")[0] == 503


def test_queue_full_guard_refuses_inference_routes_only_while_there_is_no_room():
    room = [True]
    echo = Echo()
    app = BodyLimits(QueueFullGuard(echo, lambda: room[0]), 1000)  # stacked as install_middleware does
    assert call(app)[0] == 200 and echo.calls == 1
    room[0] = False
    for path in ("/v1/embeddings", "/v1/classify", "/v1/rerank", "/embed_sparse"):
        status, headers, body, unread = call(app, path=path, chunks=(b'{"input":', b' "x"}'))
        assert status == 429 and headers["retry-after"] == "1" and unread == 0  # body read: keep-alive stays usable
        err = _error(body)
        assert err["type"] == "rate_limit_error" and err["message"] == "Embedding request queue is full; retry later."
    assert echo.calls == 1  # none of them reached the app
    for method, path in (("GET", "/health"), ("GET", "/metrics"), ("GET", "/v1/models")):
        assert call(app, method=method, path=path, chunks=(b"",))[0] == 200
    room[0] = True
    assert call(app)[0] == 200


def test_request_context_ids_metrics_and_log_line(caplog):
    metrics = ServerMetrics("m")
    app = RequestContext(ApiKeyAuth(Echo(), "k"), metrics, lambda: {"/v1/embeddings", "/health"}, log_requests=True)
    with caplog.at_level(logging.INFO, logger=REQUEST_LOGGER):
        _, headers, _, _ = call(app, headers={"x-request-id": "client-7", "authorization": "Bearer k"})
        assert headers["x-request-id"] == "client-7"
        _, headers, _, _ = call(app, headers={"authorization": "Bearer k"})
        generated = headers["x-request-id"]
        assert len(generated) == 32 and int(generated, 16) >= 0
        # An id that is too long or not printable ASCII is replaced, not echoed.
        _, headers, _, _ = call(app, headers={"x-request-id": "a b", "authorization": "Bearer k"})
        assert headers["x-request-id"] != "a b" and len(headers["x-request-id"]) == 32
        _, headers, _, _ = call(app, path="/nope/../etc", headers={"x-request-id": "x" * 129})
        assert len(headers["x-request-id"]) == 32  # the 401 carries an id too
    assert metrics.requests.get(route="/v1/embeddings", status="200") == 3
    assert metrics.requests.get(route="unmatched", status="401") == 1
    assert metrics.request_duration.count() == 3 and metrics.in_flight.get() == 0
    records = [r for r in caplog.records if r.name == REQUEST_LOGGER]
    assert len(records) == 4
    first = records[0].fields
    assert first["request_id"] == "client-7" and first["status"] == 200 and first["route"] == "/v1/embeddings"
    assert first["inputs"] == 1 and first["total_ms"] >= 0 and "input" not in first
    assert records[3].fields["path"] == "/nope/../etc" and records[3].fields["status"] == 401


def test_request_cancelled_by_the_shutdown_deadline_gets_a_503():
    metrics = ServerMetrics("m")
    entered = asyncio.Event()  # bound to the loop that first waits on it

    async def stuck(scope, receive, send):
        entered.set()
        await asyncio.sleep(3600)

    app = RequestContext(stuck, metrics, lambda: {"/v1/embeddings"})
    sent = []

    async def send(msg):
        sent.append(msg)

    async def receive():
        await asyncio.sleep(3600)

    async def scenario():
        task = asyncio.ensure_future(
            app({"type": "http", "method": "POST", "path": "/v1/embeddings", "headers": []}, receive, send)
        )
        await asyncio.wait_for(entered.wait(), 5)  # the request reached the app
        task.cancel()  # what uvicorn does once --graceful-timeout has passed
        await task  # answered and ended quietly: no CancelledError for uvicorn to log as a traceback

    asyncio.run(scenario())
    assert sent[0]["status"] == 503
    assert "--graceful-timeout" in _error(sent[1]["body"])["message"]
    assert metrics.requests.get(route="/v1/embeddings", status="503") == 1 and metrics.in_flight.get() == 0
