"""A test playing a ZeroMQ peer (scheduler, detokenizer) of code that runs on an asyncio loop:
its plain sockets are awaited through `zmq.asyncio.Poller`, so waiting for a message never blocks
the loop that has to send it."""

from __future__ import annotations

from typing import Any, Sequence

import zmq
import zmq.asyncio

from sglang.srt.wire.msgcodec import decode


async def _ready(socks: Sequence[zmq.Socket], timeout: float) -> list[zmq.Socket]:
    poller = zmq.asyncio.Poller()
    for sock in socks:
        poller.register(sock, zmq.POLLIN)
    events = await poller.poll(timeout * 1000)
    ready = {id(s) for s, _ in events}
    return [s for s in socks if id(s) in ready]


async def next_message(sock: zmq.Socket, timeout: float = 5.0) -> Any:
    """The next decoded message on `sock`, as soon as it arrives; fails after `timeout` seconds."""
    assert await _ready([sock], timeout), f"nothing arrived within {timeout} s"
    return decode(sock.recv_multipart())


async def next_message_of(socks: Sequence[zmq.Socket], timeout: float = 5.0) -> tuple[int, Any]:
    """(index in `socks`, message) of the first of `socks` to receive one."""
    ready = await _ready(socks, timeout)
    assert ready, f"nothing arrived on any of {len(socks)} sockets within {timeout} s"
    i = next(i for i, s in enumerate(socks) if s is ready[0])
    return i, decode(socks[i].recv_multipart())


async def stays_quiet(sock: zmq.Socket, window: float) -> bool:
    """True when nothing arrives on `sock` for `window` seconds (a deliberate wait: proving a
    message is NOT sent takes the whole window), the loop running meanwhile."""
    return not await _ready([sock], window)
