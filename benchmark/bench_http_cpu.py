"""CPU cost per request of each server process, against a bare uvicorn + FastAPI route (issue #32).

    python benchmark/bench_http_cpu.py [--requests 1200] [--concurrency 64] [--rounds 3]
    python benchmark/bench_http_cpu.py --variant before=/tmp/wt_before/python --variant after=python

Why CPU seconds: on a shared machine wall times move with the neighbours' load, the CPU a process
spends per request does not (much). Each server (one per --variant: a PYTHONPATH put first, so
two checkouts of the package run side by side; the default is this checkout) and the floor (a bare
uvicorn + FastAPI route answering a fixed JSON body, the least any Python HTTP route costs) are
started once, then loaded in turn, round after round (A, B, floor, A, B, floor, ...), so that a
slow minute hits every variant alike. A round sends --requests single-text requests (corpus texts,
cycled) from --concurrency keep-alive clients (benchmark/http_client.py, cheap on the client side)
and reads the CPU time of every process of the server (/proc/<pid>/task/*/schedstat) before and after:
the HTTP/tokenizer process (the launched one), the scheduler, the detokenizer (renderer). Printed:
the median over rounds of CPU-ms per request per process, texts/s, and the load generator's own
CPU-ms per request (it shares the cores). --profile-dir writes one py-spy profile of the HTTP
process of each variant (py-spy from PyPI; not a dependency of the server).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_serving  # noqa: E402
from http_client import LeanPoster  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
FLOOR_BODY = b'{"object":"list","data":[{"object":"embedding","index":0,"embedding":"AAAA"}],"model":"m"}'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """CPU seconds of one process: the sum of its live threads' run time in nanoseconds
    (/proc/<pid>/task/*/schedstat), finer than stat's utime + stime in clock ticks (10 ms, too
    coarse for a round of a few hundred requests at about a millisecond each). A thread that
    ended during the round takes its time with it; the server's threads live as long as it does."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
    return total / 1e9


def process_tree(pid: int) -> dict[int, str]:
    """pid -> name (its comm: the server names its children sglang-scheduler, sglang-detokeni...)."""
    out, todo = {}, [pid]
    while todo:
        p = todo.pop()
        with contextlib.suppress(OSError):
            with open(f"/proc/{p}/comm") as f:
                out[p] = "http (main)" if p == pid else f.read().strip()
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
    return out


def variant_env(path: str) -> dict[str, str]:
    """This environment with `path` (a checkout's python/) first on PYTHONPATH."""
    return {**os.environ, "PYTHONPATH": os.path.abspath(path) + os.pathsep + os.environ.get("PYTHONPATH", "")}


@dataclass
class Variant:
    name: str
    proc: Optional[subprocess.Popen] = None
    url: str = ""
    rounds: list[dict[str, Any]] = field(default_factory=list)


FLOOR_APP = """
import sys, uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response
app = FastAPI()
BODY = %r
@app.post("/v1/embeddings")
async def embeddings(request: Request):
    await request.body()
    return Response(BODY, media_type="application/json")
@app.get("/health")
async def health():
    return Response(status_code=200)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), loop="uvloop", http="httptools",
            log_level="warning", access_log=False)
"""


# Runs sglang.launch_server with cProfile ready on the HTTP process's main (event-loop) thread,
# timed in that thread's CPU seconds (time.thread_time): the first SIGUSR1 starts it (after start-up
# and warm-up), the second stops it and writes argv[1]; the rest of argv is the server's flags.
CPROFILE_WRAPPER = """
import cProfile, runpy, signal, sys, time
out, sys.argv = sys.argv[1], [sys.argv[0], *sys.argv[2:]]
prof, on = cProfile.Profile(time.thread_time), [False]
def toggle(*_):
    if on[0]:
        prof.disable()
        prof.dump_stats(out)
    else:
        prof.enable()
    on[0] = not on[0]
signal.signal(signal.SIGUSR1, toggle)
runpy.run_module("sglang.launch_server", run_name="__main__")
"""


def start(variant: Variant, cmd: list[str], env: dict[str, str], timeout: float, new_session: bool = True) -> None:
    """Start a server and wait for /health. It leads its own process group either way (stop() kills the
    group); `new_session=False` keeps it in this session, so that with Linux's autogroup scheduling
    several servers share one CPU share against the machine's other work instead of one each."""
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix=f"bench_http_cpu_{variant.name}_", suffix=".log", delete=False)
    cmd = [c.replace("{port}", str(port)) for c in cmd]
    print(f"[{variant.name}] {shlex.join(cmd)}  (log: {log.name})", flush=True)
    variant.proc = subprocess.Popen(
        cmd,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=new_session,
        process_group=None if new_session else 0,
    )
    variant.url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and variant.proc.poll() is None:
        with contextlib.suppress(OSError):
            if bench_serving.http_get(variant.url + "/health", 2.0)[0] == 200:
                return
        time.sleep(0.5)
    with open(log.name, errors="replace") as f:
        raise SystemExit(f"[{variant.name}] did not become healthy; end of its log:\n{''.join(f.readlines()[-30:])}")


def stop(variant: Variant) -> None:
    if variant.proc is not None and variant.proc.poll() is None:
        variant.proc.send_signal(signal.SIGTERM)
        try:
            variant.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(variant.proc.pid, signal.SIGKILL)
            variant.proc.wait()


async def load(url: str, texts: list[str], start_at: int, n: int, concurrency: int, model: Optional[str], fmt: str):
    """n single-text requests from `concurrency` closed-loop clients; (ok texts, errors, seconds)."""
    poster = LeanPoster(url + "/v1/embeddings", concurrency, 120.0)
    sent, ok, errors = 0, 0, {}

    async def client() -> None:
        nonlocal sent, ok
        while sent < n:
            i = start_at + sent
            sent += 1
            body: dict[str, Any] = {"input": texts[i % len(texts)], "encoding_format": fmt}
            if model:
                body["model"] = model
            status, answer = await poster.post(body)
            if status == 200 and answer is not None:
                ok += len(answer.get("data") or ())
            else:
                errors[str(status)] = errors.get(str(status), 0) + 1

    t0 = time.perf_counter()
    try:
        await asyncio.gather(*(client() for _ in range(concurrency)))
    finally:
        await poster.close()
    return ok, errors, time.perf_counter() - t0


def one_round(variant: Variant, args: argparse.Namespace, texts: list[str], cursor: int, model: Optional[str]):
    tree = process_tree(variant.proc.pid)
    before = {p: cpu_seconds(p) for p in tree}
    me0 = sum(os.times()[:2])
    ok, errors, seconds = bench_serving.run_event_loop(
        load(variant.url, texts, cursor, args.requests, args.concurrency, model, args.encoding_format), True
    )
    me = sum(os.times()[:2]) - me0
    per: dict[str, float] = {}
    for p, name in tree.items():
        with contextlib.suppress(OSError):
            per[name] = per.get(name, 0.0) + (cpu_seconds(p) - before[p]) * 1000 / args.requests
    row = {
        "texts_per_s": ok / seconds,
        "errors": errors,
        "cpu_ms_per_request": per,
        "client_cpu_ms": me * 1000 / args.requests,
    }
    variant.rounds.append(row)
    procs = ", ".join(f"{k} {v:.3f}" for k, v in sorted(per.items()) if v > 0.0005)
    print(f"[{variant.name}] {row['texts_per_s']:.1f} texts/s; CPU-ms/request: {procs}; errors {errors}", flush=True)


def profile(variant: Variant, args: argparse.Namespace, texts: list[str], model: Optional[str]) -> None:
    """py-spy record of the HTTP process under one more round (its own file per variant)."""
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    os.makedirs(args.profile_dir, exist_ok=True)
    out = os.path.join(args.profile_dir, f"{variant.name}.txt")
    rec = subprocess.Popen(
        [
            spy,
            "record",
            "--pid",
            str(variant.proc.pid),
            "--format",
            "raw",
            "--rate",
            "400",
            "--output",
            out,
            "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    time.sleep(1.0)
    bench_serving.run_event_loop(
        load(variant.url, texts, 0, args.requests, args.concurrency, model, args.encoding_format), True
    )
    rec.send_signal(signal.SIGINT)
    _, err = rec.communicate(timeout=60)
    print(f"[{variant.name}] py-spy profile: {out} {err.decode(errors='replace')[-300:].strip()}")


def cprofile(name: str, env: dict[str, str], args: argparse.Namespace, texts: list[str]) -> None:
    """One more server of this variant under cProfile for one round after the warm-up, then the
    functions of the HTTP process's event-loop thread by own CPU time per request (cProfile's own overhead
    inflates call-heavy code; compare shares, not totals, with the round's /proc figures)."""
    import pstats

    os.makedirs(args.cprofile_dir, exist_ok=True)
    out = os.path.join(args.cprofile_dir, f"{name}.prof")
    with contextlib.suppress(FileNotFoundError):
        os.remove(out)
    v = Variant(f"{name} (cProfile)")
    cmd = [sys.executable, "-c", CPROFILE_WRAPPER, out, "--port", "{port}", "--log-level", "warning"]
    start(v, cmd + ["--allow-auto-truncate", *shlex.split(args.server_args)], env, args.launch_timeout)
    try:
        model = bench_serving.discover_model(v.url)
        n = args.requests
        for count, on in ((args.warmup, False), (n, True)):
            bench_serving.run_event_loop(
                load(v.url, texts, 0, count, args.concurrency, model, args.encoding_format), True
            )
            v.proc.send_signal(signal.SIGUSR1)  # on after the warm-up, off (and written) after the round
        deadline = time.monotonic() + 60
        while not os.path.exists(out) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)
    finally:
        stop(v)
    stats = pstats.Stats(out)
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])  # (file, line, func) -> (cc, nc, tt, ct, callers)
    total = sum(r[1][2] for r in rows)
    print(f"\n[{name}] cProfile of the HTTP event-loop thread: {total * 1000 / n:.3f} CPU-ms/request (profiled)")
    for (file, line, func), (_, calls, tt, ct, _) in rows[: args.cprofile_top]:
        where = f"{os.path.basename(file)}:{line}({func})" if line else func
        print(
            f"  {100 * tt / total:5.1f}%  own {tt * 1000 / n:.4f} ms  incl {ct * 1000 / n:.4f} ms  "
            f"{calls / n:5.1f} calls/req  {where}"
        )


def summary(variants: list[Variant]) -> list[dict[str, Any]]:
    rows = []
    for v in (v for v in variants if v.rounds):  # --rounds 0: profiles only
        names = sorted({k for r in v.rounds for k in r["cpu_ms_per_request"]})
        per = {k: statistics.median(r["cpu_ms_per_request"].get(k, 0.0) for r in v.rounds) for k in names}
        rows.append(
            {
                "variant": v.name,
                "rounds": len(v.rounds),
                "texts_per_s": statistics.median(r["texts_per_s"] for r in v.rounds),
                "cpu_ms_per_request": {k: round(x, 4) for k, x in per.items() if x > 0.0005},
                "server_total_cpu_ms": round(sum(per.values()), 4),
                "client_cpu_ms": round(statistics.median(r["client_cpu_ms"] for r in v.rounds), 4),
                "per_round": v.rounds,
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=1200, help="single-text requests per round")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3, help="rounds per variant, interleaved")
    ap.add_argument("--warmup", type=int, default=200, help="requests per variant before the first round")
    ap.add_argument("--encoding-format", default="base64", choices=["float", "base64"])
    ap.add_argument("--server-args", default="", help="extra flags for every launched server")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=PYTHONPATH",
        help="a server run with PYTHONPATH first (a checkout's python/); default: this checkout",
    )
    ap.add_argument("--no-floor", action="store_true", help="skip the bare uvicorn + FastAPI floor")
    ap.add_argument("--profile-dir", default=None, help="also write a py-spy raw profile of each HTTP process")
    ap.add_argument("--cprofile-dir", default=None, help="also run each variant once under cProfile, stats here")
    ap.add_argument("--cprofile-top", type=int, default=30, help="functions listed per cProfile run")
    ap.add_argument("--launch-timeout", type=float, default=600.0)
    ap.add_argument("--output-json", default=None)
    args = ap.parse_args()

    texts = bench_serving.load_texts(bench_serving.DEFAULT_TEXTS, None)
    specs = [v.split("=", 1) for v in args.variant] or [["server", os.path.join(ROOT, "python")]]
    machine = bench_serving.machine_info()
    print(f"machine: {machine['cpu']}, {machine['cores']} cores, flags: {' '.join(machine['cpu_flags'])}")
    variants: list[Variant] = []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        for name, path in specs:
            v = Variant(name)
            env = variant_env(path)
            cmd = [sys.executable, "-m", "sglang.launch_server", "--port", "{port}", "--log-level", "warning"]
            cmd += ["--allow-auto-truncate", *shlex.split(args.server_args)]
            start(v, cmd, env, args.launch_timeout)
            variants.append(v)
        if not args.no_floor:
            v = Variant("floor (bare uvicorn+FastAPI)")
            start(v, [sys.executable, "-c", FLOOR_APP % FLOOR_BODY, "{port}"], dict(os.environ), 60)
            variants.append(v)
        models = {v.name: bench_serving.discover_model(v.url) for v in variants}
        for v in variants:
            bench_serving.run_event_loop(
                load(v.url, texts, 0, args.warmup, args.concurrency, models[v.name], args.encoding_format), True
            )
        cursor = 0
        for _ in range(args.rounds):
            for v in variants:
                one_round(v, args, texts, cursor, models[v.name])
            cursor += args.requests
        if args.profile_dir:
            for v in variants[: len(specs)]:
                profile(v, args, texts, models[v.name])
    finally:
        for v in variants:
            stop(v)
    if args.cprofile_dir:
        for name, path in specs:
            cprofile(name, variant_env(path), args, texts)
    rows = summary(variants)
    print(
        f"\n{args.rounds} rounds x {args.requests} single-text requests, {args.concurrency} clients, "
        f"encoding_format {args.encoding_format}; medians over rounds; CPU flags: {' '.join(machine['cpu_flags'])}"
    )
    for r in rows:
        procs = ", ".join(f"{k} {x:.3f}" for k, x in sorted(r["cpu_ms_per_request"].items()))
        print(
            f"{r['variant']:<30} {r['texts_per_s']:7.1f} texts/s  CPU-ms/request: {procs}  "
            f"(server total {r['server_total_cpu_ms']:.3f}; load generator {r['client_cpu_ms']:.3f})"
        )
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump({"machine": machine, "command": shlex.join(sys.argv), "variants": rows}, f, indent=1)


if __name__ == "__main__":
    main()
