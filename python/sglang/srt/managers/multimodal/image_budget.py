"""How much image work the HTTP process takes on at once, and how much of it one request may have.

- ImageMemory (one per process, --mm-max-bytes-in-flight): bytes of image data held at once.
  Two kinds of charge: *held* bytes (fetched or inline encoded images until decoded, preprocessed
  pixels until the request is handed on) are refused at once when over the limit, so holders never
  wait on each other; a *decode* (its working set, estimated from the header) waits until it fits
  beside what is held and decoding, except that one decode may always run, so waiting ends.
  Memory therefore stays under the limit plus one decode.
- RequestImages (one per request): its share of the URL fetch slots and of the decode threads (a
  request with many images takes turns instead of filling them), a bound on its images between
  first byte and decoded (`in_progress`: fetches do not run ahead of decoding, so a request of
  hundreds of image URLs holds a few encoded images at a time, not all of them), its held bytes
  (given back when it ends, whatever way it ends), and its peak, which decides whether to return freed memory to
  the system afterwards (glibc keeps freed image buffers in its heap otherwise).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import AsyncIterator

from sglang.srt.managers.multimodal.image_errors import ImageMemoryFull
from sglang.srt.utils.allocator import glibc_malloc_trim

logger = logging.getLogger(__name__)

# A request that had this much image memory at its peak gives the freed pages back afterwards.
TRIM_AFTER_BYTES = 64 * 1024 * 1024


class ImageMemory:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.decoding = 0
        self.decoders = 0
        self._waiters: deque[asyncio.Future] = deque()

    def hold(self, n: int, request_held: int) -> None:
        if request_held + n > self.limit:
            raise ImageMemoryFull(self.limit, own_request=True)
        if self.held + n > self.limit:
            raise ImageMemoryFull(self.limit, own_request=False)
        self.held += n

    def unhold(self, n: int) -> None:
        self.held -= n
        self._wake()

    def _fits(self, n: int) -> bool:
        return self.decoders == 0 or self.held + self.decoding + n <= self.limit

    async def start_decode(self, n: int) -> None:
        while not self._fits(n):
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
        self.decoding += n
        self.decoders += 1

    def end_decode(self, n: int) -> None:
        self.decoding -= n
        self.decoders -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters:  # each re-checks its own fit
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)


class RequestImages:
    """One request's image loading: its slot shares, held bytes and peak."""

    def __init__(
        self, memory: ImageMemory, fetch_slots: asyncio.Semaphore, fetch_share: int, decode_share: int
    ) -> None:
        self.memory = memory
        self.fetch_slots = fetch_slots
        self.fetch_share = asyncio.Semaphore(fetch_share)
        self.decode_share = asyncio.Semaphore(decode_share)
        self.in_progress = asyncio.Semaphore(fetch_share + decode_share)
        self.held = 0
        self.decoding = 0
        self.peak = 0

    @contextlib.asynccontextmanager
    async def fetch_slot(self) -> AsyncIterator[None]:
        async with self.fetch_share, self.fetch_slots:
            yield

    def hold(self, n: int) -> None:
        self.memory.hold(n, self.held)
        self.held += n
        self._note_peak()

    def unhold(self, n: int) -> None:
        n = min(n, self.held)
        self.held -= n
        self.memory.unhold(n)

    async def start_decode(self, n: int) -> None:
        await self.memory.start_decode(n)
        self.decoding += n
        self._note_peak()

    def end_decode(self, n: int) -> None:
        self.decoding -= n
        self.memory.end_decode(n)

    def _note_peak(self) -> None:
        self.peak = max(self.peak, self.held + self.decoding)

    def close(self) -> None:
        """Give back everything still held (decodes give theirs back when their thread ends)."""
        self.unhold(self.held)

    @property
    def should_trim(self) -> bool:
        return self.peak >= TRIM_AFTER_BYTES


class MemoryTrimmer:
    """Returns the free pages of glibc's heaps to the system (a no-op on other allocators/systems)."""

    def __init__(self) -> None:
        self._malloc_trim = glibc_malloc_trim()

    def trim(self) -> None:
        if self._malloc_trim is not None:
            self._malloc_trim(0)
