"""Data parallelism on one machine: one replica using every core against N replicas of fewer cores.

    python benchmark/bench_dp.py --dp-sizes 1,2 --concurrency 1,8,64 --num-requests 400 --rounds 2

For each --dp-sizes value D the server is launched with `--dp-size D --cpu-threads cores/D` (cores:
what this process may use) and measured by bench_serving.py's closed loop at every concurrency
level; the configurations alternate round by round so that machine noise hits all of them. Prints
texts/s, p50 and p99 per configuration and level (the median over rounds), each configuration's
texts/s as a ratio of the first one's, and the cores each server process used (HTTP, every
replica, the detokenizer). The load generator shares the machine with the server, as in
bench_serving.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_serving  # noqa: E402  (benchmark/ is not a package)


def server_processes(port: int) -> dict[str, int]:
    """{process name: pid} of the launched server listening on `port` and its children."""
    leader = None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"sglang.launch_server" in argv and str(port).encode() in argv:
            leader = int(pid)
    if leader is None:
        return {}
    out = subprocess.run(["ps", "-o", "pid=,comm=", "-s", str(leader)], capture_output=True, text=True).stdout
    procs = {}
    for line in out.splitlines():
        pid, comm = line.split(None, 1)
        procs["http (main)" if int(pid) == leader else comm.strip()] = int(pid)
    return procs


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_config(dp: int, threads: int, args: argparse.Namespace) -> tuple[list[dict], dict[str, float]]:
    """bench_serving's levels against a server launched with this --dp-size; also the CPU each of
    its processes used over all levels, as a share of one core."""
    server_args = f"--dp-size {dp} --cpu-threads {threads} {args.server_args}".strip()
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as out:
        path = out.name
    launch = bench_serving.parse_args(["--server-args", server_args, "--launch"])
    with bench_serving.launched_server(launch) as base:
        procs = server_processes(int(base.rsplit(":", 1)[1]))
        before = {name: cpu_seconds(pid) for name, pid in procs.items()}
        t0 = time.monotonic()
        argv = [
            "--url",
            base,
            "--concurrency",
            args.concurrency,
            "--num-requests",
            str(args.num_requests),
            "--texts-per-request",
            str(args.texts_per_request),
            "--encoding-format",
            "base64",
            "--no-progress",
            "--output-json",
            path,
        ]
        if args.max_words:
            argv += ["--max-words", str(args.max_words)]
        bench_serving.main(argv)
        wall = time.monotonic() - t0
        cores_used = {name: (cpu_seconds(pid) - before[name]) / wall for name, pid in procs.items()}
    with open(path) as f:
        rows = json.load(f)["levels"]
    os.unlink(path)
    return rows, cores_used


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dp-sizes", default="1,2", help="comma-separated --dp-size values to compare")
    ap.add_argument("--concurrency", default="1,8,64")
    ap.add_argument("--num-requests", type=int, default=400, help="requests per level")
    ap.add_argument("--texts-per-request", type=int, default=1)
    ap.add_argument("--max-words", type=int, default=None, help="only texts of at most this many words")
    ap.add_argument("--rounds", type=int, default=1, help="times each configuration runs, alternated")
    ap.add_argument("--server-args", default="", help="extra flags for every launched server")
    ap.add_argument("--output-json", default=None)
    args = ap.parse_args()

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    configs = []
    for dp in map(int, args.dp_sizes.split(",")):
        configs.append((f"dp {dp} x {max(1, cores // dp)} threads", dp, max(1, cores // dp)))
    runs: dict[str, list[list[dict]]] = {name: [] for name, _, _ in configs}
    cpu: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in configs}
    for _ in range(args.rounds):
        for name, dp, threads in configs:
            print(f"\n=== {name}", flush=True)
            rows, cores_used = run_config(dp, threads, args)
            runs[name].append(rows)
            cpu[name].append(cores_used)

    levels = [row["label"] for row in runs[configs[0][0]][0]]
    table = []
    for name, _, _ in configs:
        for i, level in enumerate(levels):
            rows = [r[i] for r in runs[name]]
            table.append(
                {
                    "config": name,
                    "level": level,
                    "texts_per_s": statistics.median(r["texts_per_s"] for r in rows),
                    "p50_ms": statistics.median(r["p50_ms"] for r in rows),
                    "p99_ms": statistics.median(r["p99_ms"] for r in rows),
                    "errors": sum(r["errors_429"] + r["errors_5xx"] for r in rows),
                    "rounds": [round(r["texts_per_s"], 1) for r in rows],
                }
            )
    base = {row["level"]: row["texts_per_s"] for row in table if row["config"] == configs[0][0]}
    machine = bench_serving.machine_info()
    print(f"\nmachine: {machine['cpu']}, {cores} cores, flags: {' '.join(machine['cpu_flags']) or 'none listed'}")
    print(f"{args.texts_per_request} text(s)/request, base64, median of {args.rounds} round(s)")
    print(f"{'config':<22}{'level':>7}{'texts/s':>10}{'ratio':>8}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}  rounds")
    for row in table:
        row["ratio"] = row["texts_per_s"] / base[row["level"]] if base[row["level"]] else float("nan")
        print(
            f"{row['config']:<22}{row['level']:>7}{row['texts_per_s']:>10.1f}{row['ratio']:>8.2f}"
            f"{row['p50_ms']:>9.1f}{row['p99_ms']:>9.1f}{row['errors']:>8}  {row['rounds']}"
        )
    print("\ncores used per process over all levels (median of rounds; the load generator is not counted):")
    for name, _, _ in configs:
        names = sorted({p for c in cpu[name] for p in c})
        shares = {p: statistics.median(c.get(p, 0.0) for c in cpu[name]) for p in names}
        cpu[name] = shares
        print(f"  {name}: " + ", ".join(f"{p} {v:.2f}" for p, v in shares.items()))
    if args.output_json:
        with open(args.output_json, "w") as f:
            report = {
                "cpu_flags": machine["cpu_flags"],
                "cores": cores,
                "args": vars(args),
                "table": table,
                "cores_used": cpu,
            }
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
