"""Decoder embedding forward on CPU: our packed Qwen3 against transformers on the same padded batch.

A Qwen3-Embedding-0.6B-shaped model (hidden 1024, 16 heads, 8 kv heads, head_dim 128) with random
weights and fewer layers, float32. The peer is transformers' Qwen3Model (sdpa attention) on the
same inputs, right-padded. The ratio in the same run is what to compare across machines.

    .venv/bin/python benchmark/bench_decoder_cpu.py --layers 4 --batch 32 --min-len 16 --max-len 256
"""

from __future__ import annotations

import argparse
import tempfile

import numpy as np
import torch
from bench_timing import median_seconds  # benchmark/, on sys.path when run as a script


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--min-len", type=int, default=16)
    p.add_argument("--max-len", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()

    from transformers import AutoModel, Qwen3Config, Qwen3Model

    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.server_args import ServerArgs

    cfg = Qwen3Config(
        vocab_size=151669,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=args.layers,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        architectures=["Qwen3Model"],
    )
    rng = np.random.default_rng(0)
    lens = rng.integers(args.min_len, args.max_len + 1, size=args.batch)
    ids = [rng.integers(0, cfg.vocab_size, size=int(n)).astype(np.int32) for n in lens]
    with tempfile.TemporaryDirectory() as d:
        torch.manual_seed(0)
        Qwen3Model(cfg).save_pretrained(d)
        runner = ModelRunner(ServerArgs(model_path=d, is_embedding=True, device="cpu", dtype="float32"))
        ref = AutoModel.from_pretrained(d, attn_implementation="sdpa", dtype=torch.float32).eval()

    padded = torch.zeros(args.batch, int(lens.max()), dtype=torch.long)
    mask = torch.zeros_like(padded)
    for i, x in enumerate(ids):
        padded[i, : len(x)] = torch.from_numpy(x)
        mask[i, : len(x)] = 1

    def ours() -> None:
        runner.embed(ids)

    @torch.inference_mode()
    def theirs() -> None:
        ref(input_ids=padded, attention_mask=mask)

    t_ours, t_ref = median_seconds(ours, args.repeats), median_seconds(theirs, args.repeats)
    tokens = int(lens.sum())
    print(
        f"threads={torch.get_num_threads()} layers={args.layers} batch={args.batch} tokens={tokens} "
        f"(padded {padded.numel()})"
    )
    print(f"ours:         {t_ours * 1000:8.1f} ms  {tokens / t_ours:8.0f} tok/s")
    print(f"transformers: {t_ref * 1000:8.1f} ms  {tokens / t_ref:8.0f} tok/s")
    print(f"speed-up: {t_ref / t_ours:.2f}x")


if __name__ == "__main__":
    main()
