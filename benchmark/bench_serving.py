"""Load generator for any OpenAI-compatible /v1/embeddings endpoint (ours, infinity, TEI, ...).

Closed loop, N concurrent clients per level (levels run in sequence):
    python benchmark/bench_serving.py --url http://127.0.0.1:30000 --concurrency 1,8,64 --num-requests 500
Open loop, Poisson arrivals at R requests/s, at most --max-outstanding in flight:
    python benchmark/bench_serving.py --url http://127.0.0.1:7997 --request-rate 20,50 --duration 30
Start our server for the run (with --allow-auto-truncate), measure, stop it with SIGTERM:
    python benchmark/bench_serving.py --launch --server-args "--max-batch-size 64" --concurrency 1,8 \
        --texts-per-request 4 --output-json out.json --plot out.png

Texts are real English (test/data/texts.json by default), cycled. Our launched server gets
--allow-auto-truncate (texts over 256 tokens are cut, not refused); external URLs get texts as is.
Throughput counts successful requests only; tokens come from the responses' usage.prompt_tokens;
latency is per request, from send to parsed JSON. The client shares the CPU with a local server:
on a small machine its work competes with the server. The default `--client lean` (asyncio streams
+ httptools + orjson on uvloop, benchmark/http_client.py) costs a fraction of httpx's ~1 ms of CPU
per request; `--client httpx` keeps the general-purpose client. `--encoding-format base64` also
saves the client (and the server) parsing float JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterator, Optional

from tqdm import tqdm

try:
    import httpx  # type: ignore[import-not-found]
except ImportError:
    try:
        import httpx2 as httpx  # the httpx fork openai depends on in this venv; same API
    except ImportError:
        httpx = None

DEFAULT_TEXTS = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "test", "data", "texts.json"))
Post = Callable[[dict], Awaitable[tuple[Any, Optional[dict]]]]  # payload -> (status, JSON body if 200)
CLIENTS = ("lean", "httpx")  # --client: lean first, the default


@dataclass
class Level:
    label: str
    concurrency: Optional[int] = None  # closed loop
    rate: Optional[float] = None  # open loop, requests/s
    latencies: list[float] = field(default_factory=list)  # seconds, successful requests only
    errors: dict[str, int] = field(default_factory=dict)  # "429", "5xx:503", "400", "timeout", ...
    sent: int = 0
    texts: int = 0
    tokens: int = 0
    capped: int = 0  # open loop: arrivals held back because --max-outstanding were in flight
    elapsed: float = 0.0


def percentile(xs: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); nan without data."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100
    lo = int(pos)
    return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (pos - lo)


# CPU features that decide which kernels oneDNN and our code run (printed next to every number).
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8", "avx512_bf16", "amx_bf16")


def cpu_flags() -> list[str]:
    """Which of CPU_FLAGS this machine has, from /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
    except OSError:
        flags = []
    return [fl for fl in CPU_FLAGS if fl in flags]


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    info: dict[str, Any] = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "cpu_flags": cpu_flags(),
        "platform": platform.platform(),
    }
    if shutil.which("nvidia-smi"):
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        )
        info["gpus"] = [g.strip() for g in out.stdout.splitlines() if g.strip()]
    return info


def load_texts(path: str, max_words: Optional[int]) -> list[str]:
    with open(path) as f:
        texts = json.load(f)
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise SystemExit(f"{path}: expected a JSON list of strings")
    texts = [t for t in texts if not max_words or len(t.split()) <= max_words]
    if not texts:
        raise SystemExit("no texts left after --max-words")
    return texts


def make_poster(
    url: str, pool: int, timeout: float, kind: str = "lean"
) -> tuple[Post, Callable[[], Awaitable[None]], str]:
    """An async `post(payload) -> (status, body)` over `pool` keep-alive connections, its close(), a name."""
    if kind == "lean":
        from http_client import LeanPoster  # benchmark/, on sys.path when run as a script

        poster = LeanPoster(url, pool, timeout)
        return poster.post, poster.close, "lean (asyncio + httptools)"
    if httpx is not None:
        client = httpx.AsyncClient(
            http1=True,
            http2=False,
            timeout=timeout,
            limits=httpx.Limits(max_connections=pool, max_keepalive_connections=pool),
        )

        async def post(payload: dict) -> tuple[Any, Optional[dict]]:
            try:
                r = await client.post(url, json=payload)
                return r.status_code, (r.json() if r.status_code == 200 else None)
            except httpx.TimeoutException:
                return "timeout", None
            except httpx.HTTPError as e:
                return f"conn:{type(e).__name__}", None
            except ValueError:
                return "bad_json", None

        return post, client.aclose, f"{httpx.__name__} {httpx.__version__}"

    from concurrent.futures import ThreadPoolExecutor

    import requests  # fallback: blocking requests in a thread pool sized to the concurrency

    session, executor = requests.Session(), ThreadPoolExecutor(max_workers=pool)
    session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=pool))

    def blocking(payload: dict) -> tuple[Any, Optional[dict]]:
        try:
            r = session.post(url, json=payload, timeout=timeout)
            return r.status_code, (r.json() if r.status_code == 200 else None)
        except requests.JSONDecodeError:
            return "bad_json", None
        except requests.Timeout:
            return "timeout", None
        except requests.RequestException as e:
            return f"conn:{type(e).__name__}", None

    async def post(payload: dict) -> tuple[Any, Optional[dict]]:
        return await asyncio.get_running_loop().run_in_executor(executor, blocking, payload)

    async def close() -> None:
        executor.shutdown(wait=True)
        session.close()

    return post, close, f"requests {requests.__version__} (thread pool)"


