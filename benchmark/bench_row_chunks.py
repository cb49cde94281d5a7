"""What running a decoder's per-token work in row chunks on CPU saves in peak memory, and costs in time.

    python benchmark/bench_row_chunks.py                      # Qwen3-0.6B's layer shape, 2 layers
    python benchmark/bench_row_chunks.py --chunks off,4096,2048 --tokens 16384 --repeats 2

A random-weight Qwen3 with the layer shape of Qwen3-0.6B (hidden 1024, MLP 3072, 16 heads of 128,
8 KV heads; --layers of them: peak memory is per layer, so two show it) is built once under
--model-dir. Each set-up (--chunks: `off` is one pass over the whole batch, a number is the chunk's
row count, 4096 being the server's ROW_CHUNK) runs in a fresh spawned process with the environment
the launcher gives the scheduler (jemalloc and its pool, utils/allocator.py), loads the model with
our ModelRunner, embeds one batch to warm up and then --batches batches of --tokens tokens each
(texts of --text-tokens). Reported per set-up: the peak RSS above the RSS after the model loaded
(what one full batch pins), CPU seconds per batch (all threads; steadier than wall time on a shared
machine), wall seconds per batch, and the largest difference of its vectors from `off`'s.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from typing import Any, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_allocator import spawned  # noqa: E402
from bench_serving import machine_info  # noqa: E402
from bench_soak import random_qwen3  # noqa: E402
from rss_sampler import rss_mb  # noqa: E402


def build_model(path: str, layers: int) -> str:
    """A random Qwen3 of Qwen3-0.6B's layer shape."""
    return random_qwen3(
        path,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=layers,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=8192,
    )


def _run(model: str, chunk: str, args: argparse.Namespace, conn) -> None:
    import numpy as np

    import sglang.srt.layers.row_chunks as row_chunks
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.server_args import ServerArgs

    row_chunks.ROW_CHUNK = sys.maxsize if chunk == "off" else int(chunk)
    runner = ModelRunner(ServerArgs(model_path=model, is_embedding=True, cpu_threads=args.threads))
    rng = np.random.default_rng(0)
    vocab = runner.model_config.hf_config.vocab_size
    batch = [rng.integers(0, vocab, args.text_tokens) for _ in range(args.tokens // args.text_tokens)]
    loaded_mb = rss_mb(os.getpid())
    first = runner.embed(batch)
    times, wall = os.times(), time.perf_counter()
    for _ in range(args.batches):
        runner.embed(batch)
    wall = time.perf_counter() - wall
    end = os.times()
    cpu = (end.user - times.user) + (end.system - times.system)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    conn.send(
        {
            "chunk": chunk,
            "loaded_mb": loaded_mb,
            "peak_mb": peak_mb,
            "cpu_s": cpu / args.batches,
            "wall_s": wall / args.batches,
            "vectors": first,
        }
    )
    conn.close()


def run_chunk(model: str, chunk: str, args: argparse.Namespace) -> dict[str, Any]:
    from sglang.srt.utils.allocator import plan_allocator

    return spawned(_run, (model, chunk, args), plan_allocator("auto", {}).env)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", default="/tmp/bench-qwen3-0.6b-layers")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--chunks", default="off,4096,2048")
    parser.add_argument("--tokens", type=int, default=16384, help="tokens per batch (--max-num-tokens' default)")
    parser.add_argument("--text-tokens", type=int, default=512)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2, help="runs of every set-up, alternated")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)

    model = build_model(args.model_dir, args.layers)
    print(machine_info())
    print(
        f"model: Qwen3-0.6B layer shape x {args.layers}; batches of {args.tokens} tokens "
        f"({args.tokens // args.text_tokens} texts of {args.text_tokens})"
    )
    results: dict[str, list[dict[str, Any]]] = {}
    chunks = args.chunks.split(",")
    for repeat in range(args.repeats):
        for chunk in chunks if repeat % 2 == 0 else chunks[::-1]:
            results.setdefault(chunk, []).append(run_chunk(model, chunk, args))
    import numpy as np

    reference = results[chunks[0]][0]["vectors"]
    print(f"{'chunk':>6} | {'peak over loaded MB':>20} | {'CPU s / batch':>14} | {'wall s / batch':>15} | max diff")
    for chunk in chunks:
        runs = results[chunk]
        peaks = ", ".join(f"{r['peak_mb'] - r['loaded_mb']:.0f}" for r in runs)
        cpu = ", ".join(f"{r['cpu_s']:.2f}" for r in runs)
        wall = ", ".join(f"{r['wall_s']:.2f}" for r in runs)
        diff = max(float(np.abs(r["vectors"] - reference).max()) for r in runs)
        print(f"{chunk:>6} | {peaks:>20} | {cpu:>14} | {wall:>15} | {diff:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
