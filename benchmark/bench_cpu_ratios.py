"""Issue #32's served ratios in one run, per OpenMP wait policy: served / Engine.encode, and served
/ sentence-transformers, with the scheduler's CPU time per text.

    python benchmark/bench_cpu_ratios.py [--dtypes float32,int8] [--policies libgomp,spin10k,passive]
        [--rounds 2] [--server-args "--dp-size 2"] [--output-json out.json]

For each round, dtype and OpenMP wait policy (alternated, so machine drift hits all of them):
1. served: one server (`python -m sglang.launch_server`, bench_cpu_targets' flags) under 64 concurrent
   clients sending one corpus text each, then one client sending short texts (p50); the scheduler's
   CPU-seconds (all its threads, /proc schedstat) per text over each level;
2. in-process: `sglang.Engine(...).encode` with the same server arguments and environment, the
   corpus in calls of 64 texts (the 64 inputs the clients keep in flight; served, they settle into
   two cohorts of ~32 per batch, which cost Engine the same per text: docs/benchmarks.md, round
   eleven), texts/s and the scheduler's CPU-seconds per text;
3. the peer, sentence-transformers' offline float32 `encode(batch_size=32)`, once before and once
   after every round (its median over the run is the ratio's denominator).

Each round's served and in-process runs follow each other within a minute, so the summary gives
served / Engine both as the ratio of the medians and as the median (and range) of the rounds'
own ratios. With --interleave N the server and the Engine are up side by side and loaded in turn
N times per round (the idle one sleeps), so each pair's ratio is taken within seconds. Each round
prints the share of CPU time the hypervisor gave to other guests (steal, /proc/stat) while it ran:
a shared VM's neighbour moved one setting from 0.70 to 0.99 between two runs an hour apart
(docs/benchmarks.md, round seven).

The wait policy reaches the scheduler through the environment it inherits from the launching
process (entrypoints/engine_processes.py). `libgomp` sets GOMP_SPINCOUNT to libgomp's own default
(300,000 spins), so a launcher default cannot replace it. Run it once natively and once with
`ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 SGLANG_KERNEL_ISA=x86-64-v3 MKL_ENABLE_INSTRUCTIONS=AVX2`
for emulated AVX2 (without the last one the peer's matmuls still run AVX-512).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shlex
import statistics
import sys
import time
from typing import Any, Iterator, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_cpu_targets  # noqa: E402
import bench_serving  # noqa: E402
from bench_http_cpu import cpu_seconds, process_tree  # noqa: E402

OMP_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
POLICIES = {
    "libgomp": {"GOMP_SPINCOUNT": "300000"},  # libgomp's default spin count, stated explicitly
    "spin10k": {"GOMP_SPINCOUNT": "10000"},
    "spin50k": {"GOMP_SPINCOUNT": "50000"},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
    "unset": {},  # whatever the launcher does when the user sets neither variable
}
DTYPES = {"float32": "", "int8": "--quantization int8"}
ENGINE_BATCH = 64
# What emulates an older CPU: torch's kernels, oneDNN's, ours, and MKL's (torch's float32 matmul in
# sentence-transformers, the peer, is MKL's sgemm, which ONEDNN_MAX_CPU_ISA does not reach).
ISA_VARS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "SGLANG_KERNEL_ISA", "MKL_ENABLE_INSTRUCTIONS")


@contextlib.contextmanager
def omp_env(policy: dict[str, str]) -> Iterator[None]:
    """The launching process's environment holds exactly `policy` of the OpenMP variables."""
    saved = {k: os.environ.pop(k, None) for k in OMP_VARS}
    os.environ.update(policy)
    try:
        yield
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v


def schedulers() -> list[int]:
    """The pids of this process's descendant scheduler processes (server's or Engine's)."""
    return [pid for pid, name in process_tree(os.getpid()).items() if name.startswith("sglang-sch")]


