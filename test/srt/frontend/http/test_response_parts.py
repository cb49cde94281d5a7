"""PartsResponse: a large answer sent as the parts it was rendered in, each released once written."""

from __future__ import annotations

import asyncio
import gc
import weakref

from sglang.srt.frontend.http.response_parts import (
    COALESCE_BYTES,
    Parts,
    PartsResponse,
    body_bytes,
    json_array,
)


class Row(bytearray):
    """A row that can be watched with a weak reference (bytes cannot)."""


def _send_all(response: PartsResponse, on_body=None) -> list[dict]:
    sent = []

    async def send(message):
        if on_body is not None and message["type"] == "http.response.body":
            on_body(message)
            message = {**message, "body": None}  # keep no reference to what was written
        sent.append(message)

    async def receive():
        return {"type": "http.disconnect"}

    asyncio.run(response({"type": "http"}, receive, send))
    return sent


def test_json_array_parts_do_not_copy_the_items():
    rows = [b"[1.0]", b"[2.0]"]
    parts = json_array(rows)
    assert isinstance(parts, Parts) and body_bytes(parts) == b"[[1.0],[2.0]]"
    assert parts[1] is rows[0] and parts[3] is rows[1]
    assert body_bytes(json_array([])) == b"[]"


def test_sends_every_part_in_order_with_the_total_length():
    big = [bytes([65 + i]) * (COALESCE_BYTES + 10) for i in range(3)]
    parts = json_array(big)
    want = body_bytes(parts)
    sent = _send_all(PartsResponse(parts, headers={"x-a": "1"}))
    start, bodies = sent[0], sent[1:]
    headers = dict(start["headers"])
    assert start["status"] == 200 and headers[b"content-length"] == str(len(want)).encode()
    assert headers[b"content-type"] == b"application/json" and headers[b"x-a"] == b"1"
    assert b"".join(m["body"] for m in bodies) == want
    assert [m["more_body"] for m in bodies] == [True] * (len(bodies) - 1) + [False]
    assert any(m["body"] is big[1] for m in bodies), "a large part was copied"


def test_small_parts_are_coalesced():
    parts = Parts([b"x" * 100] * 10_000)  # 1 MB in 100-byte parts
    sent = _send_all(PartsResponse(parts))
    bodies = [m["body"] for m in sent[1:]]
    assert b"".join(bodies) == b"x" * 1_000_000 and len(bodies) <= 1_000_000 // COALESCE_BYTES + 2


def test_each_part_is_released_once_written():
    rows = [Row(b"r" * (COALESCE_BYTES + 1)) for _ in range(4)]
    refs = [weakref.ref(r) for r in rows]
    parts = json_array(rows)
    del rows
    alive_when_sent = []

    def on_body(message):
        gc.collect()
        alive_when_sent.append(sum(r() is not None for r in refs))

    _send_all(PartsResponse(parts), on_body)
    # While row k is being written, rows before it are gone: fewer alive at each write.
    assert alive_when_sent[0] == 4 and alive_when_sent[-1] <= 1, alive_when_sent
    assert alive_when_sent == sorted(alive_when_sent, reverse=True)
