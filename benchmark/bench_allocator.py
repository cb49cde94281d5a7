"""What each scheduler memory set-up costs in CPU time, on identical mixed-size batches.

    flock /work/.heavy.lock python benchmark/bench_allocator.py --batches 30 --repeats 2

Each set-up (--configs) runs in a fresh spawned process with the environment the launcher would
give the scheduler (utils/allocator.py: LD_PRELOAD, MALLOC_CONF, the oneDNN cache cap), loads the
model with our ModelRunner and embeds the same seeded sequence of batches: each batch holds a
number of texts drawn from --sizes, each text a random token count in [--min-tokens,
--max-tokens], capped at --max-num-tokens as the scheduler caps its batches. Reported per set-up:
the process's CPU seconds for the batches (all its threads; steadier than wall time on a shared
machine), wall seconds, tokens per CPU-second relative to `off` (glibc, oneDNN's default cache:
the behaviour before issue 20), and RSS right after the batches (busy) and after the release the
scheduler makes once it sits idle. Set-ups alternate across --repeats.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import sys
import time
from typing import Any, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_serving import machine_info  # noqa: E402
from rss_sampler import rss_mb  # noqa: E402

from sglang.srt.utils.allocator import DEFAULT_POOL_MB  # noqa: E402

CONFIGS = ("off", "auto", "glibc", "tcmalloc")


def batches(args: argparse.Namespace) -> list[list[int]]:
    """Token counts per text per batch, the same for every set-up."""
    rng = random.Random(args.seed)
    out = []
    for _ in range(args.batches):
        lengths = [rng.randint(args.min_tokens, args.max_tokens) for _ in range(rng.choice(args.sizes))]
        while sum(lengths) > args.max_num_tokens:
            lengths.pop()
        out.append(lengths)
    return out


def _run(config: str, work: list[list[int]], threads: Optional[int], pool_mb: int, conn) -> None:
    import numpy as np

    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.utils.allocator import AllocatorPlan, SchedulerMemory, plan_allocator

    name = config.split(":", 1)[0]
    plan = plan_allocator(name, {}) if name != "off" else AllocatorPlan("off", "off")
    memory = SchedulerMemory(plan, pool_mb)
    runner = ModelRunner(ServerArgs(cpu_threads=threads))
    rng = np.random.default_rng(0)
    runner.embed([rng.integers(1000, 20000, 16)])  # first call's one-off set-up, outside the timing
    times, wall, tokens = os.times(), time.perf_counter(), 0
    for lengths in work:
        runner.embed([rng.integers(1000, 20000, n) for n in lengths])
        memory.after_batch(sum(lengths))
        tokens += sum(lengths)
    end = os.times()
    busy_rss = rss_mb(os.getpid())
    if memory.idle_release_s() is not None:  # what the scheduler loop does once it sits idle
        memory.release()
    conn.send(
        {
            "config": config,
            "allocator": memory.allocator,
            "cpu_s": (end.user - times.user) + (end.system - times.system),
            "system_s": end.system - times.system,  # page faults, madvise: what returning memory costs
            "wall_s": time.perf_counter() - wall,
            "tokens": tokens,
            "rss_mb": busy_rss,  # right after the last batch
            "idle_rss_mb": rss_mb(os.getpid()),  # after the idle release
        }
    )


def run_config(config: str, work: list[list[int]], threads: Optional[int], pool_mb: int) -> dict[str, Any]:
    from sglang.srt.utils.allocator import plan_allocator

    name, _, conf = config.partition(":")  # jemalloc:<MALLOC_CONF> tries other jemalloc settings
    env = plan_allocator(name, {}).env if name != "off" else {}
    if conf:
        env["MALLOC_CONF"] = conf
    return spawned(_run, (config, work, threads, pool_mb), env)


def spawned(target, args: tuple, env: dict[str, str]) -> Any:
    """What target(*args, conn) sends on conn, run in a fresh spawned process whose environment
    adds `env` (the launcher's allocator variables: they only take effect at a process's start)."""
    from sglang.srt.utils.allocator import child_environment

    ctx = mp.get_context("spawn")
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=target, args=(*args, writer))
    with child_environment(env):
        proc.start()
    writer.close()
    try:
        return reader.recv()
    finally:
        proc.join(60)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--configs",
        default=",".join(CONFIGS),
        help="--cpu-allocator values to compare",
    )
    p.add_argument(
        "--jemalloc-conf",
        action="append",
        default=[],
        metavar="MALLOC_CONF",
        help="also run jemalloc with this MALLOC_CONF instead of ours (repeatable)",
    )
    p.add_argument("--batches", type=int, default=30)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--sizes", default="1,1,2,4,8,16,32,64,128", help="texts per batch, drawn uniformly")
    p.add_argument("--min-tokens", type=int, default=12)
    p.add_argument("--max-tokens", type=int, default=160)
    p.add_argument("--max-num-tokens", type=int, default=16384)
    p.add_argument("--cpu-threads", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pool-mb", type=int, default=DEFAULT_POOL_MB, help="--cpu-pool-mb of the jemalloc set-ups")
    args = p.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",")]
    configs = args.configs.split(",") + [f"jemalloc:{conf}" for conf in args.jemalloc_conf]
    m = machine_info()
    print(f"machine: {m['cpu']}, {m['cores']} cores, CPU flags {' '.join(m['cpu_flags'])}", flush=True)
    work = batches(args)
    print(f"{len(work)} batches, {sum(map(sum, work))} tokens, {sum(map(len, work))} texts", flush=True)
    results: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
    for r in range(args.repeats):
        for config in configs if r % 2 == 0 else reversed(configs):
            res = run_config(config, work, args.cpu_threads, args.pool_mb)
            results[config].append(res)
            print(
                f"  {config:9s} ({res['allocator']}): {res['cpu_s']:.1f} CPU s ({res.get('system_s', 0):.1f} system), "
                f"{res['wall_s']:.1f} s wall, "
                f"RSS {res['rss_mb']:.0f} MB busy, {res['idle_rss_mb']:.0f} MB idle",
                flush=True,
            )
    base = sum(r["cpu_s"] for r in results.get("off", [])) or None
    print("set-up     CPU s (sum)  wall s (sum)  RSS MB busy / idle (last)  CPU vs off")
    for config, rows in results.items():
        cpu = sum(r["cpu_s"] for r in rows)
        ratio = f"{cpu / base:.3f}" if base else "-"
        rss = f"{rows[-1]['rss_mb']:.0f} / {rows[-1]['idle_rss_mb']:.0f}"
        print(f"{config:9s}  {cpu:11.1f}  {sum(r['wall_s'] for r in rows):12.1f}  {rss:>25s}  {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
