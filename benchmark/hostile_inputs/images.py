"""Hostile image inputs (issue 15, items 1-4) against live GME servers on loopback: tried / failed.

    python benchmark/hostile_inputs/images.py            # builds a tiny random GME, starts its servers
    python benchmark/hostile_inputs/images.py --memory   # also: HTTP-process RSS, the issue's two memory probes
    python benchmark/hostile_inputs/images.py --memory --baseline /tmp/main/python   # and older code's

Two servers of a tiny random GME-shaped checkpoint (test/helpers/tiny_models.build_tiny_gme):
`default` with no image flags, and `open` that allows loopback image URLs (the dripping attacker
host and the victim's image host both live on 127.0.0.1 here) with a 2 s fetch deadline, 8 fetch
slots and a media directory. An HTTP image host in this process plays every remote party. With
--memory a third server raises --mm-max-image-pixels so that the issue's 8000x8000 PNGs are
decoded rather than refused, and the script prints the HTTP process's RSS before, at its peak and
after one request of 4 such PNGs and one of 256 URLs to a 5 MB image. Every request has a
timeout; exit status 1 when a probe failed.

`run(ctx)` is the hook for the hostile-input runner (`python -m benchmark.hostile_inputs`): the
runner's own server serves a text model, so this area starts its GME servers itself.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Callable, Optional

import numpy as np
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from benchmark.hostile_inputs.common import Recorder, Result, record_numbers, report  # noqa: E402
from test.helpers.images import (  # noqa: E402
    HOSTILE_IMAGE_STRINGS,
    ImageServer,
    blank_png,
    data_uri,
    encode_image,
    gradient_image,
)
from test.helpers.server import ServerProcess  # noqa: E402
from test.helpers.tiny_models import build_tiny_gme  # noqa: E402

AREA = "images"
URL_FAILED = "could not load the image URL (the server log has the reason)"
FETCH_TIMEOUT = 2.0
PNG = encode_image(gradient_image(100, 60, seed=1))
LOOPBACK_SPELLINGS = ["127.0.0.1", "localhost", "127.1", "2130706433", "0x7f.0.0.1", "[::1]", "[::ffff:127.0.0.1]"]


def post(base_url: str, items: list, timeout: float = 60.0) -> tuple[int, str, dict]:
    """(status, error message or "", headers) of one /v1/embeddings request."""
    body = json.dumps({"input": items}).encode()
    req = urllib.request.Request(
        base_url + "/v1/embeddings", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, "", dict(r.headers)
    except urllib.error.HTTPError as e:
        try:
            message = json.loads(e.read())["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = "<not an OpenAI error body>"
        return e.code, message, dict(e.headers)


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1024


@dataclass
class Servers:
    default: ServerProcess
    open: ServerProcess
    host: ImageServer
    media: str


# ----- the probes: each returns (ok, detail) -----
def drip_deadline(s: Servers) -> tuple[bool, str]:
    """32 dripping URLs in one request: answered by the deadline, and another client is not starved."""
    with ThreadPoolExecutor(1) as pool:
        start = time.monotonic()
        attack = pool.submit(post, s.open.base_url, [{"image": s.host.url("/drip.png")}] * 32)
        time.sleep(0.5)
        t0 = time.monotonic()
        victim_status, _, _ = post(s.open.base_url, [{"image": s.host.url("/cat.png")}])
        victim_s = time.monotonic() - t0
        status, message, _ = attack.result()
        attack_s = time.monotonic() - start
    ok = status == 400 and attack_s < FETCH_TIMEOUT + 2 and victim_status == 200 and victim_s < 1.5
    return ok, f"attacker {status} after {attack_s:.1f} s; victim {victim_status} in {victim_s:.2f} s"


def disconnect_cancels(s: Servers) -> tuple[bool, str]:
    body = json.dumps({"input": [{"image": s.host.url("/drip.png")}] * 4}).encode()
    head = "POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    head += f"Content-Length: {len(body)}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", s.open.port), timeout=5) as sock:
        sock.sendall(head.encode() + body)
        deadline = time.monotonic() + 2
        while s.host.open_connections < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        during = s.host.open_connections
    hung_up = time.monotonic()
    idle = s.host.wait_idle(FETCH_TIMEOUT)
    closed_s = time.monotonic() - hung_up
    return idle and during > 0 and closed_s < FETCH_TIMEOUT / 2, f"{during} fetches open, closed {closed_s:.2f} s after"


def bomb_refused(s: Servers) -> tuple[bool, str]:
    bomb = data_uri(blank_png(8000, 8000))
    pid = s.default.proc.pid
    before = rss_mb(pid)
    start = time.monotonic()
    status, message, _ = post(s.default.base_url, [{"image": bomb}] * 4)
    elapsed = time.monotonic() - start
    grew = rss_mb(pid) - before
    ok = status == 400 and "8000x8000 pixels" in message and elapsed < 3 and grew < 100
    return ok, f"{status} in {elapsed:.2f} s, RSS +{grew:.0f} MB"


def loopback_refused(s: Servers) -> tuple[bool, str]:
    bad = []
    for host in LOOPBACK_SPELLINGS:
        status, message, _ = post(s.default.base_url, [{"image": s.host.url("/cat.png", host=host)}])
        if status != 400 or not message.endswith(URL_FAILED):
            bad.append(f"{host}: {status}")
    return not bad, "; ".join(bad) or f"{len(LOOPBACK_SPELLINGS)} spellings refused"


def failures_read_alike(s: Servers) -> tuple[bool, str]:
    urls = ["http://127.0.0.1:1/x.png", s.host.url("/gone.png"), s.host.url("/text"), s.host.url("/drip.png")]
    with ThreadPoolExecutor(len(urls)) as pool:
        answers = list(pool.map(lambda u: post(s.open.base_url, [{"image": u}])[:2], urls))
    return len(set(answers)) == 1 and answers[0][0] == 400, f"{len(set(answers))} distinct answers"


def malformed_strings(s: Servers) -> tuple[bool, str]:
    bad = []
    for source in HOSTILE_IMAGE_STRINGS:
        status, message, _ = post(s.open.base_url, [{"image": source}])
        if status != 400 or s.media in message or os.path.dirname(s.media) in message:
            bad.append(f"{source[:30]!r}: {status}")
    return not bad, "; ".join(bad) or f"{len(HOSTILE_IMAGE_STRINGS)} strings, all 400, no path named"


PROBES: list[tuple[str, Callable[[Servers], tuple[bool, str]]]] = [
    ("1 dripping URLs vs deadline and a victim", drip_deadline),
    ("1 disconnect cancels fetches", disconnect_cancels),
    ("2 8000x8000 PNG x4 refused from the header", bomb_refused),
    ("3 loopback URLs refused by default", loopback_refused),
    ("3 every URL failure reads the same", failures_read_alike),
    ("4 malformed image strings are 400", malformed_strings),
]


class PeakRss:
    """The highest RSS of a process while the block runs, sampled every 20 ms."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss_mb(self.pid))

    def __enter__(self) -> "PeakRss":
        self.peak = rss_mb(self.pid)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _measure(server: ServerProcess, label: str, items: list) -> str:
    pid = server.proc.pid
    before = rss_mb(pid)
    with PeakRss(pid) as peak:
        start = time.monotonic()
        status, message, _ = post(server.base_url, items, timeout=600)
        elapsed = time.monotonic() - start
        time.sleep(1.0)  # the trim after a large request runs in the background
    after = rss_mb(pid)
    outcome = f"{status}" + (f" ({message[:60]})" if message else "")
    return (
        f"{label}: {outcome} in {elapsed:.1f} s; HTTP process RSS {before:.0f} MB before, "
        f"peak {peak.peak:.0f} MB (+{peak.peak - before:.0f}), {after:.0f} MB after (+{after - before:.0f})"
    )


