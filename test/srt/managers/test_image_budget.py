"""The process's image memory budget and a request's shares of it."""

from __future__ import annotations

import asyncio

import pytest

from sglang.srt.managers.multimodal.image_budget import TRIM_AFTER_BYTES, ImageMemory, MemoryTrimmer, RequestImages
from sglang.srt.managers.multimodal.image_errors import ImageMemoryFull


def _request(memory: ImageMemory, fetch_slots: int = 8, fetch_share: int = 2) -> RequestImages:
    return RequestImages(memory, asyncio.Semaphore(fetch_slots), fetch_share=fetch_share, decode_share=1)


def test_holds_are_refused_at_once_when_over_the_limit():
    async def scenario():
        memory = ImageMemory(100)
        a, b = _request(memory), _request(memory)
        a.hold(60)
        with pytest.raises(ImageMemoryFull) as err:
            b.hold(50)  # others hold the room: retry later (429)
        assert not err.value.own_request and err.value.limit == 100
        with pytest.raises(ImageMemoryFull) as err:
            a.hold(50)  # this request alone is over the limit: no retry helps (400)
        assert err.value.own_request
        b.hold(40)
        a.close()
        b.close()
        assert memory.held == 0 and a.peak == 60

    asyncio.run(scenario())


def test_decodes_wait_for_room_but_one_always_runs():
    async def scenario():
        memory = ImageMemory(100)
        req = _request(memory)
        await req.start_decode(500)  # bigger than the limit, but nothing else decodes: it runs
        second = asyncio.ensure_future(req.start_decode(10))
        await asyncio.sleep(0.01)
        assert not second.done()
        req.end_decode(500)
        await asyncio.wait_for(second, 1)
        req.hold(80)
        third = asyncio.ensure_future(req.start_decode(20))  # 80 held + 10 decoding + 20 > 100
        await asyncio.sleep(0.01)
        assert not third.done()
        req.unhold(80)
        await asyncio.wait_for(third, 1)
        assert memory.decoding == 30 and memory.decoders == 2 and req.peak == 500
        # A cancelled waiter leaves nothing behind.
        waiter = asyncio.ensure_future(req.start_decode(1000))
        await asyncio.sleep(0.01)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        assert memory.decoding == 30

    asyncio.run(scenario())


def test_a_request_uses_its_share_of_the_fetch_slots():
    async def scenario():
        memory = ImageMemory(100)
        shared = asyncio.Semaphore(4)
        first = RequestImages(memory, shared, fetch_share=2, decode_share=1)
        second = RequestImages(memory, shared, fetch_share=2, decode_share=1)
        running, peak = {"first": 0, "second": 0}, {"first": 0, "second": 0}

        async def fetch(req, name):
            async with req.fetch_slot():
                running[name] += 1
                peak[name] = max(peak[name], running[name])
                await asyncio.sleep(0.02)
                running[name] -= 1

        start = asyncio.get_running_loop().time()
        first_done = asyncio.gather(*(fetch(first, "first") for _ in range(10)))
        await asyncio.sleep(0.005)
        await fetch(second, "second")  # not queued behind the first request's ten fetches
        waited = asyncio.get_running_loop().time() - start
        await first_done
        return peak, waited

    peak, waited = asyncio.run(scenario())
    assert peak == {"first": 2, "second": 1} and waited < 0.05


def test_trim_threshold_and_trimmer():
    async def scenario():
        req = _request(ImageMemory(2 * TRIM_AFTER_BYTES))
        req.hold(TRIM_AFTER_BYTES - 1)
        assert not req.should_trim
        await req.start_decode(1)
        assert req.should_trim

    asyncio.run(scenario())
    MemoryTrimmer().trim()  # glibc: returns free heap pages; elsewhere a no-op
