"""A connection's writes of one event-loop turn, sent to the socket as one.

uvicorn writes a response's status line and headers, then its body, each with its own
`transport.write`, and uvloop sends each at once: two `send` system calls and two TCP segments per
response, and on loopback each call also runs the receiving side's TCP processing and wakes the
client. For single-text /v1/embeddings answers the one write instead of two saved about 6% of the
HTTP process's CPU per request and a quarter of the load generator's (issue #32,
docs/benchmarks.md); on a small machine those cores are the forward pass's.

CoalescedWrites stands in for the connection's transport: writes wait in a list until the current
callback or task step is over (one `call_soon`), then go out in one `writelines` (one `writev`).
Nothing waits longer than that turn, and a large answer does not pile up here: once
FLUSH_BYTES are waiting they are written at once, so the transport's own buffer limits and flow
control (pause_writing) see the data as before. Closing, half-closing and the write-buffer size
account for what waits; every other attribute is the transport's.
"""

from __future__ import annotations

import asyncio
from typing import Any, Iterable

FLUSH_BYTES = 64 * 1024  # at this many bytes waiting, write now (a small answer's head and body stay together)


class CoalescedWrites:
    __slots__ = ("_transport", "_loop", "_pending", "_size")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self._size = 0

    @property
    def transport(self) -> asyncio.Transport:
        """The transport written to."""
        return self._transport

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self._pending:  # the turn's first write: flush when the turn is over
            self._loop.call_soon(self.flush)
        self._pending.append(data)
        self._size += len(data)
        if self._size >= FLUSH_BYTES:
            self.flush()

    def writelines(self, chunks: Iterable[bytes]) -> None:
        for chunk in chunks:
            self.write(chunk)

    def flush(self) -> None:
        """Hand what waits to the transport now (dropped once the transport is closing, which a
        direct write would not deliver either)."""
        if not self._pending:
            return
        chunks, self._pending, self._size = self._pending, [], 0
        if self._transport.is_closing():
            return
        if len(chunks) == 1:
            self._transport.write(chunks[0])
        else:
            self._transport.writelines(chunks)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._pending, self._size = [], 0
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._size + self._transport.get_write_buffer_size()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
