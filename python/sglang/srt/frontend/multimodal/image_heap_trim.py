"""When the HTTP process gives the memory of images it is done with back to the system.

glibc keeps freed image buffers (encoded bytes, decoded pixels, the decoder's scratch) in its heaps
for reuse; the decode threads each have heaps of their own. The rules before trimmed at the end
of a request when its peak, or the process's peak since the last trim, reached 64 MiB: under a
32 MiB limit neither peak gets there (16 requests of three 5 MB images left the process +70 to
+123 MB for good), and a trim at a request's end runs while that request's pixels are still
alive (256 URLs to a 5 MB image: +55 MB kept, +2 with the idle rule). Two rules now:

- busy: at a request's end, when that request held TRIM_AFTER_BYTES at its peak, or the process
  took that much image memory since the last trim (at most once a second); the traffic goes on,
  so such a trim only keeps the heaps from growing (the request's own pixels are still alive).
- idle: once no request with images has been in flight for IDLE_TRIM_DELAY_S, when the process
  took IDLE_TRIM_AFTER_BYTES since the last idle trim, whatever busy trims ran meanwhile: this is
  what leaves a quiet process at its resting size. A request counts until it is answered
  (`request_in_flight`, held by the tokenizer manager), not until its images are loaded: its
  pixels live in its messages until then.

The trim itself runs on a decode thread: it takes glibc's heap locks for a few ms, which the
event loop need not wait for.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Callable, Iterator, Optional

from sglang.srt.frontend.multimodal.image_budget import ImageMemory, RequestImages
from sglang.srt.utils.allocator import glibc_malloc_trim

TRIM_AFTER_BYTES = 64 * 1024 * 1024
PROCESS_TRIM_INTERVAL_S = 1.0
IDLE_TRIM_AFTER_BYTES = 4 * 1024 * 1024
IDLE_TRIM_DELAY_S = 0.25


class ImageHeapTrimmer:
    """Decides when to trim (the rules above) and hands the trim to `run_in_thread`."""

    def __init__(
        self,
        memory: ImageMemory,
        run_in_thread: Callable[[Callable[[], None]], None],
        malloc_trim: Optional[Callable[[int], int]] = None,
    ) -> None:
        self.memory = memory
        self.run_in_thread = run_in_thread
        self._malloc_trim = malloc_trim if malloc_trim is not None else glibc_malloc_trim()
        self._trimmed_at = -PROCESS_TRIM_INTERVAL_S
        self._taken_at_trim = 0  # memory.taken at the last trim
        self._taken_at_idle_trim = 0  # ... and at the last idle one
        self._idle_timer: Optional[asyncio.TimerHandle] = None
        self._in_flight = 0  # requests with images not answered yet

    @contextlib.contextmanager
    def request_in_flight(self) -> Iterator[None]:
        """Held from a request with images' arrival to its answer; the idle rule counts from the
        last one's end."""
        self._in_flight += 1
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0 and self._malloc_trim is not None:
                self._arm_idle_timer()

    def request_ended(self, request: RequestImages) -> None:
        """Called once a request's images are closed (what it held is given back)."""
        if self._malloc_trim is None:  # not glibc: nothing to give back this way
            return
        now = time.monotonic()
        taken = self.memory.taken - self._taken_at_trim
        busy_due = taken >= TRIM_AFTER_BYTES and now - self._trimmed_at >= PROCESS_TRIM_INTERVAL_S
        if request.peak >= TRIM_AFTER_BYTES or busy_due:
            self._trim(now)

    def _arm_idle_timer(self) -> None:
        if self._idle_timer is None:
            self._idle_timer = asyncio.get_running_loop().call_later(IDLE_TRIM_DELAY_S, self._on_idle_timer)

    def _on_idle_timer(self) -> None:
        self._idle_timer = None
        if self._in_flight:  # busy again: the last of them to end arms the timer
            return
        if self.memory.decoders:  # a cancelled request's decode still runs: look again later
            self._arm_idle_timer()
            return
        if self.memory.taken - self._taken_at_idle_trim >= IDLE_TRIM_AFTER_BYTES:
            self._taken_at_idle_trim = self.memory.taken
            self._trim(time.monotonic())

    def _trim(self, now: float) -> None:
        self._trimmed_at = now
        self._taken_at_trim = self.memory.taken
        trim = self._malloc_trim
        self.run_in_thread(lambda: trim(0))
