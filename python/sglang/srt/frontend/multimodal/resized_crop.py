"""A crop of a resized image, made without the resized image.

CLIP's processor resizes the short side to the tower's size, then crops the centre. For a tall,
thin image the resized image is huge (1 x 200,000 -> 32 x 6,400,000 pixels) and all but the
crop is thrown away. `resized_crop` gives the crop's pixels from the source region the crop's
filter taps reach, with Pillow's own resampling: the same sample positions, taps and weights as
the full resize. Each pass is rounded to 8 bits; this one runs the horizontal pass first (Pillow's
C code does; recent Pillow releases pick the order per size), so where the reference ran the
vertical one first the rounding between passes differs: a level or two in 255 on smooth images,
more at pixel-sharp edges (test_resized_crop.py measures it).

Pillow takes a resize's `box` as 32-bit floats; on a source 200,000 pixels long that alone moves
the sample positions by a hundredth of a pixel. Cropping the source to a small window first keeps
the box's numbers small, and so exact.
"""

from __future__ import annotations

import math

from PIL import Image

# Pillow's smooth resampling filters and their support (in source pixels at scale 1). Left to the
# processor: NEAREST (another algorithm, an affine transform) and BOX, whose taps start and stop
# sharply, so that the last bits of a sample position can take in or leave out a whole pixel.
FILTER_SUPPORT = {
    Image.Resampling.BILINEAR: 1.0,
    Image.Resampling.HAMMING: 1.0,
    Image.Resampling.BICUBIC: 2.0,
    Image.Resampling.LANCZOS: 3.0,
}
# Extra source pixels kept on each side of the taps (Pillow rounds the window's ends).
MARGIN = 2


def supports(resample: int) -> bool:
    """Whether `resized_crop` reproduces this filter."""
    return resample in FILTER_SUPPORT


def resized_crop(
    image: Image.Image, resized: tuple[int, int], crop: tuple[int, int, int, int], resample: int
) -> Image.Image:
    """The same pixels as `image.resize((rw, rh), resample).crop((left, top, left + cw, top + ch))`
    for resized = (rh, rw) and crop = (top, left, ch, cw) inside it, allocating only about the
    crop (plus the source window its filter taps reach)."""
    (x0, x1, c0, c1), (y0, y1, r0, r1) = _plan(image.size, resized, crop, resample)
    cw, ch = crop[3], crop[2]
    part = image.crop((c0, r0, c1, r1))
    rows = r1 - r0
    # Horizontal pass first, as Pillow's own two-pass resize does, then the vertical one.
    across = part.resize((cw, rows), resample, box=(x0 - c0, 0, x1 - c0, rows))
    return across.resize((cw, ch), resample, box=(0, y0 - r0, cw, y1 - r0))


def source_window(
    size: tuple[int, int], resized: tuple[int, int], crop: tuple[int, int, int, int], resample: int
) -> tuple[int, int]:
    """(height, width) of the source region `resized_crop` copies for an image of `size` (width,
    height): what it allocates beside the crop (image_cost.py)."""
    (_, _, c0, c1), (_, _, r0, r1) = _plan(size, resized, crop, resample)
    return r1 - r0, c1 - c0


def _plan(size: tuple[int, int], resized: tuple[int, int], crop: tuple[int, int, int, int], resample: int):
    """((x0, x1, c0, c1), (y0, y1, r0, r1)): the crop's edges in source pixels and the source
    window [c0, c1) x [r0, r1) its filter taps read."""
    width, height = size
    rh, rw = resized
    top, left, ch, cw = crop
    support = FILTER_SUPPORT[Image.Resampling(resample)]
    sx, sy = width / rw, height / rh
    x0, x1 = left * sx, (left + cw) * sx
    y0, y1 = top * sy, (top + ch) * sy
    across = (x0, x1, *_window(x0, x1, support * max(sx, 1.0), width))
    down = (y0, y1, *_window(y0, y1, support * max(sy, 1.0), height))
    return across, down


def _window(start: float, end: float, reach: float, size: int) -> tuple[int, int]:
    """Source pixels [first, last) that a resample of [start, end) reads, with a margin."""
    first = max(0, math.floor(start - reach) - MARGIN)
    last = min(size, math.ceil(end + reach) + MARGIN)
    return first, last
