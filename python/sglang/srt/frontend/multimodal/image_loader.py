"""One request's images: sources -> (pixel patches, grid), all bounded and all cancellable.

Per image: a URL is fetched on the event loop (http_fetch.py) within the request's share of the
fetch slots; inline data and local files are read in the decode pool; then the header is read
and checked (image_decode.open_image: pixels, aspect ratio, and what the model's processor will
make of it), the decode's working set (the decoded image plus everything the processor
allocates, image_cost.py) is reserved in the process's ImageMemory, and the image is decoded,
reduced and preprocessed in the decode pool, within the request's share of those threads. The
first image that fails fails the request and cancels the others (a cancelled fetch closes its
socket; a decode already running finishes, and its memory reservation is given back only then).
A client that hangs up cancels the whole request the same way. Every byte a request held is
given back when it ends, and after a request that held a lot the freed pages go back to the
system.

Public API for model code (GME's preparer, and any other image-text model): `parse_image_source`
(image_source.py) checks a client's string; `ImageLoader(server_args, preprocessor)` with any
`ImagePreprocessor`; `await loader.load_all({item index: source})` returns each item's
preprocessed arrays or raises `LoadFailed`, which `preparer.load_failed_error` turns into the
client's error.
"""

from __future__ import annotations

import asyncio
import logging
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Mapping, Optional, Protocol

import numpy as np
from PIL import Image

from sglang.srt.frontend.multimodal.fetch_slots import FetchSlots
from sglang.srt.frontend.multimodal.http_fetch import ImageUrlFetcher
from sglang.srt.frontend.multimodal.image_budget import ImageMemory, RequestImages
from sglang.srt.frontend.multimodal.image_cost import CostOf, cost_from_target
from sglang.srt.frontend.multimodal.image_decode import OpenedImage, decode_image, open_image
from sglang.srt.frontend.multimodal.image_errors import ImageLoadError
from sglang.srt.frontend.multimodal.image_heap_trim import ImageHeapTrimmer
from sglang.srt.frontend.multimodal.image_source import ImageSource, UrlSource, read_source_bytes
from sglang.srt.frontend.multimodal.url_guard import UrlPolicy
from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)

# Decoding and preprocessing use the CPU: a few threads (Pillow and numpy release the GIL for
# the heavy parts; more would take turns with the event loop).
DECODE_WORKERS = max(1, min(4, os.cpu_count() or 1))
# The smallest default for --mm-max-image-pixels: an 8K UHD frame.
MIN_DEFAULT_IMAGE_PIXELS = 7680 * 4320

# (pixel_values, per-image metadata the model needs: Qwen2-VL's image_grid_thw)
ImageResult = tuple[np.ndarray, np.ndarray]


class ImagePreprocessor(Protocol):
    """What ImageLoader needs from a model's image processor (processors.Qwen2VLImages is one)."""

    max_pixels: int  # the area the processor resizes to: the default pixel cap follows it

    def target_size(self, height: int, width: int) -> tuple[int, int]:
        """(height, width) an image of this size is resized to (ValueError if it cannot be)."""
        ...

    def __call__(self, image: Image.Image) -> ImageResult:
        """An RGB image -> the model's arrays (called in a decode thread)."""
        ...


def preprocess_cost_of(images: ImagePreprocessor) -> CostOf:
    """The preprocessor's own `preprocess_cost(height, width) -> PreprocessCost` (what it allocates
    for an image of that size: processors.py, tower_images.py), or an estimate from its resize
    rule for one that has none."""
    own = getattr(images, "preprocess_cost", None)
    return own if callable(own) else cost_from_target(images.target_size)


def default_image_pixel_cap(model_max_pixels: int) -> int:
    """Four times what the model resizes to (room for detail that survives the resize), and never
    below an 8K frame, so ordinary photos and screenshots pass."""
    return max(4 * model_max_pixels, MIN_DEFAULT_IMAGE_PIXELS)


