"""What an image string names, checked before anything is read: a URL, inline data, or a file.

`parse_image_source` runs on the event loop (cheap string checks only), so a malformed string is
refused at once with a 400 whose message never echoes a server path: NUL bytes, lone surrogates,
control characters or spaces in a URL, a broken IPv6 host, credentials in a URL, over-long
strings. Reading inline data (base64) and local files is blocking and done in a worker thread
(`read_source_bytes`); local files only under --allowed-local-media-path (resolved, so `..` and
symlinks cannot leave it). URLs are fetched by http_fetch.py.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import urllib.parse
from dataclasses import dataclass
from typing import Optional, Union

from sglang.srt.frontend.multimodal.image_errors import ImageLoadError
from sglang.srt.frontend.multimodal.url_guard import UrlRefused, normalize_host

_BASE64 = re.compile(r"[A-Za-z0-9+/_\-]+={0,2}")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_UNSAFE_IN_URL = re.compile(r"[\x00-\x20\x7f-\x9f]")  # controls and spaces (C0, DEL, C1)
MAX_URL_CHARS = 8192
MAX_PATH_BYTES = 4096  # PATH_MAX on Linux
MAX_NAME_BYTES = 255  # NAME_MAX
DEFAULT_PORTS = {"http": 80, "https": 443}
LOCAL_FILES_DISABLED = "local file paths are disabled (start the server with --allowed-local-media-path DIR)"


@dataclass(frozen=True)
class UrlSource:
    url: str  # as checked and normalized (ASCII, percent-encoded)
    scheme: str  # http or https
    host: str  # lower case, IDNA, IPv6 without brackets
    port: int
    target: str  # path and query, for the request line

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"


@dataclass(frozen=True)
class InlineSource:
    text: str  # base64 text (data URI payload or bare), or percent-encoded bytes
    is_base64: bool = True
    path_fallback: Optional[str] = None  # bare strings that may also be a file name


@dataclass(frozen=True)
class FileSource:
    path: str  # as the client wrote it: absolute, or relative to --allowed-local-media-path


ImageSource = Union[UrlSource, InlineSource, FileSource]


def parse_image_source(source: str) -> ImageSource:
    """Classify and check an image string; raises ImageLoadError with a message for the client."""
    _check_text(source)
    s = source.strip()
    if not s:
        raise ImageLoadError("the image is an empty string")
    scheme = _SCHEME.match(s[:40])
    name = scheme.group(1).lower() if scheme else ""
    if name in ("http", "https") and s[len(name) : len(name) + 3] == "://":
        return parse_url(s)
    if name == "data":
        return _parse_data_uri(s)
    if name == "file" and s[4:7] == "://":
        return FileSource(_file_uri_path(s))
    if scheme and s[scheme.end() : scheme.end() + 2] == "//":
        raise ImageLoadError(f"unsupported URL scheme '{name[:20]}' (use http, https, data or file)")
    compact = re.sub(r"\s+", "", s)
    if len(compact) >= 16 and _BASE64.fullmatch(compact):
        # A long base64-looking string is data; one that also looks like a path ("/9j/..." is
        # how JPEG base64 starts) is read as a file when it does not decode.
        return InlineSource(compact, path_fallback=s if _looks_like_path(s) else None)
    _check_path(s)
    return FileSource(s)


def _check_text(s: str) -> None:
    if not s.isascii():
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:  # JSON "\ud800" escapes decode to lone surrogates
            raise ImageLoadError("the image string is not valid Unicode (it holds a lone surrogate)") from None
    if "\x00" in s:
        raise ImageLoadError("the image string contains a NUL character")


def _looks_like_path(s: str) -> bool:
    return s.startswith(("/", "./", "../", "~")) or "." in os.path.basename(s)


# ----- URLs -----
def parse_url(url: str) -> UrlSource:
    """An http(s) URL checked and normalized for the request line; ImageLoadError if malformed."""
    if len(url) > MAX_URL_CHARS:
        raise ImageLoadError(f"the image URL is longer than {MAX_URL_CHARS} characters")
    if _UNSAFE_IN_URL.search(url):
        raise ImageLoadError("the image URL contains a space or a control character (percent-encode it)")
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
        raw_host = parts.hostname
    except ValueError:  # "http://[::1/x", a port out of range or not a number
        raise ImageLoadError("the image URL is malformed (its host or port is not valid)") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise ImageLoadError(f"unsupported URL scheme '{scheme[:20]}' (use http, https, data or file)")
    if parts.username is not None or parts.password is not None:
        raise ImageLoadError("credentials in image URLs (user:password@) are not supported")
    if not raw_host:
        raise ImageLoadError("the image URL has no host")
    try:
        host = normalize_host(raw_host)
    except UrlRefused:
        raise ImageLoadError("the image URL's host is not a valid domain name") from None
    if not _valid_host(host):
        raise ImageLoadError("the image URL's host is not a valid domain name")
    path = _requote(parts.path or "/")
    target = path + ("?" + _requote(parts.query) if parts.query else "")
    port = port or DEFAULT_PORTS[scheme]
    netloc = (f"[{host}]" if ":" in host else host) + ("" if port == DEFAULT_PORTS[scheme] else f":{port}")
    return UrlSource(urllib.parse.urlunsplit((scheme, netloc, target, "", "")), scheme, host, port, target)


def _valid_host(host: str) -> bool:
    if ":" in host:  # an IPv6 literal, which urlsplit has checked
        return bool(re.fullmatch(r"[0-9a-f:.]+(%[0-9A-Za-z._\-%]+)?", host))
    labels = host.split(".")
    return len(host) <= 253 and all(0 < len(label) <= 63 and re.fullmatch(r"[a-z0-9_\-]+", label) for label in labels)


def _requote(part: str) -> str:
    """Percent-encode what may not appear in a request line (non-ASCII), keeping existing escapes."""
    return urllib.parse.quote(part, safe="!#$%&'()*+,/:;=?@[]~-._")


# ----- data URIs and base64 -----
def _parse_data_uri(uri: str) -> InlineSource:
    header, sep, payload = uri.partition(",")
    if not sep:
        raise ImageLoadError("malformed data URI (no ',')")
    if header.lower().endswith(";base64"):
        return InlineSource(re.sub(r"\s+", "", payload))
    return InlineSource(payload, is_base64=False)


def _decode_base64(text: str, max_bytes: Optional[int]) -> bytes:
    if max_bytes is not None and len(text) * 3 // 4 > max_bytes + 2:  # judge by size before decoding
        raise ImageLoadError(f"the image is about {len(text) * 3 // 4} bytes, over the limit of {max_bytes} bytes")
    text = text.replace("-", "+").replace("_", "/")  # URL-safe alphabet too
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ImageLoadError("invalid base64 image data") from None


def read_inline(source: InlineSource, max_bytes: int) -> bytes:
    if source.is_base64:
        return _decode_base64(source.text, max_bytes)
    data = urllib.parse.unquote_to_bytes(source.text)
    if len(data) > max_bytes:
        raise ImageLoadError(f"the image is {len(data)} bytes, over the limit of {max_bytes} bytes")
    return data


def read_source_bytes(source: Union[InlineSource, FileSource], allowed_dir: Optional[str], max_bytes: int) -> bytes:
    """Inline data decoded, or a local file read (blocking: call it in a worker thread)."""
    if isinstance(source, FileSource):
        return read_local_file(source.path, allowed_dir, max_bytes)
    try:
        return read_inline(source, max_bytes)
    except ImageLoadError:
        if source.path_fallback is None:
            raise
    return read_local_file(source.path_fallback, allowed_dir, max_bytes)


# ----- local files -----
def _file_uri_path(uri: str) -> str:
    try:
        parts = urllib.parse.urlsplit(uri)
    except ValueError:
        raise ImageLoadError("the file URI is malformed") from None
    if parts.netloc not in ("", "localhost"):
        raise ImageLoadError("file URIs must name a local file (file:///path)")
    try:
        path = urllib.parse.unquote(parts.path, errors="strict")
    except UnicodeDecodeError:
        raise ImageLoadError("the file URI's path is not valid UTF-8") from None
    _check_text(path)  # "%00" and lone surrogates from escapes
    _check_path(path)
    return path


def _check_path(path: str) -> None:
    try:
        raw = os.fsencode(path)
    except UnicodeError:
        raise ImageLoadError("the image path is not valid Unicode") from None
    if len(raw) > MAX_PATH_BYTES or any(len(part) > MAX_NAME_BYTES for part in raw.split(b"/")):
        raise ImageLoadError("the image path is too long")


def read_local_file(path: str, allowed_dir: Optional[str], max_bytes: int) -> bytes:
    """The file's bytes when it lies under `allowed_dir`; messages never name the server's paths."""
    if allowed_dir is None:
        raise ImageLoadError(LOCAL_FILES_DISABLED)
    _check_path(path)
    try:
        root = os.path.realpath(allowed_dir)
        candidate = os.path.expanduser(path)
        real = os.path.realpath(candidate if os.path.isabs(candidate) else os.path.join(root, candidate))
        if os.path.commonpath([root, real]) != root:
            raise ImageLoadError("the path is outside --allowed-local-media-path")
        size = os.stat(real).st_size
        if size > max_bytes:
            raise ImageLoadError(f"the image is {size} bytes, over the limit of {max_bytes} bytes")
        with open(real, "rb") as f:
            return f.read(max_bytes + 1)
    except FileNotFoundError:
        raise ImageLoadError("no such file under --allowed-local-media-path") from None
    except (IsADirectoryError, NotADirectoryError):
        raise ImageLoadError("the path is not a file under --allowed-local-media-path") from None
    except PermissionError:
        raise ImageLoadError("the file is not readable") from None
    except (OSError, ValueError):  # ENAMETOOLONG, ELOOP, ...: the exception text would name the path
        raise ImageLoadError("the file cannot be read") from None
