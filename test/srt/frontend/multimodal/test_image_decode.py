"""Decoding: the header checks before any pixel is decoded (pixels, aspect ratio, what the model's
processor would make of it), the reduced decode of images far larger than the model needs, the
decode's cost, and the RGB conversion."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from sglang.srt.frontend.multimodal.image_cost import PreprocessCost
from sglang.srt.frontend.multimodal.image_decode import decode_image, open_image, to_rgb
from sglang.srt.frontend.multimodal.image_errors import ImageLoadError
from test.helpers.images import blank_png, encode_image, gradient_image, png_claiming_size
from test.helpers.preprocess_peak import measure_decode

CAP = 8192 * 8192


def _decode(data: bytes, cap: int = CAP, target=None) -> Image.Image:
    return decode_image(open_image(data, cap, target))


def _target(size: int):
    """A model that resizes everything to size x size."""
    return lambda h, w: (size, size)


def test_pixel_cap_is_read_from_the_header():
    bomb = png_claiming_size(9000, 9000)
    assert len(bomb) < 100
    with pytest.raises(ImageLoadError, match="9000x9000 pixels, over the limit of 67108864 pixels"):
        open_image(bomb, CAP)
    with pytest.raises(ImageLoadError, match="too many pixels"):  # Pillow's own bomb check comes first here
        open_image(png_claiming_size(100000, 100000), CAP)
    with pytest.raises(ImageLoadError, match="over the limit of 1000 pixels"):
        open_image(encode_image(gradient_image(40, 30)), 1000)


def test_jpeg_far_larger_than_the_target_decodes_at_reduced_scale():
    jpeg = encode_image(gradient_image(800, 600, seed=4), "JPEG", quality=90)
    full = open_image(jpeg, CAP)
    assert full.image.size == (800, 600)
    opened = open_image(jpeg, CAP, _target(50))  # 2x the target is 100: 1/4 scale keeps 200 x 150
    assert opened.image.size == (200, 150) and opened.header_size == (800, 600)
    assert opened.decode_cost == 200 * 150 * 8 + 150 * 12 and full.decode_cost == 800 * 600 * 8 + 600 * 12
    small = decode_image(opened)
    assert small.mode == "RGB" and small.size == (200, 150)
    # What the model then sees barely differs from a full decode shrunk the same way.
    ref = decode_image(full).resize((50, 50), Image.BICUBIC)
    diff = np.abs(np.asarray(small.resize((50, 50), Image.BICUBIC), float) - np.asarray(ref, float))
    assert diff.mean() < 2.0
    # Close to the target: decoded as it is.
    assert open_image(jpeg, CAP, _target(250)).image.size == (800, 600)


def test_progressive_jpeg_reserves_its_coefficients():
    img = gradient_image(800, 800)
    plain = open_image(encode_image(img, "JPEG"), CAP, _target(100))
    progressive = open_image(encode_image(img, "JPEG", progressive=True), CAP, _target(100))
    assert progressive.decode_cost == plain.decode_cost + 800 * 800 * 3


def test_other_formats_are_reduced_after_decoding():
    png = encode_image(gradient_image(500, 400, seed=2))
    out = _decode(png, target=_target(50))  # factor min(500 // 100, 400 // 100) = 4
    assert out.mode == "RGB" and out.size == (125, 100)
    assert _decode(png, target=_target(150)).size == (500, 400)  # under 2x twice the target: as is
    # A fully transparent 2000 x 2000 PNG (a few kilobytes) becomes a small white image.
    blank = blank_png(2000, 2000)
    assert len(blank) < 20_000
    out = _decode(blank, target=_target(100))
    assert out.size == (200, 200) and np.asarray(out).min() == 255


def test_sixteen_bit_images_are_converted_and_reduced():
    deep = Image.fromarray((np.arange(400 * 300, dtype=np.uint32).reshape(300, 400) * 7 % 65536).astype(np.uint16))
    assert deep.mode == "I;16"
    out = _decode(encode_image(deep), target=_target(50))  # converted, then reduced by min(400, 300) // 100
    assert out.mode == "RGB" and out.size == (134, 100)  # Pillow rounds up


def test_aspect_ratio_is_checked_before_decoding():
    def refuse(h, w):
        raise ValueError("absolute aspect ratio must be smaller than 200, got 300.0")

    with pytest.raises(ImageLoadError, match="cannot preprocess it: absolute aspect ratio"):
        open_image(encode_image(gradient_image(300, 1)), CAP, refuse)


def test_not_images():
    with pytest.raises(ImageLoadError, match="not a PNG, JPEG, WebP or GIF"):
        open_image(b"hello world, not pixels", CAP)
    bmp = encode_image(gradient_image(8, 8), "BMP")  # a real image, but not an accepted format
    with pytest.raises(ImageLoadError, match="not a PNG, JPEG, WebP or GIF"):
        open_image(bmp, CAP)
    png = encode_image(gradient_image(40, 30))
    with pytest.raises(ImageLoadError, match="corrupt"):
        _decode(png[: len(png) // 2])


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP"])
def test_formats(fmt):
    img = gradient_image(33, 21, seed=3)
    out = _decode(encode_image(img, fmt))
    assert out.mode == "RGB" and out.size == (33, 21)
    if fmt == "PNG":
        np.testing.assert_array_equal(np.asarray(out), np.asarray(img))


def test_gif_first_frame():
    red, blue = Image.new("RGB", (10, 10), (255, 0, 0)), Image.new("RGB", (10, 10), (0, 0, 255))
    gif = encode_image(red, "GIF", save_all=True, append_images=[blue], duration=50)
    out = _decode(gif)
    assert out.mode == "RGB" and out.getpixel((5, 5)) == (255, 0, 0)


def test_modes_become_rgb():
    rgba = Image.new("RGBA", (4, 4), (10, 20, 30, 255))
    rgba.putpixel((0, 0), (10, 20, 30, 0))  # fully transparent: white, as transformers composites it
    out = _decode(encode_image(rgba))
    assert out.getpixel((0, 0)) == (255, 255, 255) and out.getpixel((1, 1)) == (10, 20, 30)
    gray = _decode(encode_image(Image.new("L", (4, 4), 77)))
    assert gray.mode == "RGB" and gray.getpixel((2, 2)) == (77, 77, 77)
    pal = Image.new("P", (4, 4), 1)
    pal.putpalette([0, 0, 0, 200, 100, 50] + [0] * 762)
    assert _decode(encode_image(pal)).getpixel((0, 0)) == (200, 100, 50)
    pal.info["transparency"] = 1
    assert to_rgb(pal).getpixel((0, 0)) == (255, 255, 255)


# ----- issue 27 item 1: tall, thin images -----
def test_aspect_ratio_limit_is_read_from_the_header():
    """A 1 x 200,000 image is refused from its header (these bytes are a header only: decoding
    them would fail), with the limit and its flag named; one at the limit passes."""
    header_only = png_claiming_size(1, 200_000)
    with pytest.raises(ImageLoadError) as refused:
        open_image(header_only, CAP, max_aspect_ratio=200)
    assert str(refused.value) == (
        "the image is 1x200000 pixels, an aspect ratio of 200000:1, over the limit of 200:1 (--mm-max-aspect-ratio)"
    )
    with pytest.raises(ImageLoadError, match=r"400000x2 pixels, an aspect ratio of 200000:1"):
        open_image(png_claiming_size(400_000, 2), CAP, max_aspect_ratio=200)
    with pytest.raises(ImageLoadError, match="201:1, over the limit of 200:1"):
        open_image(encode_image(gradient_image(1, 201)), CAP, max_aspect_ratio=200)
    assert open_image(encode_image(gradient_image(1, 200)), CAP, max_aspect_ratio=200).header_size == (1, 200)
    assert open_image(header_only, CAP).header_size == (1, 200_000)  # no limit given: not checked here


def test_decode_cost_counts_transparency_and_rows():
    """Measured: an opaque image decodes in 8 bytes a pixel and 12 a row (Pillow's row pointers);
    one with transparency is composited onto white through four more images (22 and 40)."""
    assert open_image(encode_image(gradient_image(30, 20)), CAP).decode_cost == 30 * 20 * 8 + 20 * 12
    assert open_image(blank_png(30, 20), CAP).decode_cost == 30 * 20 * 22 + 20 * 40
    pal = Image.new("P", (30, 20), 1)
    pal.info["transparency"] = 1
    assert open_image(encode_image(pal), CAP).decode_cost == 30 * 20 * 22 + 20 * 40


def test_decode_cost_counts_what_the_processor_allocates():
    """The reservation is the decoded image plus the processor's working set, computed for the
    size the processor is given (after any reduction)."""
    seen = []

    def cost(height: int, width: int) -> PreprocessCost:
        seen.append((height, width))
        return PreprocessCost(pixels=height * width, nbytes=1_000_000)

    png = encode_image(gradient_image(500, 400, seed=2))
    plain = open_image(png, CAP, _target(50))
    opened = open_image(png, CAP, _target(50), cost=cost)
    assert opened.reduce == 4 and opened.processed_size == (125, 100) and seen == [(100, 125)]
    assert opened.decode_cost == plain.decode_cost + 1_000_000
    assert decode_image(opened).size == opened.processed_size


def test_pixel_cap_counts_the_resized_image():
    """An image under the cap whose processor would make a larger one is refused from its header."""

    def upscale(height: int, width: int) -> PreprocessCost:
        return PreprocessCost(pixels=height * width * 1024, nbytes=0)

    with pytest.raises(ImageLoadError) as refused:
        open_image(png_claiming_size(1, 2000), 1_000_000, cost=upscale)
    assert str(refused.value) == (
        "the image is 1x2000 pixels, which the model's processor resizes to 2048000 pixels, "
        "over the limit of 1000000 pixels"
    )


def test_a_processor_that_refuses_the_size_is_a_load_error():
    def refuse(height, width):
        raise ValueError("absolute aspect ratio must be smaller than 200, got 300.0")

    with pytest.raises(ImageLoadError, match="cannot preprocess it: absolute aspect ratio"):
        open_image(encode_image(gradient_image(300, 1)), CAP, cost=refuse)


def test_aspect_ratio_message_keeps_one_decimal():
    with pytest.raises(ImageLoadError, match=r"aspect ratio of 3.4:1, over the limit of 2.5:1"):
        open_image(encode_image(gradient_image(17, 5)), CAP, max_aspect_ratio=2.5)


@pytest.mark.parametrize(
    "name",
    ["thin transparent", "thin opaque", "transparent", "opaque"],
)
def test_decode_cost_covers_the_measured_peak(name, tmp_path):
    """The reservation is never short of what decoding really takes (peak RSS of a fresh process
    decoding it: this one's other threads and heap would blur the peak)."""
    data = {
        "thin transparent": lambda: blank_png(1, 1_000_000),
        "thin opaque": lambda: encode_image(gradient_image(1, 1_000_000)),
        "transparent": lambda: encode_image(gradient_image(2000, 2000, mode="RGBA")),
        "opaque": lambda: encode_image(gradient_image(2000, 2000)),
    }[name]()
    path = tmp_path / "image"
    path.write_bytes(data)
    got = measure_decode(str(path), CAP)
    peak, cost = got["measured"], got["estimate"]
    assert got["mode"] == "RGB" and peak <= cost <= 3 * peak + 4_000_000, (peak, cost)
