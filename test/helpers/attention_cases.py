"""Attention test cases shared by the backend tests: shapes, lengths, a float64 reference, batches."""

from __future__ import annotations

import numpy as np
import torch

from sglang.srt.layers.attention.layer import AttentionLayer
from sglang.srt.model_executor.forward_batch import ForwardBatch

# (num_heads, num_kv_heads, head_dim, causal, sliding_window)
CASES = {
    "bidirectional": (4, 4, 16, False, None),
    "causal": (4, 4, 16, True, None),
    "gqa_bidirectional": (8, 2, 16, False, None),
    "gqa_causal": (6, 2, 16, True, None),
    "window_bidirectional": (4, 4, 16, False, 3),
    "window_causal": (4, 2, 16, True, 3),
    "head_dim_64": (2, 1, 64, False, None),
}
LENGTHS = {"mixed": [5, 1, 9, 3, 12], "single": [11], "ones": [1, 1, 1]}


def reference_attention(q, k, v, seq_lens, heads, kv_heads, head_dim, causal, window, scale) -> torch.Tensor:
    """One sequence at a time, in float64, with an explicit allowed[i, j] matrix."""
    out, start = [], 0
    for n in seq_lens:
        qs = q[start : start + n].double().view(n, heads, head_dim).transpose(0, 1)
        ks = k[start : start + n].double().view(n, kv_heads, head_dim).transpose(0, 1)
        vs = v[start : start + n].double().view(n, kv_heads, head_dim).transpose(0, 1)
        ks = ks.repeat_interleave(heads // kv_heads, 0)
        vs = vs.repeat_interleave(heads // kv_heads, 0)
        allowed = torch.ones(n, n, dtype=torch.bool)
        for i in range(n):
            for j in range(n):
                if causal and j > i:
                    allowed[i, j] = False
                if window is not None and abs(i - j) >= window:
                    allowed[i, j] = False
        scores = (qs @ ks.transpose(1, 2)) * scale
        probs = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
        out.append((probs @ vs).transpose(0, 1).reshape(n, heads * head_dim))
        start += n
    return torch.cat(out)


def make_inputs(seq_lens, heads, kv_heads, head_dim, seed=0, dtype=torch.float32, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    t = sum(seq_lens)
    q = torch.randn(t, heads * head_dim, generator=gen)
    k = torch.randn(t, kv_heads * head_dim, generator=gen)
    v = torch.randn(t, kv_heads * head_dim, generator=gen)
    return q.to(device, dtype), k.to(device, dtype), v.to(device, dtype)


def make_batch(seq_lens, backend, device="cpu") -> ForwardBatch:
    lists = [np.arange(n, dtype=np.int64) for n in seq_lens]
    return ForwardBatch.from_token_lists(lists, device, attn_backend=backend)


def make_layer(heads, kv_heads, head_dim, causal, window, scaling=None) -> AttentionLayer:
    return AttentionLayer(heads, head_dim, kv_heads, scaling=scaling, causal=causal, sliding_window=window)


def check_backend(backend, case, lengths, scaling=None, atol=1e-5, seed=0):
    heads, kv_heads, head_dim, causal, window = CASES[case]
    seq_lens = LENGTHS[lengths] if isinstance(lengths, str) else lengths
    layer = make_layer(heads, kv_heads, head_dim, causal, window, scaling)
    fb = make_batch(seq_lens, backend)
    q, k, v = make_inputs(seq_lens, heads, kv_heads, head_dim, seed)
    ours = layer(q, k, v, fb)
    ref = reference_attention(q, k, v, seq_lens, heads, kv_heads, head_dim, causal, window, layer.scaling)
    assert ours.shape == (sum(seq_lens), heads * head_dim)
    assert torch.allclose(ours.double(), ref, atol=atol), (ours.double() - ref).abs().max()


def check_layers_with_different_masks(backend) -> None:
    """One batch's metadata serves layers with different masks (as in EmbeddingGemma)."""
    seq_lens = [6, 2, 9]
    fb = make_batch(seq_lens, backend)
    for case in ("bidirectional", "window_bidirectional", "causal", "window_causal"):
        heads, kv_heads, d, causal, window = CASES[case]
        layer = make_layer(heads, kv_heads, d, causal, window)
        q, k, v = make_inputs(seq_lens, heads, kv_heads, d, seed=3)
        ref = reference_attention(q, k, v, seq_lens, heads, kv_heads, d, causal, window, layer.scaling)
        assert torch.allclose(layer(q, k, v, fb).double(), ref, atol=1e-5), case
