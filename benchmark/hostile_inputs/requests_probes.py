"""Requests: error messages that always encode, 499s, Content-Type / encoding / Host checks,
HEAD /health, Allow, no filesystem paths (issue #15 items 5, 6, 9, 10)."""

from __future__ import annotations

import json
import socket
import time

from benchmark.hostile_inputs.common import Context, Recorder, http, is_error_shape, metrics, sample

JSON = {"Content-Type": "application/json"}


def run(ctx: Context) -> list:
    rec = Recorder("requests")
    surrogate_bodies = {
        "/v1/embeddings": b'{"input": "hi", "model": "\\ud800"}',
        "/v1/rerank": b'{"query": "q", "documents": ["d"], "model": "\\ud800"}',
        "/v1/classify": b'{"input": "\\udfff"}',
        "/embed_sparse": b'{"inputs": "\\ud800x"}',
        "/embed_all": b'{"inputs": ["ok", "\\udc00"]}',
    }
    for path, body in surrogate_bodies.items():
        status, _, out = http(ctx, "POST", path, body, ctx.headers())
        rec.check(f"lone surrogate on {path} -> 400", status == 400 and is_error_shape(out), f"{status} {out[:120]!r}")

    before = metrics(ctx)
    head = f"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1:{ctx.port}\r\nContent-Type: application/json\r\n"
    if ctx.api_key:
        head += f"Authorization: Bearer {ctx.api_key}\r\n"
    n = 50
    for _ in range(n):
        with socket.create_connection(("127.0.0.1", ctx.port), timeout=5) as sock:
            sock.sendall((head + "Content-Length: 1000\r\n\r\n").encode() + b'{"input": "half')
            time.sleep(0.01)
    time.sleep(0.5)
    after = metrics(ctx)
    got = {
        code: sample(after, "sglang_http_requests_total", route="/v1/embeddings", status=code)
        - sample(before, "sglang_http_requests_total", route="/v1/embeddings", status=code)
        for code in ("499", "500")
    }
    rec.check(f"{n} partial bodies then disconnect -> 499, no 500", got["499"] == n and got["500"] == 0, str(got))

    status, _, out = http(ctx, "POST", "/v1/embeddings", b'{"input": "x"}', {k: v for k, v in ctx.headers().items()
                                                                             if k != "Content-Type"})  # fmt: skip
    rec.check("POST without Content-Type -> 415", status == 415 and is_error_shape(out), str(status))
    status, _, _ = http(ctx, "POST", "/v1/embeddings", b"input=x", ctx.headers({"Content-Type": "text/plain"}))
    rec.check("POST text/plain -> 415", status == 415, str(status))
    status, _, out = http(ctx, "POST", "/v1/embeddings", '{"input": "x"}'.encode("utf-16"), ctx.headers())
    rec.check("UTF-16 body -> 400", status == 400 and b"UTF-8" in out, f"{status} {out[:100]!r}")
    status, _, out = http(ctx, "POST", "/v1/embeddings", b'{"input": "\xff\xfe"}', ctx.headers())
    rec.check("invalid UTF-8 body -> 400", status == 400, str(status))
    for host in (f"127.0.0.1:{ctx.port}", f"localhost:{ctx.port}", f"[::1]:{ctx.port}"):
        status, _, _ = http(ctx, "POST", "/v1/embeddings", b'{"input": "x"}', ctx.headers({"Host": host}))
        rec.check(f"Host {host} on a loopback server -> 200", status == 200, str(status))
    status, _, out = http(ctx, "POST", "/v1/embeddings", b'{"input": "x"}', ctx.headers({"Host": "rebind.attacker"}))
    rec.check("Host rebind.attacker (DNS rebinding) -> 400", status == 400 and b"invalid_host" in out, str(status))

    status, _, _ = http(ctx, "HEAD", "/health")
    rec.check("HEAD /health -> 200", status == 200, str(status))
    status, hdrs, _ = http(ctx, "DELETE", "/v1/embeddings", headers=ctx.headers())
    rec.check("405 carries Allow", status == 405 and hdrs.get("allow") == "POST", f"{status} {hdrs.get('allow')}")
    for path in ("/v1/models", "/model_info"):
        status, _, out = http(ctx, "GET", path, headers=ctx.headers())
        text = out.decode(errors="replace")
        leaks = [s for s in ("/home/", "/root/", "/tmp/", "/work/", "site-packages", "snapshots") if s in text]
        rec.check(f"{path} shows no filesystem path", status == 200 and not leaks, f"{status} {leaks}")
        if path == "/v1/models" and status == 200:
            card = json.loads(out)["data"][0]
            rec.check("/v1/models root is the served name", card["root"] == card["id"], str(card.get("root")))
    return rec.results
