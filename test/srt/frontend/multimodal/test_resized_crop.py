"""CLIP's resize-then-crop made without the resized image: the reference's pixels (Pillow resizing
the whole image, then cropping), and memory bounded by the crop whatever the image's length."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from sglang.srt.frontend.multimodal.resized_crop import resized_crop, source_window, supports
from test.helpers.images import gradient_image

FILTERS = [Image.Resampling.BICUBIC, Image.Resampling.BILINEAR, Image.Resampling.LANCZOS, Image.Resampling.HAMMING]


def _reference(image: Image.Image, edge: int, resample: int) -> tuple[np.ndarray, tuple, tuple]:
    """transformers' CLIP rule on Pillow: the short side to `edge` (the long one truncated), then
    the centre edge x edge crop; also (resized, crop) as resized_crop takes them."""
    w, h = image.size
    rh, rw = (int(edge * h / w), edge) if w <= h else (edge, int(edge * w / h))
    top, left = (rh - edge) // 2, (rw - edge) // 2
    full = np.asarray(image.resize((rw, rh), resample))
    return full[top : top + edge, left : left + edge], (rh, rw), (top, left, edge, edge)


def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


@pytest.mark.parametrize("resample", FILTERS)
@pytest.mark.parametrize(
    "size, edge",
    [((1, 150), 32), ((150, 1), 32), ((7, 1000), 32), ((3, 451), 224), ((37, 1999), 224), ((2000, 37), 224)],
)
def test_upscaled_crops_are_the_reference_pixels(size, edge, resample):
    """Thin images (the short side scaled up): the same taps and weights as the full resize, so at
    most one level in 255 apart (the sample positions' last bits), on a sliver of the pixels."""
    image = gradient_image(*size, seed=size[0])
    ref, resized, crop = _reference(image, edge, resample)
    ours = np.asarray(resized_crop(image, resized, crop, resample))
    assert ours.shape == ref.shape == (edge, edge, 3)
    diff = np.abs(ours.astype(int) - ref)
    assert diff.max() <= 1 and (diff > 0).mean() < 0.01, (diff.max(), (diff > 0).mean())


@pytest.mark.parametrize("resample", FILTERS)
@pytest.mark.parametrize("size, edge", [((90, 400), 64), ((400, 90), 64), ((300, 1500), 224), ((1500, 300), 224)])
def test_downscaled_crops_stay_within_the_passes_rounding(size, edge, resample):
    """Both sides shrinking: Pillow may run the vertical pass first where this runs the horizontal
    one first; only the 8-bit rounding between the passes differs (a level on average here, more
    at the gradient's sharp wrap from 255 to 0)."""
    image = gradient_image(*size, seed=size[1])
    ref, resized, crop = _reference(image, edge, resample)
    ours = np.asarray(resized_crop(image, resized, crop, resample))
    diff = np.abs(ours.astype(int) - ref)
    assert diff.max() <= 16 and diff.mean() < 1.0, (diff.max(), diff.mean())


def test_memory_is_bounded_by_the_crop():
    """1 x 1,000,000: resizing it whole to CLIP's 224 would make 224 x 224,000,000 pixels (200 GB);
    the crop's source window is a few pixels and the process barely grows."""
    image = gradient_image(1, 1_000_000)
    resized, crop = (224_000_000, 224), ((224_000_000 - 224) // 2, 0, 224, 224)
    rows, cols = source_window(image.size, resized, crop, Image.Resampling.BICUBIC)
    assert rows <= 12 and cols == 1
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the high-water mark starts again from here
    before = _rss_kb("VmRSS")
    out = resized_crop(image, resized, crop, Image.Resampling.BICUBIC)
    assert out.size == (224, 224)
    assert (_rss_kb("VmHWM") - before) / 1024 < 20
    # A one-pixel-wide source: every row one colour, from the middle pixels of the column.
    pixels = np.asarray(out).astype(int)
    assert (pixels == pixels[:, :1]).all()
    middle = np.asarray(image)[499_995:500_005, 0].astype(int)
    assert (pixels[:, 0] >= middle.min(0) - 8).all() and (pixels[:, 0] <= middle.max(0) + 8).all()


def test_nearest_and_box_are_left_to_the_processor():
    assert not supports(Image.Resampling.NEAREST) and not supports(Image.Resampling.BOX)
    assert all(supports(f) for f in FILTERS)
