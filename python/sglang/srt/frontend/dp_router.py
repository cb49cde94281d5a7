"""ReplicaRouter: one tokenizer manager's sockets to the scheduler replicas, and what it has in flight.

It sends each request's inputs as one part per replica (the parts of one event-loop turn travel
together: frontend/turn_outbox.py), counts the inputs and tokens
in flight per replica for the dispatch policy (frontend/dp_policy.py), sends aborts to the
replicas that hold the inputs, and when a replica refuses a part because its queue share is full
(possible with several tokenizer workers, which do not see each other's load) sends the part to
another replica with room: a request is refused (429) only when every replica refused it.
With one replica this is exactly the single scheduler socket it replaces.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Optional

import zmq

from sglang.srt.frontend.dp_policy import DispatchPolicy, ReplicaLoad
from sglang.srt.frontend.turn_outbox import TurnOutbox
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.network import PortArgs, make_socket
from sglang.srt.wire.io_struct import AbortReq, TokenizedEmbeddingReqInput
from sglang.srt.wire.msgcodec import send


@dataclass
class Part:
    """The inputs of one request sent to one replica in one message."""

    rank: int
    rids: list[str]
    # Kept for a retry on another replica; None with one replica (nothing to retry on), so that a
    # single scheduler's inputs are not held here while they are queued there.
    reqs: Optional[list[TokenizedEmbeddingReqInput]]
    tried: set[int] = field(default_factory=set)  # replicas that refused it


class ReplicaRouter:
    def __init__(self, server_args: ServerArgs, port_args: PortArgs, ctx: zmq.Context, worker_id: int = 0) -> None:
        self.dp_size = server_args.dp_size
        self.policy = DispatchPolicy(server_args, first=worker_id)
        self.sockets = [
            make_socket(ctx, zmq.PUSH, port_args.scheduler_input_of(rank), bind=False) for rank in range(self.dp_size)
        ]
        self.outboxes = [TurnOutbox(sock) for sock in self.sockets]
        self.loads = [ReplicaLoad() for _ in range(self.dp_size)]
        self.in_flight: dict[str, tuple[Part, int]] = {}  # rid -> (the part it travels in, its tokens)

    # ----- room -----
    def room(self) -> int:
        """Inputs this process may still send, over all replicas."""
        return sum(self.policy.room(self.loads))

    # ----- sending -----
    def dispatch(self, reqs: list[TokenizedEmbeddingReqInput]) -> Optional[list[asyncio.Future]]:
        """Place the inputs on replicas and send them; None (nothing sent) when they do not fit.

        Returns the sends to await. Placement happens before this returns, so the counts stay
        right for whatever the event loop runs next.
        """
        parts = self._place(reqs, exclude=())
        if parts is None:
            return None
        if len(parts) == 1:  # the common case: one message holding the caller's list
            return [self._send_part(parts[0], reqs)]
        return [self._send_part(p, p.reqs) for p in parts]

    def _place(self, reqs: list[TokenizedEmbeddingReqInput], exclude: Iterable[int]) -> Optional[list[Part]]:
        ranks = self.policy.assign([r.num_tokens for r in reqs], self.loads, tuple(exclude))
        if ranks is None:
            return None
        by_rank: dict[int, list[TokenizedEmbeddingReqInput]] = defaultdict(list)
        for req, rank in zip(reqs, ranks):
            by_rank[rank].append(req)
        keep = self.dp_size > 1
        return [Part(rank, [r.rid for r in rs], rs if keep else None) for rank, rs in by_rank.items()]

    def _send_part(self, part: Part, reqs: list[TokenizedEmbeddingReqInput]):
        load = self.loads[part.rank]
        for req in reqs:
            self.in_flight[req.rid] = (part, req.num_tokens)
            load.inputs += 1
            load.tokens += req.num_tokens
        return self.outboxes[part.rank].add(reqs)  # sent at the end of this event-loop turn

    # ----- answers -----
    def answered(self, rid: str) -> None:
        """An input got its final answer (or was given up): it no longer loads its replica."""
        entry = self.in_flight.pop(rid, None)
        if entry is not None:
            part, tokens = entry
            load = self.loads[part.rank]
            load.inputs -= 1
            load.tokens -= tokens

    def retry_refused(self, rids: list[str]) -> set[str]:
        """Replicas refused these inputs (queue full): send each whole part to another replica with
        room. Returns the rids now retried; the others' refusal is final."""
        retried: set[str] = set()
        refused = set(rids)
        seen: set[int] = set()
        for rid in rids:
            entry = self.in_flight.get(rid)
            if entry is None or id(entry[0]) in seen:
                continue
            part = entry[0]
            seen.add(id(part))
            if part.reqs is None or not refused.issuperset(part.rids):
                continue  # nowhere else to go, or not a whole part (a replica refuses whole messages)
            part.tried.add(part.rank)
            for r in part.rids:
                self.answered(r)
            if len(part.tried) >= self.dp_size:
                continue
            moved = self._place(part.reqs, exclude=part.tried)
            if moved is None:
                continue
            for new in moved:
                new.tried = set(part.tried)
                self._send_part(new, new.reqs)
                retried.update(new.rids)
        return retried

    def abort(self, rids: list[str]) -> None:
        """Forget these inputs and tell their replicas to drop whatever is still queued (fire and forget)."""
        by_rank: dict[int, list[str]] = defaultdict(list)
        for rid in rids:
            entry = self.in_flight.get(rid)
            if entry is not None:
                by_rank[entry[0].rank].append(rid)
                self.answered(rid)
        for rank, dropped in by_rank.items():
            self.outboxes[rank].flush()  # the inputs first: an abort must not overtake them
            send(self.sockets[rank], AbortReq(dropped))

    def clear(self) -> None:
        """The engine died: nothing is in flight any more."""
        self.in_flight.clear()
        self.loads = [ReplicaLoad() for _ in range(self.dp_size)]
