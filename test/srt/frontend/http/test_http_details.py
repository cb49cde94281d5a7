"""HTTP details (#27 item 9) over raw sockets on a real uvicorn with the server's protocol and body
middleware: transfer codings (501), chunk extensions within --max-header-bytes, no `100 Continue`
before a 413, strict Host parsing, and 405s whose Allow header lists every method of the path."""

from __future__ import annotations

import json
import socket

import pytest
from fastapi.testclient import TestClient

from sglang.srt.frontend.http.host_guard import allowed_hosts, host_allowed, host_name
from sglang.srt.frontend.http.http_protocol import ConnectionLimits, limited_protocol, transfer_coding_refusal
from sglang.srt.frontend.http.http_server import create_app
from sglang.srt.frontend.http.middleware import BodyLimits
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.network import PortArgs
from test.helpers.model_info import make_model_info
from test.helpers.raw_http import exchange
from test.helpers.uvicorn_thread import uvicorn_in_thread

LIMIT = 8192
MAX_BODY = 1000


async def echo_app(scope, receive, send):
    """Reads the whole body and answers 200 with its length and text."""
    if scope["type"] != "http":
        return
    body = b""
    while True:
        msg = await receive()
        if msg["type"] != "http.request":
            return
        body += msg.get("body", b"")
        if not msg.get("more_body"):
            break
    out = json.dumps({"len": len(body), "body": body.decode("latin-1")}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(out)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": out})


@pytest.fixture(scope="module")
def server():
    refused: list[int] = []
    limits = ConnectionLimits(max_connections=64, max_header_bytes=LIMIT, header_timeout=5.0, on_reject=refused.append)
    app = BodyLimits(echo_app, max_bytes=MAX_BODY, timeout=5.0)
    with uvicorn_in_thread(app, limited_protocol(limits)) as (_, port):
        yield port, refused


def _answer(port: int, *chunks: bytes, pause: float = 0.0) -> bytes:
    return exchange(port, *chunks, pause=pause, done=lambda out: out.endswith(b"}") and b"\r\n\r\n" in out)


def _chunked(te: bytes, chunks: bytes) -> bytes:
    head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
    return head + b"Transfer-Encoding: " + te + b"\r\n\r\n" + chunks


def _json(reply: bytes) -> dict:
    return json.loads(reply.split(b"\r\n\r\n", 1)[1])


BODY = b'{"a":1}'
ONE_CHUNK = b"7\r\n" + BODY + b"\r\n0\r\n\r\n"


def test_plain_chunked_bodies_arrive_whole(server):
    port, _ = server
    reply = _answer(port, _chunked(b"chunked", ONE_CHUNK))
    assert reply.startswith(b"HTTP/1.1 200 ") and _json(reply)["body"] == BODY.decode()
    # Many small chunks, a short extension and a trailer: all within the budget.
    many = b"".join(b"1;x=y\r\n" + bytes([c]) + b"\r\n" for c in BODY) + b"0\r\nX-Trailer: 1\r\n\r\n"
    reply = _answer(port, _chunked(b"chunked", many))
    assert reply.startswith(b"HTTP/1.1 200 ") and _json(reply)["body"] == BODY.decode()


@pytest.mark.parametrize(
    "te,status",
    [(b"gzip, chunked", 501), (b"deflate,chunked", 501), (b"identity, chunked", 501), (b"chunked, gzip", 400)],
)
def test_transfer_codings_other_than_chunked_are_refused(server, te, status):
    port, refused = server
    reply = _answer(port, _chunked(te, ONE_CHUNK))
    assert reply.startswith(f"HTTP/1.1 {status} ".encode()), reply[:80]
    if status == 501:
        assert "Transfer-Encoding" in _json(reply)["error"]["message"]
        assert 501 in refused


def test_transfer_codings_split_over_two_headers_are_read_together(server):
    port, _ = server
    head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
    reply = _answer(port, head + b"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n" + ONE_CHUNK)
    assert reply.startswith(b"HTTP/1.1 501 ")


def test_transfer_coding_policy():
    assert transfer_coding_refusal(["chunked"]) is None
    assert transfer_coding_refusal(["gzip", "chunked"])[0] == 501
    assert transfer_coding_refusal(["chunked", "gzip"])[0] == 400  # length unknown (RFC 9112 6.3)
    assert transfer_coding_refusal(["chunked", "chunked"])[0] == 400


@pytest.mark.parametrize("pieces", [1, 7])
def test_a_chunk_extension_over_the_header_limit_gets_400(server, pieces):
    port, refused = server
    before = refused.count(400)
    ext = b"7;ext=" + b"a" * (LIMIT + 2000) + b"\r\n" + BODY + b"\r\n0\r\n\r\n"
    raw = _chunked(b"chunked", ext)
    step = -(-len(raw) // pieces)
    reply = _answer(port, *[raw[i : i + step] for i in range(0, len(raw), step)], pause=0.02)
    assert reply.startswith(b"HTTP/1.1 400 "), reply[:80]
    assert "--max-header-bytes" in _json(reply)["error"]["message"]
    assert refused.count(400) == before + 1


def test_trailers_count_toward_the_header_limit_too(server):
    port, _ = server
    trailer = b"7\r\n" + BODY + b"\r\n0\r\nX-Pad: " + b"b" * (LIMIT + 2000) + b"\r\n\r\n"
    reply = _answer(port, _chunked(b"chunked", trailer))
    assert reply.startswith(b"HTTP/1.1 400 ")


def test_extensions_within_the_limit_pass(server):
    port, _ = server
    ext = b"7;ext=" + b"a" * (LIMIT // 2) + b"\r\n" + BODY + b"\r\n0\r\n\r\n"
    assert _answer(port, _chunked(b"chunked", ext)).startswith(b"HTTP/1.1 200 ")


def _expect(port: int, length: int) -> bytes:
    """Headers with `Expect: 100-continue`; the body only once 100 Continue came (as curl does)."""
    head = (
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n"
        + f"Content-Length: {length}\r\n\r\n".encode()
    )
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(head)
        first = sock.recv(65536)
        if first.startswith(b"HTTP/1.1 100 "):
            sock.sendall(b" " * (length - 2) + b"{}")
            rest = b""
            while not rest.endswith(b"}"):
                data = sock.recv(65536)
                if not data:
                    break
                rest += data
            return first + rest
        return first


def test_expect_100_continue_over_the_payload_limit_gets_413_without_100_continue(server):
    port, _ = server
    reply = _expect(port, MAX_BODY + 1)
    assert reply.startswith(b"HTTP/1.1 413 "), reply[:80]
    assert b"100 Continue" not in reply
    # Within the limit the client is told to go on, and the body arrives.
    reply = _expect(port, MAX_BODY)
    assert reply.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 ")


def test_an_oversized_body_without_expect_is_still_read_and_answered_413(server):
    port, _ = server
    head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    raw = head + f"Content-Length: {MAX_BODY + 500}\r\n\r\n".encode() + b"x" * (MAX_BODY + 500)
    assert _answer(port, raw).startswith(b"HTTP/1.1 413 ")


@pytest.mark.parametrize(
    "value,name",
    [
        ("[::1]evil", None),
        ("[::1]:30000", "::1"),
        ("[0:0::1]", "::1"),
        ("[::1]:x", None),
        ("[::1]:123456", None),
        ("[localhost]", None),
        ("localhost:30000", "localhost"),
        ("localhost:evil", None),
        ("127.0.0.1:80", "127.0.0.1"),
        ("::1", None),  # an IPv6 Host must be bracketed
        ("a:b:c", None),
        ("evil.example/x", None),
        ("Example.COM.", "example.com"),
        ("", None),
    ],
)
def test_host_values_are_parsed_strictly(value, name):
    assert host_name(value) == name


def test_a_bracketed_ipv6_with_trailing_text_does_not_pass_the_loopback_guard():
    allowed = allowed_hosts(ServerArgs(host="127.0.0.1"))
    assert host_allowed(host_name("[::1]:8000"), allowed)
    assert not host_allowed(host_name("[::1]evil"), allowed)
    assert not host_allowed(host_name("[::1]evil.example"), allowed)
    assert host_allowed(host_name("[::1]"), ["[::1]"]) and host_allowed(host_name("[::1]"), ["::1"])


@pytest.fixture(scope="module")
def client():
    port_args = PortArgs.create()
    args = ServerArgs(allowed_hosts=["*"])  # TestClient says `Host: testserver`
    app = create_app(args, port_args, make_model_info(model_path=args.model_path))  # the lifespan never runs
    yield TestClient(app)
    port_args.cleanup()


@pytest.mark.parametrize(
    "method,path,allow",
    [
        ("TRACE", "/", {"GET", "POST"}),
        ("DELETE", "/health", {"GET", "HEAD"}),
        ("DELETE", "/v1/embeddings", {"POST"}),
        ("DELETE", "/metrics", {"GET"}),
    ],
)
def test_405_lists_every_method_the_path_takes(client, method, path, allow):
    r = client.request(method, path)
    assert r.status_code == 405
    assert set(m.strip() for m in r.headers["allow"].split(",")) == allow
    assert "error" in r.json()
    for m in allow:  # each method named is one the path takes
        assert client.request(m, path).status_code != 405, m
