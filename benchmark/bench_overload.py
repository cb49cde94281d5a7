"""Overload and soak: 10x the queue capacity for a minute, against our own server.

    python benchmark/bench_overload.py --duration 60 --max-queue-size 16 --overload 10 \
        --output-json overload.json

What it does, in order:
  1. starts `python -m sglang.launch_server --max-queue-size Q ...` on a free port (own session);
  2. unloaded: one client, --unloaded-requests sequential requests -> p50/p99 baseline, and the
     reference vector of every text used later;
  3. at capacity: Q closed-loop clients for --capacity-duration s (the queue full, nothing refused)
     -> a second baseline, the latency of a busy but not overloaded server;
  4. overload: overload x Q closed-loop clients (one keep-alive connection each) for --duration s;
     every request carries a unique x-request-id; after a 429 a client waits --backoff s;
  5. meanwhile samples the resident memory (VmRSS) of every server process once a second;
  6. checks every request id was answered exactly once, with its own id and its own vector
     (compared with the reference), that only 200/429 came back, and the accepted p99 against 3x the
     unloaded p99; then stops the server with SIGTERM and checks it exits 0.

Each request embeds one short text, so the queue capacity in inputs equals that in requests. The
client is a minimal HTTP/1.1 client on asyncio streams, to leave the CPU to the server.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from typing import Optional

import numpy as np

TEXTS = [
    f"request {i}: a short sentence about {w} for the overload test"
    for i, w in enumerate(["rivers", "mountains", "music", "cities", "oceans", "forests", "deserts", "stars"] * 4)
]


def percentile(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


class Conn:
    """One keep-alive HTTP/1.1 connection; reconnects after the server closes it."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: Optional[asyncio.StreamReader] = None
        self.writer: Optional[asyncio.StreamWriter] = None

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = [
            f"POST {path} HTTP/1.1",
            f"Host: {self.host}:{self.port}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
        ] + [f"{k}: {v}" for k, v in headers.items()]
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        await self.writer.drain()
        status = int((await self.reader.readline()).split()[1])
        hdrs: dict[str, str] = {}
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            k, _, v = line.decode("latin-1").partition(":")
            hdrs[k.strip().lower()] = v.strip()
        data = await self.reader.readexactly(int(hdrs.get("content-length", "0")))
        if hdrs.get("connection", "").lower() == "close":
            await self.close()
        return status, hdrs, data

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = self.reader = None


def _payload(text: str) -> bytes:
    return json.dumps({"input": text, "encoding_format": "base64"}).encode()


def _vector(body: bytes) -> np.ndarray:
    return np.frombuffer(base64.b64decode(json.loads(body)["data"][0]["embedding"]), dtype="<f4")


def _rss_mb(pids: list[int]) -> dict[int, float]:
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        out[pid] = int(line.split()[1]) / 1024
        except FileNotFoundError:
            pass
    return out


