"""CoalescedWrites: one transport write per event-loop turn, nothing held longer, and on a real
uvicorn with the server's protocol a response's head and body leave in one write."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from sglang.srt.frontend.http.coalesced_writes import FLUSH_BYTES, CoalescedWrites
from sglang.srt.frontend.http.http_protocol import ConnectionLimits, LimitedHttpToolsProtocol
from test.helpers.uvicorn_thread import uvicorn_in_thread


class RecordingTransport:
    """What a transport was asked to do, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.calls.append(("write", bytes(data)))

    def writelines(self, chunks) -> None:
        self.calls.append(("writelines", [bytes(c) for c in chunks]))

    def close(self) -> None:
        self.calls.append(("close",))
        self.closing = True

    def write_eof(self) -> None:
        self.calls.append(("write_eof",))

    def abort(self) -> None:
        self.calls.append(("abort",))
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 7

    def get_extra_info(self, name: str, default=None):
        return ("127.0.0.1", 1) if name == "peername" else default


def run_turns(body) -> RecordingTransport:
    """Run `body(writes)` as a coroutine on a fresh loop and let the loop finish its turns."""
    real = RecordingTransport()

    async def main() -> None:
        await body(CoalescedWrites(real, asyncio.get_running_loop()))
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    asyncio.run(main())
    return real


def test_writes_of_one_turn_leave_together_in_order():
    async def body(w: CoalescedWrites) -> None:
        w.write(b"HTTP/1.1 200 OK\r\n\r\n")
        w.write(b"")  # nothing to send: no call
        w.write(b"body")
        assert w.transport.calls == []  # held until the turn ends
        assert w.get_write_buffer_size() == 7 + len(b"HTTP/1.1 200 OK\r\n\r\nbody")

    real = run_turns(body)
    assert real.calls == [("writelines", [b"HTTP/1.1 200 OK\r\n\r\n", b"body"])]


def test_each_turn_gets_its_own_write():
    async def body(w: CoalescedWrites) -> None:
        w.write(b"a")
        await asyncio.sleep(0.01)
        assert w.transport.calls == [("write", b"a")]  # gone before the next turn's write
        w.writelines([b"b", b"c"])

    assert run_turns(body).calls == [("write", b"a"), ("writelines", [b"b", b"c"])]


def test_a_large_answer_is_written_at_once():
    big = b"x" * FLUSH_BYTES

    async def body(w: CoalescedWrites) -> None:
        w.write(b"head")
        w.write(big)
        assert w.transport.calls == [("writelines", [b"head", big])]  # the transport's flow control sees it now
        assert w.get_write_buffer_size() == 7

    assert run_turns(body).calls == [("writelines", [b"head", big])]


def test_close_and_write_eof_send_what_waits_first():
    async def body(w: CoalescedWrites) -> None:
        w.write(b"last")
        w.write_eof()
        w.write(b"after")
        w.close()

    assert run_turns(body).calls == [("write", b"last"), ("write_eof",), ("write", b"after"), ("close",)]


def test_abort_drops_what_waits_and_a_closing_transport_gets_nothing():
    async def aborted(w: CoalescedWrites) -> None:
        w.write(b"dropped")
        w.abort()

    assert run_turns(aborted).calls == [("abort",)]

    async def closed_meanwhile(w: CoalescedWrites) -> None:
        w.write(b"late")
        w.transport.closing = True  # the peer went away within the turn

    assert run_turns(closed_meanwhile).calls == []


def test_other_attributes_are_the_transports():
    real = RecordingTransport()
    w = CoalescedWrites(real, asyncio.new_event_loop())
    assert w.get_extra_info("peername") == ("127.0.0.1", 1)
    assert w.is_closing() is False and w.transport is real


# ----- on a real uvicorn with the server's protocol -----


async def two_part_app(scope, receive, send):
    """A head and a first part at once, the rest after a pause: the first part must not wait for it."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"10")]})
    await send({"type": "http.response.body", "body": b"first", "more_body": True})
    await asyncio.sleep(0.5)
    await send({"type": "http.response.body", "body": b"later"})


@pytest.fixture(scope="module")
def server():
    written: list[int] = []

    class Counting(LimitedHttpToolsProtocol):  # counts the writes that reach the real transport
        def connection_made(self, transport) -> None:
            real_write, real_writelines = transport.write, transport.writelines

            class Counted:
                def __getattr__(self, name):
                    return getattr(transport, name)

                def write(self, data):
                    written.append(1)
                    real_write(data)

                def writelines(self, chunks):
                    written.append(1)
                    real_writelines(chunks)

            super().connection_made(Counted())

    Counting.limits = ConnectionLimits()
    with uvicorn_in_thread(two_part_app, Counting) as (_, port):
        yield port, written


def test_head_and_first_part_leave_in_one_write_without_waiting_for_the_rest(server):
    port, written = server
    written.clear()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        t0 = time.monotonic()
        first = b""
        while b"first" not in first:
            first += sock.recv(65536)
        waited = time.monotonic() - t0
        rest = b""
        while b"later" not in rest:
            rest += sock.recv(65536)
    assert first.startswith(b"HTTP/1.1 200 ") and first.endswith(b"\r\n\r\nfirst")
    assert waited < 0.4, f"the first part waited {waited:.2f} s for the rest"
    assert rest == b"later"
    assert len(written) == 2  # head + first part together, then the rest (uvicorn alone: 3 writes)