def scheduler_cpu(pids: Optional[list[int]] = None) -> float:
    """CPU-seconds so far of these scheduler processes (default: every one under this process)."""
    return sum(cpu_seconds(pid) for pid in (schedulers() if pids is None else pids))


def measured_level(
    url: str, concurrency: int, requests: int, max_words: Optional[int], pids: Optional[list[int]] = None
) -> dict[str, Any]:
    """One load level (corpus texts, at most `max_words` each) with its schedulers' CPU per text
    (`pids`: the server's, when an Engine runs beside it; its warm-up requests counted too)."""
    before = scheduler_cpu(pids)
    level = bench_cpu_targets.load_level(url, concurrency, requests, "base64", max_words, "lean")
    texts = requests + bench_cpu_targets.LEVEL_WARMUP
    level["scheduler_cpu_ms_per_text"] = 1000 * (scheduler_cpu(pids) - before) / texts
    return level


def served(server_args: str, requests: int) -> dict[str, Any]:
    """One server: c=64 corpus texts, then c=1 short texts; texts/s, p50 and scheduler CPU per text."""
    launch = argparse.Namespace(server_args=server_args, no_auto_truncate=False, launch_timeout=600.0)
    with bench_serving.launched_server(launch) as url:
        return {"c=64": measured_level(url, 64, requests, None), "c=1 short": measured_level(url, 1, requests // 2, 12)}


def engine_kwargs(server_args: str) -> dict[str, Any]:
    """The server's command-line flags as Engine keyword arguments: parsed as `sglang serve` parses
    them (without SGLANG_* variables), the ServerArgs fields that differ from the defaults, so both
    sides run the same settings."""
    from sglang.cli import parse_serve_args
    from sglang.srt.server_args import ServerArgs

    given, defaults = parse_serve_args(shlex.split(server_args), environ={}), ServerArgs()
    fields = (f.name for f in dataclasses.fields(ServerArgs) if f.init)
    return {k: getattr(given, k) for k in fields if getattr(given, k) != getattr(defaults, k)}


def start_engine(server_args: str, texts: list[str]) -> Any:
    """sglang.Engine with the server's arguments, warmed up on one call."""
    import sglang

    kwargs: dict[str, Any] = {"allow_auto_truncate": True, "log_level": "warning", **engine_kwargs(server_args)}
    engine = sglang.Engine(**kwargs)
    engine.encode(texts[:ENGINE_BATCH])
    return engine


def engine_slice(engine: Any, texts: list[str], seconds: float, pids: Optional[list[int]] = None) -> dict[str, float]:
    """Engine.encode on the corpus in calls of ENGINE_BATCH texts for about `seconds`: texts/s and the
    scheduler's CPU per text (`pids`: the Engine's schedulers, when a server's run beside them)."""
    done, before, start = 0, scheduler_cpu(pids), time.perf_counter()
    while time.perf_counter() - start < seconds:
        for i in range(0, len(texts), ENGINE_BATCH):
            engine.encode(texts[i : i + ENGINE_BATCH])
        done += len(texts)
    elapsed = time.perf_counter() - start
    return {"texts_per_s": done / elapsed, "scheduler_cpu_ms_per_text": 1000 * (scheduler_cpu(pids) - before) / done}


def engine_encode(server_args: str, texts: list[str], seconds: float) -> dict[str, float]:
    """In-process Engine.encode on the corpus in calls of ENGINE_BATCH texts, same server arguments."""
    engine = start_engine(server_args, texts)
    try:
        return engine_slice(engine, texts, seconds)
    finally:
        engine.shutdown()


def interleaved(server_args: str, texts: list[str], pairs: int, requests: int) -> dict[str, Any]:
    """A server and an Engine up side by side (the idle one sleeps), loaded in turn `pairs` times:
    a c=64 level of `requests`, then Engine.encode for as long as that level took. Each pair's
    ratio is measured within seconds, so the host's drift between minutes stays out of it."""
    launch = argparse.Namespace(server_args=server_args, no_auto_truncate=False, launch_timeout=600.0)
    with bench_serving.launched_server(launch) as url:
        served_pids = schedulers()
        engine = start_engine(server_args, texts)
        engine_pids = [pid for pid in schedulers() if pid not in served_pids]
        try:
            bench_cpu_targets.load_level(url, 64, 256, "base64", None, "lean")  # the server's warm-up
            levels, slices = [], []
            for _ in range(pairs):
                levels.append(measured_level(url, 64, requests, None, served_pids))
                slices.append(engine_slice(engine, texts, levels[-1]["elapsed_s"], engine_pids))
            short = measured_level(url, 1, requests // 2, 12, served_pids)
        finally:
            engine.shutdown()

    def med(rows: list[dict[str, Any]], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    served = {key: med(levels, key) for key in ("texts_per_s", "scheduler_cpu_ms_per_text", "p50_ms")}
    return {
        "served": {"c=64": served, "c=1 short": short, "levels": levels},
        "engine": {key: med(slices, key) for key in ("texts_per_s", "scheduler_cpu_ms_per_text")} | {"slices": slices},
        "pair_ratios": [lv["texts_per_s"] / sl["texts_per_s"] for lv, sl in zip(levels, slices)],
    }


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def cpu_ticks() -> tuple[int, int]:
    """(steal, total) clock ticks of all CPUs so far (/proc/stat's first line; (0, 0) elsewhere)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    # user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is already in user
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def steal_percent(before: tuple[int, int], after: tuple[int, int]) -> float:
    """Percent of the CPUs' time between two cpu_ticks() readings that went to other guests."""
    total = after[1] - before[1]
    return 100.0 * (after[0] - before[0]) / total if total > 0 else 0.0


def paired_ratios(rows: list[dict[str, Any]]) -> list[float]:
    """served / Engine per round (the two ran back to back, so a slow minute hits both), or per
    pair of slices with --interleave."""
    if all("pair_ratios" in r for r in rows):
        return [x for r in rows for x in r["pair_ratios"]]
    return [r["served"]["c=64"]["texts_per_s"] / r["engine"]["texts_per_s"] for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtypes", default="float32,int8", help="comma-separated from: " + ", ".join(DTYPES))
    ap.add_argument("--policies", default="libgomp,spin10k,passive", help="from: " + ", ".join(POLICIES))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--requests", type=int, default=600, help="requests at 64 clients (half at 1 client)")
    ap.add_argument("--engine-seconds", type=float, default=10.0)
    ap.add_argument("--peer-seconds", type=float, default=10.0)
    ap.add_argument(
        "--server-args",
        default="",
        help='more flags for both sides (the server and Engine), e.g. "--dp-size 2" or "--max-queue-delay 0.005"',
    )
    ap.add_argument(
        "--interleave",
        type=int,
        default=0,
        help="N > 0: per round, a server and an Engine side by side, loaded in turn N times (a c=64 level "
        "of --requests, then Engine.encode as long): ratios per pair of slices",
    )
    ap.add_argument("--output-json", default=None)
    args = ap.parse_args()

    texts = bench_serving.load_texts(bench_serving.DEFAULT_TEXTS, None)
    isa = {k: os.environ[k] for k in ISA_VARS if k in os.environ}
    print(f"CPU flags: {' '.join(bench_serving.cpu_flags())}; ISA overrides: {isa or 'none'}")
    peer, runs = [], []
    with omp_env({}):
        peer.append(bench_cpu_targets.peer_texts_per_s(texts, args.peer_seconds))
    for rnd in range(args.rounds):
        for dtype in args.dtypes.split(","):
            for policy in args.policies.split(","):
                row: dict[str, Any] = {
                    "round": rnd + 1,
                    "dtype": dtype,
                    "policy": policy,
                    "load_before": load_average(),
                }
                flags = f"{DTYPES[dtype]} {args.server_args}".strip()
                ticks = cpu_ticks()
                with omp_env(POLICIES[policy]):
                    if args.interleave:
                        row.update(interleaved(flags, texts, args.interleave, args.requests))
                    else:
                        row["served"] = served(flags, args.requests)
                        row["engine"] = engine_encode(flags, texts, args.engine_seconds)
                row["load_after"] = load_average()
                row["steal_percent"] = round(steal_percent(ticks, cpu_ticks()), 1)
                s, e = row["served"]["c=64"], row["engine"]
                print(
                    f"round {rnd + 1} {dtype} {policy}: served {s['texts_per_s']:.1f} texts/s "
                    f"(sched {s['scheduler_cpu_ms_per_text']:.2f} CPU-ms/text), Engine.encode {e['texts_per_s']:.1f} "
                    f"({e['scheduler_cpu_ms_per_text']:.2f}), served/Engine {s['texts_per_s'] / e['texts_per_s']:.2f}, "
                    f"c=1 p50 {row['served']['c=1 short']['p50_ms']:.2f} ms, steal {row['steal_percent']:.1f}%, "
                    f"load {row['load_before']} -> {row['load_after']}"
                    + (f"; pairs {' '.join(f'{x:.2f}' for x in row['pair_ratios'])}" if "pair_ratios" in row else ""),
                    flush=True,
                )
                runs.append(row)
        with omp_env({}):
            peer.append(bench_cpu_targets.peer_texts_per_s(texts, args.peer_seconds))
    st = statistics.median(peer)
    print(f"\nsentence-transformers float32 batch 32: {st:.1f} texts/s (runs {', '.join(f'{p:.1f}' for p in peer)})")
    paired = "by pair" if args.interleave else "by round"
    head = f"{'dtype':<8} {'policy':<8} {'served':>7} {'Engine':>7} {'srv/Eng':>7} {paired:>15} {'x ST':>5}"
    print(head + f" {'c=1 p50':>8} {'sched ms/text c64':>17} {'c1':>6} {'Engine':>6}")
    summary = []
    for dtype in args.dtypes.split(","):
        for policy in args.policies.split(","):
            rows = [r for r in runs if r["dtype"] == dtype and r["policy"] == policy]

            def med(path: tuple[str, ...], rows: list[dict] = rows) -> float:
                vals = []
                for r in rows:
                    v: Any = r
                    for k in path:
                        v = v[k]
                    vals.append(v)
                return statistics.median(vals)

            srv, eng = med(("served", "c=64", "texts_per_s")), med(("engine", "texts_per_s"))
            paired = paired_ratios(rows)
            by_round = f"{statistics.median(paired):.2f} ({min(paired):.2f}-{max(paired):.2f})"
            item = {
                "dtype": dtype,
                "policy": policy,
                "served_texts_per_s": srv,
                "engine_texts_per_s": eng,
                "served_over_engine": srv / eng,
                "served_over_engine_by_round": paired,
                "served_over_st": srv / st,
                "c1_p50_ms": med(("served", "c=1 short", "p50_ms")),
                "c64_p50_ms": med(("served", "c=64", "p50_ms")),
                "sched_cpu_ms_c64": med(("served", "c=64", "scheduler_cpu_ms_per_text")),
                "sched_cpu_ms_c1": med(("served", "c=1 short", "scheduler_cpu_ms_per_text")),
                "sched_cpu_ms_engine": med(("engine", "scheduler_cpu_ms_per_text")),
            }
            summary.append(item)
            print(
                f"{dtype:<8} {policy:<8} {srv:>7.1f} {eng:>7.1f} {srv / eng:>7.2f} {by_round:>15} {srv / st:>5.2f} "
                f"{item['c1_p50_ms']:>8.2f} {item['sched_cpu_ms_c64']:>17.2f} {item['sched_cpu_ms_c1']:>6.2f} "
                f"{item['sched_cpu_ms_engine']:>6.2f}"
            )
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump(
                {
                    "machine": bench_serving.machine_info(),
                    "isa_overrides": isa,
                    "st_texts_per_s": peer,
                    "summary": summary,
                    "runs": runs,
                    "command": " ".join(sys.argv),
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
