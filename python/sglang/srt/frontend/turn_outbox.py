"""The inputs an HTTP process sends one scheduler replica during one event-loop turn, as one message.

Under load, requests come in cohorts: a batch's answers go out together, their clients send their
next requests together, and the event loop reads, tokenizes and dispatches a few dozen of them in
one turn. Sent one message each, every request paid pyzmq's asyncio send machinery, and woke the
ZeroMQ I/O threads of this process and of the scheduler's once: the scheduler's wake-ups land on
cores where the forward pass runs. Gathered over the turn (one `call_soon`), they travel as one
`BatchTokenizedEmbeddingReqInput` whose `group_sizes` keep each request's inputs together, so the
scheduler still accepts or refuses each request whole (Scheduler.add_requests).

Nothing waits longer than the turn it was dispatched in. Each caller gets a future of its own
(set when the message was handed to ZeroMQ, or with the send's error), so cancelling one request's
task cannot cancel another's wait.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from sglang.srt.wire.io_struct import BatchTokenizedEmbeddingReqInput, TokenizedEmbeddingReqInput
from sglang.srt.wire.msgcodec import send


class TurnOutbox:
    """One replica's socket: `add(reqs)` queues one request's inputs for the end of this turn."""

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self._groups: list[list[TokenizedEmbeddingReqInput]] = []
        self._waiters: list[asyncio.Future] = []

    def add(self, reqs: list[TokenizedEmbeddingReqInput]) -> asyncio.Future:
        """Queue one request's inputs; the future is done once their message was sent."""
        loop = asyncio.get_running_loop()
        if not self._groups:
            loop.call_soon(self.flush)
        waiter = loop.create_future()
        self._groups.append(reqs)
        self._waiters.append(waiter)
        return waiter

    def flush(self) -> None:
        """Send what is queued now (the end of the turn, or before an abort that must not overtake it)."""
        if not self._groups:
            return
        groups, waiters = self._groups, self._waiters
        self._groups, self._waiters = [], []
        if len(groups) == 1:
            msg = BatchTokenizedEmbeddingReqInput(groups[0])
        else:
            msg = BatchTokenizedEmbeddingReqInput([r for g in groups for r in g], [len(g) for g in groups])
        try:
            sent = send(self.sock, msg)
        except Exception as e:  # a closed socket, say: every request of the turn hears it
            _settle(waiters, e)
            return
        if sent.done():
            _settle(waiters, _error_of(sent))
        else:
            sent.add_done_callback(lambda done: _settle(waiters, _error_of(done)))


def _error_of(sent: asyncio.Future) -> Optional[BaseException]:
    if sent.cancelled():
        return asyncio.CancelledError()
    return sent.exception()


def _settle(waiters: list[asyncio.Future], error: Optional[BaseException]) -> None:
    for waiter in waiters:
        if waiter.done():  # its request was cancelled meanwhile
            continue
        if error is None:
            waiter.set_result(None)
        else:
            waiter.set_exception(error)
