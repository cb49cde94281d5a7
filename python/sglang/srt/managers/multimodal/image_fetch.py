"""Load one image from what a request names: http(s) URL, data URI, bare base64, or local path.

Everything here is blocking (sockets, file reads, decoding) and meant for a worker thread; the
tokenizer manager's event loop never runs it. Every source is bounded: a total time limit and a
byte limit while reading, a pixel limit checked from the header before any decoding (decompression
bombs), redirects only within the same scheme, only PNG / JPEG / WebP / GIF decoders, and local
files only under --allowed-local-media-path (resolved, so `..` and symlinks cannot leave it).
"""

from __future__ import annotations

import base64
import binascii
import io
import os
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Optional

from PIL import Image

IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "GIF")
_BASE64 = re.compile(r"[A-Za-z0-9+/_\-]+={0,2}")
_CHUNK = 1 << 16


class ImageLoadError(Exception):
    """Why an image could not be loaded; the message is written for the client."""


@dataclass(frozen=True)
class ImageFetchLimits:
    timeout: float = 10.0  # seconds for a whole URL fetch (connect, redirects, body)
    max_bytes: int = 20 * 1024 * 1024  # encoded size, any source
    max_pixels: int = 8192 * 8192  # width * height before decoding
    allowed_local_dir: Optional[str] = None  # None: local paths refused
    max_redirects: int = 5


def load_image(source: str, limits: ImageFetchLimits) -> Image.Image:
    """The image `source` names, decoded and converted to RGB. Raises ImageLoadError."""
    return decode_image(read_image_bytes(source, limits), limits)


def read_image_bytes(source: str, limits: ImageFetchLimits) -> bytes:
    s = source.strip()
    if not s:
        raise ImageLoadError("the image is an empty string")
    head = s[:16].lower()
    if head.startswith(("http://", "https://")):
        return fetch_url(s, limits)
    if head.startswith("data:"):
        return _from_data_uri(s, limits)
    if head.startswith("file://"):
        return read_local_file(urllib.parse.unquote(urllib.parse.urlsplit(s).path), limits)
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.\-]*)://", s[:40])
    if scheme:
        raise ImageLoadError(f"unsupported URL scheme '{scheme.group(1)}' (use http, https, data or file)")
    compact = re.sub(r"\s+", "", s)
    if len(compact) >= 16 and _BASE64.fullmatch(compact):
        try:
            return _decode_base64(compact, limits)
        except ImageLoadError:
            if not _looks_like_path(s):
                raise
    return read_local_file(s, limits)


def _looks_like_path(s: str) -> bool:
    return s.startswith(("/", "./", "../", "~")) or "." in os.path.basename(s)


# ----- URLs -----
class _SameSchemeRedirects(urllib.request.HTTPRedirectHandler):
    """Follow redirects only to the scheme we started with (no https -> http downgrade, no file://)."""

    def __init__(self, max_redirects: int) -> None:
        super().__init__()
        self.max_redirections = max_redirects

    def http_error_302(self, req, fp, code, msg, headers):
        location = headers.get("location") or headers.get("uri")
        if location:
            old = urllib.parse.urlsplit(req.full_url).scheme.lower()
            new = urllib.parse.urlsplit(urllib.parse.urljoin(req.full_url, location)).scheme.lower()
            if old != new:
                fp.close()
                raise ImageLoadError(f"redirect from {old} to {new} URL refused")
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


def fetch_url(url: str, limits: ImageFetchLimits) -> bytes:
    opener = urllib.request.build_opener(_SameSchemeRedirects(limits.max_redirects))
    request = urllib.request.Request(url, headers={"User-Agent": "sglang-embed", "Accept": "image/*"})
    deadline = time.monotonic() + limits.timeout
    try:
        with opener.open(request, timeout=limits.timeout) as resp:
            declared = resp.headers.get("Content-Length")
            if declared and declared.isdigit() and int(declared) > limits.max_bytes:
                raise ImageLoadError(f"the image is {int(declared)} bytes, over the limit of {limits.max_bytes} bytes")
            chunks, size = [], 0
            while True:
                if time.monotonic() > deadline:
                    raise ImageLoadError(f"fetching the image took longer than {limits.timeout:g} s")
                chunk = resp.read(_CHUNK)
                if not chunk:
                    break
                size += len(chunk)
                if size > limits.max_bytes:
                    raise ImageLoadError(f"the image is over the limit of {limits.max_bytes} bytes")
                chunks.append(chunk)
            return b"".join(chunks)
    except ImageLoadError:
        raise
    except urllib.error.HTTPError as e:
        raise ImageLoadError(f"{_short(url)} answered HTTP {e.code}") from None
    except urllib.error.URLError as e:
        if isinstance(e.reason, ImageLoadError):
            raise e.reason from None
        if isinstance(e.reason, (socket.timeout, TimeoutError)):
            raise ImageLoadError(f"fetching the image took longer than {limits.timeout:g} s") from None
        raise ImageLoadError(f"cannot reach {_short(url)}: {e.reason}") from None
    except (socket.timeout, TimeoutError):
        raise ImageLoadError(f"fetching the image took longer than {limits.timeout:g} s") from None
    except (OSError, ValueError) as e:  # connection reset, malformed URL or response
        raise ImageLoadError(f"cannot fetch {_short(url)}: {e}") from None


