"""Loading images: every accepted source, every limit, every refusal, and the RGB conversion."""

from __future__ import annotations

import base64
import os

import numpy as np
import pytest
from PIL import Image

from sglang.srt.managers.multimodal.image_fetch import (
    ImageFetchLimits,
    ImageLoadError,
    decode_image,
    load_image,
    to_rgb,
)
from test.helpers.images import ImageServer, data_uri, encode_image, gradient_image, png_claiming_size

PNG = encode_image(gradient_image(40, 30, seed=1))
LIMITS = ImageFetchLimits(timeout=2.0)


def _same_pixels(img: Image.Image, ref: Image.Image) -> None:
    assert img.mode == "RGB" and img.size == ref.size
    np.testing.assert_array_equal(np.asarray(img), np.asarray(ref.convert("RGB")))


@pytest.fixture(scope="module")
def server():
    with ImageServer(
        {
            "/img.png": PNG,
            "/to-img": ("redirect", "/img.png"),
            "/to-https": ("redirect", "https://127.0.0.1:1/img.png"),
            "/to-file": ("redirect", "file:///etc/hostname"),
            "/slow.png": ("slow", 3.0, PNG),
            "/endless.png": ("stream", 4 * 1024 * 1024),
            "/declared-huge.png": ("declare", 10**9),
            "/gone.png": 404,
            "/text": b"this is not an image",
        }
    ) as s:
        yield s


def test_data_uri_and_bare_base64():
    ref = Image.open(__import__("io").BytesIO(PNG))
    _same_pixels(load_image(data_uri(PNG), LIMITS), ref)
    _same_pixels(load_image(base64.b64encode(PNG).decode(), LIMITS), ref)
    _same_pixels(load_image(base64.urlsafe_b64encode(PNG).decode().rstrip("="), LIMITS), ref)
    # Line breaks inside base64 (as some encoders write it) are fine.
    wrapped = base64.encodebytes(PNG).decode()
    _same_pixels(load_image("data:image/png;base64," + wrapped, LIMITS), ref)


def test_url_and_same_scheme_redirect(server):
    ref = Image.open(__import__("io").BytesIO(PNG))
    _same_pixels(load_image(server.url("/img.png"), LIMITS), ref)
    _same_pixels(load_image(server.url("/to-img"), LIMITS), ref)


@pytest.mark.parametrize(
    "path, message",
    [
        ("/to-https", "redirect from http to https URL refused"),
        ("/to-file", "redirect from http to file URL refused"),
        ("/gone.png", "answered HTTP 404"),
        ("/text", "not a PNG, JPEG, WebP or GIF image"),
    ],
)
def test_url_refusals(server, path, message):
    with pytest.raises(ImageLoadError, match=message):
        load_image(server.url(path), LIMITS)


def test_url_limits(server):
    with pytest.raises(ImageLoadError, match="took longer than 0.5 s"):
        load_image(server.url("/slow.png"), ImageFetchLimits(timeout=0.5))
    with pytest.raises(ImageLoadError, match="over the limit of 1000000 bytes"):
        load_image(server.url("/endless.png"), ImageFetchLimits(max_bytes=10**6))
    with pytest.raises(ImageLoadError, match="is 1000000000 bytes, over the limit"):
        load_image(server.url("/declared-huge.png"), LIMITS)


def test_unreachable_and_unsupported_schemes():
    with pytest.raises(ImageLoadError, match="cannot reach http://127.0.0.1:1/x.png"):
        load_image("http://127.0.0.1:1/x.png", LIMITS)
    with pytest.raises(ImageLoadError, match="unsupported URL scheme 'ftp'"):
        load_image("ftp://example.com/x.png", LIMITS)
    with pytest.raises(ImageLoadError, match="empty string"):
        load_image("   ", LIMITS)


