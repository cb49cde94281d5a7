"""Two models in one server against one server per model, under the same mixed load (issue #31).

    python benchmark/bench_several_models.py [--second cross-encoder|embedder] [--clients 8]
        [--duration 20] [--rounds 2] [--sessions shared|own] [--server-args "..."] [--output-json out.json]
    python benchmark/bench_several_models.py --b-layout one-server --b-server-args "--cpu-threads 1"

Setup A is one server holding both models (a --models-config file); setup B is two single-model
servers on two ports, each with the same model and options. Every server gets every core (no
pinning in either setup), so in both setups two schedulers share the same cores. Model 1 is the
bundled embedder (all-MiniLM-L6-v2); model 2 is, by default, a cross-encoder of MiniLM-L6's shape
(cross-encoder/ms-marco-MiniLM-L-6-v2's: MiniLM's encoder weights with a seeded random one-label
head, built in a temporary folder: no weights can be downloaded here, and the cost per pair and the
memory are the real model's), or with --second embedder the bundled embedder again under a second
name. All three servers start once and stay up; the load then runs on A and B in turn, round by
round in the order A B B A A B ..., so that a noisy minute of the shared machine hits both.
`--b-layout one-server --b-server-args FLAGS` makes B the same two-model server with FLAGS added:
one layout, two settings (the second command above: torch threads per model).
By default the servers stay in this script's session: with Linux's autogroup scheduling
(/proc/sys/kernel/sched_autogroup_enabled) each session is one CPU share against the machine's other
work, and servers in sessions of their own hand setup B two shares to A's one on a busy machine
(--sessions own measures exactly that).

The load: --clients closed-loop clients (benchmark/http_client.py's lean poster), half of them
sending /v1/embeddings (--embed-texts texts, base64) to model 1, half sending /v1/rerank (a query
and --rerank-docs documents) or /v1/embeddings to model 2, for --duration seconds per round.
Printed per model and setup: texts/s (documents/s for rerank), p50 and p95 latency (medians over
rounds) and the A/B ratios; the CPU the measured setup used; and the memory of every process of
each setup (RSS and PSS from /proc/<pid>/smaps_rollup: RSS counts a shared library once per process
that maps it, PSS splits it between them, so the PSS sum is what the setup really takes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_http_cpu  # noqa: E402  (benchmark/ is not a package)
import bench_serving  # noqa: E402
from bench_http_cpu import Variant, cpu_seconds, process_tree  # noqa: E402
from http_client import LeanPoster  # noqa: E402
from rss_sampler import memory_mb  # noqa: E402

SETUPS = ("A", "B")


def setup_names(args: argparse.Namespace) -> dict[str, str]:
    b = "one server, two models" if args.b_layout == "one-server" else "two servers, one model each"
    return {"A": "one server, two models", "B": f"{b} {args.b_server_args}".strip()}


@dataclass(frozen=True)
class Model:
    """One served model: its name, checkpoint, and the route the load sends it."""

    name: str
    path: str
    route: str  # "embed" (/v1/embeddings) or "rerank" (/v1/rerank)


@dataclass
class Setup:
    key: str
    servers: list[Variant]
    urls: dict[str, str]  # model name -> base URL of the server that serves it
    rounds: list[dict[str, dict[str, Any]]] = field(default_factory=list)  # per round: model -> summary
    cores: list[dict[str, float]] = field(default_factory=list)  # per round: role -> cores its processes used
    cpu_s: list[float] = field(default_factory=list)  # per round: CPU seconds of all its processes
    memory: list[dict[str, Any]] = field(default_factory=list)  # per process after the load: role, rss_mb, pss_mb
    memory_start: list[dict[str, Any]] = field(default_factory=list)  # the same, once every server is up


def round_order(rounds: int) -> list[str]:
    """A B B A A B ...: each setup goes first as often as the other, so a drift in the machine's load
    over the run weighs on both alike."""
    return [k for r in range(rounds) for k in (SETUPS if r % 2 == 0 else SETUPS[::-1])]


def build_cross_encoder(out_dir: str, embedder: str, seed: int = 0) -> str:
    """MiniLM-L6's encoder with a seeded random one-label classification head, saved with its tokenizer:
    ms-marco-MiniLM-L-6-v2's architecture and size. Its scores mean nothing; its cost is the real one."""
    import torch
    from transformers import BertForSequenceClassification
    from transformers import logging as hf_logging

    hf_logging.set_verbosity_error()  # "newly initialized classifier": intended
    torch.manual_seed(seed)
    model = BertForSequenceClassification.from_pretrained(embedder, num_labels=1, id2label={0: "relevant"})
    model.save_pretrained(out_dir)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if os.path.exists(os.path.join(embedder, name)):
            shutil.copy(os.path.join(embedder, name), out_dir)
    return out_dir