def _short(url: str, n: int = 100) -> str:
    return url if len(url) <= n else url[: n - 3] + "..."


# ----- data URIs and base64 -----
def _from_data_uri(uri: str, limits: ImageFetchLimits) -> bytes:
    header, sep, payload = uri.partition(",")
    if not sep:
        raise ImageLoadError("malformed data URI (no ',')")
    if header.lower().endswith(";base64"):
        return _decode_base64(re.sub(r"\s+", "", payload), limits)
    data = urllib.parse.unquote_to_bytes(payload)
    if len(data) > limits.max_bytes:
        raise ImageLoadError(f"the image is {len(data)} bytes, over the limit of {limits.max_bytes} bytes")
    return data


def _decode_base64(text: str, limits: ImageFetchLimits) -> bytes:
    if len(text) * 3 // 4 > limits.max_bytes + 2:  # judge by size before decoding
        raise ImageLoadError(
            f"the image is about {len(text) * 3 // 4} bytes, over the limit of {limits.max_bytes} bytes"
        )
    text = text.replace("-", "+").replace("_", "/")  # URL-safe alphabet too
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ImageLoadError("invalid base64 image data") from None


# ----- local files -----
def read_local_file(path: str, limits: ImageFetchLimits) -> bytes:
    if limits.allowed_local_dir is None:
        raise ImageLoadError("local file paths are disabled (start the server with --allowed-local-media-path DIR)")
    root = os.path.realpath(limits.allowed_local_dir)
    candidate = os.path.expanduser(path)
    real = os.path.realpath(candidate if os.path.isabs(candidate) else os.path.join(root, candidate))
    if os.path.commonpath([root, real]) != root:
        raise ImageLoadError("the path is outside --allowed-local-media-path")
    try:
        size = os.stat(real).st_size
        if size > limits.max_bytes:
            raise ImageLoadError(f"the image is {size} bytes, over the limit of {limits.max_bytes} bytes")
        with open(real, "rb") as f:
            return f.read(limits.max_bytes + 1)
    except FileNotFoundError:
        raise ImageLoadError("no such file under --allowed-local-media-path") from None
    except IsADirectoryError:
        raise ImageLoadError("the path is a directory") from None
    except PermissionError:
        raise ImageLoadError("the file is not readable") from None


# ----- decoding -----
def decode_image(data: bytes, limits: ImageFetchLimits) -> Image.Image:
    """Bytes -> RGB image: format and size checked from the header before the pixels are decoded."""
    try:
        img = Image.open(io.BytesIO(data), formats=IMAGE_FORMATS)
    except Image.DecompressionBombError as e:
        raise ImageLoadError(f"the image has too many pixels ({e})") from None
    except (Image.UnidentifiedImageError, OSError, SyntaxError, ValueError):
        raise ImageLoadError("the data is not a PNG, JPEG, WebP or GIF image") from None
    width, height = img.size
    if width < 1 or height < 1:
        raise ImageLoadError(f"the image is empty ({width}x{height})")
    if width * height > limits.max_pixels:
        raise ImageLoadError(f"the image is {width}x{height} pixels, over the limit of {limits.max_pixels} pixels")
    try:
        img.seek(0)  # animated GIF / WebP: the first frame
        img.load()
        return to_rgb(img)
    except (OSError, SyntaxError, ValueError, EOFError) as e:
        raise ImageLoadError(f"the image data is corrupt ({e})") from None


def to_rgb(img: Image.Image) -> Image.Image:
    """RGB, with any transparency composited onto white (as transformers' convert_to_rgb does)."""
    if img.mode == "RGB":
        return img
    if img.has_transparency_data:  # an alpha band (RGBA, LA, PA) or a transparent palette entry
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return img.convert("RGB")
