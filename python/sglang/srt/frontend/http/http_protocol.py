"""uvicorn's httptools protocol plus the connection limits it lacks.

uvicorn (httptools) accepts headers of any size, waits forever for a client that opens a
connection and sends its headers a byte at a time, and keeps any number of such connections
open. This subclass adds, per HTTP process:

- `--max-header-bytes`: a request line plus headers larger than this gets 431 and the connection
  is closed (counted on the bytes received, before the parser buffers more);
- `--header-timeout`: a connection must deliver a request's complete headers within this many
  seconds of opening (or of the request's first byte on a kept-alive connection): 408, or a
  quiet close when it sent nothing at all;
- `--max-connections`: a connection beyond this many open ones gets 503 and is closed at once;
- `Transfer-Encoding`: only `chunked` is understood, so any other coding before the final
  `chunked` (`gzip, chunked`) gets 501 (RFC 9112 6.1) instead of a body read as if it were plain;
- chunked framing: a chunked body's non-data bytes (chunk-size lines with their extensions, and
  trailers) count toward `--max-header-bytes` together with the headers (32 bytes of plain framing
  per chunk are free), measured after each read: over it, 400, before the app sees the body end
  (a request pipelined behind another within one read is measured from the next read on).

The request body's own deadline (--body-timeout) is kept by middleware.BodyLimits, and idle
kept-alive connections by uvicorn's `timeout_keep_alive` (--keep-alive-timeout). Every write on a
connection goes through CoalescedWrites (coalesced_writes.py): a response's head and body leave in
one system call instead of two.
"""

from __future__ import annotations

import asyncio
import http
import logging
from dataclasses import dataclass
from typing import Callable, Optional

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from sglang.srt.frontend.http.coalesced_writes import CoalescedWrites
from sglang.srt.frontend.http.http_errors import HttpError

logger = logging.getLogger(__name__)

