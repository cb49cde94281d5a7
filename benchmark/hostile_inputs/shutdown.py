"""Shutdown: SIGTERM with requests still running past --graceful-timeout is quiet and ordered
(issue #15 item 14): they are answered 503, the server exits 0, and its log holds no traceback,
no ZMQError and no ERROR line. Starts a server of its own (the shared one is left alone)."""

from __future__ import annotations

import concurrent.futures as cf
import signal
import time

from benchmark.hostile_inputs.common import Context, Recorder, exit_code, own_server, post_json

LONG = "the quick brown fox jumps over the lazy dog " * 25
NOISE = ("Traceback", "ZMQError", "Future exception was never retrieved", "] ERROR ", "] CRITICAL ")


def run(ctx: Context) -> list:
    rec = Recorder("shutdown")
    if ctx.proc is None:
        rec.skip("quiet shutdown after --graceful-timeout (starts its own server)", "--url given")
        return rec.results
    with own_server(["--graceful-timeout", "1", "--max-batch-size", "4"]) as (proc, port, log):
        own = Context(base_url=f"http://127.0.0.1:{port}", port=port, proc=proc, log_path=log)

        def one(_: int):
            try:
                return post_json(own, "/v1/embeddings", {"input": [LONG] * 64}, timeout=60)[0]
            except Exception as e:  # the connection closed under it: no answer
                return type(e).__name__

        with cf.ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(one, i) for i in range(6)]
            time.sleep(0.8)
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            codes = [f.result() for f in futures]
        code = exit_code(proc, 30)
        ctx.numbers["exit after SIGTERM with --graceful-timeout 1 (s)"] = round(time.monotonic() - t0, 2)
    rec.check("requests cut by --graceful-timeout are answered 503", 503 in codes, str(codes))
    rec.check("server exits 0 after the graceful timeout", code == 0, f"exit {code}")
    text = open(log, errors="replace").read()
    found = [n.strip() for n in NOISE if n in text]
    rec.check("shutdown log: no traceback, ZMQError or ERROR", not found, str(found))
    return rec.results
