"""The CPU targets of the batching work, as ratios against sentence-transformers in one run.

    python benchmark/bench_cpu_targets.py [--output-json results.json]

Measures sentence-transformers' offline `encode(batch_size=32)` on the English corpus (the peer),
then our server under 64 concurrent single-text clients (corpus texts) and one client sending short
texts (the latency target), for each server
configuration, then the peer again: the peer's median brackets the server runs, so machine noise
hits both sides. Prints one table of texts/s, p50 latency and the ratio to the peer.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_serving  # noqa: E402

SHORT_WORDS = 12  # "one short text" for the latency target: the corpus's queries and short lines

CONFIGS = {
    "float32": "",
    "float32-1thread": "--cpu-threads 1",
    "bfloat16": "--dtype bfloat16",
    "bfloat16-1thread": "--dtype bfloat16 --cpu-threads 1",
}


def peer_texts_per_s(texts: list[str], seconds: float) -> float:
    """sentence-transformers offline, float32, batch 32, over the corpus until `seconds` pass."""
    from sentence_transformers import SentenceTransformer

    from sglang.srt.server_args import default_model_path

    model = SentenceTransformer(default_model_path(), device="cpu")
    model.encode(texts[:64], batch_size=32)
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        model.encode(texts, batch_size=32)
        done += len(texts)
    return done / (time.perf_counter() - start)


LEVEL_WARMUP = 32  # requests load_level sends and discards before each level


def load_level(
    url: str, concurrency: int, requests: int, encoding: str, max_words: int | None, client: str
) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        argv = [
            "--url",
            url,
            "--concurrency",
            str(concurrency),
            "--num-requests",
            str(requests),
            "--warmup",
            str(LEVEL_WARMUP),
            "--encoding-format",
            encoding,
            "--no-progress",
            "--client",
            client,
            "--output-json",
            out.name,
        ]
        if max_words:
            argv += ["--max-words", str(max_words)]
        bench_serving.main(argv)
        with open(out.name) as f:
            return json.load(f)["levels"][0]


def serve_and_load(server_args: str, requests: int, encoding: str, client: str) -> dict[str, dict[str, Any]]:
    """One server: 64 clients sending corpus texts, then one client sending short texts."""
    launch = argparse.Namespace(server_args=server_args, no_auto_truncate=False, launch_timeout=600.0)
    with bench_serving.launched_server(launch) as url:
        return {
            "c=64": load_level(url, 64, requests, encoding, None, client),
            "c=1 short": load_level(url, 1, requests // 2, encoding, SHORT_WORDS, client),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer-seconds", type=float, default=20.0, help="seconds per sentence-transformers run")
    ap.add_argument("--requests", type=int, default=600, help="requests per concurrency level")
    ap.add_argument(
        "--encoding-format",
        default="base64",
        choices=["float", "base64"],
        help="base64 is what the official openai client asks for",
    )
    ap.add_argument(
        "--client",
        default=bench_serving.CLIENTS[0],
        choices=bench_serving.CLIENTS,
        help="bench_serving's HTTP client (lean: least CPU taken from the server)",
    )
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated names from: " + ", ".join(CONFIGS))
    ap.add_argument("--output-json", default=None)
    args = ap.parse_args()

    texts = bench_serving.load_texts(bench_serving.DEFAULT_TEXTS, None)
    peer = [peer_texts_per_s(texts, args.peer_seconds)]
    results = {}
    for name in args.configs.split(","):
        results[name] = serve_and_load(CONFIGS[name], args.requests, args.encoding_format, args.client)
        peer.append(peer_texts_per_s(texts, args.peer_seconds))
    st = statistics.median(peer)

    print(
        f"\nsentence-transformers offline float32, batch 32: {st:.1f} texts/s "
        f"(runs: {', '.join(f'{p:.1f}' for p in peer)})"
    )
    print(f"{'server':<20} {'c=64 texts/s':>12} {'x ST':>6} {'c=1 short p50 ms':>17} {'p99 ms':>8}")
    rows = []
    for name, levels in results.items():
        c64, c1 = levels["c=64"], levels["c=1 short"]
        ratio = c64["texts_per_s"] / st
        print(f"{name:<20} {c64['texts_per_s']:>12.1f} {ratio:>6.2f} {c1['p50_ms']:>17.1f} {c1['p99_ms']:>8.1f}")
        rows.append(
            {
                "config": name,
                "c64_texts_per_s": c64["texts_per_s"],
                "ratio_vs_st": ratio,
                "c1_p50_ms": c1["p50_ms"],
                "c1_p99_ms": c1["p99_ms"],
                "levels": levels,
            }
        )
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump(
                {
                    "machine": bench_serving.machine_info(),
                    "st_texts_per_s": peer,
                    "servers": rows,
                    "command": " ".join(sys.argv),
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