_FREE_FRAMING = 32  # bytes per chunk a chunk-size line and its CRLFs take without extensions
_LINGER = 1.0  # seconds a connection refused mid-request keeps reading (and dropping) before it closes


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
        self.transport = CoalescedWrites(transport, self.loop)  # type: ignore[assignment]  # one send per turn
        self._header_bytes = 0
        self._got_bytes = False
        self._reading_headers = True
        self._header_timer: Optional[asyncio.TimerHandle] = None
        self._refused = False  # answered here: what else arrives is dropped
        self._chunked = False  # the message in progress has a chunked body still arriving
        self._msg_bytes = 0  # its bytes so far
        self._msg_body = 0  # its body bytes so far
        self._chunks = 0
        self._begun = self._ended = False  # a message began / ended within the read being parsed
        self._mid_read = False  # the message in progress began after another ended within one read
        self._complete_pending = False  # a chunked message ended in that read: delivered once measured
        if len(self.connections) > self.limits.max_connections:
            self._refuse(503, "The server has too many open connections (--max-connections); retry later.")
            return
        self._arm_header_timer()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused or self.transport.is_closing():
            return  # refused: nothing more is read
        self._got_bytes = True
        self._begun = self._ended = False
        super().data_received(data)
        if self._refused or self.transport.is_closing():
            return
        self._count_message_bytes(len(data))
        if (self._chunked or self._complete_pending) and self._framing_too_large():
            limit = self.limits.max_header_bytes
            self._refuse(
                400, f"The request's headers, chunk extensions and trailers exceed {limit} bytes (--max-header-bytes)."
            )
            return
        self._deliver_completion()
        if self._reading_headers:
            # Still inside a request's headers after this chunk: every byte of it was header.
            self._header_bytes += len(data)
            if self._header_bytes > self.limits.max_header_bytes:
                self._refuse_large_headers()

    def _count_message_bytes(self, n: int) -> None:
        if not self._begun:
            self._msg_bytes += n
        elif self._mid_read:  # it began after another ended in this read: count from the next read on
            self._msg_bytes = self._msg_body = 0
        else:  # it began at the read's first byte
            self._msg_bytes = n

    def _framing_too_large(self) -> bool:
        """The message's bytes that are not body (headers, chunk-size lines with their extensions,
        trailers) exceed --max-header-bytes plus the plain framing of its chunks."""
        framing = self._msg_bytes - self._msg_body
        return framing > self.limits.max_header_bytes + _FREE_FRAMING * self._chunks

    def _refuse_large_headers(self) -> None:
        limit = self.limits.max_header_bytes
        self._refuse(431, f"The request's headers are larger than {limit} bytes (--max-header-bytes).")

    # httptools parser callbacks
    def on_message_begin(self) -> None:
        self._deliver_completion()  # a pipelined request follows a chunked one within one read
        super().on_message_begin()
        self._mid_read = self._ended
        self._msg_bytes = self._msg_body = self._chunks = 0
        self._begun = True
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
        codings = transfer_codings(self.headers)
        if codings:
            refusal = transfer_coding_refusal(codings)
            if refusal is not None:
                self._refuse(*refusal)
                return
            self._chunked = True
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self._msg_body += len(body)
        if not self._refused and (not self.transport.is_closing() or self.cycle is not None):
            super().on_body(body)

    def on_chunk_header(self) -> None:
        self._chunks += 1

    def on_message_complete(self) -> None:
        self._ended = True
        if self._chunked:  # handed on once the read it ended in is measured (data_received)
            self._chunked = False
            self._complete_pending = True
            return
        if not self._refused and (not self.transport.is_closing() or self.cycle is not None):
            super().on_message_complete()

    def _deliver_completion(self) -> None:
        if self._complete_pending:
            self._complete_pending = False
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
        self._refused = True
        self._chunked = self._complete_pending = False
        if self._reading_headers or not self.transport.can_write_eof():
            self.transport.close()
        else:
            # Mid-request the client may still be sending: closing with its bytes unread would
            # reset the connection, and its TCP stack could drop our answer. Half-close, keep
            # dropping what arrives, close soon after.
            self.transport.write_eof()
            self.loop.call_later(_LINGER, self.transport.close)
        # debug, not warning: a flood of refusals must not flood the log too (they are counted).
        logger.debug("refused a connection from %s: %d %s", self.client[0] if self.client else "?", status, message)
        if self.limits.on_reject is not None:
            self.limits.on_reject(status)


def limited_protocol(limits: ConnectionLimits) -> type[LimitedHttpToolsProtocol]:
    """The protocol class uvicorn instantiates per connection, carrying `limits`."""
    return type("LimitedHttpProtocol", (LimitedHttpToolsProtocol,), {"limits": limits})


def transfer_codings(headers: list[tuple[bytes, bytes]]) -> list[str]:
    """The request's transfer codings in order, over every Transfer-Encoding header, lower case."""
    out: list[str] = []
    for name, value in headers:
        if name.lower() == b"transfer-encoding":
            out += [c.strip() for c in value.decode("latin-1").lower().split(",") if c.strip()]
    return out


def transfer_coding_refusal(codings: list[str]) -> Optional[tuple[int, str]]:
    """(status, message) for codings this server cannot read, None for plain `chunked`.

    A final coding other than chunked leaves the body's length unknown: 400 (RFC 9112 6.3; the
    parser refuses most of these itself). Chunked twice is malformed: 400. Any other coding before
    the final chunked is one this server does not implement: 501 (RFC 9112 6.1).
    """
    if codings == ["chunked"]:
        return None
    shown = ", ".join(codings)[:100]
    if codings[-1] != "chunked":
        return 400, f"Transfer-Encoding {shown!r}: the final transfer coding of a request must be chunked."
    if codings.count("chunked") > 1:
        return 400, f"Transfer-Encoding {shown!r}: chunked may be applied only once."
    return 501, f"Transfer-Encoding {shown!r} is not implemented: send the body with chunked alone, or Content-Length."