def flag_known(python_dir: str, flag: str) -> bool:
    """Whether the server code under `python_dir` (a checkout's python/) defines `flag`."""
    args_file = os.path.join(python_dir, "sglang", "srt", "server_args.py")
    try:
        with open(args_file) as f:
            return f'"{flag}"' in f.read()
    except OSError:
        return False


def memory_probe(gme_dir: str, baseline: Optional[str] = None) -> list[str]:
    """The issue's two memory probes, with the images accepted so that they are decoded: one request
    of 4 x 8000x8000 transparent PNGs (--mm-max-image-pixels raised to let them through), and one
    of 256 URLs to a 5 MB image. RSS of the HTTP process before, at its peak (sampled) and after.
    `baseline`: a `python/` directory of older code to serve instead (PYTHONPATH), given those of the
    two image flags its code knows (code older than a flag accepted such images without it)."""
    big = encode_image(Image.fromarray(np.random.default_rng(3).integers(0, 256, (1290, 1290, 3), np.uint8)))
    args = ["--model-path", gme_dir, "--is-embedding", "--chat-template", "gme-qwen2-vl", "--log-level", "warning"]
    for flag, value in (("--mm-max-image-pixels", str(8000 * 8000)), ("--mm-allow-private-urls", None)):
        if baseline is None or flag_known(baseline, flag):
            args += [flag] if value is None else [flag, value]
    env = {"PYTHONPATH": os.path.abspath(baseline)} if baseline else None
    label = f"[{baseline}] " if baseline else ""
    with ImageServer({"/big.png": big}) as host, ServerProcess(*args, env=env) as server:
        post(server.base_url, [{"image": data_uri(PNG)}])  # warm: the first image starts the pools
        bombs = [{"image": data_uri(blank_png(8000, 8000))}] * 4
        notes = [_measure(server, label + "4 x 8000x8000 transparent PNG (250 KB each), decoded", bombs)]
        urls = [{"image": host.url("/big.png")}] * 256
        notes.append(_measure(server, label + f"256 URLs to one {len(big) / 1e6:.1f} MB PNG", urls))
    return notes


