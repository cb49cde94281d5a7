"""Encoded bytes -> an RGB image no larger than the model needs, with decoding cost known upfront.

`open_image` reads only the header (PIL's open is lazy): the format must be PNG, JPEG, WebP or
GIF and width x height at most the pixel cap, so a few hundred bytes that claim 8000 x 8000
pixels are refused before any decoding. It also sets up the cheapest decode: a JPEG far larger
than the model's resize target decodes at 1/2, 1/4 or 1/8 scale (libjpeg's DCT scaling, `draft`),
and `decode_image` box-reduces other formats right after decoding; both keep at least twice the
target's width and height, so the model's own resize still does the final antialiased step.
`OpenedImage.decode_cost` is the working set to reserve before decoding (image_budget.py): the
decoded image and, when the model's cost rule is given (image_cost.py), everything its processor
allocates, resized images and float arrays included. An aspect ratio over the limit
(--mm-max-aspect-ratio) and a processor that would make an image over the pixel cap are refused
from the header too.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Callable, Optional

from PIL import Image

from sglang.srt.frontend.multimodal.image_cost import CostOf, PreprocessCost, aspect_ratio
from sglang.srt.frontend.multimodal.image_errors import ImageLoadError

IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "GIF")
# Decoded frame plus one converted copy, at up to 4 bytes a pixel each.
BYTES_PER_DECODED_PIXEL = 8
# With transparency, composited onto white (to_rgb): the RGBA frame, its RGBA copy, the white
# background, the composite and the RGB result (measured: 19 bytes a pixel).
BYTES_PER_TRANSPARENT_PIXEL = 22
# Pillow's per-row pointers and buffers of those images (a 1 x 1,000,000 image has a million
# rows: measured 8 bytes a row opaque, about 37 with transparency).
BYTES_PER_DECODED_ROW = 12
BYTES_PER_TRANSPARENT_ROW = 40
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
    reduce: int = 1  # box-reduction factor applied right after decoding (1: none)
    preprocess: Optional[PreprocessCost] = None  # what the model's processor will allocate

    @property
    def decode_cost(self) -> int:
        """Bytes to reserve while it is decoded, converted and preprocessed."""
        width, height = self.image.size
        if self.image.has_transparency_data:
            cost = width * height * BYTES_PER_TRANSPARENT_PIXEL + height * BYTES_PER_TRANSPARENT_ROW
        else:
            cost = width * height * BYTES_PER_DECODED_PIXEL + height * BYTES_PER_DECODED_ROW
        if self.image.format == "JPEG" and self.image.info.get("progressive"):
            cost += self.header_size[0] * self.header_size[1] * BYTES_PER_PROGRESSIVE_JPEG_PIXEL
        if self.preprocess is not None:
            cost += self.preprocess.nbytes
        return cost

    @property
    def processed_size(self) -> tuple[int, int]:
        """(width, height) of the RGB image the model's processor is given."""
        width, height = self.image.size
        if self.reduce < 2:
            return width, height
        return -(-width // self.reduce), -(-height // self.reduce)  # Pillow's reduce rounds up


def open_image(
    data: bytes,
    max_pixels: int,
    target: Optional[TargetSize] = None,
    *,
    max_aspect_ratio: Optional[float] = None,
    cost: Optional[CostOf] = None,
) -> OpenedImage:
    """Read the header of `data` and check it (pixels, aspect ratio, what the processor would
    make of it); set up a reduced-scale decode for large JPEGs."""
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
    if max_aspect_ratio is not None and aspect_ratio(width, height) > max_aspect_ratio:
        raise ImageLoadError(
            f"the image is {width}x{height} pixels, an aspect ratio of {_ratio(aspect_ratio(width, height))}:1, "
            f"over the limit of {_ratio(max_aspect_ratio)}:1 (--mm-max-aspect-ratio)"
        )
    opened = OpenedImage(img, (width, height), target)
    if target is not None:
        th, tw = _target(target, height, width)
        if img.format == "JPEG" and min(width // tw, height // th) >= 2 * KEEP_TARGET_MULTIPLE:
            img.draft("RGB", (KEEP_TARGET_MULTIPLE * tw, KEEP_TARGET_MULTIPLE * th))
        keep_w, keep_h = KEEP_TARGET_MULTIPLE * tw, KEEP_TARGET_MULTIPLE * th
        opened.reduce = max(1, min(img.size[0] // keep_w, img.size[1] // keep_h))
    if cost is not None:
        seen_w, seen_h = opened.processed_size
        try:
            opened.preprocess = cost(seen_h, seen_w)
        except ValueError as e:  # e.g. Qwen2-VL's aspect ratio over 200
            raise ImageLoadError(f"cannot preprocess it: {e}") from None
        if opened.preprocess.pixels > max_pixels:
            raise ImageLoadError(
                f"the image is {width}x{height} pixels, which the model's processor resizes to "
                f"{opened.preprocess.pixels} pixels, over the limit of {max_pixels} pixels"
            )
    return opened


def _ratio(value: float) -> str:
    """200000, 201, 3.4: one decimal at most (the check itself is exact)."""
    return f"{value:.1f}".rstrip("0").rstrip(".")


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
    factor = opened.reduce
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
