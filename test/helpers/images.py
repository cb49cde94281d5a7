"""Test images made with PIL, data URIs, a PNG whose header claims a huge size, and a local HTTP
server (127.0.0.1 or another loopback address, in a thread) that serves images, redirects, slow,
dripping and oversized answers, and counts the connections it is serving."""

from __future__ import annotations

import base64
import io
import struct
import threading
import time
import zlib
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional, Union

import numpy as np
from PIL import Image

from test.helpers.waiting import wait_until


def gradient_image(width: int, height: int, seed: int = 0, mode: str = "RGB") -> Image.Image:
    """A colour gradient with a little noise (so resizing and patches are not trivial)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 // max(1, width - 1), y * 255 // max(1, height - 1), (x + y) % 256], -1)
    img = Image.fromarray(np.clip(base + rng.integers(0, 40, size=base.shape), 0, 255).astype(np.uint8), "RGB")
    return img if mode == "RGB" else img.convert(mode)


def encode_image(img: Image.Image, fmt: str = "PNG", **save_kwargs) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **save_kwargs)
    return buf.getvalue()


def data_uri(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def png_claiming_size(width: int, height: int) -> bytes:
    """A tiny PNG whose IHDR says width x height: a decompression bomb's header, a few bytes long."""
    png = encode_image(Image.new("L", (1, 1)))
    ihdr_at = 8  # after the signature: length(4) type(4) data(13) crc(4)
    data = struct.pack(">II", width, height) + png[ihdr_at + 16 : ihdr_at + 21]
    chunk = b"IHDR" + data
    return png[:ihdr_at] + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk)) + png[ihdr_at + 25 :]


def blank_png(width: int, height: int) -> bytes:
    """A fully transparent RGBA PNG, compressed row by row: 8000 x 8000 is ~250 KB, made in a
    second, and decodes to 256 MB (the issue's memory probe)."""
    raw = zlib.compressobj(9)
    row = b"\0" * (1 + 4 * width)  # filter byte, then RGBA zeros
    idat = b"".join(raw.compress(row) for _ in range(height)) + raw.flush()

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)  # 8-bit RGBA
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


# Image strings that were 500s or leaked paths (issue 15, item 4), plus path escapes: all must be
# 400s that name no server path (a server with --allowed-local-media-path reads them).
HOSTILE_IMAGE_STRINGS = [
    "ok.png\u0000",
    "cat.png\u0000.jpg",
    "file:///%00",
    "file:///%00/../../etc/passwd",
    "http://example.com/a b.png",
    "http://example.com/\u0001.png",
    "http://exa mple.com/a.png",
    "http://[::1/x",
    "http://[::1]:99999/x",
    "cat\ud800.png",
    "http://example.com/\udc00.png",
    "/" + "a" * 5000 + ".png",
    "x/" + "b" * 300 + ".png",
    "http://example.com/" + "c" * 9000,
    "http://user:pw@example.com/a.png",
    "file://other-host/etc/passwd",
    "../../../../etc/passwd.png",
    "/etc/passwd.png",
    "sub/../../cat.png",
]


# A route's answer: bytes (200, image/png), ("redirect", location), ("slow", seconds, bytes),
# ("stream", n_bytes) without Content-Length, ("declare", n_bytes) with a Content-Length it never
# sends, ("drip", seconds, n_bytes): headers, then one byte every `seconds` (an attacker's
# host), ("drip_headers", seconds): the status line one byte at a time, ("stall", n_bytes,
# seconds): n_bytes of a longer body, then nothing for `seconds`, or an int status with an empty
# body.
Route = Union[bytes, tuple, int]


class ImageServer:
    def __init__(self, routes: dict[str, Route], host: str = "127.0.0.1") -> None:
        self.routes = routes
        self.host = host
        self._open: Counter[str] = Counter()  # requests being answered right now, by path and query
        self.requests: list[tuple[str, str]] = []  # (path, Host header) of every request
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                with server._lock:
                    server._open[self.path] += 1
                    server.requests.append((self.path, self.headers.get("Host", "")))
                try:
                    server.handle(self)
                finally:
                    with server._lock:
                        server._open[self.path] -= 1

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str, host: str = "") -> str:
        return f"http://{host or self.host}:{self.port}{path}"

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        answer = self.routes.get(h.path.split("?")[0], 404)
        if isinstance(answer, int):
            h.send_response(answer)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        if isinstance(answer, tuple) and answer[0] == "redirect":
            h.send_response(302)
            h.send_header("Location", answer[1])
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        if isinstance(answer, tuple) and answer[0] in ("drip", "drip_headers"):
            _drip(h, answer)
            return
        if isinstance(answer, tuple) and answer[0] == "stall":
            h.send_response(200)
            h.send_header("Content-Length", str(answer[1] + 1))
            h.end_headers()
            try:
                h.wfile.write(b"\0" * answer[1])
                h.wfile.flush()
                time.sleep(answer[2])
            except (BrokenPipeError, ConnectionResetError):
                pass
            h.close_connection = True
            return
        if isinstance(answer, tuple) and answer[0] == "slow":
            time.sleep(answer[1])
            answer = answer[2]
        if isinstance(answer, tuple) and answer[0] in ("stream", "declare"):
            h.send_response(200)
            h.send_header("Content-Type", "image/png")
            if answer[0] == "declare":
                h.send_header("Content-Length", str(answer[1]))
            h.end_headers()
            try:
                for _ in range(0 if answer[0] == "declare" else answer[1] // 65536 + 1):
                    h.wfile.write(b"\0" * 65536)
            except (BrokenPipeError, ConnectionResetError):  # the client stopped reading: as intended
                pass
            return
        h.send_response(200)
        h.send_header("Content-Type", "image/png")
        h.send_header("Content-Length", str(len(answer)))
        h.end_headers()
        try:
            h.wfile.write(answer)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def open_to(self, path: Optional[str] = None) -> int:
        """Requests being answered now: all of them, or those for `path` (query included).

        A test that counts connections asks for its own query-tagged path, so a connection an
        earlier test's cancelled fetch left in the listen backlog (served late, on a busy machine)
        cannot be counted as its own."""
        with self._lock:
            return sum(self._open.values()) if path is None else self._open[path]

    @property
    def open_connections(self) -> int:
        return self.open_to()

    def wait_idle(self, timeout: float, path: Optional[str] = None) -> bool:
        """Whether every connection being served (for `path`, if given) has ended within `timeout` s."""
        return wait_until(lambda: self.open_to(path) == 0, timeout, interval=0.05)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "ImageServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _drip(h: BaseHTTPRequestHandler, answer: tuple) -> None:
    """Send slowly until the client goes away (a write then fails) or the answer is done."""
    interval = answer[1]
    if answer[0] == "drip":
        head = f"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: {answer[2]}\r\n\r\n".encode()
        body = b"\0" * answer[2]
    else:
        head, body = b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\n" + b"X-Pad: y\r\n" * 1000, b""
    try:
        if answer[0] == "drip":
            h.wfile.write(head)
            h.wfile.flush()
        for i in range(len(head) if answer[0] == "drip_headers" else len(body)):
            time.sleep(interval)
            h.wfile.write((head if answer[0] == "drip_headers" else body)[i : i + 1])
            h.wfile.flush()
    except (BrokenPipeError, ConnectionResetError):
        pass
    h.close_connection = True
