"""The batch former: a pure function from the waiting queue and budgets to the next batch.

Requests are served first-come first-served. A batch is cut when the next request would overflow
the request or token budget (that request then heads the next batch: nothing is dropped or
reordered, so no request starves behind a stream of short ones), or when the hold window that lets
a batch fill has expired.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Protocol


class QueuedItem(Protocol):
    @property
    def num_tokens(self) -> int: ...

    arrival_time: float


@dataclass(frozen=True)
class BatchBudget:
    max_batch_size: int
    max_num_tokens: int
    max_queue_delay: float = 0.0  # seconds the oldest request may wait for the batch to fill


@dataclass(frozen=True)
class BatchDecision:
    take: int  # how many requests to take from the head of the queue (0: none yet)
    wait: float | None  # when take == 0: seconds until the hold window expires (None: queue empty)
    tokens: int = 0


def next_batch(queue: Iterable[QueuedItem], budget: BatchBudget, now: float, expected: int = 0) -> BatchDecision:
    """Decide how many head-of-queue requests form the next batch.

    `queue` is iterated in order and only as far as needed, so callers can pass a live view.
    `expected` is how many inputs the caller expects to be waiting by now (the size of the batch
    it last ran: under a steady load the clients just answered send again). The hold window only
    waits while fewer than that have arrived, so a lone client never waits for a batch to fill.
    """
    take = tokens = 0
    oldest = None
    overflow = False
    for item in queue:
        if oldest is None:
            oldest = item.arrival_time
        if take == budget.max_batch_size:
            overflow = True
            break
        n = item.num_tokens
        if take and tokens + n > budget.max_num_tokens:
            overflow = True
            break
        take += 1
        tokens += n
        if tokens >= budget.max_num_tokens:  # budget used up: nothing more can join
            overflow = True
            break
    if take == 0:
        return BatchDecision(0, None)
    full = overflow or take == budget.max_batch_size
    if full or budget.max_queue_delay <= 0 or take >= expected:
        return BatchDecision(take, None, tokens)
    remaining = oldest + budget.max_queue_delay - now
    if remaining <= 0:
        return BatchDecision(take, None, tokens)
    return BatchDecision(0, remaining)
