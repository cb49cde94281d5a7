"""engine_death.wind_down on a real uvicorn (the server's protocol, uvloop when installed) in a thread:
requests in flight are answered and their connections closed, a kept-alive connection's next
request is answered too, new connections are refused at once, and uvicorn stops once every
connection closed, or after the grace with an idle one left."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest
import uvicorn

from sglang.srt.frontend.http.engine_death import wind_down
from sglang.srt.frontend.http.http_protocol import ConnectionLimits, limited_protocol
from sglang.srt.frontend.http.middleware import DrainGuard, ServerLifecycle
from sglang.srt.frontend.http.uvicorn_server import UvicornServer, make_listen_socket, on_loop, serve
from sglang.srt.utils.network import get_free_port
from test.helpers.waiting import wait_until

GET = b"GET /work HTTP/1.1\r\nHost: x\r\n\r\n"


class Harness:
    """An app whose /work requests wait until `fail()` fails them with 503 (as TokenizerManager's
    futures do), behind DrainGuard; served by UvicornServer on its own thread."""

    def __init__(self) -> None:
        self.lifecycle = ServerLifecycle()
        self.waiting: list[asyncio.Future] = []
        self.port = get_free_port()
        config = uvicorn.Config(
            DrainGuard(self.app, self.lifecycle),
            http=limited_protocol(ConnectionLimits()),
            lifespan="off",
            log_level="warning",
        )
        self.server = UvicornServer(config)
        self.sock = make_listen_socket("127.0.0.1", self.port, reuse_port=False)
        self.thread = threading.Thread(target=serve, args=(self.server, self.sock), daemon=True)
        self.thread.start()
        assert wait_until(lambda: self.server.started, 10), "uvicorn did not start"

    async def app(self, scope, receive, send):
        if scope["type"] != "http":
            return
        status, body = 200, b"done"
        if scope["path"] == "/work":
            fut = asyncio.get_running_loop().create_future()
            self.waiting.append(fut)
            try:
                await fut
            except RuntimeError:
                status, body = 503, b"engine died"
        headers = [(b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def fail(self) -> None:
        self.lifecycle.dead_reason = "test replica exited"
        for fut in self.waiting:
            fut.set_exception(RuntimeError("dead"))

    def die(self, grace: float) -> float:
        t0 = time.monotonic()
        on_loop(self.server, lambda: wind_down(self.server, self.fail, grace))
        return t0


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def _read_answer(sock: socket.socket) -> bytes:
    out = b""
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            return out + b"<RESET>"
        if not data:
            return out + b"<EOF>"
        out += data


@pytest.fixture
def harness():
    h = Harness()
    yield h
    h.server.should_exit = True
    h.thread.join(10)


def test_in_flight_and_kept_alive_requests_are_answered_then_the_server_stops(harness):
    busy = [_connect(harness.port) for _ in range(4)]
    for s in busy:
        s.sendall(GET)
    assert wait_until(lambda: len(harness.waiting) == 4, 5)
    idle = _connect(harness.port)  # kept alive after one answered request
    idle.sendall(b"GET /other HTTP/1.1\r\nHost: x\r\n\r\n")
    assert idle.recv(4096).startswith(b"HTTP/1.1 200 ")
    t0 = harness.die(grace=5.0)
    for s in busy:  # answered 503, then closed by the server (no reset)
        reply = _read_answer(s)
        assert reply.startswith(b"HTTP/1.1 503 ") and reply.endswith(b"engine died<EOF>"), reply
    with pytest.raises(ConnectionRefusedError):  # no longer listening
        _connect(harness.port).close()
    idle.sendall(b"GET /other HTTP/1.1\r\nHost: x\r\n\r\n")  # its next request: 503 with the reason
    reply = _read_answer(idle)
    assert reply.startswith(b"HTTP/1.1 503 ") and b"connection: close" in reply.lower(), reply
    assert b"test replica exited" in reply and reply.endswith(b"<EOF>")
    assert wait_until(lambda: not harness.thread.is_alive(), 3.0), "uvicorn did not stop once every connection closed"
    assert time.monotonic() - t0 < 3.0  # well before the 5 s grace
    for s in [*busy, idle]:
        s.close()


def test_an_idle_connection_holds_the_stop_only_for_the_grace(harness):
    idle = _connect(harness.port)
    idle.sendall(b"GET /other HTTP/1.1\r\nHost: x\r\n\r\n")
    assert idle.recv(4096).startswith(b"HTTP/1.1 200 ")
    t0 = harness.die(grace=0.5)
    assert wait_until(lambda: not harness.thread.is_alive(), 5.0)
    assert 0.4 < time.monotonic() - t0 < 3.0
    assert _read_answer(idle) == b"<EOF>"  # closed quietly once the grace ran out
    idle.close()


def test_before_uvicorn_started_it_is_only_told_to_exit():
    server = UvicornServer(uvicorn.Config(lambda *a: None, lifespan="off"))
    failed = []
    wind_down(server, lambda: failed.append(True))
    assert failed == [True] and server.should_exit
