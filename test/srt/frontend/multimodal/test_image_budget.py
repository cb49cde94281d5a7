"""The process's image memory budget: arrival-order admission (the earliest request always gets its
memory, waits form no cycle, memory stays under the limit plus one decode) and a request's shares."""

from __future__ import annotations

import asyncio
import random

import pytest

from sglang.srt.frontend.multimodal.fetch_slots import FetchSlots
from sglang.srt.frontend.multimodal.image_budget import ImageMemory, RequestImages
from sglang.srt.frontend.multimodal.image_errors import ImageMemoryFull
from test.helpers.waiting import wait_until_async


def _request(memory: ImageMemory, wait_s: float = 10.0) -> RequestImages:
    return RequestImages(memory, FetchSlots(8), fetch_share=2, decode_share=1, wait_s=wait_s)


def _waiters(memory: ImageMemory) -> int:
    return len(memory._holds) + len(memory._decodes)


async def _pending(memory: ImageMemory, coro) -> asyncio.Task:
    """Start `coro` and return once it waits in `memory` (its hold or decode is queued there)."""
    before = _waiters(memory)
    task = asyncio.ensure_future(coro)
    assert await wait_until_async(lambda: task.done() or _waiters(memory) > before, 1.0)
    assert not task.done(), "it did not wait"
    return task


def test_holds_refused_at_once_when_the_request_alone_or_earlier_ones_leave_no_room():
    async def scenario():
        memory = ImageMemory(100)
        a, b = _request(memory), _request(memory)
        await a.hold(60)
        with pytest.raises(ImageMemoryFull) as err:
            await b.hold(50)  # the earlier request holds the room: no wait can help b (429)
        assert not err.value.own_request and err.value.limit == 100
        with pytest.raises(ImageMemoryFull) as err:
            await a.hold(50)  # this request alone is over the limit: no retry helps (400)
        assert err.value.own_request
        await b.hold(40)
        a.close()
        b.close()
        assert memory.held == 0 and a.peak == 60 and not memory._held_by

    asyncio.run(scenario())


def test_the_earliest_request_waits_for_later_ones_and_its_room_is_kept():
    async def scenario():
        memory = ImageMemory(100)
        a, b, c = _request(memory), _request(memory), _request(memory)
        await b.hold(70)  # a later request got there first
        waiting = await _pending(memory, a.hold(50))  # a arrived earlier: it waits instead of failing
        assert not waiting.done()
        with pytest.raises(ImageMemoryFull):
            await c.hold(20)  # the 30 free bytes are kept for a's 50
        b.unhold(30)
        assert not waiting.done()  # 40 held + 50 > ... still 10 short
        b.close()  # b ends: a proceeds
        await asyncio.wait_for(waiting, 1)
        assert memory.held == 50 and a.held == 50
        await c.hold(50)  # what a does not need is anyone's
        a.close()
        c.close()
        assert memory.held == 0

    asyncio.run(scenario())


def test_a_wait_ends_at_the_request_deadline_and_leaves_nothing_behind():
    async def scenario():
        memory = ImageMemory(100)
        a, b = _request(memory, wait_s=0.2), _request(memory)
        await b.hold(90)
        start = asyncio.get_running_loop().time()
        with pytest.raises(ImageMemoryFull) as err:
            await a.hold(50)
        assert not err.value.own_request and 0.15 < asyncio.get_running_loop().time() - start < 1
        assert memory.held == 90 and not memory._holds
        # a cancelled wait leaves nothing behind either
        waiting = await _pending(memory, memory.hold(a.seq, 20, float("inf")))
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        assert memory.held == 90 and not memory._holds and a.held == 0

    asyncio.run(scenario())


def test_a_waiter_is_refused_once_earlier_requests_take_its_room():
    async def scenario():
        memory = ImageMemory(100)
        a, b, c = _request(memory), _request(memory), _request(memory)
        await c.hold(50)
        waiting = await _pending(memory, b.hold(60))  # b may wait: c (later) holds what it needs
        await a.hold(45)  # a is earlier than b: it takes the free room, and b can no longer fit
        with pytest.raises(ImageMemoryFull) as err:
            await asyncio.wait_for(waiting, 1)
        assert not err.value.own_request and memory.held == 95 and not memory._holds

    asyncio.run(scenario())


