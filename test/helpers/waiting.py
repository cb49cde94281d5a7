"""Waiting for an event instead of for a fixed time: a test that needs something to have happened
(a message sent, a process gone, a counter moved) waits until it holds, up to a timeout, so it
neither flakes on a slow machine nor sleeps longer than needed on a fast one."""

from __future__ import annotations

import asyncio
import time
from typing import Callable


def wait_until(cond: Callable[[], object], timeout: float, interval: float = 0.02) -> bool:
    """Check `cond` until it holds or `timeout` seconds pass; True when it held (its last check
    runs at the deadline, so a condition that comes true late still counts)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(interval)
    return bool(cond())


async def wait_until_async(cond: Callable[[], object], timeout: float, interval: float = 0.005) -> bool:
    """`wait_until` for coroutines: yields to the event loop between checks instead of blocking it,
    so the code under test (on the same loop) can make the condition come true."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if cond():
            return True
        await asyncio.sleep(interval)
    return bool(cond())
