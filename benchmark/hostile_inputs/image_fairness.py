"""Image requests competing for one HTTP process's image memory and fetch slots (#27 items 6, 7).

    python benchmark/hostile_inputs/image_fairness.py                  # tiny random GME, its own server
    python benchmark/hostile_inputs/image_fairness.py --runs 8         # more rounds of each scenario
    python benchmark/hostile_inputs/image_fairness.py --baseline /tmp/main/python   # and older code's

The server (a tiny random GME, test/helpers/tiny_models.build_tiny_gme) allows loopback image URLs
with a 32 MiB image-memory budget (--mm-max-bytes-in-flight), 8 fetch slots and a 5 s fetch
deadline; an HTTP image host in this process serves three ~5 MB PNGs, a tiny one and a URL that
drips a byte every 0.5 s.

- memory_admission: four requests at once of the three 5 MB images (any two requests fit in the
  budget), `runs` times: at least one answers 200 in every round (before: all four 429 in most).
- fetch_fairness: 12 requests of two dripping URLs each take the 8 fetch slots; another client's
  tiny image must be answered in under 1.5 s (before: 8.5 s with a 3 s deadline), `runs` times.
Both also sample the HTTP process's RSS and /health latency. Exit status 1 when a probe failed.

`run(ctx)` is the hook for the hostile-input runner: its own server serves a text model, so this
area starts its GME server itself.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Optional

import numpy as np
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from benchmark.hostile_inputs.common import Recorder, Result, record_numbers, report  # noqa: E402
from benchmark.hostile_inputs.images import post, rss_mb  # noqa: E402
from test.helpers.images import ImageServer, encode_image, gradient_image  # noqa: E402
from test.helpers.server import ServerProcess  # noqa: E402
from test.helpers.tiny_models import build_tiny_gme  # noqa: E402

AREA = "image_fairness"
FETCH_TIMEOUT = 5.0
BUDGET = 32 * 1024 * 1024
VICTIM_LIMIT_S = 1.5


class Watch:
    """The HTTP process's peak RSS and slowest /health while the block runs."""

    def __init__(self, server: ServerProcess) -> None:
        self.server, self.peak_mb, self.health_s = server, 0.0, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.peak_mb = max(self.peak_mb, rss_mb(self.server.proc.pid))
            start = time.monotonic()
            try:
                urllib.request.urlopen(self.server.base_url + "/health", timeout=5).read()
            except OSError:
                self.health_s = max(self.health_s, 5.0)
                continue
            self.health_s = max(self.health_s, time.monotonic() - start)

    def __enter__(self) -> "Watch":
        self.peak_mb = rss_mb(self.server.proc.pid)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def memory_admission(server: ServerProcess, host: ImageServer, runs: int) -> tuple[bool, str]:
    items = [{"image": host.url(f"/big{i}.png")} for i in range(3)]
    before = rss_mb(server.proc.pid)
    rounds = []
    with Watch(server) as watch:
        for _ in range(runs):
            start = time.monotonic()
            with ThreadPoolExecutor(4) as pool:
                statuses = [status for status, _, _ in pool.map(lambda _: post(server.base_url, items), range(4))]
            rounds.append((statuses, time.monotonic() - start))
    time.sleep(1.0)
    after = rss_mb(server.proc.pid)
    ok = all(200 in statuses and set(statuses) <= {200, 429} for statuses, _ in rounds)
    summary = "; ".join(f"{s.count(200)}x200 {s.count(429)}x429 in {t:.1f} s" for s, t in rounds)
    return ok, (
        f"{summary}; RSS {before:.0f} -> peak {watch.peak_mb:.0f} -> {after:.0f} MB; /health max {watch.health_s:.2f} s"
    )


def fetch_fairness(server: ServerProcess, host: ImageServer, runs: int) -> tuple[bool, str]:
    victims, ok = [], True
    with Watch(server) as watch:
        for i in range(runs):
            path = f"/drip.png?round={i}"
            attack = [{"image": host.url(path)}] * 2
            with ThreadPoolExecutor(12) as pool:
                start = time.monotonic()
                attackers = [pool.submit(post, server.base_url, attack) for _ in range(12)]
                while host.open_to(path) < 8 and time.monotonic() - start < 5:
                    time.sleep(0.02)
                t0 = time.monotonic()
                status, _, _ = post(server.base_url, [{"text": "a cat", "image": host.url("/cat.png")}])
                victims.append(time.monotonic() - t0)
                ok &= status == 200 and victims[-1] < VICTIM_LIMIT_S
                ok &= all(a.result()[0] == 400 for a in attackers)
            host.wait_idle(FETCH_TIMEOUT, path)
    ok &= watch.health_s < 1.0
    times = ", ".join(f"{v:.2f}" for v in victims)
    return ok, f"victim answered in {times} s (limit {VICTIM_LIMIT_S} s); /health max {watch.health_s:.2f} s"


def run_probes(runs: int = 4, baseline: Optional[str] = None) -> list[Result]:
    big = [
        encode_image(Image.fromarray(np.random.default_rng(s).integers(0, 256, (1290, 1290, 3), np.uint8)))
        for s in (1, 2, 3)
    ]
    routes = {"/cat.png": encode_image(gradient_image(100, 60, seed=1)), "/drip.png": ("drip", 0.5, 100_000)}
    routes.update({f"/big{i}.png": data for i, data in enumerate(big)})
    env = {"PYTHONPATH": os.path.abspath(baseline)} if baseline else None
    label = f"[{baseline}] " if baseline else ""
    with tempfile.TemporaryDirectory() as tmp, ImageServer(routes) as host:
        gme_dir = build_tiny_gme(os.path.join(tmp, "gme"))
        args = ["--model-path", gme_dir, "--is-embedding", "--chat-template", "gme-qwen2-vl"]
        args += ["--log-level", "warning", "--mm-allow-private-urls", "--mm-allowed-url-hosts", "127.0.0.1"]
        args += ["--mm-image-timeout", str(FETCH_TIMEOUT), "--mm-fetch-concurrency", "8"]
        args += ["--mm-max-bytes-in-flight", str(BUDGET)]
        rec = Recorder(AREA)
        with ServerProcess(*args, env=env) as server:
            post(server.base_url, [{"image": host.url("/cat.png")}])  # warm: the first image starts the pools
            for name, probe in (("memory_admission", memory_admission), ("fetch_fairness", fetch_fairness)):
                rec.attempt(label + name, partial(probe, server, host, runs))
    return rec.results


def run(ctx: Optional[object] = None) -> list[Result]:
    """The runner's hook: this area's results (measurements go to ctx.numbers when it has them)."""
    return record_numbers(ctx, AREA, run_probes())


def main(argv: Optional[list[str]] = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=4, help="rounds of each scenario (default 4)")
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="also serve the python/ directory of older code (e.g. `git archive main python | tar -x -C "
        "/tmp/main`, then /tmp/main/python) and probe it the same way",
    )
    args = parser.parse_args(argv)
    results = run_probes(args.runs)
    if args.baseline:
        results += run_probes(args.runs, args.baseline)
    return report(results)


if __name__ == "__main__":
    sys.exit(main())
