"""A test playing a ZeroMQ peer (scheduler, detokenizer) of code that runs on an asyncio loop:
its plain sockets are awaited through `zmq.asyncio.Poller`, so waiting for a message never blocks
the loop that has to send it.

An HTTP process sends the requests it dispatched in one event-loop turn as one message
(frontend/turn_outbox.py); `next_message` hands such a message out one request at a time, as the
scheduler takes it (its `groups()`), so a test reads requests whatever turns they shared.
`next_raw_message` returns messages as they travelled.
"""

from __future__ import annotations

import collections
import weakref
from typing import Any, Sequence

import zmq
import zmq.asyncio

from sglang.srt.wire.io_struct import BatchTokenizedEmbeddingReqInput
from sglang.srt.wire.msgcodec import decode

# Per socket: the requests of a several-request message not handed out yet.
_unread: "weakref.WeakKeyDictionary[zmq.Socket, collections.deque]" = weakref.WeakKeyDictionary()


def _one_request_at_a_time(sock: zmq.Socket, msg: Any) -> Any:
    if isinstance(msg, BatchTokenizedEmbeddingReqInput) and msg.group_sizes is not None:
        first, *rest = [BatchTokenizedEmbeddingReqInput(group) for group in msg.groups()]
        _unread.setdefault(sock, collections.deque()).extend(rest)
        return first
    return msg


def _unread_request(sock: zmq.Socket) -> Any:
    queue = _unread.get(sock)
    return queue.popleft() if queue else None


async def _ready(socks: Sequence[zmq.Socket], timeout: float) -> list[zmq.Socket]:
    poller = zmq.asyncio.Poller()
    for sock in socks:
        poller.register(sock, zmq.POLLIN)
    events = await poller.poll(timeout * 1000)
    ready = {id(s) for s, _ in events}
    return [s for s in socks if id(s) in ready]


async def next_raw_message(sock: zmq.Socket, timeout: float = 5.0) -> Any:
    """The next decoded message on `sock` as it travelled, as soon as it arrives; fails after `timeout` s."""
    assert await _ready([sock], timeout), f"nothing arrived within {timeout} s"
    return decode(sock.recv_multipart())


async def next_message(sock: zmq.Socket, timeout: float = 5.0) -> Any:
    """The next request's message on `sock` (one request's inputs), or the next other message."""
    unread = _unread_request(sock)
    if unread is not None:
        return unread
    return _one_request_at_a_time(sock, await next_raw_message(sock, timeout))


async def next_message_of(socks: Sequence[zmq.Socket], timeout: float = 5.0) -> tuple[int, Any]:
    """(index in `socks`, message) of the first of `socks` to receive one."""
    for i, sock in enumerate(socks):
        unread = _unread_request(sock)
        if unread is not None:
            return i, unread
    ready = await _ready(socks, timeout)
    assert ready, f"nothing arrived on any of {len(socks)} sockets within {timeout} s"
    i = next(i for i, s in enumerate(socks) if s is ready[0])
    return i, _one_request_at_a_time(socks[i], decode(socks[i].recv_multipart()))


async def stays_quiet(sock: zmq.Socket, window: float) -> bool:
    """True when nothing arrives on `sock` for `window` seconds (a deliberate wait: proving a
    message is NOT sent takes the whole window), the loop running meanwhile."""
    if _unread.get(sock):
        return False
    return not await _ready([sock], window)