def plan_models(second: str, workdir: str) -> list[Model]:
    from sglang.srt.server_args import default_model_path

    embedder = default_model_path()
    if second == "embedder":
        return [Model("embed", embedder, "embed"), Model("embed-2", embedder, "embed")]
    path = build_cross_encoder(os.path.join(workdir, "cross-encoder"), embedder)
    return [Model("embed", embedder, "embed"), Model("rerank", path, "rerank")]


def server_commands(
    models: list[Model], workdir: str, server_args: str, b_layout: str = "per-model", b_server_args: str = ""
) -> dict[str, list[list[str]]]:
    """Setup -> the command line of each of its servers ({port} filled in at start). B is one server
    per model unless `b_layout` is "one-server" (then B differs from A by `b_server_args` alone)."""
    head = [sys.executable, "-m", "sglang.launch_server", "--port", "{port}", "--log-level", "warning"]
    extra = shlex.split(server_args)
    if "--allow-auto-truncate" not in extra:
        extra.append("--allow-auto-truncate")  # long corpus texts are cut, not refused, in both setups
    config = os.path.join(workdir, "models.json")
    with open(config, "w") as f:
        json.dump([{"model-path": m.path, "served-model-name": m.name} for m in models], f)
    b_extra = [*extra, *shlex.split(b_server_args)]
    if b_layout == "one-server":
        b = [[*head, "--models-config", config, *b_extra]]
    else:
        b = [[*head, "--model-path", m.path, "--served-model-name", m.name, *b_extra] for m in models]
    return {"A": [[*head, "--models-config", config, *extra]], "B": b}


def payload(model: Model, texts: list[str], i: int, embed_texts: int, rerank_docs: int) -> tuple[str, dict]:
    """(path, body) of request number i to this model; texts are taken from the corpus in turn."""
    n = len(texts)
    if model.route == "rerank":
        docs = [texts[(i * (rerank_docs + 1) + 1 + j) % n] for j in range(rerank_docs)]
        return "/v1/rerank", {"model": model.name, "query": texts[(i * (rerank_docs + 1)) % n], "documents": docs}
    batch = [texts[(i * embed_texts + j) % n] for j in range(embed_texts)]
    body = {"model": model.name, "input": batch if embed_texts > 1 else batch[0], "encoding_format": "base64"}
    return "/v1/embeddings", body


def texts_answered(body: dict) -> int:
    """Texts a 200 answer covers: embeddings' `data` rows, or rerank's scored documents."""
    return len(body.get("data") or body.get("results") or [])