def test_local_paths(tmp_path):
    root = tmp_path / "media"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.png").write_bytes(PNG)
    outside = tmp_path / "secret.png"
    outside.write_bytes(PNG)
    os.symlink(outside, root / "link.png")
    allowed = ImageFetchLimits(allowed_local_dir=str(root))
    ref = Image.open(__import__("io").BytesIO(PNG))
    _same_pixels(load_image(str(root / "sub" / "a.png"), allowed), ref)
    _same_pixels(load_image("sub/a.png", allowed), ref)  # relative to the allowed directory
    _same_pixels(load_image((root / "sub" / "a.png").as_uri(), allowed), ref)
    for escape in (str(outside), "sub/../../secret.png", str(root / "link.png")):
        with pytest.raises(ImageLoadError, match="outside --allowed-local-media-path"):
            load_image(escape, allowed)
    with pytest.raises(ImageLoadError, match="no such file"):
        load_image(str(root / "missing.png"), allowed)
    with pytest.raises(ImageLoadError, match="over the limit of 100 bytes"):
        load_image(str(root / "sub" / "a.png"), ImageFetchLimits(allowed_local_dir=str(root), max_bytes=100))
    # Off by default: the file exists, but no path is read.
    with pytest.raises(ImageLoadError, match="local file paths are disabled"):
        load_image(str(root / "sub" / "a.png"), LIMITS)


def test_byte_and_pixel_limits():
    with pytest.raises(ImageLoadError, match="over the limit of 64 bytes"):
        load_image(data_uri(PNG), ImageFetchLimits(max_bytes=64))
    bomb = png_claiming_size(9000, 9000)  # under Pillow's own warning threshold, over ours
    assert len(bomb) < 100
    with pytest.raises(ImageLoadError, match="9000x9000 pixels, over the limit of 67108864 pixels"):
        load_image(data_uri(bomb), LIMITS)
    with pytest.raises(ImageLoadError, match="too many pixels"):  # Pillow's own bomb check comes first here
        load_image(data_uri(png_claiming_size(100000, 100000)), LIMITS)
    with pytest.raises(ImageLoadError, match="over the limit of 1000 pixels"):
        load_image(data_uri(PNG), ImageFetchLimits(max_pixels=1000))


def test_not_images():
    with pytest.raises(ImageLoadError, match="invalid base64"):
        load_image("data:image/png;base64,@@@@", LIMITS)
    with pytest.raises(ImageLoadError, match="not a PNG, JPEG, WebP or GIF"):
        load_image(data_uri(b"hello world, not pixels"), LIMITS)
    bmp = encode_image(gradient_image(8, 8), "BMP")  # a real image, but not an accepted format
    with pytest.raises(ImageLoadError, match="not a PNG, JPEG, WebP or GIF"):
        load_image(data_uri(bmp, "image/bmp"), LIMITS)
    with pytest.raises(ImageLoadError, match="corrupt"):
        load_image(data_uri(PNG[: len(PNG) // 2]), LIMITS)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP"])
def test_formats(fmt):
    img = gradient_image(33, 21, seed=3)
    out = decode_image(encode_image(img, fmt), LIMITS)
    assert out.mode == "RGB" and out.size == (33, 21)
    if fmt == "PNG":
        _same_pixels(out, img)


def test_gif_first_frame():
    red, blue = Image.new("RGB", (10, 10), (255, 0, 0)), Image.new("RGB", (10, 10), (0, 0, 255))
    gif = encode_image(red, "GIF", save_all=True, append_images=[blue], duration=50)
    out = decode_image(gif, LIMITS)
    assert out.mode == "RGB" and out.getpixel((5, 5)) == (255, 0, 0)


def test_modes_become_rgb():
    rgba = Image.new("RGBA", (4, 4), (10, 20, 30, 255))
    rgba.putpixel((0, 0), (10, 20, 30, 0))  # fully transparent: white, as transformers composites it
    out = decode_image(encode_image(rgba), LIMITS)
    assert out.getpixel((0, 0)) == (255, 255, 255) and out.getpixel((1, 1)) == (10, 20, 30)
    gray = decode_image(encode_image(Image.new("L", (4, 4), 77)), LIMITS)
    assert gray.mode == "RGB" and gray.getpixel((2, 2)) == (77, 77, 77)
    pal = Image.new("P", (4, 4), 1)
    pal.putpalette([0, 0, 0, 200, 100, 50] + [0] * 762)
    assert decode_image(encode_image(pal), LIMITS).getpixel((0, 0)) == (200, 100, 50)
    pal.info["transparency"] = 1
    assert to_rgb(pal).getpixel((0, 0)) == (255, 255, 255)
