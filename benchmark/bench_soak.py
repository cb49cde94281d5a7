"""Soak under mixed-size traffic: does the scheduler's memory stay flat, and at what speed?

    flock /work/.heavy.lock python benchmark/bench_soak.py --output-json soak.json --plot soak.png
    python benchmark/bench_soak.py --tiny-decoder /tmp/soak-qwen3     # a random-weight Qwen3, built once
    python benchmark/bench_soak.py --server-args "--dp-size 2"        # any extra server flags

Load: --clients closed-loop clients (8), each request holding a random number of texts drawn from
--sizes (1,1,2,4,8,16,32,64,128) out of the corpus (test/data/texts.json, ~10-250 tokens each), on
our server launched on a free loopback port with --allow-auto-truncate.

1. A/B (--ab-rounds, --ab-seconds): a fresh server per side, the baseline (--baseline-args,
   default `--cpu-allocator off`: the behaviour before the memory set-up) and the server as
   configured, alternated, same load and seed; prints texts/s per side and the ratio.
2. Soak: one server, --warmup seconds (120) then --duration seconds (1200). The RSS of every
   process (HTTP, scheduler, detokenizer) is sampled every --interval seconds (10), printed as a
   table (a row a minute) and drawn to --plot. Exits 1 when a scheduler's RSS grew more than
   --max-growth (0.15) from just after the warm-up to the end of the run (medians of the first
   --window seconds (120) after the warm-up and of the last --window seconds), or when any
   request failed. Two minutes, not one: a scheduler's samples swing by up to a third with the
   batch in flight, and a median of six of them moved a flat run's verdict by 10 points.
3. One big request (--big-request texts, 2048), on a fresh server per A/B side: the scheduler's
   RSS before it, at its peak, and --settle seconds (30) after the answer, i.e. what one request
   leaves pinned.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shlex
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_serving import DEFAULT_TEXTS, launched_server, load_texts, machine_info, pyplot, run_event_loop  # noqa: E402
from http_client import LeanPoster  # noqa: E402
from rss_sampler import Growth, RssLog, cpu_seconds, growth, server_processes  # noqa: E402

DEFAULT_SIZES = "1,1,2,4,8,16,32,64,128"


@dataclass
class LoadStats:
    requests: int = 0
    texts: int = 0
    tokens: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    elapsed: float = 0.0

    def row(self) -> dict[str, Any]:
        el = max(self.elapsed, 1e-9)
        return {
            "requests": self.requests,
            "texts": self.texts,
            "tokens": self.tokens,
            "elapsed_s": round(el, 1),
            "requests_per_s": self.requests / el,
            "texts_per_s": self.texts / el,
            "tokens_per_s": self.tokens / el,
            "errors": dict(self.errors),
        }


async def mixed_load(
    url: str, texts: list[str], sizes: list[int], clients: int, seconds: float, seed: int, timeout: float = 300.0
) -> LoadStats:
    """`clients` closed-loop clients for `seconds`; request sizes and texts drawn from a seeded RNG."""
    poster = LeanPoster(url.rstrip("/") + "/v1/embeddings", clients, timeout)
    stats = LoadStats()
    deadline = time.perf_counter() + seconds

    async def client(rng: random.Random) -> None:
        while time.perf_counter() < deadline:
            k = rng.choice(sizes)
            batch = [texts[rng.randrange(len(texts))] for _ in range(k)]
            status, body = await poster.post({"input": batch if k > 1 else batch[0]})
            if status == 200 and body is not None:
                stats.requests += 1
                stats.texts += len(body.get("data") or [])
                stats.tokens += int((body.get("usage") or {}).get("prompt_tokens") or 0)
            else:
                stats.errors[str(status)] = stats.errors.get(str(status), 0) + 1

    start = time.perf_counter()
    try:
        await asyncio.gather(*(client(random.Random(seed * 1000 + i)) for i in range(clients)))
    finally:
        await poster.close()
    stats.elapsed = time.perf_counter() - start
    return stats


def server_pid_for_port(port: int) -> int:
    """The pid of the `sglang.launch_server --port PORT` process (the HTTP process)."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"sglang.launch_server" in argv and b"--port" in argv and str(port).encode() in argv:
            return int(name)
    raise RuntimeError(f"no sglang.launch_server process on port {port}")


