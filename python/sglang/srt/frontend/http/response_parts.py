"""Large JSON answers sent as the parts they were rendered in, never joined into one body.

A per-token answer is the detokenizer's finished rows (one bytes object per input, megabytes
each) plus a few bytes of JSON around them. Splicing them with `b",".join` and `b"[" + ... + b"]"`
held the rows, the joined body and a concatenated copy at once (~3x the answer), and the event
loop's transport buffered whatever the socket had not taken yet. Here the rows stay where they
are: the route returns a list of parts, `PartsResponse` announces their total length and writes
them one at a time under uvicorn's flow control, dropping each once it is handed over, so the
HTTP process holds at most the answer itself, shrinking as it is sent.
"""

from __future__ import annotations

import asyncio
from typing import Iterable, Mapping, Optional, Union

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from sglang.srt.utils.allocator import glibc_malloc_trim


class Parts(list):
    """A JSON body as its parts in order (a type of its own: a plain list is a JSON value to dump)."""


class BinaryParts(Parts):
    """A binary body (vLLM's `bytes` responses) as its parts, with the headers that describe it."""

    media_type = "application/octet-stream"

    def __init__(self, parts: Iterable[bytes] = (), headers: Optional[Mapping[str, str]] = None) -> None:
        super().__init__(parts)
        self.headers = dict(headers or {})


Body = Union[bytes, Parts]  # what a route's render returns
COALESCE_BYTES = 256 * 1024  # parts smaller than this are joined with their neighbours into one write
TRIM_AFTER_BYTES = 8 * 1024 * 1024  # after an answer this large, free heap pages go back to the system
_TRIM = glibc_malloc_trim()


def json_array(items: Iterable[bytes]) -> Parts:
    """`[item, item, ...]` as parts (the items are not copied)."""
    parts = Parts([b"["])
    for i, item in enumerate(items):
        if i:
            parts.append(b",")
        parts.append(item)
    parts.append(b"]")
    return parts


def release_heap() -> None:
    """Give glibc's free heap pages back to the system (after tens of MB were freed)."""
    if _TRIM is not None:
        _TRIM(0)


def body_bytes(body: Body) -> bytes:
    """The whole body as one bytes object (tests and small answers)."""
    return body if isinstance(body, bytes) else b"".join(body)


class PartsResponse(Response):
    """A response whose body is `parts`, sent in order with a Content-Length of their sum."""

    def __init__(
        self,
        parts: Parts,
        status_code: int = 200,
        headers: Optional[Mapping[str, str]] = None,
        media_type: str = "application/json",
    ) -> None:
        self.parts = parts
        self.length = sum(len(p) for p in parts)
        super().__init__(None, status_code, {**(headers or {}), "content-length": str(self.length)}, media_type)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        parts, self.parts = self.parts, []
        parts.reverse()  # pop from the end: each part is released as soon as it is written
        pending: list[bytes] = []
        pending_size = 0
        while parts:
            part = parts.pop()
            if len(part) < COALESCE_BYTES:
                pending.append(part)
                pending_size += len(part)
                if pending_size < COALESCE_BYTES:
                    continue
                part = b"".join(pending)
            elif pending:
                await send({"type": "http.response.body", "body": b"".join(pending), "more_body": True})
            pending, pending_size = [], 0
            await send({"type": "http.response.body", "body": part, "more_body": True})
            del part
        await send({"type": "http.response.body", "body": b"".join(pending), "more_body": False})
        if self.length >= TRIM_AFTER_BYTES and _TRIM is not None:
            # glibc keeps the freed rows' pages in its heap (the process stayed +58 MB after a 56 MB
            # answer, +0 with this); give them back, off the event loop (it takes milliseconds).
            await asyncio.get_running_loop().run_in_executor(None, _TRIM, 0)
