"""When the HTTP process returns freed image memory to the system: at once after a large request
or a large amount of image traffic (at most once a second), and once image traffic goes quiet."""

from __future__ import annotations

import asyncio
import platform
import sys

from sglang.srt.frontend.multimodal import image_heap_trim
from sglang.srt.frontend.multimodal.fetch_slots import FetchSlots
from sglang.srt.frontend.multimodal.image_budget import ImageMemory, RequestImages
from sglang.srt.frontend.multimodal.image_heap_trim import (
    IDLE_TRIM_AFTER_BYTES,
    IDLE_TRIM_DELAY_S,
    TRIM_AFTER_BYTES,
    ImageHeapTrimmer,
)
from sglang.srt.utils.allocator import glibc_malloc_trim

MIB = 1024 * 1024


class Recorder:
    """A trimmer whose `malloc_trim` counts calls, run at once instead of on a thread."""

    def __init__(self, memory: ImageMemory) -> None:
        self.calls = 0
        self.trimmer = ImageHeapTrimmer(memory, run_in_thread=lambda fn: fn(), malloc_trim=self._trim)

    def _trim(self, pad: int) -> int:
        assert pad == 0
        self.calls += 1
        return 1


async def _request_holding(memory: ImageMemory, nbytes: int) -> RequestImages:
    request = RequestImages(memory, FetchSlots(8), fetch_share=2, decode_share=1)
    await request.hold(nbytes)
    return request


async def _end(recorder: Recorder, request: RequestImages) -> None:
    request.close()
    recorder.trimmer.request_ended(request)


def test_a_large_request_trims_at_once():
    async def scenario():
        memory = ImageMemory(4 * TRIM_AFTER_BYTES)
        rec = Recorder(memory)
        with rec.trimmer.request_in_flight():
            small = await _request_holding(memory, TRIM_AFTER_BYTES - 1)
            await _end(rec, small)
            assert rec.calls == 0  # under the threshold: only the idle rule may trim it, later
        with rec.trimmer.request_in_flight():
            large = await _request_holding(memory, 10)
            await large.start_decode(TRIM_AFTER_BYTES)  # a decode's working set counts toward its peak
            large.end_decode(TRIM_AFTER_BYTES)
            await _end(rec, large)
            assert rec.calls == 1  # at once, while its pixels are still on their way
        await asyncio.sleep(IDLE_TRIM_DELAY_S * 2)
        assert rec.calls == 2  # once quiet, the idle trim gives back what was still in use then

    asyncio.run(scenario())


def test_busy_traffic_trims_once_per_threshold_and_interval(monkeypatch):
    async def scenario():
        memory = ImageMemory(4 * TRIM_AFTER_BYTES)
        rec = Recorder(memory)
        a = await _request_holding(memory, TRIM_AFTER_BYTES // 2)
        b = await _request_holding(memory, TRIM_AFTER_BYTES // 2)
        await _end(rec, a)
        assert rec.calls == 1  # the process took the threshold's worth, though no request did
        await _end(rec, b)
        assert rec.calls == 1  # one trim for that traffic, not one per request
        c = await _request_holding(memory, TRIM_AFTER_BYTES // 2)
        d = await _request_holding(memory, TRIM_AFTER_BYTES // 2)
        await _end(rec, c)
        await _end(rec, d)
        assert rec.calls == 1  # within the interval of the last trim
        monkeypatch.setattr(image_heap_trim, "PROCESS_TRIM_INTERVAL_S", 0.0)
        e = await _request_holding(memory, 10)
        await _end(rec, e)
        assert rec.calls == 2  # c and d's traffic, once the interval has passed

    asyncio.run(scenario())


def test_quiet_process_trims_after_the_idle_delay():
    """Requests of 5 MB each, together under the busy threshold: nothing is trimmed as they end,
    one trim once no request with images has been in flight for the idle delay."""

    async def scenario():
        memory = ImageMemory(32 * MIB)
        rec = Recorder(memory)
        for _ in range(3):
            with rec.trimmer.request_in_flight():
                request = await _request_holding(memory, 5 * MIB)
                await _end(rec, request)
            assert rec.calls == 0
        await asyncio.sleep(IDLE_TRIM_DELAY_S * 2)
        assert rec.calls == 1
        with rec.trimmer.request_in_flight():
            tiny = await _request_holding(memory, IDLE_TRIM_AFTER_BYTES - 1)
            await _end(rec, tiny)
        await asyncio.sleep(IDLE_TRIM_DELAY_S * 2)
        assert rec.calls == 1  # too little image traffic since to be worth a trim

    asyncio.run(scenario())


def test_no_idle_trim_until_requests_are_answered_and_decodes_done():
    """A request's images are loaded long before it is answered (its pixels go to the scheduler
    with it): the idle delay counts from the answer, and waits for a decode that outlived its
    (cancelled) request."""

    async def scenario():
        memory = ImageMemory(32 * MIB)
        rec = Recorder(memory)
        with rec.trimmer.request_in_flight():
            first = await _request_holding(memory, 8 * MIB)
            await _end(rec, first)
            await asyncio.sleep(IDLE_TRIM_DELAY_S * 2)
            assert rec.calls == 0  # loaded, not answered yet
        with rec.trimmer.request_in_flight():
            second = await _request_holding(memory, 1)
            await asyncio.sleep(IDLE_TRIM_DELAY_S * 2)
            await memory.start_decode(1 * MIB, second.seq)  # a decode that outlives its request
            await _end(rec, second)
        await asyncio.sleep(IDLE_TRIM_DELAY_S * 2)
        assert rec.calls == 0
        memory.end_decode(1 * MIB)
        await asyncio.sleep(IDLE_TRIM_DELAY_S * 2)
        assert rec.calls == 1  # the timer looked again until the decode was done

    asyncio.run(scenario())


def test_the_real_trim_is_found_on_glibc():
    trim = glibc_malloc_trim()
    if sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc":
        assert trim is not None and trim(0) in (0, 1)
    else:  # musl, macOS: the trimmer does nothing
        assert trim is None
