"""Raw HTTP/1.1 over a socket, for tests of what happens before a request reaches the app."""

from __future__ import annotations

import socket
import time
from typing import Callable, Optional


def exchange(
    port: int,
    *chunks: bytes,
    pause: float = 0.0,
    timeout: float = 5.0,
    done: Optional[Callable[[bytes], bool]] = None,
) -> bytes:
    """Send `chunks` on a new loopback connection (`pause` seconds after each), then read until the
    server closes it, the read times out, or `done(received)` says the answer is complete."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        for c in chunks:
            sock.sendall(c)
            time.sleep(pause)
        out = b""
        while True:
            try:
                data = sock.recv(65536)
            except (ConnectionResetError, socket.timeout):
                return out
            if not data:
                return out
            out += data
            if done is not None and done(out):
                return out