class ImageLoader:
    def __init__(self, server_args: ServerArgs, images: ImagePreprocessor) -> None:
        self.images = images
        self.max_bytes = server_args.mm_max_image_bytes
        self.allowed_local_dir = server_args.allowed_local_media_path
        self.max_pixels = server_args.mm_max_image_pixels or default_image_pixel_cap(images.max_pixels)
        self.max_aspect_ratio = server_args.mm_max_aspect_ratio
        self._cost: CostOf = preprocess_cost_of(images)
        # Pillow's own bomb check (an error at twice its limit, at open) backs ours up; its warning
        # (above its limit) is noise, since our cap refuses such images right after.
        Image.MAX_IMAGE_PIXELS = max(Image.MAX_IMAGE_PIXELS or 0, self.max_pixels)
        warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)
        policy = UrlPolicy.from_flags(
            server_args.mm_disable_url_fetch, server_args.mm_allowed_url_hosts, server_args.mm_allow_private_urls
        )
        self.fetcher = ImageUrlFetcher(policy, server_args.mm_image_timeout, self.max_bytes)
        self.urls_enabled = policy.enabled
        self.memory = ImageMemory(server_args.mm_max_bytes_in_flight)
        self.fetch_concurrency = server_args.mm_fetch_concurrency
        self.fetch_slots = FetchSlots(self.fetch_concurrency)
        self.memory_wait_s = server_args.mm_image_timeout  # a request waits this long for image memory
        self.trimmer = ImageHeapTrimmer(self.memory, self._run_in_pool)
        self._pool: Optional[ThreadPoolExecutor] = None

    @property
    def pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(DECODE_WORKERS, thread_name_prefix="sglang-image")
        return self._pool

    def _run_in_pool(self, fn: Callable[[], None]) -> None:
        try:
            self.pool.submit(fn)
        except RuntimeError:  # shut down: the process is exiting, nothing left to trim for
            pass

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def new_request(self) -> RequestImages:
        return RequestImages(
            self.memory,
            self.fetch_slots,
            fetch_share=max(1, self.fetch_concurrency // 4),
            decode_share=max(1, DECODE_WORKERS // 2),
            wait_s=self.memory_wait_s,
        )

    async def load_all(self, sources: Mapping[int, ImageSource]) -> dict[int, ImageResult]:
        """Every image, or the first failure (by time) as (item index, exception) in LoadFailed."""
        request = self.new_request()
        tasks = {i: asyncio.ensure_future(self._load(request, source)) for i, source in sources.items()}
        try:
            if tasks:
                await asyncio.wait(tasks.values(), return_when=asyncio.FIRST_EXCEPTION)
            for i, task in sorted(tasks.items()):
                if task.done() and not task.cancelled() and task.exception() is not None:
                    raise LoadFailed(i, task.exception(), isinstance(sources[i], UrlSource))
            return {i: task.result() for i, task in tasks.items()}
        finally:
            for task in tasks.values():
                task.cancel()
            try:  # a cancelled load gives its bytes back as it ends; wait for that
                await asyncio.gather(*tasks.values(), return_exceptions=True)
            finally:
                request.close()
                self.trimmer.request_ended(request)

    async def _load(self, request: RequestImages, source: ImageSource) -> ImageResult:
        async with request.in_progress:
            pixels, grid = await self._load_encoded(request, source)
        await request.hold(pixels.nbytes)
        return pixels, grid

    async def _load_encoded(self, request: RequestImages, source: ImageSource) -> ImageResult:
        """Read or fetch the encoded image, then decode and preprocess it; the encoded bytes are
        given back once it is decoded (or has failed)."""
        held = [0]  # bytes of the encoded image this item holds

        async def hold(n: int) -> None:
            await request.hold(n)
            held[0] += n

        loop = asyncio.get_running_loop()
        try:
            if isinstance(source, UrlSource):
                async with request.fetch_slot():
                    data = await self.fetcher.fetch(source, hold)
            else:
                async with request.decode_share:
                    data = await loop.run_in_executor(
                        self.pool, read_source_bytes, source, self.allowed_local_dir, self.max_bytes
                    )
                await hold(len(data))
            async with request.decode_share:
                opened = await loop.run_in_executor(self.pool, self.open_checked, data)
                cost = opened.decode_cost
                await request.start_decode(cost)
                return await self._run_releasing(request, cost, self._decode, opened)
        finally:
            request.unhold(held[0])

    def open_checked(self, data: bytes) -> OpenedImage:
        """Read and check the header (pixels, aspect ratio, what the processor would make of it)
        and work out the decode's full cost, before any pixel is decoded (a decode thread's job)."""
        return open_image(data, self.max_pixels, self._target, max_aspect_ratio=self.max_aspect_ratio, cost=self._cost)

    def _target(self, height: int, width: int) -> tuple[int, int]:
        return self.images.target_size(height, width)

    def _decode(self, opened) -> ImageResult:
        image = decode_image(opened)
        try:
            return self.images(image)
        except ValueError as e:  # e.g. an aspect ratio over 200
            raise ImageLoadError(f"cannot preprocess it: {e}") from None

    def _run_releasing(self, request: RequestImages, cost: int, fn: Callable, *args) -> "asyncio.Future":
        """Run fn in the pool; the decode reservation is given back when the thread is done with
        it, not when a cancelled caller stops waiting."""
        loop = asyncio.get_running_loop()
        job = self.pool.submit(fn, *args)

        def release(_) -> None:
            try:
                loop.call_soon_threadsafe(request.end_decode, cost)
            except RuntimeError:  # the loop is closed: nothing left to account for
                pass

        job.add_done_callback(release)
        return asyncio.wrap_future(job)


class LoadFailed(Exception):
    """Item `index` failed with `error`; `from_url` items get one generic message (see image_errors)."""

    def __init__(self, index: int, error: BaseException, from_url: bool) -> None:
        super().__init__(index, error)
        self.index = index
        self.error = error
        self.from_url = from_url
