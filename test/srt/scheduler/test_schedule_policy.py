"""The batch former: budgets, overflow carry-over, hold window and fairness."""

from __future__ import annotations

from dataclasses import dataclass

from sglang.srt.scheduler.schedule_policy import BatchBudget, next_batch


@dataclass
class Item:
    num_tokens: int
    arrival_time: float = 0.0


def test_empty_queue_waits_forever():
    d = next_batch([], BatchBudget(8, 100), now=0.0)
    assert d.take == 0 and d.wait is None


def test_takes_everything_that_fits_without_hold():
    d = next_batch([Item(10)] * 5, BatchBudget(8, 100), now=0.0)
    assert d.take == 5 and d.tokens == 50


def test_request_budget_cuts_the_batch():
    d = next_batch([Item(1)] * 20, BatchBudget(8, 1000), now=0.0)
    assert d.take == 8


def test_token_budget_edge_exactly_full():
    assert next_batch([Item(50), Item(50), Item(1)], BatchBudget(8, 100), 0.0).take == 2


def test_overflowing_request_heads_the_next_batch_not_skipped():
    # 60 + 50 > 100: the second request starts the next batch; the small third one does not jump it.
    queue = [Item(60), Item(50), Item(5)]
    d = next_batch(queue, BatchBudget(8, 100), 0.0)
    assert d.take == 1
    d2 = next_batch(queue[1:], BatchBudget(8, 100), 0.0)
    assert d2.take == 2


def test_single_request_over_budget_still_runs_alone():
    assert next_batch([Item(500), Item(1)], BatchBudget(8, 100), 0.0).take == 1


def test_hold_window_waits_for_the_expected_inputs_then_fires():
    budget = BatchBudget(8, 100, max_queue_delay=0.01)
    d = next_batch([Item(5, arrival_time=1.0)], budget, now=1.004, expected=3)
    assert d.take == 0 and abs(d.wait - 0.006) < 1e-9
    d = next_batch([Item(5, arrival_time=1.0)], budget, now=1.0101, expected=3)
    assert d.take == 1
    # As many as expected have arrived: no reason to keep holding.
    assert next_batch([Item(5, 1.0)] * 3, budget, now=1.001, expected=3).take == 3


def test_hold_window_never_delays_a_lone_client():
    budget = BatchBudget(8, 100, max_queue_delay=0.05)
    assert next_batch([Item(5, 1.0)], budget, now=1.0, expected=1).take == 1
    assert next_batch([Item(5, 1.0)], budget, now=1.0, expected=0).take == 1


def test_full_batch_ignores_hold_window():
    budget = BatchBudget(4, 100, max_queue_delay=10.0)
    assert next_batch([Item(1, 0.0)] * 4, budget, now=0.0, expected=50).take == 4
    # token budget full also dispatches at once
    assert next_batch([Item(60, 0.0), Item(60, 0.0)], budget, now=0.0, expected=50).take == 1


def test_no_starvation_behind_stream_of_short_requests():
    """A long request at the head is served before any later short one."""
    budget = BatchBudget(8, 100)
    queue = [Item(90)] + [Item(20) for _ in range(50)]
    served = []
    while queue:
        d = next_batch(queue, budget, 0.0)
        served.append(queue[: d.take])
        queue = queue[d.take :]
    assert served[0][0].num_tokens == 90
    assert all(sum(i.num_tokens for i in b) <= 100 for b in served)


def test_queue_is_consumed_lazily():
    def gen():
        for _ in range(3):
            yield Item(10)
        raise AssertionError("policy read past what it needed")

    assert next_batch(gen(), BatchBudget(2, 100), 0.0).take == 2
