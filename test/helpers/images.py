"""Test images made with PIL, data URIs, a PNG whose header claims a huge size, and a local HTTP
server (127.0.0.1, in a thread) that serves images, redirects, slow and oversized answers."""

from __future__ import annotations

import base64
import io
import struct
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Union

import numpy as np
from PIL import Image


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


# A route's answer: bytes (200, image/png), ("redirect", location), ("slow", seconds, bytes),
# ("stream", n_bytes) without Content-Length, ("declare", n_bytes) with a Content-Length it never
# sends, or an int status with an empty body.
Route = Union[bytes, tuple, int]


class ImageServer:
    def __init__(self, routes: dict[str, Route]) -> None:
        self.routes = routes
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                server.handle(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

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

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "ImageServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
