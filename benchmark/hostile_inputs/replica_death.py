"""A data-parallel replica SIGKILLed under load (issue #27 item 8): a --dp-size 2 server of its own,
32 clients on kept-alive connections, `sglang-sched-1` killed. Every request the server received
gets an HTTP answer (200, or 503 naming the dead replica) before the server exits 1; a client may
find the port closed (connection refused: nothing sent), never a connection reset."""

from __future__ import annotations

import collections
import http.client
import json
import os
import signal
import subprocess
import threading
import time

from benchmark.hostile_inputs.common import Context, Recorder, exit_code, own_server

DESTRUCTIVE = True  # kills a process: runs last, on a server of its own
LONG = "the quick brown fox jumps over the lazy dog " * 25
CLIENTS = 32
MAX_REQUESTS = 300  # per client, so every loop ends even if the server does not


def _replica_pid(server_pid: int, name: str) -> int:
    out = subprocess.run(["ps", "-o", "pid=", "-s", str(server_pid)], capture_output=True, text=True).stdout
    for pid in (int(p) for p in out.split()):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == name:
                    return pid
        except FileNotFoundError:
            pass
    raise RuntimeError(f"no process named {name}")


def _client(port: int, i: int, kill: list, results: list) -> None:
    body = json.dumps({"input": [f"{i} {LONG}"] * 2})
    conn = None
    for _ in range(MAX_REQUESTS):
        t0 = time.monotonic()
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
            conn.request("POST", "/v1/embeddings", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            text = r.read()
            outcome, reason = r.status, text[:300].decode("latin-1")
            if r.will_close:
                conn.close()
                conn = None
        except (OSError, http.client.HTTPException) as e:
            outcome, reason = type(e).__name__, str(e)
            if conn is not None:
                conn.close()
                conn = None
        results.append((t0, time.monotonic(), outcome, reason))
        if kill and t0 > kill[0] + 0.5:
            break
    if conn is not None:
        conn.close()


def run(ctx: Context) -> list:
    rec = Recorder("replica")
    if ctx.proc is None:
        rec.skip("dp replica SIGKILL: every received request answered (starts its own server)", "--url given")
        return rec.results
    results: list = []
    kill: list = []
    code = None
    with own_server(["--dp-size", "2", "--max-batch-size", "8"]) as (proc, port, log):
        threads = [threading.Thread(target=_client, args=(port, i, kill, results)) for i in range(CLIENTS)]
        try:
            victim = _replica_pid(proc.pid, "sglang-sched-1")
            for t in threads:
                t.start()
            time.sleep(3.0)
            kill.append(time.monotonic())
            os.kill(victim, signal.SIGKILL)
            code = exit_code(proc, 30)
            ctx.numbers["replica: exit after the SIGKILL (s)"] = round(time.monotonic() - kill[0], 2)
        finally:
            for t in threads:
                t.join(60)
    k = kill[0] if kill else float("inf")
    in_flight = [(t1 - k, o, why) for t0, t1, o, why in results if t0 < k < t1]
    outcomes = collections.Counter(o for _, _, o, _ in results)
    ctx.numbers["replica: outcomes"] = dict(outcomes)
    ctx.numbers["replica: in flight at the kill"] = len(in_flight)
    answered = [o for _, o, _ in in_flight if o in (200, 503)]
    rec.check("every request in flight at the kill is answered 200/503", len(answered) == len(in_flight), str(outcomes))
    named = all("sglang-scheduler-1" in why for _, o, why in in_flight if o == 503)
    rec.check("the 503s name the dead replica", named and 503 in answered, str(in_flight[:1]))
    slowest = max((dt for dt, _, _ in in_flight), default=0.0)
    rec.check("in-flight requests answered within 2 s", slowest < 2.0, f"{slowest:.2f} s")
    bad = {o: n for o, n in outcomes.items() if not isinstance(o, int) and o != "ConnectionRefusedError"}
    rec.check("no connection reset or dropped request", not bad, str(bad))
    rec.check("the server exits 1", code == 1, f"exit {code}")
    return rec.results
