"""Image throughput of /v1/embeddings, and what images in flight do to text-only requests.

Three phases of --duration seconds each, closed loop, against one server:
  images  --image-clients clients, each request --images-per-request {"image": ...} items
  text    --text-clients clients, each request one short plain string
  mixed   both client groups at once
and prints images/s, text requests/s and latency percentiles per phase. Text latency in `mixed`
against `text` shows what image work costs text requests: with images fetched, decoded and
resized in worker threads, a slow image source (--image-source slow-url) must not slow text down
at all; CPU-heavy images share the machine's cores with everything else.

    python benchmark/bench_multimodal.py --launch                    # tiny random GME, data URIs
    python benchmark/bench_multimodal.py --launch --image-source slow-url --slow-seconds 0.5
    python benchmark/bench_multimodal.py --url http://127.0.0.1:30000  # a running GME server
                                  # (url sources need it started with --mm-allow-private-urls)

--launch builds a tiny random GME-shaped checkpoint (test/helpers/tiny_models.build_tiny_gme)
unless --model-path is given, and starts the server with --chat-template gme-qwen2-vl. Images are
distinct JPEGs of --image-size made with PIL; `url` serves them from a local HTTP server here.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from bench_serving import launched_server, make_poster, percentile  # noqa: E402


@dataclass
class Stream:
    name: str
    latencies: list[float] = field(default_factory=list)
    items: int = 0
    errors: dict = field(default_factory=dict)


async def client(post, payloads, stream: Stream, items_per_request: int, stop_at: float, offset: int) -> None:
    i = offset
    while time.monotonic() < stop_at:
        t0 = time.monotonic()
        status, _ = await post(payloads[i % len(payloads)])
        i += 1
        if status == 200:
            stream.latencies.append(time.monotonic() - t0)
            stream.items += items_per_request
        else:
            stream.errors[str(status)] = stream.errors.get(str(status), 0) + 1


async def run_phase(args, post, image_payloads, text_payloads, images: bool, text: bool) -> dict:
    stop_at = time.monotonic() + args.duration
    streams, tasks = {}, []
    if images:
        streams["images"] = Stream("images")
        tasks += [
            client(post, image_payloads, streams["images"], args.images_per_request, stop_at, c)
            for c in range(args.image_clients)
        ]
    if text:
        streams["text"] = Stream("text")
        tasks += [client(post, text_payloads, streams["text"], 1, stop_at, c * 7) for c in range(args.text_clients)]
    start = time.monotonic()
    await asyncio.gather(*tasks)
    elapsed = time.monotonic() - start
    out = {}
    for name, s in streams.items():
        ms = [x * 1000 for x in s.latencies]
        out[name] = {
            "requests_per_s": len(ms) / elapsed,
            "items_per_s": s.items / elapsed,
            "requests": len(ms),
            "p50_ms": percentile(ms, 50),
            "p90_ms": percentile(ms, 90),
            "p99_ms": percentile(ms, 99),
            "errors": s.errors,
        }
    return out


def make_images(args) -> list[bytes]:
    import io

    import numpy as np
    from PIL import Image

    w, h = (int(x) for x in args.image_size.lower().split("x"))
    out = []
    for seed in range(args.distinct_images):
        rng = np.random.default_rng(seed)
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([(x * 255 // w + seed * 37) % 256, y * 255 // h, (x ^ y) % 256], -1)
        pixels = np.clip(base + rng.integers(0, 48, size=base.shape), 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(pixels, "RGB").save(buf, "JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def payloads(args, sources: list[str], texts: list[str], model: Optional[str]) -> tuple[list, list]:
    k = args.images_per_request
    image_payloads = [
        {
            "input": [{"image": sources[(i * k + j) % len(sources)]} for j in range(k)],
            "encoding_format": "base64",
            **({"model": model} if model else {}),
        }
        for i in range(len(sources))
    ]
    text_payloads = [{"input": t, "encoding_format": "base64", **({"model": model} if model else {})} for t in texts]
    return image_payloads, text_payloads


async def main_async(args, base: str) -> dict:
    from test.helpers.images import ImageServer
    from test.helpers.texts import load_texts

    jpegs = make_images(args)
    server = None
    if args.image_source == "data":
        sources = ["data:image/jpeg;base64," + base64.b64encode(b).decode() for b in jpegs]
    else:
        delay = args.slow_seconds if args.image_source == "slow-url" else 0.0
        server = ImageServer({f"/{i}.jpg": (("slow", delay, b) if delay else b) for i, b in enumerate(jpegs)})
        sources = [server.url(f"/{i}.jpg") for i in range(len(jpegs))]
    texts = [t for t in load_texts() if len(t.split()) <= 24][:64]
    image_payloads, text_payloads = payloads(args, sources, texts, None)
    pool = args.image_clients + args.text_clients
    post, close, client_name = make_poster(base.rstrip("/") + "/v1/embeddings", pool, 120.0)
    try:
        for p in image_payloads[:2] + text_payloads[:2]:  # warm-up (JIT, first allocations)
            status, _ = await post(p)
            if status != 200:
                raise SystemExit(f"warm-up request failed with {status}; is this a GME server with a chat template?")
        results = {"client": client_name}
        for phase, (img, txt) in {"images": (True, False), "text": (False, True), "mixed": (True, True)}.items():
            results[phase] = await run_phase(args, post, image_payloads, text_payloads, img, txt)
            print(f"{phase:7s}", json.dumps(results[phase]))
        return results
    finally:
        await close()
        if server is not None:
            server.stop()


def report(args, results: dict) -> str:
    rows = [
        "| phase | images/s | image req p50 / p99 (ms) | text req/s | text p50 / p90 / p99 (ms) |",
        "|---|---|---|---|---|",
    ]
    for phase in ("images", "text", "mixed"):
        r = results[phase]
        img, txt = r.get("images"), r.get("text")
        rows.append(
            "| {} | {} | {} | {} | {} |".format(
                phase,
                f"{img['items_per_s']:.1f}" if img else "-",
                f"{img['p50_ms']:.0f} / {img['p99_ms']:.0f}" if img else "-",
                f"{txt['requests_per_s']:.1f}" if txt else "-",
                f"{txt['p50_ms']:.1f} / {txt['p90_ms']:.1f} / {txt['p99_ms']:.1f}" if txt else "-",
            )
        )
    errors = {
        f"{phase}.{k}": v["errors"]
        for phase in ("images", "text", "mixed")
        for k, v in results[phase].items()
        if v["errors"]
    }
    head = (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus; image source {args.image_source}, "
        f"{args.image_size} JPEG, {args.images_per_request} per request, {args.image_clients} image clients, "
        f"{args.text_clients} text clients, {args.duration:g} s per phase"
    )
    return head + "\n\n" + "\n".join(rows) + (f"\n\nerrors: {errors}" if errors else "")


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--url", default="http://127.0.0.1:30000", help="base URL of a running GME server")
    p.add_argument("--launch", action="store_true", help="start a server for the run (see --model-path)")
    p.add_argument("--model-path", default=None, help="with --launch: checkpoint (default: a tiny random GME)")
    p.add_argument(
        "--tiny-max-pixels",
        type=int,
        default=28 * 28 * 64,
        help="with --launch and no --model-path: the tiny checkpoint's max_pixels (64 tokens/image)",
    )
    p.add_argument("--server-args", default="", help="with --launch: extra server flags")
    p.add_argument("--launch-timeout", type=float, default=300.0)
    p.add_argument(
        "--image-source",
        choices=["data", "url", "slow-url"],
        default="data",
        help="data URIs in the body, URLs of a local HTTP server, or URLs that answer after --slow-seconds",
    )
    p.add_argument("--slow-seconds", type=float, default=0.5)
    p.add_argument("--image-size", default="640x480")
    p.add_argument("--distinct-images", type=int, default=16)
    p.add_argument("--images-per-request", type=int, default=1)
    p.add_argument("--image-clients", type=int, default=8)
    p.add_argument("--text-clients", type=int, default=8)
    p.add_argument("--duration", type=float, default=15.0, help="seconds per phase")
    p.add_argument("--output-json", default=None)
    return p.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> None:
    args = parse_args(argv)
    if args.launch:
        model = args.model_path
        tmp = None
        if model is None:
            from test.helpers.tiny_models import build_tiny_gme

            tmp = tempfile.mkdtemp(prefix="bench_gme_")
            model = build_tiny_gme(tmp, max_pixels=args.tiny_max_pixels)
        # The image host of the url sources is on loopback, which image URLs may not reach by default.
        opt_in = "--mm-allow-private-urls" if args.image_source != "data" else ""
        launch = argparse.Namespace(
            server_args=f"--model-path {model} --is-embedding --chat-template gme-qwen2-vl {opt_in} {args.server_args}",
            no_auto_truncate=True,
            launch_timeout=args.launch_timeout,
        )
        with launched_server(launch) as base:
            results = asyncio.run(main_async(args, base))
    else:
        results = asyncio.run(main_async(args, args.url))
    text = report(args, results)
    print("\n" + text)
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump({"args": vars(args), "results": results, "table": text}, f, indent=2)


if __name__ == "__main__":
    main()
