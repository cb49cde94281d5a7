"""Where the HTTP process runs a request's CPU work: on the event loop when small, in a worker
thread when big (the Rust tokenizer and numpy release the GIL), so that /health and every other
request keep being answered while one request tokenizes megabytes or decodes a million ids."""

from __future__ import annotations

import asyncio
from typing import Callable, TypeVar

T = TypeVar("T")
# Characters to tokenize or token ids to handle: more run in a worker thread (a thread hop costs
# ~0.1 ms; this much work costs milliseconds).
INLINE_WORK = 32_768


async def off_loop(fn: Callable[[], T], size: int) -> T:
    """`fn()` here when `size` (characters or ids) is at most INLINE_WORK, else in a worker thread."""
    if size <= INLINE_WORK:
        return fn()
    return await asyncio.get_running_loop().run_in_executor(None, fn)
