"""Work the HTTP process's event loop hands to a worker thread when it is big."""

from __future__ import annotations

import asyncio
import threading

from sglang.srt.utils.off_loop import INLINE_WORK, off_loop


def test_off_loop_runs_large_work_in_a_worker_thread():
    async def scenario():
        here = threading.get_ident()
        small = await off_loop(threading.get_ident, INLINE_WORK)
        large = await off_loop(threading.get_ident, INLINE_WORK + 1)
        return here, small, large

    here, small, large = asyncio.run(scenario())
    assert small == here and large != here
