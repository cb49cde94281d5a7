"""within(): an await with a time limit, without a task per await on Python 3.11+."""

from __future__ import annotations

import asyncio
import sys

import pytest

from sglang.srt.utils.within import within


def test_returns_the_result_in_time():
    async def scenario():
        fut = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.01, fut.set_result, 7)
        return await within(fut, 1.0), await within(asyncio.sleep(0, "x"), 1.0)

    assert asyncio.run(scenario()) == (7, "x")


def test_times_out_and_cancels_what_it_waited_for():
    async def scenario():
        fut = asyncio.get_running_loop().create_future()
        with pytest.raises(asyncio.TimeoutError):
            await within(fut, 0.02)
        return fut.cancelled()

    assert asyncio.run(scenario())


def test_an_outside_cancel_stays_a_cancel():
    async def waiter():
        await within(asyncio.get_running_loop().create_future(), 5.0)

    async def scenario():
        task = asyncio.ensure_future(waiter())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())


@pytest.mark.skipif(sys.version_info < (3, 11), reason="3.10 falls back to wait_for, which makes a task")
def test_no_task_per_await():
    async def scenario():
        before = len(asyncio.all_tasks())
        seen = []

        async def body():
            seen.append(len(asyncio.all_tasks()))
            return 1

        await within(body(), 1.0)
        return before, seen[0]

    before, during = asyncio.run(scenario())
    assert during == before
