"""Position bias (MPNet) and per-sequence key counts (ColBERT query expansion) in both CPU backends,
against a float64 per-sequence reference; the kernel path, its SDPA hand-off for long sequences,
and torch_native all agree."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sglang.srt.layers.attention.cpu_kernel_loader import load_kernel
from sglang.srt.layers.attention.cpu_varlen_backend import CpuVarlenAttnBackend
from sglang.srt.layers.attention.position_bias import PositionBias
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.model_executor.forward_batch import ForwardBatch
from test.helpers.attention_cases import make_inputs, make_layer

HEADS, KV_HEADS, HEAD_DIM = 4, 2, 16
LENGTHS = [5, 1, 23, 7, 7, 40]
KEYS = [3, 1, 23, 4, 7, 12]  # fewer keys than tokens for some sequences


def _bias_of(offsets: torch.Tensor) -> torch.Tensor:
    """A per-head bias that varies with the offset and its sign, clipped like MPNet's buckets."""
    gen = torch.Generator().manual_seed(7)
    table = torch.randn(2 * 33 + 1, HEADS, generator=gen)
    return table[offsets.clamp(-33, 33) + 33]


def _reference(q, k, v, lens, keys, bias: PositionBias | None) -> torch.Tensor:
    out, start, group = [], 0, HEADS // KV_HEADS
    for n, kn in zip(lens, keys):
        qs = q[start : start + n].double().view(n, HEADS, HEAD_DIM).transpose(0, 1)
        ks = k[start : start + n].double().view(n, KV_HEADS, HEAD_DIM).transpose(0, 1).repeat_interleave(group, 0)
        vs = v[start : start + n].double().view(n, KV_HEADS, HEAD_DIM).transpose(0, 1).repeat_interleave(group, 0)
        scores = (qs @ ks.transpose(1, 2)) * HEAD_DIM**-0.5
        if bias is not None:
            i = torch.arange(n)
            scores = scores + bias.table.double()[:, bias.center + i[None, :] - i[:, None]]
        allowed = torch.arange(n)[None, :] < kn
        probs = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
        out.append((probs @ vs).transpose(0, 1).reshape(n, HEADS * HEAD_DIM))
        start += n
    return torch.cat(out)


def _backends():
    kernel, why = load_kernel()
    assert kernel is not None, why
    return {
        "cpu_varlen": CpuVarlenAttnBackend(kernel),
        "cpu_varlen_with_sdpa_for_long": CpuVarlenAttnBackend(kernel, max_kernel_len=8),
        "torch_native": TorchNativeAttnBackend(),
    }


@pytest.fixture(scope="module")
def backends():
    return _backends()


@pytest.mark.parametrize("name", ["cpu_varlen", "cpu_varlen_with_sdpa_for_long", "torch_native"])
@pytest.mark.parametrize("use_bias", [True, False])
@pytest.mark.parametrize("use_keys", [True, False])
def test_bias_and_key_counts_match_reference(backends, name, use_bias, use_keys):
    backend = backends[name]
    keys = KEYS if use_keys else LENGTHS
    lists = [np.arange(n) for n in LENGTHS]
    fb = ForwardBatch.from_token_lists(lists, "cpu", key_lens=keys if use_keys else None)
    fb.attn_backend = backend
    backend.init_forward_metadata(fb)
    assert (fb.key_lens is not None) == use_keys
    bias = PositionBias.build(fb.max_seqlen, _bias_of, "cpu") if use_bias else None
    layer = make_layer(HEADS, KV_HEADS, HEAD_DIM, False, None)
    q, k, v = make_inputs(LENGTHS, HEADS, KV_HEADS, HEAD_DIM, seed=3)
    ours = layer(q, k, v, fb, position_bias=bias)
    ref = _reference(q, k, v, LENGTHS, keys, bias)
    assert (ours.double() - ref).abs().max() < 2e-5


def test_bias_table_covers_the_kernel_reads():
    bias = PositionBias.build(10, _bias_of, "cpu")
    assert bias.center == 9 and bias.table.shape == (HEADS, 19 + 16)
    dense = bias.dense(4)
    assert dense.shape == (HEADS, 4, 4)
    assert torch.equal(dense[:, 1, 3], _bias_of(torch.tensor([2]))[0].float())


def test_kernel_refuses_a_bias_too_small(backends):
    kernel = backends["cpu_varlen"].kernel
    q, k, v = make_inputs([20], HEADS, KV_HEADS, HEAD_DIM)
    small = PositionBias.build(5, _bias_of, "cpu")
    with pytest.raises(ValueError, match="does not cover"):
        kernel(
            q,
            k,
            v,
            torch.empty_like(q),
            torch.tensor([0, 20], dtype=torch.int32),
            num_heads=HEADS,
            num_kv_heads=KV_HEADS,
            head_dim=HEAD_DIM,
            scale=0.25,
            causal=False,
            window=None,
            bias=small.table,
            bias_center=small.center,
        )