async def mixed_load(setup: Setup, models: list[Model], texts: list[str], args: argparse.Namespace, seconds: float):
    """--clients closed-loop clients split evenly over the models, for `seconds`; model -> Level."""
    per_model = max(1, args.clients // len(models))
    levels = {m.name: bench_serving.Level(m.name, concurrency=per_model) for m in models}
    posters = {}
    for m in models:
        path, _ = payload(m, texts, 0, args.embed_texts, args.rerank_docs)
        posters[m.name] = LeanPoster(setup.urls[m.name] + path, per_model, args.timeout)
    counter = {m.name: 0 for m in models}
    start = time.perf_counter()

    async def client(m: Model) -> None:
        level, poster = levels[m.name], posters[m.name]
        while time.perf_counter() - start < seconds:
            i = counter[m.name] = counter[m.name] + 1
            _, body = payload(m, texts, i, args.embed_texts, args.rerank_docs)
            t0 = time.perf_counter()
            status, answer = await poster.post(body)
            level.sent += 1
            if status == 200 and answer is not None:
                level.latencies.append(time.perf_counter() - t0)
                level.texts += texts_answered(answer)
            else:
                key = f"5xx:{status}" if isinstance(status, int) and status >= 500 else str(status)
                level.errors[key] = level.errors.get(key, 0) + 1

    try:
        await asyncio.gather(*(client(m) for m in models for _ in range(per_model)))
    finally:
        for poster in posters.values():
            await poster.close()
    for level in levels.values():
        level.elapsed = time.perf_counter() - start
    return levels


def summarize(level: bench_serving.Level) -> dict[str, Any]:
    row = bench_serving.summarize(level)
    row["texts"] = level.texts
    row["p95_ms"] = bench_serving.percentile([x * 1000 for x in level.latencies], 95)
    return row


def role(name: str) -> str:
    """A process's role from its name (process_tree's: the launched one is `http (main)`)."""
    if name == "http (main)":
        return "http"
    if name.startswith("sglang-sched"):
        return "scheduler"
    if name.startswith("sglang-detok"):
        return "detokenizer"
    if name.startswith("sglang-http-"):
        return "http worker"
    return "other"  # multiprocessing's resource tracker, compilers


def setup_memory(setup: Setup) -> list[dict[str, Any]]:
    """Every process of every server of the setup: server index, role, RSS and PSS in MB."""
    rows = []
    for index, server in enumerate(setup.servers):
        for pid, name in sorted(process_tree(server.proc.pid).items()):
            mem = memory_mb(pid)
            if mem is not None:
                rows.append({"server": index, "role": role(name), "rss_mb": mem[0], "pss_mb": mem[1]})
    return rows


def setup_cpu(setup: Setup) -> dict[str, float]:
    """CPU seconds used so far by the setup's processes, summed by role (both servers' schedulers together)."""
    total: dict[str, float] = {}
    for server in setup.servers:
        for pid, name in process_tree(server.proc.pid).items():
            with contextlib.suppress(OSError):
                total[role(name)] = total.get(role(name), 0.0) + cpu_seconds(pid)
    return total


def one_round(setup: Setup, models: list[Model], texts: list[str], args: argparse.Namespace) -> None:
    before, t0 = setup_cpu(setup), time.monotonic()
    levels = bench_serving.run_event_loop(mixed_load(setup, models, texts, args, args.duration), True)
    after, wall = setup_cpu(setup), time.monotonic() - t0
    setup.cores.append({r: (after[r] - before.get(r, 0.0)) / wall for r in after})
    setup.cpu_s.append(sum(after.values()) - sum(before.values()))
    setup.rounds.append({name: summarize(level) for name, level in levels.items()})
    setup.memory = setup_memory(setup)  # after load: pools and caches are filled
    line = ", ".join(
        f"{n} {r['texts_per_s']:.1f} texts/s p50 {r['p50_ms']:.1f} ms" for n, r in setup.rounds[-1].items()
    )
    print(f"  {setup.key}: {line}, {sum(setup.cores[-1].values()):.2f} cores", flush=True)


def table(setups: dict[str, Setup], models: list[Model]) -> list[dict[str, Any]]:
    """Per model and setup: medians over rounds of texts/s, p50, p95; errors summed; then A/B."""
    out = []
    for m in models:
        med = {}
        for key, setup in setups.items():
            rows = [r[m.name] for r in setup.rounds]
            med[key] = {
                "model": m.name,
                "setup": key,
                "texts_per_s": statistics.median(r["texts_per_s"] for r in rows),
                "p50_ms": statistics.median(r["p50_ms"] for r in rows),
                "p95_ms": statistics.median(r["p95_ms"] for r in rows),
                "errors": sum(r["requests"] - r["ok"] for r in rows),
                "rounds": [round(r["texts_per_s"], 1) for r in rows],
            }
            out.append(med[key])
        a, b = med["A"], med["B"]
        out.append({"model": m.name, "setup": "A/B", **{k: a[k] / b[k] for k in ("texts_per_s", "p50_ms", "p95_ms")}})
    return out


def cpu_summary(setup: Setup) -> dict[str, Any]:
    """Median over rounds of the cores each role used and of all models' texts per CPU-second of the
    setup's processes: on a shared machine the steadier measure (wall-clock texts/s move with the
    neighbours' load, the server's CPU per text much less)."""
    roles = sorted({r for c in setup.cores for r in c})
    per_round = [sum(r["texts"] for r in rnd.values()) / max(s, 1e-9) for rnd, s in zip(setup.rounds, setup.cpu_s)]
    return {
        "roles": {r: statistics.median(c.get(r, 0.0) for c in setup.cores) for r in roles},
        "total": statistics.median(sum(c.values()) for c in setup.cores),
        "texts_per_cpu_s": statistics.median(per_round),
    }


def describe(proc: dict[str, Any], several_servers: bool) -> str:
    where = f"server {proc['server']} " if several_servers else ""
    return f"{where}{proc['role']} {proc['rss_mb']:.0f} / {proc['pss_mb']:.0f}"


def memory_totals(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {"rss_mb": sum(r["rss_mb"] for r in rows), "pss_mb": sum(r["pss_mb"] for r in rows)}


def autogroup() -> str:
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
            return "on" if f.read().strip() == "1" else "off"
    except OSError:
        return "unknown"


def report(setups: dict[str, Setup], models: list[Model], args: argparse.Namespace) -> dict[str, Any]:
    machine = bench_serving.machine_info()
    flags = " ".join(machine["cpu_flags"]) or "none listed"
    print(f"\nmachine: {machine['cpu']}, {machine['cores']} cores, flags: {flags}")
    routes = ", ".join(f"{m.name} ({m.route})" for m in models)
    load = os.getloadavg()[0]
    print(f"servers' sessions: {args.sessions}; autogroup scheduling: {autogroup()}; 1-min load average now {load:.1f}")
    print(
        f"load: {args.clients} clients split over {routes}; {args.embed_texts} text(s) per embeddings request, "
        f"{args.rerank_docs} documents per rerank; {args.duration:g} s per round, {args.rounds} round(s) per setup"
    )
    rows, names = table(setups, models), setup_names(args)
    width = max(len(n) for n in names.values()) + 3
    print(f"{'model':<10}{'setup':<{width}}{'texts/s':>9}{'p50 ms':>9}{'p95 ms':>9}{'errors':>8}  rounds")
    for r in rows:
        if r["setup"] == "A/B":
            print(f"{r['model']:<10}{'A/B':<{width}}{r['texts_per_s']:>9.2f}{r['p50_ms']:>9.2f}{r['p95_ms']:>9.2f}")
        else:
            name = f"{r['setup']} {names[r['setup']]}"
            print(
                f"{r['model']:<10}{name:<{width}}{r['texts_per_s']:>9.1f}{r['p50_ms']:>9.1f}{r['p95_ms']:>9.1f}"
                f"{r['errors']:>8}  {r['rounds']}"
            )
    cpu = {key: cpu_summary(setup) for key, setup in setups.items()}
    print("\ncores used while loaded, by process role (medians of rounds), and texts per CPU-second of the server:")
    for key, c in cpu.items():
        roles = ", ".join(f"{r} {v:.2f}" for r, v in c["roles"].items())
        print(f"  {key}: {roles}; total {c['total']:.2f} cores, {c['texts_per_cpu_s']:.1f} texts/CPU-s")
    print(f"  A/B texts/CPU-s: {cpu['A']['texts_per_cpu_s'] / cpu['B']['texts_per_cpu_s']:.2f}")
    totals = {}
    for when, attr in (("started, before any request", "memory_start"), ("after the load", "memory")):
        print(f"\nmemory {when}, MB (RSS / PSS: PSS splits shared pages between the processes mapping them):")
        totals[attr] = {}
        for key, setup in setups.items():
            found = getattr(setup, attr)
            procs = "; ".join(describe(r, len(setup.servers) > 1) for r in found)
            totals[attr][key] = memory_totals(found)
            print(f"  {key}: {procs}")
            print(f"  {key} total: RSS {totals[attr][key]['rss_mb']:.0f}, PSS {totals[attr][key]['pss_mb']:.0f}")
        a, b = totals[attr]["A"], totals[attr]["B"]
        print(f"  A/B: RSS {a['rss_mb'] / b['rss_mb']:.2f}, PSS {a['pss_mb'] / b['pss_mb']:.2f}")
    return {
        "command": shlex.join([sys.executable, *sys.argv]),
        "machine": machine,
        "args": vars(args),
        "autogroup": autogroup(),
        "load_average_1min": load,
        "models": [vars(m) for m in models],
        "table": rows,
        "cpu": cpu,
        "memory": {
            k: {
                "started": {"processes": s.memory_start, "total": totals["memory_start"][k]},
                "after_load": {"processes": s.memory, "total": totals["memory"][k]},
            }
            for k, s in setups.items()
        },
    }


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--second", default="cross-encoder", choices=["cross-encoder", "embedder"], help="model 2")
    ap.add_argument("--clients", type=int, default=8, help="closed-loop clients in all, split evenly over the models")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of load per round")
    ap.add_argument("--rounds", type=int, default=2, help="rounds per setup (order A B B A ...)")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds of load on each setup before the rounds")
    ap.add_argument("--embed-texts", type=int, default=1, help="texts per /v1/embeddings request")
    ap.add_argument("--rerank-docs", type=int, default=4, help="documents per /v1/rerank request")
    ap.add_argument("--max-words", type=int, default=None, help="only corpus texts of at most this many words")
    ap.add_argument("--timeout", type=float, default=120.0, help="per-request timeout, seconds")
    ap.add_argument("--server-args", default="", help="extra flags for every server of both setups")
    ap.add_argument(
        "--b-layout",
        default="per-model",
        choices=["per-model", "one-server"],
        help="setup B: one server per model, or one server with both (to compare --b-server-args on one layout)",
    )
    ap.add_argument("--b-server-args", default="", help="extra flags for setup B's servers only")
    ap.add_argument("--launch-timeout", type=float, default=600.0, help="seconds to wait for each server's /health")
    ap.add_argument(
        "--sessions",
        default="shared",
        choices=["shared", "own"],
        help="shared: every server in this session (one autogroup CPU share for each setup); own: a session per "
        "server, as separate services get (Linux autogroup then gives setup B two shares against other work)",
    )
    ap.add_argument("--output-json", default=None)
    args = ap.parse_args(argv)
    if args.clients < 2 or args.rounds < 1 or args.duration <= 0 or args.embed_texts < 1 or args.rerank_docs < 1:
        ap.error("--clients must be at least 2; --rounds, --embed-texts, --rerank-docs at least 1; --duration > 0")
    return args


def main(argv: Optional[list[str]] = None) -> None:
    args = parse_args(argv)
    texts = bench_serving.load_texts(bench_serving.DEFAULT_TEXTS, args.max_words)
    with tempfile.TemporaryDirectory(prefix="bench_several_models_") as workdir:
        models = plan_models(args.second, workdir)
        commands = server_commands(models, workdir, args.server_args, args.b_layout, args.b_server_args)
        setups: dict[str, Setup] = {}
        try:
            for key in SETUPS:
                servers = [Variant(f"{key}{i}") for i in range(len(commands[key]))]
                setups[key] = Setup(key, servers, {})
                for server, cmd in zip(servers, commands[key]):
                    bench_http_cpu.start(server, cmd, dict(os.environ), args.launch_timeout, args.sessions == "own")
                setups[key].urls = {m.name: servers[min(i, len(servers) - 1)].url for i, m in enumerate(models)}
            for setup in setups.values():
                setup.memory_start = setup_memory(setup)
            for setup in setups.values():  # first requests pay one-time costs (oneDNN primitives, pools)
                bench_serving.run_event_loop(mixed_load(setup, models, texts, args, args.warmup), True)
            for i, key in enumerate(round_order(args.rounds)):
                if i % 2 == 0:
                    print(f"round {i // 2 + 1}", flush=True)
                one_round(setups[key], models, texts, args)
            result = report(setups, models, args)
        finally:
            for setup in setups.values():
                for server in setup.servers:
                    bench_http_cpu.stop(server)
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump(result, f, indent=2)
        print(f"wrote {args.output_json}")


if __name__ == "__main__":
    main()
