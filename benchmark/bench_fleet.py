"""A fleet behind the shipped nginx config against one server on the same cores, in one run.

    python benchmark/bench_fleet.py                                 # layouts direct:1x2, nginx:1x2, nginx:2x1
    python benchmark/bench_fleet.py --layouts nginx:2x1 --num-requests 2000 --output-json fleet.json

A layout is WHERE:RxT: R replicas (`sglang serve` on loopback ports) with T torch threads each
(--cpu-threads), reached directly (`direct`, one replica only) or through a real nginx running
docker/nginx/sglang-embed.conf.template (`nginx`, as test/docker/test_nginx_e2e.py runs it). Each
layout gets benchmark/bench_serving.py's closed loop (1 and 64 clients by default, one text per
request, the bundled model with --allow-auto-truncate). On one machine the replicas share its
cores, so this measures nginx's cost and the replica layout, not a scale-out: that is capacity
arithmetic in docs/scaling.md. Needs nginx (Debian's nginx-light).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # the test helpers that start servers and nginx
import bench_serving  # noqa: E402

from test.helpers.nginx import NginxProcess  # noqa: E402
from test.helpers.server import ServerProcess  # noqa: E402


def run_layout(layout: str, concurrency: str, num_requests: int) -> list[dict]:
    where, shape = layout.split(":")
    replicas, threads = map(int, shape.lower().split("x"))
    if where not in ("direct", "nginx") or (where == "direct" and replicas != 1):
        raise SystemExit(f"bad layout {layout}: direct:1xT or nginx:RxT")
    servers = [
        ServerProcess("--cpu-threads", str(threads), "--allow-auto-truncate", wait=False) for _ in range(replicas)
    ]
    nginx = None
    try:
        for s in servers:
            s.wait_healthy(600)
        url = servers[0].base_url
        if where == "nginx":
            nginx = NginxProcess([f"127.0.0.1:{s.port}" for s in servers])
            url = nginx.base_url
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            bench_serving.main(
                ["--url", url, "--concurrency", concurrency, "--num-requests", str(num_requests),
                 "--no-progress", "--output-json", out.name]
            )  # fmt: skip
            return json.load(open(out.name))["levels"]
    finally:
        if nginx is not None:
            nginx.stop()
        for s in servers:
            s.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layouts", default="direct:1x2,nginx:1x2,nginx:2x1")
    p.add_argument("--concurrency", default="1,64")
    p.add_argument("--num-requests", type=int, default=1000, help="requests per concurrency level")
    p.add_argument("--output-json", default=None)
    args = p.parse_args()
    machine = bench_serving.machine_info()  # cpu_flags included
    results = {layout: run_layout(layout, args.concurrency, args.num_requests) for layout in args.layouts.split(",")}
    print(f"\n{machine['cpu']}, {machine['cores']} cores, flags: {' '.join(machine['cpu_flags'])}")
    print(f"{'layout':>12} {'clients':>8} {'texts/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}")
    for layout, levels in results.items():
        for lv in levels:
            errors = lv["requests"] - lv["ok"]
            print(
                f"{layout:>12} {lv['concurrency']:>8} {lv['texts_per_s']:9.1f} {lv['p50_ms']:8.1f} "
                f"{lv['p99_ms']:8.1f} {errors:>7}"
            )
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump({"machine": machine, "args": vars(args), "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
