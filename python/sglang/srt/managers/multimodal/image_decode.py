"""Encoded bytes -> an RGB image no larger than the model needs, with decoding cost known upfront.

`open_image` reads only the header (PIL's open is lazy): the format must be PNG, JPEG, WebP or
GIF and width x height at most the pixel cap, so a few hundred bytes that claim 8000 x 8000
pixels are refused before any decoding. It also sets up the cheapest decode: a JPEG far larger
than the model's resize target decodes at 1/2, 1/4 or 1/8 scale (libjpeg's DCT scaling, `draft`),
and `decode_image` box-reduces other formats right after decoding; both keep at least twice the
target's width and height, so the model's own resize still does the final antialiased step.
`OpenedImage.decode_cost` is the working set to reserve before decoding (image_budget.py).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Callable, Optional

from PIL import Image

from sglang.srt.managers.multimodal.image_errors import ImageLoadError

IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "GIF")
# Decoded frame plus one converted copy, at up to 4 bytes a pixel (RGBA) each.
BYTES_PER_DECODED_PIXEL = 8
# A progressive JPEG keeps every DCT coefficient of the full image while decoding (2 bytes per
# sample, 4:2:0 chroma: about 3 bytes a pixel), whatever the output scale.
BYTES_PER_PROGRESSIVE_JPEG_PIXEL = 3
# Reduction stops while the image is still this many times the target on each side.
KEEP_TARGET_MULTIPLE = 2
# Formats Image.reduce takes directly (LA / RGBA premultiplied); others become RGB first.
_REDUCIBLE = ("L", "LA", "RGB", "RGBA", "CMYK", "I", "F")

# (height, width) -> the (height, width) the model's processor will resize to.
TargetSize = Callable[[int, int], tuple[int, int]]


@dataclass
class OpenedImage:
    """An image whose header passed the checks; nothing decoded yet (`image.size` is the size it
    will decode at, after any JPEG draft)."""

    image: Image.Image
    header_size: tuple[int, int]  # (width, height) as the file declares it
    target: Optional[TargetSize] = None

    @property
    def decode_cost(self) -> int:
        """Bytes to reserve while it is decoded and converted."""
        width, height = self.image.size
        cost = width * height * BYTES_PER_DECODED_PIXEL
        if self.image.format == "JPEG" and self.image.info.get("progressive"):
            cost += self.header_size[0] * self.header_size[1] * BYTES_PER_PROGRESSIVE_JPEG_PIXEL
        return cost


def open_image(data: bytes, max_pixels: int, target: Optional[TargetSize] = None) -> OpenedImage:
    """Read the header of `data` and check it; set up a reduced-scale decode for large JPEGs."""
    try:
        img = Image.open(io.BytesIO(data), formats=IMAGE_FORMATS)
    except Image.DecompressionBombError:
        raise ImageLoadError(f"the image has too many pixels (over the limit of {max_pixels} pixels)") from None
    except (Image.UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError):
        raise ImageLoadError("the data is not a PNG, JPEG, WebP or GIF image") from None
    width, height = img.size
    if width < 1 or height < 1:
        raise ImageLoadError(f"the image is empty ({width}x{height})")
    if width * height > max_pixels:
        raise ImageLoadError(f"the image is {width}x{height} pixels, over the limit of {max_pixels} pixels")
    if target is not None:
        th, tw = _target(target, height, width)
        if img.format == "JPEG" and min(width // tw, height // th) >= 2 * KEEP_TARGET_MULTIPLE:
            img.draft("RGB", (KEEP_TARGET_MULTIPLE * tw, KEEP_TARGET_MULTIPLE * th))
    return OpenedImage(img, (width, height), target)


def _target(target: TargetSize, height: int, width: int) -> tuple[int, int]:
    try:
        th, tw = target(height, width)
    except ValueError as e:  # e.g. an aspect ratio over 200
        raise ImageLoadError(f"cannot preprocess it: {e}") from None
    return max(1, th), max(1, tw)


def decode_image(opened: OpenedImage) -> Image.Image:
    """Decode an opened image (the first frame of an animation), reduce it, and make it RGB."""
    img = opened.image
    try:
        img.seek(0)
        img.load()
    except (OSError, SyntaxError, ValueError, EOFError) as e:
        raise ImageLoadError(f"the image data is corrupt ({_first_line(e)})") from None
    factor = 1
    if opened.target is not None:
        th, tw = _target(opened.target, opened.header_size[1], opened.header_size[0])
        factor = min(img.size[0] // (KEEP_TARGET_MULTIPLE * tw), img.size[1] // (KEEP_TARGET_MULTIPLE * th))
    try:
        if factor < 2:
            return to_rgb(img)
        if img.mode in _REDUCIBLE:
            return to_rgb(img.reduce(factor))
        return to_rgb(img).reduce(factor)
    except (OSError, ValueError) as e:  # a mode Pillow cannot convert
        raise ImageLoadError(f"cannot convert the image to RGB (mode {img.mode}: {_first_line(e)})") from None


def to_rgb(img: Image.Image) -> Image.Image:
    """RGB, with any transparency composited onto white (as transformers' convert_to_rgb does)."""
    if img.mode == "RGB":
        return img
    if img.has_transparency_data:  # an alpha band (RGBA, LA, PA) or a transparent palette entry
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return img.convert("RGB")


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else type(e).__name__