def cpu_line() -> str:
    with open("/proc/cpuinfo") as f:
        flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    wanted = ("avx2", "fma", "avx512f", "avx512_vnni", "amx_tile")
    return f"CPU flags: {' '.join(x for x in wanted if x in flags)}; cores: {os.cpu_count()}"


def start_servers(gme_dir: str, media: str, host: ImageServer) -> Servers:
    base = ["--model-path", gme_dir, "--is-embedding", "--chat-template", "gme-qwen2-vl", "--log-level", "warning"]
    default = ServerProcess(*base)
    try:
        opened = ServerProcess(
            *base, "--mm-allow-private-urls", "--mm-image-timeout", str(FETCH_TIMEOUT),
            "--mm-fetch-concurrency", "8", "--allowed-local-media-path", media,
        )  # fmt: skip
    except BaseException:
        default.stop()
        raise
    return Servers(default, opened, host, media)


def run_probes(memory: bool = False, baseline: Optional[str] = None) -> tuple[list[Result], list[str]]:
    """Every probe, against servers started here; (results, measurements)."""
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="hostile-images-") as tmp:
        gme_dir = build_tiny_gme(os.path.join(tmp, "gme"))
        media = os.path.join(tmp, "media")
        os.makedirs(media)
        with open(os.path.join(media, "cat.png"), "wb") as f:
            f.write(PNG)
        routes = {"/cat.png": PNG, "/drip.png": ("drip", 0.5, 100_000), "/gone.png": 404, "/text": b"not pixels"}
        with ImageServer(routes) as host:
            servers = start_servers(gme_dir, media, host)
            rec = Recorder(AREA)
            try:
                for name, probe in PROBES:
                    rec.attempt(name, partial(probe, servers))
            finally:
                servers.default.stop()
                servers.open.stop()
        if memory:
            notes += memory_probe(gme_dir)
            if baseline:
                notes += memory_probe(gme_dir, baseline)
    return rec.results, notes


def run(ctx: Optional[object] = None) -> list[Result]:
    """The runner's hook: this area's results (measurements go to ctx.numbers when it has them)."""
    results, notes = run_probes(memory=False)
    return record_numbers(ctx, AREA, results)


def main(argv: Optional[list[str]] = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memory", action="store_true", help="also measure RSS with 8000x8000 PNGs decoded")
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="with --memory: also serve the python/ directory of older code (e.g. "
        "`git archive main python | tar -x -C /tmp/main`, then /tmp/main/python) and measure it the same way",
    )
    args = parser.parse_args(argv)
    print(cpu_line())
    results, notes = run_probes(memory=args.memory, baseline=args.baseline)
    return report(results, notes)


if __name__ == "__main__":
    sys.exit(main())
