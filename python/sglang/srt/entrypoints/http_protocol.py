"""uvicorn's httptools protocol plus the connection limits it lacks.

uvicorn (httptools) accepts headers of any size, waits forever for a client that opens a
connection and sends its headers a byte at a time, and keeps any number of such connections
open. This subclass adds, per HTTP process:

- `--max-header-bytes`: a request line plus headers larger than this gets 431 and the connection
  is closed (counted on the bytes received, before the parser buffers more);
- `--header-timeout`: a connection must deliver a request's complete headers within this many
  seconds of opening (or of the request's first byte on a kept-alive connection): 408, or a
  quiet close when it sent nothing at all;
- `--max-connections`: a connection beyond this many open ones gets 503 and is closed at once.

The request body's own deadline (--body-timeout) is kept by middleware.BodyLimits, and idle
kept-alive connections by uvicorn's `timeout_keep_alive` (--keep-alive-timeout).
"""

from __future__ import annotations

import asyncio
import http
import logging
from dataclasses import dataclass
from typing import Callable, Optional

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from sglang.srt.entrypoints.http_errors import HttpError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int = 1024
    max_header_bytes: int = 64 * 1024
    header_timeout: float = 10.0
    on_reject: Optional[Callable[[int], None]] = None  # told the status of every refusal (metrics)


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    limits: ConnectionLimits = ConnectionLimits()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_bytes = 0
        self._got_bytes = False
        self._reading_headers = True
        self._header_timer: Optional[asyncio.TimerHandle] = None
        if len(self.connections) > self.limits.max_connections:
            self._refuse(503, "The server has too many open connections (--max-connections); retry later.")
            return
        self._arm_header_timer()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return  # refused: nothing more is read
        self._got_bytes = True
        super().data_received(data)
        if self._reading_headers and not self.transport.is_closing():
            # Still inside a request's headers after this chunk: every byte of it was header.
            self._header_bytes += len(data)
            if self._header_bytes > self.limits.max_header_bytes:
                self._refuse_large_headers()

    def _refuse_large_headers(self) -> None:
        limit = self.limits.max_header_bytes
        self._refuse(431, f"The request's headers are larger than {limit} bytes (--max-header-bytes).")

    # httptools parser callbacks
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._reading_headers = True
        self._header_bytes = 0
        if self._header_timer is None:
            self._arm_header_timer()

    def on_headers_complete(self) -> None:
        self._reading_headers = False
        self._cancel_header_timer()
        size = len(self.url) + sum(len(k) + len(v) + 4 for k, v in self.headers)
        if max(self._header_bytes, size) > self.limits.max_header_bytes:  # the last chunk completed them
            self._refuse_large_headers()
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self.transport.is_closing() or self.cycle is not None:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self.transport.is_closing() or self.cycle is not None:
            super().on_message_complete()

    # header deadline
    def _arm_header_timer(self) -> None:
        self._header_timer = self.loop.call_later(self.limits.header_timeout, self._header_timeout)

    def _cancel_header_timer(self) -> None:
        if getattr(self, "_header_timer", None) is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or not self._reading_headers:
            return
        if not self._got_bytes:  # opened and never used: nobody to answer
            self.transport.close()
            return
        self._refuse(
            408, f"The request's headers did not arrive within {self.limits.header_timeout:g} s (--header-timeout)."
        )

    def _refuse(self, status: int, message: str) -> None:
        """Answer `status` in the OpenAI error shape and close, without involving the app."""
        self._cancel_header_timer()
        body = HttpError(status, message).body()
        head = (
            f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\n"
            "content-type: application/json\r\n"
            f"content-length: {len(body)}\r\n"
            "connection: close\r\n\r\n"
        )
        self.transport.write(head.encode("latin-1") + body)
        self.transport.close()
        # debug, not warning: a flood of refusals must not flood the log too (they are counted).
        logger.debug("refused a connection from %s: %d %s", self.client[0] if self.client else "?", status, message)
        if self.limits.on_reject is not None:
            self.limits.on_reject(status)


def limited_protocol(limits: ConnectionLimits) -> type[LimitedHttpToolsProtocol]:
    """The protocol class uvicorn instantiates per connection, carrying `limits`."""
    return type("LimitedHttpProtocol", (LimitedHttpToolsProtocol,), {"limits": limits})
