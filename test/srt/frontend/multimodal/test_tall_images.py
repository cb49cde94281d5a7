"""Tall, thin images through the image loader of every image path (CLIP, SigLIP, SigLIP 2,
Qwen2-VL/GME): refused from the header over --mm-max-aspect-ratio, and with the limit raised,
served (CLIP, SigLIP) with a reservation that counts what preprocessing really makes (issue 27,
item 1: a 1 x 200,000 PNG took a CLIP server from 406 MB to 2.4 GB)."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from sglang.srt.frontend.multimodal.image_errors import ImageLoadError
from sglang.srt.frontend.multimodal.image_loader import ImageLoader, LoadFailed
from sglang.srt.frontend.multimodal.image_source import parse_image_source
from sglang.srt.frontend.multimodal.processors import Qwen2VLImages
from sglang.srt.frontend.multimodal.tower_images import TowerImages
from sglang.srt.server_args import ServerArgs
from test.helpers.images import blank_png, data_uri, encode_image, gradient_image
from test.helpers.tiny_image_text import build_tiny_towers

pytestmark = pytest.mark.slow  # builds models

MB = 1024 * 1024
THIN = data_uri(blank_png(1, 200_000))  # the image: valid, about 1 KB
LIMIT = "an aspect ratio of 200000:1, over the limit of 200:1 (--mm-max-aspect-ratio)"


@pytest.fixture(scope="module")
def dirs(tmp_path_factory, gme_dir) -> dict[str, str]:
    return {**build_tiny_towers(str(tmp_path_factory.mktemp("towers"))), "gme": gme_dir}


def _loader(dirs, kind: str, **flags) -> ImageLoader:
    args = ServerArgs(model_path=dirs[kind], **flags)
    if kind == "gme":
        return ImageLoader(args, Qwen2VLImages(dirs[kind]))
    return ImageLoader(args, TowerImages(dirs[kind], 8, class_token=kind == "clip"))


def _load(loader: ImageLoader, uri: str):
    try:
        return asyncio.run(loader.load_all({0: parse_image_source(uri)}))[0]
    finally:
        loader.close()


def test_thin_png_is_small_and_valid():
    assert len(blank_png(1, 200_000)) < 2000


@pytest.mark.parametrize("kind", ["clip", "siglip", "siglip2", "gme"])
def test_over_the_aspect_limit_is_refused_from_the_header(dirs, kind):
    loader = _loader(dirs, kind)
    start = time.monotonic()
    with pytest.raises(LoadFailed) as failed:
        _load(loader, THIN)
    assert isinstance(failed.value.error, ImageLoadError)
    assert str(failed.value.error) == f"the image is 1x200000 pixels, {LIMIT}"
    assert time.monotonic() - start < 2
    assert loader.memory.held == 0 and loader.memory.decoding == 0


@pytest.mark.parametrize("kind", ["clip", "siglip", "siglip2"])
def test_raised_limit_serves_it_with_a_small_reservation(dirs, kind):
    """--mm-max-aspect-ratio raised: the image is decoded and preprocessed, and what the loader
    reserves for it (decoded image + preprocessing) is a few MB, as is what it really makes."""
    loader = _loader(dirs, kind, mm_max_aspect_ratio=1_000_000)
    opened = loader.open_checked(blank_png(1, 200_000))
    assert opened.decode_cost < 40 * MB  # CLIP before: 1.6 MB counted, 2 GB made
    pixels, grid = _load(_loader(dirs, kind, mm_max_aspect_ratio=1_000_000), THIN)
    assert pixels.dtype == np.float32 and np.isfinite(pixels).all() and grid.shape == (1, 3)


def test_gme_keeps_its_processors_own_limit(dirs):
    """Qwen2-VL's processor refuses aspect ratios over 200 itself: raising the flag cannot pass it."""
    with pytest.raises(LoadFailed) as failed:
        _load(_loader(dirs, "gme", mm_max_aspect_ratio=1000), data_uri(encode_image(gradient_image(1, 300))))
    assert "cannot preprocess it: absolute aspect ratio must be smaller than 200" in str(failed.value.error)


@pytest.mark.parametrize("kind", ["clip", "siglip", "siglip2", "gme"])
def test_just_under_the_limit_is_served(dirs, kind):
    pixels, _ = _load(_loader(dirs, kind), data_uri(encode_image(gradient_image(1, 150, seed=5))))
    assert np.isfinite(pixels).all()


def test_clip_reservation_counts_the_resized_image(dirs):
    """Aspect 4 (CLIP's own resize, 32 x 128): the reservation holds the processor's copies of the
    image, the resize and the float arrays, not only the decoded 60 x 240 image; a large one is
    counted at the size it is reduced to while decoding."""
    loader = _loader(dirs, "clip")
    try:
        opened = loader.open_checked(encode_image(gradient_image(60, 240)))
        reduced = loader.open_checked(encode_image(gradient_image(400, 1600)))
    finally:
        loader.close()
    decoded = 60 * 240 * 8 + 240 * 12  # an opaque image: 8 bytes a pixel, 12 a row
    assert opened.preprocess is not None and opened.preprocess.pixels == 32 * 128
    assert opened.decode_cost == decoded + opened.preprocess.nbytes > decoded + 60 * 240 * 16 + 32 * 128 * 10
    assert reduced.reduce == 6 and reduced.processed_size == (67, 267) and reduced.preprocess.pixels == 32 * 127


def test_pixel_cap_counts_the_resize(dirs):
    """A 30 x 30 image under --mm-max-image-pixels 1000 that SigLIP 2 resizes to 32 x 32 (1024
    pixels) is refused from its header."""
    with pytest.raises(LoadFailed) as failed:
        _load(_loader(dirs, "siglip2", mm_max_image_pixels=1000), data_uri(encode_image(gradient_image(30, 30))))
    assert "the model's processor resizes to 1024 pixels, over the limit of 1000 pixels" in str(failed.value.error)
