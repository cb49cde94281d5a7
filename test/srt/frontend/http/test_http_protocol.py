"""The connection limits of http_protocol.py on a real uvicorn in a thread, with a trivial app."""

from __future__ import annotations

import socket
import time

import pytest
import uvicorn

from sglang.srt.frontend.http.http_protocol import ConnectionLimits, limited_protocol
from test.helpers.raw_http import exchange
from test.helpers.uvicorn_thread import uvicorn_in_thread
from test.helpers.waiting import wait_until

pytestmark = pytest.mark.slow
LIMIT = 8192


async def ok_app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture(scope="module")
def server():
    refused: list[int] = []
    limits = ConnectionLimits(max_connections=8, max_header_bytes=LIMIT, header_timeout=0.5, on_reject=refused.append)
    with uvicorn_in_thread(ok_app, limited_protocol(limits)) as (srv, port):
        yield port, refused, srv


def _no_connections(srv: uvicorn.Server, timeout: float = 5.0) -> bool:
    """Whether the server has seen every connection to it close (its count of open ones is 0)."""
    return wait_until(lambda: not srv.server_state.connections, timeout)


def _exchange(port: int, *chunks: bytes, pause: float = 0.0) -> bytes:
    return exchange(port, *chunks, pause=pause, done=lambda out: b"ok" in out or b"}}" in out)


def _headers(pad: int) -> bytes:
    return b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Pad: " + b"a" * pad + b"\r\n\r\n"


def test_headers_within_the_limit_pass_in_one_chunk_or_several(server):
    port, _, _ = server
    full = _headers(LIMIT - 200)
    assert _exchange(port, full).startswith(b"HTTP/1.1 200 ")
    half = len(full) // 2
    assert _exchange(port, full[:half], full[half:], pause=0.05).startswith(b"HTTP/1.1 200 ")


def test_headers_over_the_limit_get_431_in_one_chunk_or_several(server):
    port, refused, _ = server
    full = _headers(LIMIT + 100)
    reply = _exchange(port, full)
    assert reply.startswith(b"HTTP/1.1 431 ") and b"--max-header-bytes" in reply
    pieces = [full[i : i + 3000] for i in range(0, len(full), 3000)]
    assert _exchange(port, *pieces, pause=0.02).startswith(b"HTTP/1.1 431 ")
    assert refused.count(431) >= 2


def test_slow_headers_get_408_and_silent_connections_a_quiet_close(server):
    port, refused, _ = server
    t0 = time.monotonic()
    reply = _exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\n")
    assert reply.startswith(b"HTTP/1.1 408 ") and b"--header-timeout" in reply
    assert 0.4 < time.monotonic() - t0 < 3.0
    assert _exchange(port) == b""  # sent nothing: closed without an answer
    assert 408 in refused


def test_connections_beyond_the_cap_get_503(server):
    port, refused, srv = server
    assert _no_connections(srv)  # the earlier tests' connections are gone: all 8 places are free
    socks = [socket.create_connection(("127.0.0.1", port), timeout=2) for _ in range(12)]
    try:
        got = []
        for s in socks:
            s.settimeout(0.3)
            try:
                got.append(s.recv(40))
            except socket.timeout:
                got.append(b"")
        assert sum(g.startswith(b"HTTP/1.1 503 ") for g in got) == 4
    finally:
        for s in socks:
            s.close()
    assert 503 in refused
    assert _no_connections(srv)
    assert _exchange(port, _headers(10)).startswith(b"HTTP/1.1 200 ")
