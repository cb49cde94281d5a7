"""MPNet's relative position bias on CPU: the varlen kernel (bias table indexed in the kernel)
against torch_native (SDPA with a dense float bias per sequence length), whole-model forward.

A random MPNet of all-mpnet-base-v2's shape (12 layers, hidden 768, 12 heads), batches of mixed
lengths as embedding traffic has them. Prints ms per batch and the ratio. Run:
    .venv/bin/python benchmark/bench_position_bias.py [--layers 12] [--batch 32] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    from transformers import MPNetConfig, MPNetModel

    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.server_args import ServerArgs
    from test.helpers.tiny_task_models import build_roberta_tokenizer

    d = tempfile.mkdtemp(prefix="bench-mpnet-")
    vocab = build_roberta_tokenizer(d)
    cfg = MPNetConfig(vocab_size=vocab, hidden_size=768, num_hidden_layers=args.layers, num_attention_heads=12,
                      intermediate_size=3072, max_position_embeddings=514)  # fmt: skip
    MPNetModel(cfg, add_pooling_layer=False).eval().save_pretrained(d)
    rng = np.random.default_rng(0)
    lengths = rng.integers(8, 128, size=args.batch)
    batch = [rng.integers(5, vocab, size=n).astype(np.int32) for n in lengths]
    results = {}
    for backend in ("cpu_varlen", "torch_native"):
        runner = ModelRunner(ServerArgs(model_path=d, device="cpu", attention_backend=backend,
                                        cpu_threads=args.threads or None))  # fmt: skip
        runner.embed(batch)  # warm-up
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            runner.embed(batch)
            times.append(time.perf_counter() - t0)
        results[backend] = min(times) * 1000
        print(f"{backend:13s} {results[backend]:8.1f} ms / batch of {args.batch} ({int(lengths.sum())} tokens)")
    print(f"torch_native / cpu_varlen: {results['torch_native'] / results['cpu_varlen']:.2f}x")
    flags = [f for f in ("avx512f", "avx512_bf16", "amx_tile", "avx2", "fma") if f in open("/proc/cpuinfo").read()]
    print(f"threads {torch.get_num_threads()}, CPU flags: {' '.join(flags)}, cores {os.cpu_count()}")


if __name__ == "__main__":
    main()
