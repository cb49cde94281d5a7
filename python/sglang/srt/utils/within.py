"""Await with a time limit, without a task per await.

`asyncio.wait_for` wraps a coroutine in a task of its own and a future in a waiter with callbacks;
the HTTP process did that for every request's body read and its wait for the engine's answer
(issue #32). On Python 3.11+ `asyncio.timeout` puts one timer on the task that is already running.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, TypeVar

T = TypeVar("T")
_TIMEOUT = getattr(asyncio, "timeout", None)  # Python 3.11+


async def within(awaitable: Awaitable[T], seconds: float) -> T:
    """`await awaitable`, or asyncio.TimeoutError after `seconds` (the awaitable is then cancelled).
    A cancellation from outside stays a CancelledError."""
    if _TIMEOUT is None:  # Python 3.10
        return await asyncio.wait_for(awaitable, seconds)
    async with _TIMEOUT(seconds):
        return await awaitable
