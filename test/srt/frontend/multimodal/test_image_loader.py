"""Loading a request's images: results, the first failure cancelling the rest, cancellation giving
everything back, the request's share of the fetch slots, and the memory budget's refusals."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from sglang.srt.frontend.multimodal.image_errors import FetchFailed, ImageLoadError, ImageMemoryFull
from sglang.srt.frontend.multimodal.image_loader import (
    DECODE_WORKERS,
    ImageLoader,
    LoadFailed,
    default_image_pixel_cap,
)
from sglang.srt.frontend.multimodal.image_source import parse_image_source
from sglang.srt.frontend.multimodal.processors import Qwen2VLImages
from sglang.srt.server_args import ServerArgs
from test.helpers.images import ImageServer, data_uri, encode_image, gradient_image
from test.helpers.waiting import wait_until_async

pytestmark = pytest.mark.slow  # builds a model and runs local HTTP servers
PNG = encode_image(gradient_image(100, 60, seed=1))


@pytest.fixture(scope="module")
def images():
    with ImageServer({"/img.png": PNG, "/drip.png": ("drip", 0.5, 100_000)}) as s:
        yield s


def _loader(gme_dir, **flags) -> ImageLoader:
    flags.setdefault("mm_allow_private_urls", True)  # the test's image host is on loopback
    args = ServerArgs(model_path=gme_dir, is_embedding=True, **flags)
    return ImageLoader(args, Qwen2VLImages(gme_dir))


def _load(loader: ImageLoader, strings: list[str]):
    try:
        return asyncio.run(loader.load_all({i: parse_image_source(s) for i, s in enumerate(strings)}))
    finally:
        loader.close()


def test_default_pixel_cap_follows_the_model():
    assert default_image_pixel_cap(12_845_056) == 4 * 12_845_056  # GME's checkpoint: 16384 image tokens
    assert default_image_pixel_cap(1_003_520) == 7680 * 4320  # GME's script settings: never below 8K


def test_images_load_and_memory_is_given_back(gme_dir, images):
    loader = _loader(gme_dir)
    out = _load(loader, [data_uri(PNG), images.url("/img.png")])
    assert sorted(out) == [0, 1]
    for pixels, grid in out.values():
        assert grid.tolist() == [[1, 4, 8]] and pixels.shape == (32, 1176)
    assert loader.memory.held == 0 and loader.memory.decoding == 0 and loader.memory.decoders == 0


def test_first_failure_cancels_the_others(gme_dir, images):
    loader = _loader(gme_dir, mm_image_timeout=30)
    start = time.monotonic()
    with pytest.raises(LoadFailed) as failed:
        _load(loader, [images.url("/drip.png"), "data:image/png;base64,aGk="])
    assert failed.value.index == 1 and isinstance(failed.value.error, ImageLoadError)
    assert not failed.value.from_url
    assert time.monotonic() - start < 3 and images.wait_idle(2.0)  # not the 30 s deadline; the drip's socket closed
    assert loader.memory.held == 0


def test_cancelling_the_request_stops_its_fetches(gme_dir, images):
    loader = _loader(gme_dir, mm_image_timeout=30)
    path = "/drip.png?test=cancel"  # its own tag: another test's late connection is not counted
    sources = {i: parse_image_source(images.url(path)) for i in range(3)}

    async def scenario():
        task = asyncio.ensure_future(loader.load_all(sources))
        assert await wait_until_async(lambda: images.open_to(path) >= 3, 5.0)
        assert images.open_to(path) == 3
        task.cancel()  # what a client that hangs up does to its request
        await asyncio.gather(task, return_exceptions=True)

    try:
        asyncio.run(scenario())
    finally:
        loader.close()
    assert images.wait_idle(2.0, path) and loader.memory.held == 0


def test_one_request_takes_a_quarter_of_the_fetch_slots(gme_dir, images):
    loader = _loader(gme_dir, mm_image_timeout=1, mm_fetch_concurrency=8)
    path = "/drip.png?test=share"  # its own tag: another test's late connection is not counted
    peak, stop = [0], threading.Event()

    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], images.open_to(path))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with pytest.raises(LoadFailed) as failed:
            _load(loader, [images.url(path)] * 6)
    finally:
        stop.set()
        watcher.join()
    assert isinstance(failed.value.error, FetchFailed) and failed.value.from_url
    assert peak[0] == 2


def test_memory_budget_refusals(gme_dir):
    with pytest.raises(LoadFailed) as failed:
        _load(_loader(gme_dir, mm_max_bytes_in_flight=1000), [data_uri(PNG)])
    err = failed.value.error
    assert isinstance(err, ImageMemoryFull) and err.own_request and err.limit == 1000


class SlowImages:
    """An ImagePreprocessor other than Qwen2VLImages: GME's, slowed down, noting how many images the
    host had served each time one reached preprocessing."""

    def __init__(self, inner: Qwen2VLImages, host: ImageServer) -> None:
        self.inner, self.host = inner, host
        self.max_pixels = inner.max_pixels
        self.served_at_call: list[int] = []

    def target_size(self, height: int, width: int) -> tuple[int, int]:
        return self.inner.target_size(height, width)

    def __call__(self, image):
        self.served_at_call.append(len(self.host.requests))
        time.sleep(0.05)
        return self.inner(image)


def test_fetches_do_not_run_ahead_of_decoding(gme_dir, images):
    """A request of many URLs holds a few encoded images at a time: the k-th image to reach
    preprocessing finds at most k + (its fetch share + decode share) images fetched."""
    args = ServerArgs(model_path=gme_dir, is_embedding=True, mm_allow_private_urls=True, mm_fetch_concurrency=4)
    slow = SlowImages(Qwen2VLImages(gme_dir), images)
    loader = ImageLoader(args, slow)
    start = len(images.requests)
    out = _load(loader, [images.url("/img.png")] * 12)
    assert len(out) == 12 and loader.memory.held == 0
    ahead = max(served - start - k for k, served in enumerate(slow.served_at_call))
    assert ahead <= 1 + max(1, DECODE_WORKERS // 2), slow.served_at_call  # before: all 12 fetched at once