def test_decodes_wait_for_room_but_one_always_runs():
    async def scenario():
        memory = ImageMemory(100)
        req = _request(memory)
        await req.start_decode(500)  # bigger than the limit, but nothing else decodes: it runs
        second = await _pending(memory, req.start_decode(10))
        assert not second.done()
        req.end_decode(500)
        await asyncio.wait_for(second, 1)
        await req.hold(80)
        third = await _pending(memory, req.start_decode(20))  # 80 held + 10 decoding + 20 > 100
        assert not third.done()
        req.unhold(80)
        await asyncio.wait_for(third, 1)
        assert memory.decoding == 30 and memory.decoders == 2 and req.peak == 500
        # A cancelled waiter leaves nothing behind.
        waiter = await _pending(memory, req.start_decode(1000))
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        assert memory.decoding == 30

    asyncio.run(scenario())


def test_holds_wait_for_decodes_so_memory_stays_under_the_limit_plus_one_decode():
    async def scenario():
        memory = ImageMemory(100)
        req = _request(memory)
        await req.start_decode(150)  # the one decode that may run over the limit
        waiting = await _pending(memory, req.hold(10))
        assert not waiting.done() and memory.held + memory.decoding == 150
        req.end_decode(150)
        await asyncio.wait_for(waiting, 1)
        assert memory.held == 10

    asyncio.run(scenario())


# ----- random interleavings: the earliest request always completes, no deadlock, the bound holds -----
LIMIT = 1000
CHUNK = 50


async def _one_request(memory: ImageMemory, rng: random.Random, images: list[tuple[int, int, int]]) -> bool:
    """Like ImageLoader.load_all: every image's chunks, then its decode, then its pixels; the first
    ImageMemoryFull fails the request and cancels the rest. True when it completed."""
    req = RequestImages(memory, FetchSlots(8), fetch_share=2, decode_share=1, wait_s=60)

    async def image(encoded: int, decode: int, pixels: int) -> None:
        held = 0
        try:
            for _ in range(encoded // CHUNK):
                await req.hold(CHUNK)
                held += CHUNK
                await asyncio.sleep(rng.uniform(0, 0.002))
            await req.start_decode(decode)
            try:
                await asyncio.sleep(rng.uniform(0, 0.004))
            finally:
                req.end_decode(decode)
        finally:
            req.unhold(held)
        await req.hold(pixels)

    tasks = [asyncio.ensure_future(image(*spec)) for spec in images]
    try:
        await asyncio.gather(*tasks)
        await asyncio.sleep(rng.uniform(0, 0.003))  # handed on to the scheduler
        return True
    except ImageMemoryFull as e:
        assert not e.own_request  # every request fits alone
        return False
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        req.close()


async def _interleaving(seed: int) -> list[bool]:
    rng = random.Random(seed)
    memory = ImageMemory(LIMIT)
    max_decode = 400
    specs = [
        [
            (CHUNK * rng.randint(2, 5), rng.randint(50, max_decode), rng.randint(10, 50))
            for _ in range(rng.randint(2, 3))
        ]
        for _ in range(rng.randint(3, 6))
    ]
    worst = [0]
    done = asyncio.Event()

    async def watch() -> None:  # runs between every two steps of the requests
        while not done.is_set():
            worst[0] = max(worst[0], memory.held + memory.decoding)
            assert memory.held <= LIMIT
            await asyncio.sleep(0)

    async def arrive(i: int, spec) -> bool:
        await asyncio.sleep(i * rng.uniform(0, 0.001))  # arrival order = index order
        return await _one_request(memory, rng, spec)

    watcher = asyncio.ensure_future(watch())
    results = await asyncio.wait_for(asyncio.gather(*(arrive(i, s) for i, s in enumerate(specs))), 20)
    done.set()
    await watcher
    assert worst[0] <= LIMIT + max_decode, worst[0]
    assert memory.held == 0 and memory.decoding == 0 and memory.decoders == 0 and not memory._holds
    return results


@pytest.mark.parametrize("seed", range(40))
def test_random_interleavings_the_first_request_completes(seed):
    results = asyncio.run(_interleaving(seed))
    assert results[0], results  # the earliest request never fails for lack of memory


def test_the_issue_case_one_of_four_competing_requests_completes():
    """#27 item 6: a 32-unit budget, four requests of three 5-unit images at once (any two
    requests fit): the first always proceeds (all four were refused in 3 runs of 4)."""

    async def scenario() -> list[bool]:
        memory = ImageMemory(32 * CHUNK * 10)
        rng = random.Random(6)
        image = (5 * CHUNK * 10, 6 * CHUNK * 10, CHUNK)
        return await asyncio.wait_for(asyncio.gather(*(_one_request(memory, rng, [image] * 3) for _ in range(4))), 20)

    for _ in range(4):
        results = asyncio.run(scenario())
        assert results[0] and sum(results) >= 1, results
