"""HTTP details (issue #27 item 9), on raw sockets: a transfer coding the server does not implement
(501), a 70,000-byte chunk extension (400, counted with the headers against --max-header-bytes),
`Expect: 100-continue` with a Content-Length over the payload limit (413 with no `100 Continue`
first), a Host of `[::1]evil` (400 on a loopback server), and 405s whose Allow header lists every
method of the path (TRACE /, DELETE /health)."""

from __future__ import annotations

import socket

from benchmark.hostile_inputs.common import Context, Recorder, is_error_shape, raw


def _head(ctx: Context, method: str, path: str, extra: str = "", host: str = "127.0.0.1") -> bytes:
    auth = f"Authorization: Bearer {ctx.api_key}\r\n" if ctx.api_key else ""
    return f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n{extra}\r\n".encode()


def _status(reply: bytes) -> int:
    parts = reply.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def _body(reply: bytes) -> bytes:
    return reply.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in reply else b""


def _allow(reply: bytes) -> set[str]:
    for line in reply.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"allow":
            return {m.strip() for m in value.decode().split(",")}
    return set()


def _first_answer(ctx: Context, data: bytes, timeout: float = 10.0) -> bytes:
    """Send `data`, then read what the server sends first (headers only: no body follows)."""
    with socket.create_connection(("127.0.0.1", ctx.port), timeout=timeout) as sock:
        sock.sendall(data)
        out = b""
        while b"\r\n\r\n" not in out:
            try:
                got = sock.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not got:
                break
            out += got
        return out


def run(ctx: Context) -> list:
    rec = Recorder("http")
    post = "Content-Type: application/json\r\n"

    def gzip_chunked():
        req = _head(ctx, "POST", "/v1/embeddings", post + "Transfer-Encoding: gzip, chunked\r\n")
        reply = raw(ctx, req + b'7\r\n{"a":1}\r\n0\r\n\r\n')
        return _status(reply) == 501 and is_error_shape(_body(reply)), reply[:60].decode("latin-1")

    def chunk_extension():
        body = b"f;ext=" + b"a" * 70_000 + b'\r\n{"input": "hi"}\r\n0\r\n\r\n'
        reply = raw(ctx, _head(ctx, "POST", "/v1/embeddings", post + "Transfer-Encoding: chunked\r\n") + body)
        ok = _status(reply) == 400 and b"--max-header-bytes" in reply
        return ok, reply[:60].decode("latin-1")

    def expect_over_limit():
        extra = post + "Expect: 100-continue\r\nContent-Length: 99999999999\r\n"
        reply = _first_answer(ctx, _head(ctx, "POST", "/v1/embeddings", extra))
        return _status(reply) == 413, reply[:60].decode("latin-1")

    def bracket_host():
        reply = raw(ctx, _head(ctx, "GET", "/v1/models", host="[::1]evil"))
        return _status(reply) == 400 and b"invalid_host" in reply, reply[:60].decode("latin-1")

    def allow(method: str, path: str, want: set[str]):
        def probe():
            reply = raw(ctx, _head(ctx, method, path))
            got = _allow(reply)
            return _status(reply) == 405 and want <= got, f"{_status(reply)} Allow: {sorted(got)}"

        return probe

    rec.attempt("Transfer-Encoding: gzip, chunked -> 501", gzip_chunked)
    rec.attempt("70,000-byte chunk extension -> 400 (--max-header-bytes)", chunk_extension)
    rec.attempt("Expect: 100-continue over the payload limit -> 413, no 100", expect_over_limit)
    rec.attempt("Host [::1]evil -> 400 on a loopback server", bracket_host)
    rec.attempt("TRACE / -> 405, Allow: GET, POST", allow("TRACE", "/", {"GET", "POST"}))
    rec.attempt("DELETE /health -> 405, Allow: GET, HEAD", allow("DELETE", "/health", {"GET", "HEAD"}))
    return rec.results
