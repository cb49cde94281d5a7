"""A lean HTTP/1.1 keep-alive JSON poster for the load generator (asyncio streams + httptools).

Why: on a small machine the load generator shares the cores with the server it measures. httpx
spends ~1 ms of CPU per request (0.17 of a core at 160 requests/s on the 2-core benchmark VM),
which the server then cannot use; this client does the same exchange (JSON body out, status and
JSON body back, one request per connection at a time) for a fraction of that, like wrk or vegeta
would. It speaks only what bench_serving needs: POST with Content-Length, responses with
Content-Length or chunked bodies (httptools handles both), keep-alive with reconnects.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional
from urllib.parse import urlsplit

import httptools
import orjson


class _Response:
    """httptools callbacks collecting one response."""

    def __init__(self) -> None:
        self.body = bytearray()
        self.done = False
        self.keep_alive = True

    def on_body(self, data: bytes) -> None:
        self.body += data

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"connection" and value.lower() == b"close":
            self.keep_alive = False

    def on_message_complete(self) -> None:
        self.done = True


class LeanPoster:
    """`await poster.post(payload) -> (status, JSON body if 200)`, over up to `pool` connections."""

    def __init__(self, url: str, pool: int, timeout: float) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http":
            raise ValueError(f"the lean client speaks plain http only, not {parts.scheme}")
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.path = parts.path or "/"
        self.timeout = timeout
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.slots = asyncio.Semaphore(pool)
        self.head = (
            f"POST {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            "Content-Type: application/json\r\nAccept: application/json\r\nContent-Length: "
        ).encode()

    async def _exchange(self, conn, request: bytes) -> tuple[int, bytes, bool]:
        reader, writer = conn
        writer.write(request)
        response = _Response()
        parser = httptools.HttpResponseParser(response)
        while not response.done:
            chunk = await reader.read(65536)
            if not chunk:
                raise ConnectionResetError("server closed the connection")
            parser.feed_data(chunk)
        keep = response.keep_alive and parser.get_http_version() != "1.0"  # HTTP/1.1 keeps by default
        return parser.get_status_code(), bytes(response.body), keep

    async def post(self, payload: dict) -> tuple[Any, Optional[dict]]:
        body = orjson.dumps(payload)
        request = self.head + str(len(body)).encode() + b"\r\n\r\n" + body
        async with self.slots:
            conn = self._idle_connection()
            try:
                if conn is None:
                    conn = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), self.timeout)
                status, data, keep = await asyncio.wait_for(self._exchange(conn, request), self.timeout)
            except asyncio.TimeoutError:
                self._drop(conn)
                return "timeout", None
            except (OSError, httptools.HttpParserError) as e:
                self._drop(conn)
                return f"conn:{type(e).__name__}", None
            if keep:
                self.idle.append(conn)
            else:
                self._drop(conn)
        if status != 200:
            return status, None
        try:
            return status, orjson.loads(data)
        except orjson.JSONDecodeError:
            return "bad_json", None

    def _idle_connection(self):
        """A pooled keep-alive connection the server has not closed meanwhile (its idle timeout), or None."""
        while self.idle:
            conn = self.idle.pop()
            if not conn[0].at_eof():
                return conn
            self._drop(conn)
        return None

    @staticmethod
    def _drop(conn) -> None:
        if conn is not None:
            conn[1].close()

    async def close(self) -> None:
        for _, writer in self.idle:
            writer.close()
        self.idle.clear()