def _session_pids(leader: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "-s", str(leader)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def _names(pids: list[int], leader: int) -> dict[int, str]:
    """pid -> what it is: the server (HTTP) process, multiprocessing's resource tracker, or the child's
    own name (sglang-schedule, sglang-detokeni, sglang-http-N)."""
    names = {}
    for pid in pids:
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
            comm = open(f"/proc/{pid}/comm").read().strip()
        except FileNotFoundError:
            continue
        if pid == leader:
            names[pid] = "server (HTTP)"
        elif b"resource_tracker" in cmdline:
            names[pid] = "mp resource tracker"
        else:
            names[pid] = comm
    return names


async def unloaded(host: str, port: int, n: int) -> tuple[list[float], list[float], dict[str, np.ndarray]]:
    """-> client latencies (s), server-side x-total-time (ms), the reference vector of every text."""
    conn, lat, server_total, refs = Conn(host, port), [], [], {}
    for i in range(n + len(TEXTS)):
        text = TEXTS[i % len(TEXTS)]
        t0 = time.perf_counter()
        status, hdrs, body = await conn.post("/v1/embeddings", _payload(text), {"x-request-id": f"warm-{i}"})
        if status != 200:
            raise RuntimeError(f"unloaded request failed: {status} {body[:200]!r}")
        if i >= len(TEXTS):  # the first pass over the texts is the warm-up
            lat.append(time.perf_counter() - t0)
            server_total.append(float(hdrs["x-total-time"]))
        refs[text] = _vector(body)
    await conn.close()
    return lat, server_total, refs


async def overload(
    host: str, port: int, clients: int, duration: float, backoff: float, refs: dict[str, np.ndarray], pids: list[int]
) -> dict:
    sent: list[str] = []
    answers: Counter = Counter()
    statuses: Counter = Counter()
    accepted: list[float] = []
    server_ms: list[tuple[float, float, float]] = []  # x-queue-time, x-inference-time, x-total-time
    problems: list[str] = []
    rss: list[tuple[float, dict[int, float]]] = []
    start = time.monotonic()
    end = start + duration

    async def client(c: int) -> None:
        conn, seq = Conn(host, port), 0
        while time.monotonic() < end:
            rid = f"c{c}-{seq}"
            text = TEXTS[(c + seq) % len(TEXTS)]
            seq += 1
            sent.append(rid)
            t0 = time.perf_counter()
            try:
                status, hdrs, body = await conn.post("/v1/embeddings", _payload(text), {"x-request-id": rid})
            except (OSError, asyncio.IncompleteReadError) as e:
                problems.append(f"{rid}: {type(e).__name__}")
                await conn.close()
                continue
            statuses[status] += 1
            answers[hdrs.get("x-request-id")] += 1
            if hdrs.get("x-request-id") != rid:
                problems.append(f"{rid}: answered as {hdrs.get('x-request-id')}")
            if status == 200:
                accepted.append(time.perf_counter() - t0)
                server_ms.append(
                    tuple(float(hdrs.get(h, "nan")) for h in ("x-queue-time", "x-inference-time", "x-total-time"))
                )
                if not np.allclose(_vector(body), refs[text], atol=1e-5):
                    problems.append(f"{rid}: wrong vector")
            elif status == 429 and backoff > 0:
                await asyncio.sleep(backoff)
        await conn.close()

    async def sampler() -> None:
        while time.monotonic() < end:
            rss.append((time.monotonic() - start, _rss_mb(pids)))
            await asyncio.sleep(1.0)

    await asyncio.gather(sampler(), *(client(c) for c in range(clients)))
    elapsed = time.monotonic() - start
    dup = [r for r, n in answers.items() if n > 1]
    lost = [r for r in sent if answers.get(r, 0) == 0]
    return {
        "sent": len(sent),
        "statuses": dict(statuses),
        "accepted_latencies": accepted,
        "elapsed": elapsed,
        "duplicated": dup,
        "lost": lost,
        "problems": problems,
        "rss": rss,
        "server_ms_p50": [percentile([x[i] for x in server_ms], 50) for i in range(3)],
        "server_ms_p99": [percentile([x[i] for x in server_ms], 99) for i in range(3)],
    }


def rss_report(rss: list[tuple[float, dict[int, float]]], warmup: float, names: dict[int, str]) -> list[dict]:
    rows = []
    for pid, name in names.items():
        series = [(t, m[pid]) for t, m in rss if pid in m]
        after = [v for t, v in series if t >= warmup]
        if not after:
            continue
        base = after[0]
        rows.append(
            {
                "pid": pid,
                "process": name,
                "start_mb": series[0][1],
                "after_warmup_mb": base,
                "max_after_warmup_mb": max(after),
                "end_mb": after[-1],
                "growth_mb": max(after) - base,
            }
        )
    return rows


def launch(args) -> tuple[subprocess.Popen, int, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tempfile.NamedTemporaryFile(prefix="bench-overload-", suffix=".log", delete=False).name
    cmd = [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--port",
        str(port),
        "--max-queue-size",
        str(args.max_queue_size),
        *args.server_args.split(),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {open(log).read()[-2000:]}")
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).status == 200:
                return proc, port, log
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError("server did not become healthy")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=60.0, help="Seconds of overload.")
    p.add_argument("--max-queue-size", type=int, default=16, help="The server's queue capacity (inputs).")
    p.add_argument("--overload", type=float, default=10.0, help="Concurrent clients per queue slot.")
    p.add_argument("--backoff", type=float, default=0.05, help="Seconds a client waits after a 429 (0: none).")
    p.add_argument("--unloaded-requests", type=int, default=300)
    p.add_argument("--capacity-duration", type=float, default=10.0, help="Seconds of the at-capacity baseline.")
    p.add_argument(
        "--warmup",
        type=float,
        default=None,
        help="Seconds of overload before RSS must stay flat (default: a sixth of --duration).",
    )
    p.add_argument("--server-args", default="", help="Extra flags for the server.")
    p.add_argument("--output-json", default=None)
    args = p.parse_args()
    warmup = args.warmup if args.warmup is not None else args.duration / 6
    clients = int(args.overload * args.max_queue_size)

    load_before = os.getloadavg()
    proc, port, log = launch(args)
    try:
        pids = _session_pids(proc.pid)
        names = _names(pids, proc.pid)
        base_lat, base_server_ms, refs = asyncio.run(unloaded("127.0.0.1", port, args.unloaded_requests))
        cap = asyncio.run(
            overload("127.0.0.1", port, args.max_queue_size, args.capacity_duration, args.backoff, refs, pids)
        )
        run = asyncio.run(overload("127.0.0.1", port, clients, args.duration, args.backoff, refs, pids))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            exit_code = proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            exit_code = "killed"

    p99_base, p99_acc = percentile(base_lat, 99), percentile(run["accepted_latencies"], 99)
    statuses = run["statuses"]
    mem = rss_report(run["rss"], warmup, names)
    summary = {
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
        },
        "config": {
            "max_queue_size": args.max_queue_size,
            "clients": clients,
            "duration_s": args.duration,
            "backoff_s": args.backoff,
            "server_args": args.server_args,
            "warmup_s": warmup,
        },
        "unloaded": {
            "requests": len(base_lat),
            "p50_ms": percentile(base_lat, 50) * 1e3,
            "p99_ms": p99_base * 1e3,
            "server_total_p99_ms": percentile(base_server_ms, 99),
        },
        "at_capacity": {
            "clients": args.max_queue_size,
            "requests": cap["sent"],
            "statuses": cap["statuses"],
            "req_per_s": cap["sent"] / cap["elapsed"],
            "p50_ms": percentile(cap["accepted_latencies"], 50) * 1e3,
            "p99_ms": percentile(cap["accepted_latencies"], 99) * 1e3,
        },
        "overload": {
            "requests": run["sent"],
            "req_per_s": run["sent"] / run["elapsed"],
            "statuses": statuses,
            "accepted_per_s": statuses.get(200, 0) / run["elapsed"],
            "accepted_p50_ms": percentile(run["accepted_latencies"], 50) * 1e3,
            "accepted_p99_ms": p99_acc * 1e3,
            "p99_ratio": p99_acc / p99_base,
            "p99_ratio_vs_capacity": p99_acc / percentile(cap["accepted_latencies"], 99),
            "server_side_p99_ratio": run["server_ms_p99"][2] / percentile(base_server_ms, 99),
            "server_queue_inference_total_ms_p50": run["server_ms_p50"],
            "server_queue_inference_total_ms_p99": run["server_ms_p99"],
        },
        "correctness": {
            "lost": len(run["lost"]) + len(cap["lost"]),
            "duplicated": len(run["duplicated"]) + len(cap["duplicated"]),
            "problems": (cap["problems"] + run["problems"])[:20],
            "n_problems": len(run["problems"]) + len(cap["problems"]),
        },
        "rss": mem,
        "server_exit_code": exit_code,
        "server_log": log,
    }
    checks = {
        "only 200/429": set(statuses) <= {200, 429},
        "every id answered exactly once": all(
            not r["lost"] and not r["duplicated"] and not r["problems"] for r in (cap, run)
        ),
        "accepted p99 <= 3x unloaded p99": p99_acc <= 3 * p99_base,
        "RSS flat after warm-up (< 5% and < 20 MB growth)": all(
            r["growth_mb"] < min(20.0, 0.05 * r["after_warmup_mb"]) for r in mem
        ),
        "SIGTERM exit 0": exit_code == 0,
    }
    summary["checks"] = checks
    _print(summary)
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump(summary, f, indent=2)
    return 0 if all(checks.values()) else 1


