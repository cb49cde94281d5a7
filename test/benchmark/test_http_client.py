"""The load generator's lean HTTP client (benchmark/http_client.py) against a scripted asyncio server."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmark"))
from http_client import LeanPoster  # noqa: E402

from test.helpers.waiting import wait_until_async  # noqa: E402


def _response(status: int, body: bytes, extra: str = "", chunked: bool = False) -> bytes:
    reason = {200: "OK", 429: "Too Many Requests"}.get(status, "X")
    if chunked:
        mid = len(body) // 2
        parts = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:mid], body[mid:]) if p)
        return (
            (f"HTTP/1.1 {status} {reason}\r\nTransfer-Encoding: chunked\r\n{extra}\r\n").encode() + parts + b"0\r\n\r\n"
        )
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Length: {len(body)}\r\n{extra}\r\n").encode() + body


async def _serve(reader, writer, stats):
    stats["connections"] += 1
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
            )
            mode = json.loads(await reader.readexactly(length))["mode"]
            stats["modes"].append(mode)
            if mode == "hang":
                await asyncio.sleep(5)
            if mode == "drop":
                writer.close()
                return
            body = b"{not json" if mode == "bad_json" else json.dumps({"data": [1], "mode": mode}).encode()
            if mode == "busy":
                writer.write(_response(429, b'{"error": {}}'))
            else:
                writer.write(
                    _response(200, body, "Connection: close\r\n" if mode == "close" else "", chunked=mode == "chunked")
                )
            await writer.drain()
            if mode == "close":
                writer.close()
                return
            if mode == "idle_close":  # the server's keep-alive timeout, while the client holds it idle
                await asyncio.sleep(0.05)
                writer.close()
                return
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def _with_server(check):
    stats = {"connections": 0, "modes": []}
    server = await asyncio.start_server(lambda r, w: _serve(r, w, stats), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    poster = LeanPoster(f"http://127.0.0.1:{port}/v1/embeddings", pool=4, timeout=1.0)
    try:
        await check(poster, stats)
    finally:
        await poster.close()
        server.close()
        await server.wait_closed()


def test_reuses_connections_and_parses_bodies():
    async def check(poster, stats):
        for mode in ("plain", "chunked", "plain"):
            status, body = await poster.post({"mode": mode})
            assert (status, body) == (200, {"data": [1], "mode": mode})
        assert stats["connections"] == 1

    asyncio.run(_with_server(check))


@pytest.mark.slow
def test_errors_come_back_as_statuses():
    async def check(poster, stats):
        assert await poster.post({"mode": "busy"}) == (429, None)
        assert await poster.post({"mode": "bad_json"}) == ("bad_json", None)
        assert await poster.post({"mode": "drop"}) == ("conn:ConnectionResetError", None)
        assert await poster.post({"mode": "hang"}) == ("timeout", None)
        assert (await poster.post({"mode": "plain"}))[0] == 200  # a fresh connection after each failure
        assert stats["modes"] == ["busy", "bad_json", "drop", "hang", "plain"]

    asyncio.run(_with_server(check))


def test_connection_close_is_honoured():
    async def check(poster, stats):
        assert (await poster.post({"mode": "close"}))[0] == 200
        assert (await poster.post({"mode": "plain"}))[0] == 200
        assert stats["connections"] == 2

    asyncio.run(_with_server(check))


def test_a_connection_the_server_closed_while_idle_is_not_reused():
    async def check(poster, stats):
        assert (await poster.post({"mode": "idle_close"}))[0] == 200
        # the pooled connection has seen the server's close (what the poster checks before reuse)
        assert await wait_until_async(lambda: poster.idle and all(r.at_eof() for r, _ in poster.idle), 5.0)
        assert (await poster.post({"mode": "plain"}))[0] == 200  # not a reset: a fresh connection
        assert stats["connections"] == 2 and stats["modes"] == ["idle_close", "plain"]

    asyncio.run(_with_server(check))


def test_concurrent_posts_share_a_bounded_pool():
    async def check(poster, stats):
        results = await asyncio.gather(*(poster.post({"mode": "plain"}) for _ in range(20)))
        assert all(status == 200 for status, _ in results)
        assert stats["connections"] <= 4

    asyncio.run(_with_server(check))


def test_only_plain_http():
    with pytest.raises(ValueError, match="plain http"):
        LeanPoster("https://example.com/v1/embeddings", 1, 1.0)