class Runner:
    """Builds payloads from the cycled corpus and drives one level at a time."""

    def __init__(self, args: argparse.Namespace, texts: list[str], model: Optional[str]) -> None:
        self.args, self.texts, self.model = args, texts, model
        self.cursor = 0  # position in the cycled corpus, kept across levels
        self.post: Post
        self.bar: Optional[tqdm] = None

    def payload(self) -> dict:
        k, n = self.args.texts_per_request, len(self.texts)
        batch = [self.texts[(self.cursor + j) % n] for j in range(k)]
        self.cursor = (self.cursor + k) % n
        body: dict[str, Any] = {"input": batch if k > 1 else batch[0], "encoding_format": self.args.encoding_format}
        if self.model:
            body["model"] = self.model
        return body

    async def one(self, level: Level) -> None:
        payload = self.payload()
        t0 = time.perf_counter()
        status, body = await self.post(payload)
        dt = time.perf_counter() - t0
        if status == 200 and body is not None:
            level.latencies.append(dt)
            level.texts += len(body.get("data") or [])
            level.tokens += int((body.get("usage") or {}).get("prompt_tokens") or 0)
        else:
            key = f"5xx:{status}" if isinstance(status, int) and status >= 500 else str(status)
            level.errors[key] = level.errors.get(key, 0) + 1
        if self.bar is not None:
            self.bar.update(1)

    def more(self, level: Level, start: float, limit: Optional[int]) -> bool:
        if limit is not None and level.sent >= limit:
            return False
        return self.args.duration is None or time.perf_counter() - start < self.args.duration

    async def closed_loop(self, level: Level, limit: Optional[int]) -> None:
        async def client() -> None:
            while self.more(level, start, limit):
                level.sent += 1
                await self.one(level)

        start = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(level.concurrency or 1)))
        level.elapsed = time.perf_counter() - start

    async def open_loop(self, level: Level, limit: Optional[int]) -> None:
        rng, slots, tasks = random.Random(self.args.seed), asyncio.Semaphore(self.args.max_outstanding), set()

        async def fire() -> None:
            try:
                await self.one(level)
            finally:
                slots.release()

        start = next_at = time.perf_counter()
        while self.more(level, start, limit):
            next_at += rng.expovariate(level.rate)
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            if slots.locked():  # at the cap, the arrival waits for a slot; the schedule restarts after
                level.capped += 1
            await slots.acquire()
            next_at = max(next_at, time.perf_counter())
            level.sent += 1
            task = asyncio.create_task(fire())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await asyncio.gather(*tasks)
        level.elapsed = time.perf_counter() - start

    async def run(self, levels: list[Level], pool: int) -> str:
        self.post, close, client_name = make_poster(self.args.endpoint, pool, self.args.timeout, self.args.client)
        try:
            if self.args.warmup:
                warm = Level("warmup", concurrency=min(self.args.warmup, pool))
                await self.closed_loop(warm, self.args.warmup)
                if warm.errors:
                    print(f"warmup errors: {warm.errors}", file=sys.stderr)
            for level in levels:
                with tqdm(
                    total=self.args.num_requests,
                    desc=level.label,
                    unit="req",
                    leave=False,
                    disable=self.args.no_progress,
                ) as self.bar:
                    await (self.closed_loop if level.concurrency else self.open_loop)(level, self.args.num_requests)
                row = summarize(level)
                print(f"{level.label}: {row['texts_per_s']:.1f} texts/s, p50 {row['p50_ms']:.1f} ms", file=sys.stderr)
        finally:
            self.bar = None
            await close()
        return client_name


