"""Which replica gets which inputs (--dp-size, --load-balance-method): the pure planning."""

from __future__ import annotations

from collections import Counter

import pytest

from sglang.srt.errors import ConfigError
from sglang.srt.frontend.dp_policy import DispatchPolicy, ReplicaLoad, replica_capacities
from sglang.srt.server_args import ServerArgs


def _policy(dp: int = 2, method: str = "shortest_queue", first: int = 0, **kw) -> DispatchPolicy:
    return DispatchPolicy(ServerArgs(dp_size=dp, load_balance_method=method, **kw), first=first)


def _loads(*tokens: int, inputs: int = 0) -> list[ReplicaLoad]:
    return [ReplicaLoad(inputs=inputs, tokens=t) for t in tokens]


def test_the_queue_limit_is_shared_not_multiplied():
    assert ServerArgs(max_queue_size=4096, dp_size=1).replica_queue_sizes == [4096]
    assert ServerArgs(max_queue_size=4096, dp_size=2).replica_queue_sizes == [2048, 2048]
    assert (
        ServerArgs(max_queue_size=10, dp_size=3).replica_queue_sizes == [4, 3, 3]
        and sum(ServerArgs(max_queue_size=10, dp_size=3).replica_queue_sizes) == 10
    )
    # Each replica: its share waiting plus one batch running (the single-scheduler rule, per share).
    assert replica_capacities(ServerArgs(max_queue_size=10, max_batch_size=2, dp_size=2)) == [7, 7]
    assert replica_capacities(ServerArgs(max_queue_size=2, max_batch_size=8)) == [4]
    with pytest.raises(ConfigError, match="at least --dp-size"):
        ServerArgs(max_queue_size=2, dp_size=3)


def test_shortest_queue_sends_one_input_to_the_replica_with_fewest_tokens_in_flight():
    p = _policy(dp=3)
    assert p.assign([10], _loads(50, 7, 30)) == [1]
    assert p.assign([10], _loads(0, 0, 0)) != p.assign([10], _loads(0, 0, 0))  # ties take turns


def test_shortest_queue_splits_a_large_request_evenly_over_idle_replicas():
    p = _policy(dp=2)
    tokens = [12, 30, 7, 7, 50, 9, 22, 14] * 8
    ranks = p.assign(tokens, _loads(0, 0))
    per_rank = Counter()
    for n, r in zip(tokens, ranks):
        per_rank[r] += n
    assert set(ranks) == {0, 1}
    assert abs(per_rank[0] - per_rank[1]) <= max(tokens)  # balanced to within one input


def test_shortest_queue_keeps_a_small_request_on_a_clearly_shorter_replica():
    p = _policy(dp=2)
    assert p.assign([10, 10, 10], _loads(500, 0)) == [1, 1, 1]
    assert p.assign([10, 10, 10], _loads(15, 0)) == [1, 1, 0]  # 0, 10, 20 on replica 1 vs 15 on replica 0


def test_a_replica_without_room_gets_nothing_and_a_request_that_fits_nowhere_gets_none():
    p = _policy(dp=2, max_queue_size=8, max_batch_size=2)  # share 4, capacity 6 each
    full = [ReplicaLoad(inputs=6, tokens=0), ReplicaLoad(inputs=0, tokens=999)]
    assert p.room(full) == [0, 4]
    assert p.assign([1, 1, 1], full) == [1, 1, 1]
    assert p.assign([1] * 5, full) is None  # 4 fit, not 5: refused whole
    # One message never exceeds a replica's queue share, even on an idle server: the scheduler
    # would refuse it whole.
    assert p.room(_loads(0, 0)) == [4, 4]
    assert Counter(p.assign([1] * 8, _loads(0, 0))) == {0: 4, 1: 4}
    assert p.assign([1, 1], _loads(0, 0), exclude=[0]) == [1, 1]
    assert p.assign([], _loads(0, 0)) == []


def test_round_robin_takes_turns_with_whole_requests_and_deals_large_ones():
    p = _policy(dp=3, method="round_robin", max_batch_size=4)
    idle = _loads(0, 0, 0)
    assert [p.assign([5, 5], idle) for _ in range(4)] == [[0, 0], [1, 1], [2, 2], [0, 0]]
    big = p.assign([1] * 9, idle)  # more than one batch: dealt over every replica
    assert Counter(big) == {0: 3, 1: 3, 2: 3}
    # Load does not matter to round robin, room does: a full replica is skipped.
    q = _policy(dp=2, method="round_robin", max_queue_size=4, max_batch_size=2)
    full_first = [ReplicaLoad(inputs=4, tokens=0), ReplicaLoad()]
    assert q.assign([1], full_first) == [1] and q.assign([1], full_first) == [1]


def test_workers_start_their_turns_at_different_replicas():
    assert _policy(dp=2, first=0).assign([1], _loads(0, 0)) == [0]
    assert _policy(dp=2, first=1).assign([1], _loads(0, 0)) == [1]
    assert _policy(dp=1, first=3).assign([1, 2], _loads(0)) == [0, 0]