def random_qwen3(path: str, **config) -> str:
    """A random-weight Qwen3 with last-token pooling and the given config fields, built in `path`
    like the tests' tiny models unless one is there already; returns `path`."""
    if not os.path.isfile(os.path.join(path, "config.json")):
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
        from test.helpers.tiny_models import build_tiny_decoder as build

        build(path, "qwen3", st_pooling="lasttoken", **config)
    return path


def build_tiny_decoder(path: str) -> str:
    """A random-weight Qwen3 of MiniLM's size (6 layers, hidden 384, MLP 1536, 6 heads of 64, 2 KV
    heads, last-token pooling); server flags that serve it."""
    random_qwen3(
        path,
        hidden_size=384,
        intermediate_size=1536,
        num_hidden_layers=6,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=512,
    )
    return f"--model-path {shlex.quote(path)} --is-embedding"


def launch(server_args: str, timeout: float):
    ns = argparse.Namespace(server_args=server_args, no_auto_truncate=False, launch_timeout=timeout)
    return launched_server(ns)


def load(args: argparse.Namespace, url: str, seconds: float, seed: int) -> LoadStats:
    return run_event_loop(mixed_load(url, args.texts, args.sizes, args.clients, seconds, seed), True)


def run_ab(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Baseline vs configured, alternated; each side a fresh server, a short warm-up, then the same load."""
    sides = {"baseline": f"{args.server_args} {args.baseline_args}".strip(), "configured": args.server_args}
    rows = []
    for r in range(args.ab_rounds):
        order = ("baseline", "configured") if r % 2 == 0 else ("configured", "baseline")
        for side in order:
            with launch(sides[side], args.launch_timeout) as url:
                pid = server_pid_for_port(int(url.rsplit(":", 1)[1]))
                load(args, url, args.ab_warmup, seed=999)
                schedulers = [p for role, p in server_processes(pid).items() if role.startswith("scheduler")]
                cpu_before = sum(cpu_seconds(p) or 0.0 for p in schedulers)
                stats = load(args, url, args.ab_seconds, seed=args.seed + r)
                cpu = sum(cpu_seconds(p) or 0.0 for p in schedulers) - cpu_before
                rss = RssLog(pid).sample()
            row = {
                "round": r + 1,
                "side": side,
                "server_args": sides[side],
                **stats.row(),
                "scheduler_cpu_s": round(cpu, 1),
                "tokens_per_scheduler_cpu_s": stats.tokens / max(cpu, 1e-9),
                "scheduler_rss_mb": rss.get("scheduler"),
            }
            rows.append(row)
            print(
                f"A/B round {r + 1} {side:10s}: {row['texts_per_s']:.1f} texts/s, {row['tokens_per_s']:.0f} "
                f"tokens/s, {row['tokens_per_scheduler_cpu_s']:.0f} tokens per scheduler CPU-second, "
                f"scheduler RSS {row['scheduler_rss_mb'] or 0:.0f} MB",
                flush=True,
            )
    return rows


def ab_summary(rows: list[dict[str, Any]]) -> Optional[dict[str, float]]:
    """Throughput of each side over all its rounds (tokens/s, the work done) and configured / baseline."""
    tot, per_cpu = {}, {}
    for side in ("baseline", "configured"):
        mine = [r for r in rows if r["side"] == side]
        if not mine:
            return None
        tot[side] = sum(r["tokens"] for r in mine) / sum(r["elapsed_s"] for r in mine)
        per_cpu[side] = sum(r["tokens"] for r in mine) / max(sum(r["scheduler_cpu_s"] for r in mine), 1e-9)
    return {
        "baseline_tokens_per_s": tot["baseline"],
        "configured_tokens_per_s": tot["configured"],
        "ratio": tot["configured"] / tot["baseline"],
        "baseline_tokens_per_cpu_s": per_cpu["baseline"],
        "configured_tokens_per_cpu_s": per_cpu["configured"],
        "cpu_ratio": per_cpu["configured"] / per_cpu["baseline"],
    }


def run_soak(args: argparse.Namespace) -> tuple[RssLog, LoadStats]:
    with launch(args.server_args, args.launch_timeout) as url:
        log = RssLog(server_pid_for_port(int(url.rsplit(":", 1)[1])), args.interval).start()
        try:
            stats = load(args, url, args.warmup + args.duration, seed=args.seed)
        finally:
            log.stop()
    return log, stats


def run_big_request(args: argparse.Namespace) -> list[dict[str, Any]]:
    """One request of --big-request texts per side; RSS before, peak, and after --settle seconds."""
    import urllib.request

    rows = []
    sides = {"baseline": f"{args.server_args} {args.baseline_args}".strip(), "configured": args.server_args}
    for side, flags in sides.items():
        with launch(flags, args.launch_timeout) as url:
            log = RssLog(server_pid_for_port(int(url.rsplit(":", 1)[1])), 1.0).start()
            time.sleep(3)
            before = log.samples[-1][1].get("scheduler", 0.0)
            rng = random.Random(args.seed)
            body = json.dumps(
                {"input": [args.texts[rng.randrange(len(args.texts))] for _ in range(args.big_request)]}
            ).encode()
            req = urllib.request.Request(url + "/v1/embeddings", body, {"Content-Type": "application/json"})
            start = time.monotonic()
            with urllib.request.urlopen(req, timeout=args.launch_timeout) as r:
                status, _ = r.status, r.read()
            took = time.monotonic() - start
            time.sleep(args.settle)
            log.stop()
        peak = max(mb for _, mb in log.series("scheduler"))
        row = {
            "side": side,
            "server_args": flags,
            "status": status,
            "seconds": round(took, 1),
            "before_mb": before,
            "peak_mb": peak,
            "after_mb": log.samples[-1][1].get("scheduler"),
        }
        rows.append(row)
        print(
            f"one {args.big_request}-input request, {side:10s}: status {status} in {took:.0f} s; scheduler "
            f"{before:.0f} MB before, peak {peak:.0f}, {row['after_mb']:.0f} MB {args.settle:.0f} s after",
            flush=True,
        )
    return rows


def print_rss_table(log: RssLog, every: float) -> None:
    roles = log.roles()
    print("RSS (MB) of every server process")
    print("  ".join(f"{h:>11s}" for h in ["t (s)", *roles]))
    next_t = 0.0
    for i, (t, row) in enumerate(log.samples):
        if t + 1e-6 >= next_t or i == len(log.samples) - 1:
            print("  ".join([f"{t:11.0f}", *(f"{row[r]:11.0f}" if r in row else f"{'-':>11s}" for r in roles)]))
            next_t = t + every


def plot_rss(log: RssLog, warmup: float, path: str, title: str) -> None:
    plt = pyplot(path)
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for role in log.roles():
        pts = log.series(role)
        ax.plot([t / 60 for t, _ in pts], [mb for _, mb in pts], label=role)
    ax.axvspan(0, warmup / 60, color="0.9", label="warm-up")
    ax.set(xlabel="minutes", ylabel="RSS (MB)", title=title, ylim=(0, None))
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def verdicts(log: RssLog, warmup: float, max_growth: float, window: float) -> tuple[list[Growth], bool]:
    out = [g for role in log.roles() if (g := growth(log.series(role), warmup, window, role)) is not None]
    schedulers = [g for g in out if g.role.startswith("scheduler")]
    return out, bool(schedulers) and all(g.ratio <= max_growth for g in schedulers)


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--server-args", default="", help="extra flags for the server (both A/B sides and the soak)")
    p.add_argument("--baseline-args", default="--cpu-allocator off", help="added to the A/B baseline side")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--sizes", default=DEFAULT_SIZES, help="texts per request, drawn uniformly from this list")
    p.add_argument("--dataset", default=DEFAULT_TEXTS)
    p.add_argument("--warmup", type=float, default=120.0, help="soak seconds before the baseline RSS")
    p.add_argument("--duration", type=float, default=1200.0, help="soak seconds after the warm-up")
    p.add_argument("--interval", type=float, default=10.0, help="seconds between RSS samples")
    p.add_argument("--max-growth", type=float, default=0.15, help="allowed scheduler RSS growth after warm-up")
    p.add_argument(
        "--window", type=float, default=120.0, help="seconds whose median is the RSS after warm-up / at the end"
    )
    p.add_argument("--ab-rounds", type=int, default=2, help="A/B rounds (each runs both sides); 0: no A/B")
    p.add_argument("--ab-seconds", type=float, default=90.0, help="measured seconds per A/B side")
    p.add_argument("--ab-warmup", type=float, default=15.0, help="load before each A/B measurement")
    p.add_argument("--big-request", type=int, default=2048, help="texts in the single big request; 0: skip")
    p.add_argument("--settle", type=float, default=30.0, help="seconds after the big request before its RSS")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--tiny-decoder",
        default=None,
        metavar="DIR",
        help="serve a random-weight Qwen3 of MiniLM's size from DIR (built there when missing)",
    )
    p.add_argument("--launch-timeout", type=float, default=600.0)
    p.add_argument("--output-json", default=None)
    p.add_argument("--plot", default=None, help="PNG of RSS over time (needs matplotlib, the bench extra)")
    args = p.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",")]
    if args.clients < 1 or min(args.sizes) < 1 or args.warmup < 60 or args.duration < 60:
        p.error("--clients and --sizes must be positive; --warmup and --duration at least 60 s")
    if not args.interval <= args.window <= args.duration / 2:
        p.error("--window must be at least --interval and at most half of --duration")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    args.texts = load_texts(args.dataset, None)
    if args.tiny_decoder:
        args.server_args = f"{build_tiny_decoder(args.tiny_decoder)} {args.server_args}".strip()
    machine = machine_info()
    print(
        f"machine: {machine['cpu']}, {machine['cores']} cores, CPU flags {' '.join(machine['cpu_flags'])}; "
        f"load: {args.clients} clients, sizes {args.sizes}; server args: {args.server_args or '(defaults)'}",
        flush=True,
    )
    ab = run_ab(args) if args.ab_rounds else []
    summary = ab_summary(ab)
    if summary:
        print(
            f"A/B: baseline {summary['baseline_tokens_per_s']:.0f} tokens/s, configured "
            f"{summary['configured_tokens_per_s']:.0f} tokens/s, ratio {summary['ratio']:.3f}; per scheduler "
            f"CPU-second: baseline {summary['baseline_tokens_per_cpu_s']:.0f} tokens, configured "
            f"{summary['configured_tokens_per_cpu_s']:.0f}, ratio {summary['cpu_ratio']:.3f}",
            flush=True,
        )
    big = run_big_request(args) if args.big_request else []
    log, stats = run_soak(args)
    print_rss_table(log, 60.0)
    results, ok = verdicts(log, args.warmup, args.max_growth, args.window)
    for g in results:
        print(
            f"{g.role}: {g.baseline_mb:.0f} MB after warm-up -> {g.final_mb:.0f} MB at the end "
            f"({g.ratio:+.1%}), peak {g.peak_mb:.0f} MB"
        )
    soak = stats.row()
    print(
        f"soak: {soak['requests']} requests, {soak['texts']} texts, {soak['tokens_per_s']:.0f} tokens/s, "
        f"errors {soak['errors'] or 'none'}"
    )
    if not ok:
        print(f"FAIL: scheduler RSS grew more than {args.max_growth:.0%} after the warm-up")
    if stats.errors or any(r["errors"] for r in ab) or any(r["status"] != 200 for r in big):
        ok = False
        print("FAIL: requests failed")
    if args.plot:
        plot_rss(log, args.warmup, args.plot, f"mixed-size soak, {args.clients} clients {args.server_args}".strip())
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump(
                {
                    "command": shlex.join([sys.executable, *sys.argv]),
                    "machine": machine,
                    "server_args": args.server_args,
                    "ab": ab,
                    "ab_summary": summary,
                    "big_request": big,
                    "soak": soak,
                    "growth": [g.__dict__ | {"ratio": g.ratio} for g in results],
                    "passed": ok,
                    "rss_samples": log.samples,
                },
                f,
                indent=1,
            )
        print(f"wrote {args.output_json}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
