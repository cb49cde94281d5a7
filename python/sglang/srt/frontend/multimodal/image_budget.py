"""How much image work the HTTP process takes on at once, and how much of it one request may have.

- ImageMemory (one per process, --mm-max-bytes-in-flight): bytes of image data held at once.
  Two kinds of charge: *held* bytes (fetched or inline encoded images until decoded, preprocessed
  pixels until the request is handed on) and *decodes* (a working set, estimated from the header).
  Requests are served in arrival order: a hold that does not fit beside what is held and decoding
  waits, unless even the bytes held by earlier-arrived requests (and what earlier waiters ask
  for) leave it no room, and then it is refused at once (429): a request only ever waits for
  memory that later requests or decodes hold, never for an earlier request, so waits form no
  cycle and the earliest request always gets its memory, from later ones that finish or are
  refused. Memory asked for by a waiting request is kept for it: later requests cannot take it.
  A wait ends at the request's deadline (429 too); a request whose own images are over the limit
  is refused at once (400). A decode waits until it fits beside what is held and decoding (and
  earlier waiters), except that one decode may always run, so waiting ends. Memory therefore
  stays under the limit plus one decode.
- RequestImages (one per request): its place among the fetch slots (fetch_slots.py) and its share
  of the decode threads (a request with many images takes turns instead of filling them), a bound
  on its images between first byte and decoded (`in_progress`: fetches do not run ahead of
  decoding, so a request of hundreds of image URLs holds a few encoded images at a time, not all
  of them), its held bytes (given back when it ends, whatever way it ends), and its peak. When
  freed image memory goes back to the system is image_heap_trim.py's job.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import AsyncIterator, Optional

from sglang.srt.frontend.multimodal.fetch_slots import FetchSlots
from sglang.srt.frontend.multimodal.image_errors import ImageMemoryFull

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class _HoldWait:
    seq: int
    n: int
    future: asyncio.Future = field(repr=False)


def _granted(future: asyncio.Future) -> bool:
    return future.done() and not future.cancelled() and future.exception() is None


class ImageMemory:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.decoding = 0
        self.decoders = 0
        self._seq = itertools.count()
        self._held_by: dict[int, int] = {}  # live requests' held bytes, in arrival order
        self._holds: list[_HoldWait] = []  # waiting holds, in arrival order of their requests
        self._decodes: deque[asyncio.Future] = deque()
        self.taken = 0  # bytes ever held or decoded (what glibc's heaps have seen go by)

    # ----- requests -----
    def join(self) -> int:
        """A new request's number (its place in the arrival order)."""
        seq = next(self._seq)
        self._held_by[seq] = 0
        return seq

    def leave(self, seq: int) -> None:
        """The request ended: give back what it still holds."""
        for wait in [w for w in self._holds if w.seq == seq]:  # none when its loads were awaited
            self._holds.remove(wait)
            wait.future.set_exception(ImageMemoryFull(self.limit, own_request=False))
        self.unhold(seq, self._held_by.get(seq, 0))
        self._held_by.pop(seq, None)

    def held_by(self, seq: int) -> int:
        return self._held_by.get(seq, 0)

    # ----- held bytes -----
    async def hold(self, seq: int, n: int, deadline: float) -> None:
        """Take n bytes for request `seq`, waiting (until `deadline`, loop time) while later requests
        or decodes have the room. Raises ImageMemoryFull: own_request when the request alone would be
        over the limit, else when earlier requests leave no room or the deadline passed."""
        if self._held_by[seq] + n > self.limit:
            raise ImageMemoryFull(self.limit, own_request=True)
        if self._fits(seq, n):
            self._take(seq, n)
            return
        if not self._attainable(seq, n):
            raise ImageMemoryFull(self.limit, own_request=False)
        loop = asyncio.get_running_loop()
        wait = _HoldWait(seq, n, loop.create_future())
        at = next((i for i, w in enumerate(self._holds) if w.seq > seq), len(self._holds))
        self._holds.insert(at, wait)
        try:
            await asyncio.wait_for(asyncio.shield(wait.future), max(0.0, deadline - loop.time()))
        except asyncio.TimeoutError:
            if _granted(wait.future):  # granted in the same turn of the loop as the deadline
                return
            raise ImageMemoryFull(self.limit, own_request=False) from None
        except ImageMemoryFull:
            raise
        except BaseException:
            if _granted(wait.future):
                self.unhold(seq, n)  # granted just as the caller gave up
            raise
        finally:
            if wait in self._holds:
                self._holds.remove(wait)
                self._dispatch()

    def unhold(self, seq: int, n: int) -> None:
        n = min(n, self._held_by.get(seq, 0))
        if n <= 0:
            return
        self._held_by[seq] -= n
        self.held -= n
        self._dispatch()

    def _take(self, seq: int, n: int) -> None:
        self._held_by[seq] += n
        self.held += n
        self.taken += n
        if self._holds:  # earlier waiters may no longer be attainable for later ones
            self._dispatch()

    def _waiting_before(self, seq: int) -> int:
        return sum(w.n for w in self._holds if w.seq < seq)

    def _fits(self, seq: int, n: int) -> bool:
        return self.held + self.decoding + self._waiting_before(seq) + n <= self.limit

    def _attainable(self, seq: int, n: int) -> bool:
        """Whether the hold could fit once every later request and every decode has ended."""
        earlier = sum(held for s, held in self._held_by.items() if s < seq)
        return earlier + self._waiting_before(seq) + self._held_by[seq] + n <= self.limit

    def _dispatch(self) -> None:
        """Grant waiting holds in arrival order, refuse those that can no longer be met, and let
        waiting decodes re-check their fit."""
        for wait in list(self._holds):
            if wait.future.done():
                continue
            if self._fits(wait.seq, wait.n):
                self._holds.remove(wait)
                self._held_by[wait.seq] += wait.n
                self.held += wait.n
                self.taken += wait.n
                wait.future.set_result(None)
            elif not self._attainable(wait.seq, wait.n):
                self._holds.remove(wait)
                wait.future.set_exception(ImageMemoryFull(self.limit, own_request=False))
        while self._decodes:  # each re-checks its own fit
            waiter = self._decodes.popleft()
            if not waiter.done():
                waiter.set_result(None)

    # ----- decodes -----
    def _decode_fits(self, seq: int, n: int) -> bool:
        return self.decoders == 0 or self.held + self.decoding + self._waiting_before(seq) + n <= self.limit

    async def start_decode(self, n: int, seq: Optional[int] = None) -> None:
        seq = seq if seq is not None else -1  # -1: ahead of every request
        while not self._decode_fits(seq, n):
            waiter = asyncio.get_running_loop().create_future()
            self._decodes.append(waiter)
            try:
                await waiter
            finally:
                with contextlib.suppress(ValueError):
                    self._decodes.remove(waiter)
        self.decoding += n
        self.decoders += 1
        self.taken += n

    def end_decode(self, n: int) -> None:
        self.decoding -= n
        self.decoders -= 1
        self._dispatch()


