"""Image strings: what each names, the checks before anything is read, and reading inline data and
local files, where no message may reveal a server path."""

from __future__ import annotations

import base64
import os

import pytest

from sglang.srt.frontend.multimodal.image_errors import ImageLoadError
from sglang.srt.frontend.multimodal.image_source import (
    FileSource,
    InlineSource,
    UrlSource,
    parse_image_source,
    read_local_file,
    read_source_bytes,
)
from test.helpers.images import data_uri, encode_image, gradient_image

PNG = encode_image(gradient_image(40, 30, seed=1))
MAX = 20 * 1024 * 1024


def _bytes(source: str, allowed_dir=None, max_bytes: int = MAX) -> bytes:
    return read_source_bytes(parse_image_source(source), allowed_dir, max_bytes)


def test_data_uri_and_bare_base64():
    assert _bytes(data_uri(PNG)) == PNG
    assert _bytes(base64.b64encode(PNG).decode()) == PNG
    assert _bytes(base64.urlsafe_b64encode(PNG).decode().rstrip("=")) == PNG
    assert _bytes("data:image/png;base64," + base64.encodebytes(PNG).decode()) == PNG  # line breaks
    assert _bytes("data:image/png," + "".join(f"%{b:02x}" for b in PNG[:20])) == PNG[:20]


def test_urls_are_normalized():
    src = parse_image_source("HTTPS://Images.Example.COM/a/b%20c.png?x=1")
    assert src == UrlSource(
        "https://images.example.com/a/b%20c.png?x=1", "https", "images.example.com", 443, "/a/b%20c.png?x=1"
    )
    src = parse_image_source("http://bücher.example:8080/kätzchen.png")
    assert src.host == "xn--bcher-kva.example" and src.port == 8080 and src.target == "/k%C3%A4tzchen.png"
    assert src.host_header == "xn--bcher-kva.example:8080"
    src = parse_image_source("http://[::1]:9000")
    assert (src.host, src.target, src.host_header) == ("::1", "/", "[::1]:9000")


def test_kinds():
    assert isinstance(parse_image_source("/srv/media/a.png"), FileSource)
    assert isinstance(parse_image_source("sub/a.png"), FileSource)
    assert parse_image_source("file:///srv/media/a%20b.png") == FileSource("/srv/media/a b.png")
    assert isinstance(parse_image_source(data_uri(PNG)), InlineSource)
    with pytest.raises(ImageLoadError, match="unsupported URL scheme 'ftp'"):
        parse_image_source("ftp://example.com/x.png")
    with pytest.raises(ImageLoadError, match="empty string"):
        parse_image_source("   ")


# Item 4 of issue 15: each of these was a 500 (or leaked the path); all must be 400s.
MALFORMED = {
    "nul_in_path": ("ok.png\u0000", "contains a NUL character"),
    "nul_in_file_uri": ("file:///%00", "contains a NUL character"),
    "nul_in_url": ("http://example.com/a\u0000.png", "contains a NUL character"),
    "space_in_url": ("http://example.com/a b.png", "space or a control character"),
    "tab_in_url": ("http://example.com/\ta.png", "space or a control character"),
    "newline_in_host": ("http://exa\nmple.com/a.png", "space or a control character"),
    "c1_control_in_url": ("http://example.com/\u0085.png", "space or a control character"),
    "broken_ipv6": ("http://[::1/x", "malformed"),
    "bad_port": ("http://example.com:99999/a.png", "malformed"),
    "text_port": ("http://example.com:http/a.png", "malformed"),
    "credentials": ("http://user:pw@example.com/a.png", "credentials"),
    "no_host": ("http:///a.png", "no host"),
    "bad_host": ("http://exa$mple.com/a.png", "not a valid domain name"),
    "empty_label": ("http://images..example.com/a.png", "not a valid domain name"),
    "long_label": ("http://" + "a" * 64 + ".example.com/a.png", "not a valid domain name"),
    "lone_surrogate_path": ("cat\ud800.png", "not valid Unicode"),
    "lone_surrogate_url": ("http://example.com/\udfff.png", "not valid Unicode"),
    "escaped_bad_utf8": ("file:///%ff%fe.png", "not valid UTF-8"),
    "long_path": ("/" + "a" * 5000 + ".png", "too long"),
    "long_name": ("dir/" + "b" * 300 + ".png", "too long"),
    "long_url": ("http://example.com/" + "c" * 9000, "longer than 8192 characters"),
    "remote_file_uri": ("file://fileserver/share/a.png", "must name a local file"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_strings_are_refused_upfront(name):
    source, message = MALFORMED[name]
    with pytest.raises(ImageLoadError, match=message):
        parse_image_source(source)


def test_local_paths(tmp_path):
    root = tmp_path / "media"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.png").write_bytes(PNG)
    outside = tmp_path / "secret.png"
    outside.write_bytes(PNG)
    os.symlink(outside, root / "link.png")
    os.symlink(root / "loop", root / "loop")
    allowed = str(root)
    assert _bytes(str(root / "sub" / "a.png"), allowed) == PNG
    assert _bytes("sub/a.png", allowed) == PNG  # relative to the allowed directory
    assert _bytes((root / "sub" / "a.png").as_uri(), allowed) == PNG
    cases = {
        str(outside): "outside --allowed-local-media-path",
        "sub/../../secret.png": "outside --allowed-local-media-path",
        str(root / "link.png"): "outside --allowed-local-media-path",
        str(root / "missing.png"): "no such file",
        "sub": "not a file",
        "sub/a.png/x.png": "not a file",
        "loop": "cannot be read",
    }
    for path, message in cases.items():
        with pytest.raises(ImageLoadError, match=message) as err:
            _bytes(path, allowed)
        assert str(tmp_path) not in str(err.value)  # never the server's paths
    with pytest.raises(ImageLoadError, match="over the limit of 100 bytes"):
        _bytes(str(root / "sub" / "a.png"), allowed, max_bytes=100)
    with pytest.raises(ImageLoadError, match="local file paths are disabled"):
        read_local_file(str(root / "sub" / "a.png"), None, MAX)


def test_inline_limits_and_garbage():
    with pytest.raises(ImageLoadError, match="over the limit of 64 bytes"):
        _bytes(data_uri(PNG), max_bytes=64)
    with pytest.raises(ImageLoadError, match="invalid base64"):
        _bytes("data:image/png;base64,@@@@")
    with pytest.raises(ImageLoadError, match="malformed data URI"):
        parse_image_source("data:image/png;base64")
