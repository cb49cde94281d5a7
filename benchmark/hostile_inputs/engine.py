"""Engine: metrics that add up across HTTP workers, gauges back at idle after aborts, and a
stopped scheduler (issue #15 items 11, 13, 15). The SIGSTOP probe ends the server: runs last."""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import subprocess
import time

from benchmark.hostile_inputs.common import Context, Recorder, http, metrics, post_json, sample, wait_until

DESTRUCTIVE = True  # the runner runs this area last
# ~60 tokens: enough that 64 x 8 of them queue up, short enough that one batch stays well under
# --watchdog-exit-timeout on a busy machine (a slow batch is a stall to the watchdog, by design).
TEXT = "the quick brown fox jumps over the lazy dog " * 6


def _children(ctx: Context) -> dict[str, int]:
    out = subprocess.run(["ps", "-o", "pid=,comm=", "-s", str(ctx.proc.pid)], capture_output=True, text=True).stdout
    return {line.split()[1]: int(line.split()[0]) for line in out.splitlines() if len(line.split()) == 2}


def run(ctx: Context) -> list:
    rec = Recorder("engine")
    before = metrics(ctx)
    with cf.ThreadPoolExecutor(8) as pool:  # fresh connections: the kernel spreads them over the workers
        codes = list(pool.map(lambda i: post_json(ctx, "/v1/embeddings", {"input": f"count me {i}"})[0], range(40)))
    ok = dict(route="/v1/embeddings", status="200")
    base = sample(before, "sglang_http_requests_total", **ok)
    seen = [sample(metrics(ctx), "sglang_http_requests_total", **ok) - base for _ in range(6)]
    all_counted = codes.count(200) == 40 and set(seen) == {40}
    rec.check("every scrape counts all 40 requests (all workers)", all_counted, f"scrapes saw {seen}")

    def impatient(i: int) -> None:
        try:
            post_json(ctx, "/v1/embeddings", {"input": [f"{i} {TEXT}"] * 8}, timeout=0.3)
        except Exception:
            pass

    with cf.ThreadPoolExecutor(16) as pool:
        list(pool.map(impatient, range(64)))

    def idle() -> bool:
        m = metrics(ctx)
        return sample(m, "sglang_queue_length") == 0 and sample(m, "sglang_http_requests_in_flight") <= 1

    t0 = time.monotonic()
    settled = wait_until(idle, 30.0, 0.3)
    m = metrics(ctx)
    ctx.numbers["gauges idle after 64 aborted requests (s)"] = round(time.monotonic() - t0, 2)
    gauges = f"queue {sample(m, 'sglang_queue_length')}, in flight {sample(m, 'sglang_http_requests_in_flight')}"
    rec.check("queue and in-flight gauges back to idle after aborts", settled, gauges)

    if ctx.proc is None:
        rec.skip("stopped scheduler (needs a server the runner started)", "--url given")
        return rec.results
    scheduler = _children(ctx).get("sglang-schedule")
    post_json(ctx, "/v1/embeddings", {"input": "idle"})
    os.kill(scheduler, signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        went_503 = wait_until(lambda: http(ctx, "GET", "/health", timeout=5)[0] == 503, 20.0, 0.2)
        ctx.numbers["/health 503 after SIGSTOP of the scheduler (s)"] = round(time.monotonic() - t0, 2)
        rec.check("stopped scheduler -> /health 503", went_503)
        try:
            code = ctx.proc.wait(60)
        except subprocess.TimeoutExpired:
            code = None
        ctx.numbers["server exited after SIGSTOP (s)"] = round(time.monotonic() - t0, 2)
        rec.check("stopped scheduler -> server exits non-zero", code not in (None, 0), f"exit {code}")
    finally:
        try:
            os.kill(scheduler, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return rec.results