def summarize(level: Level) -> dict[str, Any]:
    ok, el, ms = len(level.latencies), max(level.elapsed, 1e-9), [x * 1000 for x in level.latencies]
    return {
        "label": level.label,
        "concurrency": level.concurrency,
        "request_rate": level.rate,
        "requests": level.sent,
        "ok": ok,
        "capped_arrivals": level.capped,
        "elapsed_s": round(el, 3),
        "requests_per_s": ok / el,
        "texts_per_s": level.texts / el,
        "tokens_per_s": level.tokens / el,
        "p50_ms": percentile(ms, 50),
        "p90_ms": percentile(ms, 90),
        "p99_ms": percentile(ms, 99),
        "mean_ms": sum(ms) / ok if ok else float("nan"),
        "errors_429": level.errors.get("429", 0),
        "errors_5xx": sum(v for k, v in level.errors.items() if k.startswith("5xx")),
        "errors": dict(level.errors),
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    cols = [
        ("level", "label", "{}"),
        ("reqs", "requests", "{}"),
        ("ok", "ok", "{}"),
        ("texts/s", "texts_per_s", "{:.1f}"),
        ("tokens/s", "tokens_per_s", "{:.0f}"),
        ("p50 ms", "p50_ms", "{:.1f}"),
        ("p90 ms", "p90_ms", "{:.1f}"),
        ("p99 ms", "p99_ms", "{:.1f}"),
        ("429", "errors_429", "{}"),
        ("5xx", "errors_5xx", "{}"),
    ]
    heads = [c[0] for c in cols] + ["other errors"]
    cells = [
        [fmt.format(r[key]) for _, key, fmt in cols]
        + [", ".join(f"{k}:{v}" for k, v in r["errors"].items() if k != "429" and k[:3] != "5xx") or "-"]
        for r in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
    for line in [heads, *cells]:
        print("  ".join(x.rjust(w) for x, w in zip(line, widths)))


def pyplot(path: str):
    """matplotlib.pyplot on the file-only backend, or None (said on stdout) when not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed (pip install -e '.[bench]'): skipping --plot {path}")
        return None
    return plt


def plot(rows: list[dict[str, Any]], path: str, title: str) -> None:
    plt = pyplot(path)
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    x = [r["texts_per_s"] for r in rows]
    for key, style in (("p50_ms", "o-"), ("p99_ms", "s--")):
        ax.plot(x, [r[key] for r in rows], style, label=key[:3])
    for r in rows:
        ax.annotate(r["label"], (r["texts_per_s"], r["p99_ms"]), fontsize=8, textcoords="offset points", xytext=(4, 4))
    ax.set(xlabel="throughput (texts/s)", ylabel="latency (ms)", title=title, yscale="log")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def http_get(url: str, timeout: float) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, b""


def discover_model(base: str) -> Optional[str]:
    """The first id of GET /v1/models, or None (then requests carry no `model`)."""
    with contextlib.suppress(OSError, ValueError, LookupError, TypeError):
        status, body = http_get(base + "/v1/models", 10.0)
        return json.loads(body)["data"][0]["id"] if status == 200 else None
    return None


@contextlib.contextmanager
def launched_server(args: argparse.Namespace) -> Iterator[str]:
    """Run `python -m sglang.launch_server` on a free port until the block ends; yields its base URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    extra = shlex.split(args.server_args)
    if not args.no_auto_truncate and "--allow-auto-truncate" not in extra:
        extra.append("--allow-auto-truncate")
    cmd = [sys.executable, "-m", "sglang.launch_server", "--port", str(port), "--log-level", "warning", *extra]
    log = tempfile.NamedTemporaryFile(prefix="bench_server_", suffix=".log", delete=False)
    print(f"launching: {shlex.join(cmd)}  (log: {log.name})")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base, ok = f"http://127.0.0.1:{port}", False
    try:
        deadline = time.monotonic() + args.launch_timeout
        while proc.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if http_get(base + "/health", 2.0)[0] == 200:
                    break
            time.sleep(0.5)
        else:
            why = f"exited with {proc.returncode}" if proc.poll() is not None else "did not become healthy"
            with open(log.name, errors="replace") as f:
                raise SystemExit(f"server {why} during start-up; end of its log:\n{''.join(f.readlines()[-30:])}")
        yield base
        ok = True
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
        if ok:
            os.unlink(log.name)


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--url", default="http://127.0.0.1:30000", help="base URL (or the full .../v1/embeddings)")
    p.add_argument("--model", default=None, help="model name to send (default: first id of GET /v1/models)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--concurrency", default="1,8,64", help="closed loop: comma-separated client counts")
    g.add_argument("--request-rate", default=None, help="open loop: comma-separated requests/s (Poisson)")
    p.add_argument("--max-outstanding", type=int, default=256, help="open loop: cap on requests in flight")
    p.add_argument(
        "--num-requests",
        type=int,
        default=None,
        help="requests per level (default 200 without --duration; with both, whichever ends first)",
    )
    p.add_argument("--duration", type=float, default=None, help="seconds per level")
    p.add_argument("--warmup", type=int, default=16, help="requests sent and discarded before the first level")
    p.add_argument("--texts-per-request", type=int, default=1, help="texts in each request's input")
    p.add_argument("--dataset", default=DEFAULT_TEXTS, help="JSON list of texts")
    p.add_argument("--max-words", type=int, default=None, help="drop texts longer than this many words")
    p.add_argument("--encoding-format", default="float", choices=["float", "base64"])
    p.add_argument("--timeout", type=float, default=120.0, help="per-request timeout, seconds")
    p.add_argument("--seed", type=int, default=0, help="seed of the Poisson arrivals")
    p.add_argument("--output-json", default=None, help="write all levels, the machine and the command here")
    p.add_argument("--plot", default=None, help="PNG of p50/p99 latency vs throughput (needs matplotlib)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--client",
        default=CLIENTS[0],
        choices=CLIENTS,
        help="lean: asyncio + httptools on uvloop (least CPU); httpx: the general-purpose client",
    )
    p.add_argument("--launch", action="store_true", help="start our server on a free port; stop it at the end")
    p.add_argument("--server-args", default="", help='extra flags for the launched server, e.g. "--dtype bfloat16"')
    p.add_argument(
        "--no-auto-truncate",
        action="store_true",
        help="do not give the launched server --allow-auto-truncate (long texts then get 400)",
    )
    p.add_argument("--launch-timeout", type=float, default=600.0, help="seconds to wait for /health")
    args = p.parse_args(argv)
    if args.num_requests is None and args.duration is None:
        args.num_requests = 200
    if args.texts_per_request < 1 or args.max_outstanding < 1:
        p.error("--texts-per-request and --max-outstanding must be at least 1")
    try:
        if args.request_rate:
            args.levels = [Level(f"rate={r:g}/s", rate=r) for r in map(float, args.request_rate.split(","))]
            args.pool = args.max_outstanding
        else:
            args.levels = [Level(f"c={c}", concurrency=c) for c in map(int, args.concurrency.split(","))]
            args.pool = max(lv.concurrency for lv in args.levels)
    except ValueError:
        p.error("--concurrency / --request-rate take comma-separated numbers")
    if any((lv.rate or lv.concurrency or 0) <= 0 for lv in args.levels):
        p.error("concurrency levels and request rates must be positive")
    return args


def run_event_loop(coro, fast: bool):
    """asyncio.run, on uvloop when asked for and installed (it is a server dependency)."""
    if fast:
        try:
            import uvloop
        except ImportError:
            return asyncio.run(coro)
        loop = uvloop.new_event_loop()
        try:
            return loop.run_until_complete(coro)
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
    return asyncio.run(coro)


def main(argv: Optional[list[str]] = None) -> None:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that a launched server is stopped too
    texts = load_texts(args.dataset, args.max_words)
    levels: list[Level] = args.levels
    with launched_server(args) if args.launch else contextlib.nullcontext(args.url) as base:
        base = base.rstrip("/").removesuffix("/v1/embeddings")
        args.endpoint = base + "/v1/embeddings"
        note = (
            "our server, launched with --allow-auto-truncate"
            if args.launch and not args.no_auto_truncate
            else "texts sent as is (no client-side truncation)"
        )
        model = args.model or discover_model(base)
        machine = machine_info()
        print(
            f"{args.endpoint}  model={model}  {len(texts)} texts from {args.dataset}, "
            f"{args.texts_per_request}/request\n{note}\n"
            f"machine: {machine['cpu']}, {machine['cores']} cores {' '.join(machine.get('gpus', []))}"
        )
        client = run_event_loop(Runner(args, texts, model).run(levels, args.pool), args.client == "lean")
    rows = [summarize(lv) for lv in levels]
    print(f"\nclient: {client}")
    print_table(rows)
    if args.output_json:
        config = {k: v for k, v in vars(args).items() if k not in ("endpoint", "levels", "pool")}
        with open(args.output_json, "w") as f:
            json.dump(
                {
                    "command": shlex.join([sys.executable, *sys.argv]),
                    "machine": machine,
                    "url": args.endpoint,
                    "model": model,
                    "client": client,
                    "note": note,
                    "config": config,
                    "levels": rows,
                },
                f,
                indent=2,
            )
        print(f"wrote {args.output_json}")
    if args.plot:
        plot(rows, args.plot, f"{model} @ {base}, {args.texts_per_request} text(s)/request")


if __name__ == "__main__":
    main()
