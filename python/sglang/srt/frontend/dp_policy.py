"""Which scheduler replica gets which inputs (`--dp-size`, `--load-balance-method`): pure functions.

Every tokenizer worker decides on its own from what it knows: the inputs (and their tokens) it has
sent to each replica that have not been answered yet. That is waiting + running + results on their
way back, counted for this worker's requests only. `frontend/dp_router.py` keeps those counts and
sends the parts; this module only plans.

- shortest_queue: each input goes to the replica with the fewest tokens in flight, counting the
  inputs placed before it. A request's inputs are therefore spread when that balances the replicas
  (one large request is split evenly over idle replicas) and kept together when one replica is
  clearly shorter.
- round_robin: whole requests go to the replicas in turn; a request larger than one batch
  (--max-batch-size inputs or --max-num-tokens tokens) is dealt over all of them.

`--max-queue-size` is a server-wide limit: each replica owns a share of it, and a part never
goes to a replica without room for it.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Optional, Sequence

from sglang.srt.server_args import ServerArgs

SHORTEST_QUEUE = "shortest_queue"
ROUND_ROBIN = "round_robin"


def replica_capacities(server_args: ServerArgs) -> list[int]:
    """Most inputs one tokenizer manager keeps in flight on each replica before it refuses more.

    A replica holds at most its queue share waiting and runs a batch taken from them, so inputs in
    flight beyond share + min(batch, share) cannot all have room. Results on their way back still
    count, so near the limit a refusal may come a batch early.
    """
    shares = server_args.replica_queue_sizes
    return [q + min(server_args.max_batch_size, q) for q in shares]


@dataclass
class ReplicaLoad:
    """This worker's inputs in flight on one replica."""

    inputs: int = 0
    tokens: int = 0


class DispatchPolicy:
    """Plans which replica each input of a request goes to."""

    def __init__(self, server_args: ServerArgs, first: int = 0) -> None:
        self.method = server_args.load_balance_method
        self.dp_size = server_args.dp_size
        self.queue_sizes = server_args.replica_queue_sizes
        self.capacities = replica_capacities(server_args)
        self.max_batch_size = server_args.max_batch_size
        self.max_num_tokens = server_args.max_num_tokens
        # Where the turn starts; workers start at different replicas so that their first requests
        # (and ties when idle) do not all land on replica 0.
        self.turn = first % self.dp_size

    def room(self, loads: Sequence[ReplicaLoad]) -> list[int]:
        """Inputs each replica can take now: within its capacity, and never more than its queue
        share in one message (the scheduler would refuse it whole)."""
        return [
            max(0, min(cap - load.inputs, share)) for cap, share, load in zip(self.capacities, self.queue_sizes, loads)
        ]

    def assign(
        self, tokens: Sequence[int], loads: Sequence[ReplicaLoad], exclude: Sequence[int] = ()
    ) -> Optional[list[int]]:
        """The replica of each input (by position), or None when the inputs do not fit.

        `exclude`: replicas not to use (they refused these inputs already).
        """
        room = self.room(loads)
        for rank in exclude:
            room[rank] = 0
        if sum(room) < len(tokens) or not tokens:
            return None if tokens else []
        order = [(self.turn + i) % self.dp_size for i in range(self.dp_size)]
        self.turn = (self.turn + 1) % self.dp_size
        if self.method == ROUND_ROBIN:
            return self._round_robin(tokens, room, order)
        return self._shortest_queue(tokens, loads, room, order)

    def _shortest_queue(
        self, tokens: Sequence[int], loads: Sequence[ReplicaLoad], room: list[int], order: list[int]
    ) -> list[int]:
        # (tokens in flight, position in this turn's order, rank): ties go to the replica whose turn it is.
        heap = [(loads[r].tokens, i, r) for i, r in enumerate(order) if room[r] > 0]
        heapq.heapify(heap)
        out = []
        for n in tokens:
            load, i, rank = heapq.heappop(heap)
            out.append(rank)
            room[rank] -= 1
            if room[rank] > 0:
                heapq.heappush(heap, (load + n, i, rank))
        return out

    def _round_robin(self, tokens: Sequence[int], room: list[int], order: list[int]) -> list[int]:
        large = len(tokens) > self.max_batch_size or sum(tokens) > self.max_num_tokens
        if not large:
            for rank in order:  # the whole request to the first replica in turn with room for it
                if room[rank] >= len(tokens):
                    return [rank] * len(tokens)
        out, i = [], 0  # dealt one input at a time over the replicas that still have room
        for _ in tokens:
            while room[order[i % len(order)]] == 0:
                i += 1
            rank = order[i % len(order)]
            out.append(rank)
            room[rank] -= 1
            i += 1
        return out
