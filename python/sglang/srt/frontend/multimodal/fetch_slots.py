"""Who may open an image URL fetch now: turns on --mm-fetch-concurrency's slots, fair across requests.

Why not one semaphore: a fetch keeps its slot until it ends, so a few requests of dripping URLs
(one byte every half second, each fetch ending only at --mm-image-timeout) held every slot, and
another client's tiny image waited behind them for several deadlines (8.5 s with 8 slots). Slots
cannot be taken back from a fetch, and no fixed share helps once more requests drip than there are
slots, so a slot is a *turn*:

- A fetch holds one of the N slots (N = --mm-fetch-concurrency) for its first FETCH_TURN_S seconds;
  one still running after that keeps its socket but frees its slot. At most N fetches are thus in
  their first turn, and at most OPEN_FACTOR x N are open at all (the bound on sockets); a fetch
  waits while either is reached. A new request's first fetch therefore starts within one turn
  while fewer than OPEN_FACTOR x N fetches are open, however slow the others are.
- One request has at most its share of fetches open (`share`, a quarter of N by default).
- A free slot goes to the waiting request with the fewest fetches open, then the earliest-arrived
  one, so a request's first fetch goes before others' second ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from dataclasses import dataclass, field
from typing import AsyncIterator, Optional

# Seconds a fetch counts against --mm-fetch-concurrency; a slower one keeps going beside the slots.
FETCH_TURN_S = 0.25
# Open fetches (sockets) one HTTP process allows, as a multiple of --mm-fetch-concurrency.
OPEN_FACTOR = 4


@dataclass(eq=False)
class FetchClient:
    """One request's place in the queue: its arrival order, share and fetches open now."""

    seq: int
    share: int
    open: int = 0


@dataclass(eq=False)
class _Fetch:
    client: FetchClient
    started: float


@dataclass(eq=False)
class _Waiter:
    client: FetchClient
    future: asyncio.Future = field(repr=False)


class FetchSlots:
    def __init__(self, limit: int, turn: float = FETCH_TURN_S, open_limit: Optional[int] = None) -> None:
        self.limit = limit
        self.turn = turn
        self.open_limit = open_limit if open_limit is not None else OPEN_FACTOR * limit
        self._seq = itertools.count()
        self._open: list[_Fetch] = []
        self._waiters: list[_Waiter] = []
        self._timer: Optional[asyncio.TimerHandle] = None

    def client(self, share: int) -> FetchClient:
        """A new request's place (requests are served in the order they ask for one)."""
        return FetchClient(next(self._seq), max(1, share))

    @property
    def open(self) -> int:
        return len(self._open)

    def in_turn(self, now: Optional[float] = None) -> int:
        """Fetches still in their first turn (those that count against the slots)."""
        now = asyncio.get_running_loop().time() if now is None else now
        return sum(1 for f in self._open if self._in_turn(f, now))

    def _in_turn(self, fetch: _Fetch, now: float) -> bool:
        # 1 ms early: the event loop may run a timer up to its clock resolution before its time
        return now - fetch.started < self.turn - 0.001

    @contextlib.asynccontextmanager
    async def slot(self, client: FetchClient) -> AsyncIterator[None]:
        """Wait for a turn for one fetch of `client`; it is given back when the block ends."""
        fetch = await self._acquire(client)
        try:
            yield
        finally:
            self._release(fetch)

    async def _acquire(self, client: FetchClient) -> _Fetch:
        waiter = _Waiter(client, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        self._dispatch()
        try:
            return await waiter.future
        except BaseException:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            elif waiter.future.done() and not waiter.future.cancelled():  # granted as it was cancelled
                self._release(waiter.future.result())
            raise

    def _release(self, fetch: _Fetch) -> None:
        self._open.remove(fetch)
        fetch.client.open -= 1
        self._dispatch()

    def _dispatch(self) -> None:
        """Start every waiting fetch that may start now, fewest-open request first; if some must
        wait for a turn to end, come back when the oldest running turn ends."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        while self._waiters:
            if self.in_turn(now) >= self.limit or len(self._open) >= self.open_limit:
                break
            ready = [w for w in self._waiters if w.client.open < w.client.share]
            if not ready:
                break
            waiter = min(ready, key=lambda w: (w.client.open, w.client.seq))  # ties: the first to ask
            self._waiters.remove(waiter)
            fetch = _Fetch(waiter.client, now)
            self._open.append(fetch)
            waiter.client.open += 1
            waiter.future.set_result(fetch)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._waiters and len(self._open) < self.open_limit and self.in_turn(now) >= self.limit:
            turn_ends = min(f.started for f in self._open if self._in_turn(f, now)) + self.turn
            self._timer = loop.call_at(turn_ends, self._dispatch)
