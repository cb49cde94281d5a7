"""Compare ways to run bidirectional attention over packed sequences on the CPU.

    python benchmark/bench_attention_cpu.py [--threads 2]

Strategies: `grid` pads every sequence to the batch's longest; `per_seq` runs one SDPA call per
sequence (no padding, one call each); `grouped` is TorchNativeAttnBackend, which groups by length
and pads within a group only up to its `max_padding` (default 0: equal lengths share a call). Lengths come from the English test
corpus tokenized with the bundled MiniLM tokenizer, so the mix is realistic.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
import torch
import torch.nn.functional as F

from sglang.srt.layers.attention.layer import AttentionLayer
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.model_executor.forward_batch import ForwardBatch
from sglang.srt.server_args import default_model_path
from bench_timing import median_seconds  # benchmark/, on sys.path when run as a script

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
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    lengths = corpus_lengths()
    rng = np.random.default_rng(0)
    backend = TorchNativeAttnBackend()
    layer = AttentionLayer(HEADS, HEAD_DIM)
    print(f"{'batch':>6} {'tokens':>7} {'grid ms':>8} {'per_seq ms':>10} {'grouped ms':>10}")
    for bs in (1, 4, 16, 64):
        lens = rng.choice(lengths, size=bs)
        fb = ForwardBatch.from_token_lists([np.zeros(n, np.int32) for n in lens], "cpu", attn_backend=backend)
        t = fb.num_tokens
        q, k, v = (torch.randn(t, HEADS * HEAD_DIM) for _ in range(3))
        ref = per_seq_attention(q, k, v, fb)
        ours = backend.forward(q, k, v, layer, fb)
        assert torch.allclose(ours, ref, atol=1e-5), "backend disagrees with per-sequence attention"
        with torch.inference_mode():
            g = median_seconds(lambda: grid_attention(q, k, v, fb), args.repeats)
            p = median_seconds(lambda: per_seq_attention(q, k, v, fb), args.repeats)
            o = median_seconds(lambda: backend.forward(q, k, v, layer, fb), args.repeats)
        print(f"{bs:>6} {t:>7} {g * 1e3:>8.2f} {p * 1e3:>10.2f} {o * 1e3:>10.2f}")


if __name__ == "__main__":
    main()