class RequestImages:
    """One request's image loading: its place among the fetch slots, its decode share, held bytes
    and peak. Holds wait at most until `wait_s` after the request began."""

    def __init__(
        self,
        memory: ImageMemory,
        fetch_slots: FetchSlots,
        fetch_share: int,
        decode_share: int,
        wait_s: float = 10.0,
    ) -> None:
        self.memory = memory
        self.seq = memory.join()
        self.fetch_slots = fetch_slots
        self.fetch_client = fetch_slots.client(fetch_share)
        self.decode_share = asyncio.Semaphore(decode_share)
        self.in_progress = asyncio.Semaphore(fetch_share + decode_share)
        self.deadline = asyncio.get_running_loop().time() + wait_s
        self.decoding = 0
        self.peak = 0
        self._closed = False

    @property
    def held(self) -> int:
        return self.memory.held_by(self.seq)

    @contextlib.asynccontextmanager
    async def fetch_slot(self) -> AsyncIterator[None]:
        async with self.fetch_slots.slot(self.fetch_client):
            yield

    async def hold(self, n: int) -> None:
        await self.memory.hold(self.seq, n, self.deadline)
        self._note_peak()

    def unhold(self, n: int) -> None:
        self.memory.unhold(self.seq, n)

    async def start_decode(self, n: int) -> None:
        await self.memory.start_decode(n, self.seq)
        self.decoding += n
        self._note_peak()

    def end_decode(self, n: int) -> None:
        self.decoding -= n
        self.memory.end_decode(n)

    def _note_peak(self) -> None:
        self.peak = max(self.peak, self.held + self.decoding)

    def close(self) -> None:
        """Give back everything still held (decodes give theirs back when their thread ends)."""
        if not self._closed:
            self._closed = True
            self.memory.leave(self.seq)
