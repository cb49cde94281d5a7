"""Compare ways to run bidirectional attention over packed sequences on the CPU.

    python benchmark/bench_attention_cpu.py [--threads 2] [--dtype float32,bfloat16]

Strategies: `grid` pads every sequence to the batch's longest; `per_seq` runs one SDPA call per
sequence (no padding, one call each); `grouped` is TorchNativeAttnBackend, which groups by length
and pads within a group only up to its `max_padding` (default 0: equal lengths share a call);
`kernel` is CpuVarlenAttnBackend, the compiled C kernel, one call per layer. Lengths come from the
English test corpus tokenized with the bundled MiniLM tokenizer, so the mix is realistic.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
import torch
import torch.nn.functional as F
from bench_timing import median_seconds  # benchmark/, on sys.path when run as a script

from sglang.srt.layers.attention.cpu_kernel_loader import load_kernel
from sglang.srt.layers.attention.cpu_varlen_backend import CpuVarlenAttnBackend
from sglang.srt.layers.attention.layer import AttentionLayer
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.model_executor.forward_batch import ForwardBatch
from sglang.srt.server_args import default_model_path

HEADS, HEAD_DIM = 12, 32  # all-MiniLM-L6-v2


def corpus_lengths() -> list[int]:
    from transformers import AutoTokenizer

    path = os.path.join(os.path.dirname(__file__), "..", "test", "data", "texts.json")
    with open(path) as f:
        texts = json.load(f)
    tok = AutoTokenizer.from_pretrained(default_model_path())
    return [min(256, len(x)) for x in tok(texts)["input_ids"]]


def grid_attention(q, k, v, fb: ForwardBatch) -> torch.Tensor:
    b, lmax = fb.batch_size, fb.max_seqlen
    idx = fb.seq_ids * lmax + fb.positions
    valid = torch.arange(lmax)[None, :] < fb.seq_lens[:, None]

    def grid(x):
        g = x.new_zeros(b * lmax, x.shape[1])
        g.index_copy_(0, idx, x)
        return g.view(b, lmax, HEADS, HEAD_DIM).transpose(1, 2)

    out = F.scaled_dot_product_attention(grid(q), grid(k), grid(v), attn_mask=valid[:, None, None, :])
    return out.transpose(1, 2).reshape(b * lmax, -1).index_select(0, idx)


def per_seq_attention(q, k, v, fb: ForwardBatch) -> torch.Tensor:
    out = torch.empty_like(q)
    cu = fb.cu_seqlens.tolist()
    for s, e in zip(cu[:-1], cu[1:]):
        n = e - s
        qs, ks, vs = (x[s:e].view(1, n, HEADS, HEAD_DIM).transpose(1, 2) for x in (q, k, v))
        out[s:e] = F.scaled_dot_product_attention(qs, ks, vs).transpose(1, 2).reshape(n, -1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--dtype", default="float32,bfloat16")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    kernel, why = load_kernel()
    if kernel is None:
        raise SystemExit(f"the CPU kernel is unavailable: {why}")
    lengths = corpus_lengths()
    layer = AttentionLayer(HEADS, HEAD_DIM)
    grouped, compiled = TorchNativeAttnBackend(), CpuVarlenAttnBackend(kernel)
    for dtype_name in args.dtype.split(","):
        dtype = getattr(torch, dtype_name)
        rng = np.random.default_rng(0)
        print(f"\n{dtype_name}, {args.threads} threads, {HEADS} heads x {HEAD_DIM}")
        print(
            f"{'batch':>6} {'tokens':>7} {'grid ms':>8} {'per_seq ms':>10} {'grouped ms':>10} "
            f"{'kernel ms':>9} {'grouped/kernel':>14}"
        )
        for bs in (1, 4, 16, 32, 64):
            lens = rng.choice(lengths, size=bs)
            lists = [np.zeros(n, np.int32) for n in lens]
            fb_g = ForwardBatch.from_token_lists(lists, "cpu", attn_backend=grouped)
            fb_k = ForwardBatch.from_token_lists(lists, "cpu", attn_backend=compiled)
            t = fb_g.num_tokens
            q, k, v = (torch.randn(t, HEADS * HEAD_DIM).to(dtype) for _ in range(3))
            ref = per_seq_attention(q.float(), k.float(), v.float(), fb_g)
            tol = 1e-5 if dtype == torch.float32 else 3e-2
            for name, fb, backend in (("grouped", fb_g, grouped), ("kernel", fb_k, compiled)):
                ours = backend.forward(q, k, v, layer, fb).float()
                assert torch.allclose(ours, ref, atol=tol), f"{name} disagrees with per-sequence attention"
            with torch.inference_mode():
                g = median_seconds(lambda: grid_attention(q, k, v, fb_g), args.repeats)
                p = median_seconds(lambda: per_seq_attention(q, k, v, fb_g), args.repeats)
                o = median_seconds(lambda: grouped.forward(q, k, v, layer, fb_g), args.repeats)
                c = median_seconds(lambda: compiled.forward(q, k, v, layer, fb_k), args.repeats)
            print(f"{bs:>6} {t:>7} {g * 1e3:>8.2f} {p * 1e3:>10.2f} {o * 1e3:>10.2f} {c * 1e3:>9.2f} {o / c:>13.1f}x")


if __name__ == "__main__":
    main()
