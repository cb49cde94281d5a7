"""Turns on the image URL fetch slots: a request's share, fewest-open-first fairness, slow fetches
giving up their slot after one turn, the bound on open fetches, and cancellation."""

from __future__ import annotations

import asyncio

from sglang.srt.frontend.multimodal.fetch_slots import FetchClient, FetchSlots
from test.helpers.waiting import wait_until_async


async def _fetch(slots: FetchSlots, client: FetchClient, seconds: float, log: list, name: str) -> None:
    loop = asyncio.get_running_loop()
    asked = loop.time()
    async with slots.slot(client):
        log.append((name, loop.time() - asked, slots.in_turn(), slots.open))
        await asyncio.sleep(seconds)


def test_a_request_uses_its_share_and_another_starts_at_once():
    async def scenario():
        slots = FetchSlots(4, turn=10)
        first, second = slots.client(share=2), slots.client(share=2)
        log: list = []
        burst = asyncio.gather(*(_fetch(slots, first, 0.02, log, "first") for _ in range(10)))
        assert await wait_until_async(lambda: slots.open == 2, 1.0)  # the first request holds its share
        await _fetch(slots, second, 0, log, "second")  # not queued behind the first request's ten
        await burst
        return log

    log = asyncio.run(scenario())
    assert max(opened for name, _, _, opened in log if name == "first") <= 2
    assert next(waited for name, waited, _, _ in log if name == "second") < 0.01


def test_a_free_slot_goes_to_the_request_with_fewest_fetches_open():
    async def scenario():
        slots = FetchSlots(2, turn=10)
        a, b = slots.client(share=2), slots.client(share=2)
        log: list = []
        hold_a = asyncio.ensure_future(_fetch(slots, a, 0.2, log, "a1"))
        hold_b = asyncio.ensure_future(_fetch(slots, b, 0.05, log, "b1"))  # its slot frees first
        assert await wait_until_async(lambda: slots.open == 2, 1.0)
        a2 = asyncio.ensure_future(_fetch(slots, a, 0, log, "a2"))  # asks first, but a has one open
        assert await wait_until_async(lambda: len(slots._waiters) == 1, 1.0)
        c = slots.client(share=2)
        c1 = asyncio.ensure_future(_fetch(slots, c, 0, log, "c1"))  # none open: goes first
        await asyncio.gather(hold_a, hold_b, a2, c1)
        return [name for name, *_ in log]

    order = asyncio.run(scenario())
    assert order.index("c1") < order.index("a2"), order


def test_a_slow_fetch_gives_up_its_slot_after_one_turn():
    async def scenario():
        slots = FetchSlots(2, turn=0.1, open_limit=3)
        log: list = []
        slow = [asyncio.ensure_future(_fetch(slots, slots.client(1), 1.0, log, f"slow{i}")) for i in range(2)]
        assert await wait_until_async(lambda: slots.open == 2, 1.0)
        await _fetch(slots, slots.client(1), 0, log, "newcomer")  # waits one turn, not 1 s
        fourth = asyncio.ensure_future(_fetch(slots, slots.client(1), 0.5, log, "fourth"))
        assert await wait_until_async(lambda: slots.open == 3, 1.0)
        blocker = asyncio.ensure_future(_fetch(slots, slots.client(1), 0.5, log, "blocker"))
        await asyncio.gather(*slow, fourth, blocker)
        return {name: (waited, in_turn, opened) for name, waited, in_turn, opened in log}

    seen = asyncio.run(scenario())
    assert 0.05 < seen["newcomer"][0] < 0.3, seen
    assert seen["fourth"][0] < 0.3 and seen["fourth"][2] == 3  # the third open fetch
    assert seen["blocker"][0] > 0.4, seen  # 3 open: it waits for one to end (the slow ones, at 1 s)
    assert all(in_turn <= 2 and opened <= 3 for _, in_turn, opened in seen.values())


def test_the_issue_case_a_victim_starts_within_a_turn():
    """#27 item 7: 8 slots, 12 requests of two URLs that drip until a 3 s deadline; a victim that
    arrives once they hold the slots starts its fetch within one turn (it waited ~8.5 s)."""

    async def scenario():
        slots = FetchSlots(8)  # the default turn
        log: list = []
        attack = [
            asyncio.ensure_future(_fetch(slots, client, 3.0, log, f"drip{i}"))
            for i, client in enumerate(slots.client(share=2) for _ in range(12))
            for _ in range(2)
        ]
        assert await wait_until_async(lambda: slots.open == len(attack), 5.0)  # every drip has begun
        await _fetch(slots, slots.client(share=2), 0, log, "victim")
        for task in attack:
            task.cancel()
        await asyncio.gather(*attack, return_exceptions=True)
        assert slots.open == 0
        return log

    log = asyncio.run(scenario())
    victim = next(waited for name, waited, _, _ in log if name == "victim")
    assert victim < 0.6, victim
    assert all(in_turn <= 8 and opened <= 32 for _, _, in_turn, opened in log)


def test_cancelled_waits_leave_nothing_behind():
    async def scenario():
        slots = FetchSlots(1, turn=10)
        log: list = []
        a = slots.client(share=1)
        holder = asyncio.ensure_future(_fetch(slots, a, 0.05, log, "holder"))
        assert await wait_until_async(lambda: slots.open == 1, 1.0)
        waiting = asyncio.ensure_future(_fetch(slots, slots.client(share=1), 0, log, "cancelled"))
        assert await wait_until_async(lambda: len(slots._waiters) == 1, 1.0)
        waiting.cancel()
        await asyncio.gather(holder, waiting, return_exceptions=True)
        assert slots.open == 0 and not slots._waiters
        await _fetch(slots, slots.client(share=1), 0, log, "after")
        return [name for name, *_ in log]

    assert asyncio.run(scenario()) == ["holder", "after"]