def _print(s: dict) -> None:
    c, u, o = s["config"], s["unloaded"], s["overload"]
    print(
        f"\nqueue {c['max_queue_size']}, {c['clients']} clients, {c['duration_s']:.0f} s, "
        f"backoff after 429 {c['backoff_s'] * 1e3:.0f} ms, {s['machine']['cpus']} CPUs, load average "
        f"{s['machine']['loadavg_before'][0]:.2f} before / {s['machine']['loadavg_after'][0]:.2f} after"
    )
    print("| phase | requests | req/s | 200 | 429 | other | p50 ms | p99 ms |")
    print("|---|---|---|---|---|---|---|---|")
    print(
        f"| unloaded (1 client) | {u['requests']} | | {u['requests']} | 0 | 0 | {u['p50_ms']:.1f} | {u['p99_ms']:.1f} |"
    )
    a = s["at_capacity"]
    ast = a["statuses"]
    print(
        f"| at capacity ({a['clients']} clients) | {a['requests']} | {a['req_per_s']:.0f} | {ast.get(200, 0)} | "
        f"{ast.get(429, 0)} | {sum(v for k, v in ast.items() if k not in (200, 429))} | {a['p50_ms']:.1f} "
        f"| {a['p99_ms']:.1f} |"
    )
    st = o["statuses"]
    other = sum(v for k, v in st.items() if k not in (200, 429))
    print(
        f"| overload ({c['clients']} clients) | {o['requests']} | {o['req_per_s']:.0f} | {st.get(200, 0)} | "
        f"{st.get(429, 0)} | {other} | {o['accepted_p50_ms']:.1f} | {o['accepted_p99_ms']:.1f} |"
    )
    q50, i50, t50 = o["server_queue_inference_total_ms_p50"]
    q99, i99, t99 = o["server_queue_inference_total_ms_p99"]
    print(
        f"\naccepted, as the server timed them (x-queue/inference/total-time): p50 {q50:.1f} / {i50:.1f} / "
        f"{t50:.1f} ms, p99 {q99:.1f} / {i99:.1f} / {t99:.1f} ms"
    )
    print(
        f"server-side (x-total-time) p99: unloaded {u['server_total_p99_ms']:.1f} ms, overload {t99:.1f} ms, "
        f"ratio {o['server_side_p99_ratio']:.2f}"
    )
    print(
        f"accepted p99 / unloaded p99 = {o['p99_ratio']:.2f}, / at-capacity p99 = {o['p99_ratio_vs_capacity']:.2f}; "
        f"lost {s['correctness']['lost']}, duplicated {s['correctness']['duplicated']}, "
        f"other problems {s['correctness']['n_problems']}"
    )
    print("\n| process | RSS at start MB | after warm-up MB | max after warm-up MB | end MB | growth MB |")
    print("|---|---|---|---|---|---|")
    for r in s["rss"]:
        print(
            f"| {r['process']} ({r['pid']}) | {r['start_mb']:.0f} | {r['after_warmup_mb']:.1f} | "
            f"{r['max_after_warmup_mb']:.1f} | {r['end_mb']:.1f} | {r['growth_mb']:+.1f} |"
        )
    print(f"\nserver exit code after SIGTERM: {s['server_exit_code']}")
    for name, ok in s["checks"].items():
        print(f"{'PASS' if ok else 'FAIL'}  {name}")


if __name__ == "__main__":
    sys.exit(main())
