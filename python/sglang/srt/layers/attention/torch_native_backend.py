"""CPU / reference attention with torch's scaled_dot_product_attention.

Linear layers run on the packed tokens; only attention sees padding. Per batch we compute, once,
where each packed token sits in a [B, L_max] grid and the mask of real keys; every layer then
scatters q/k/v into that grid, runs one batched SDPA call and gathers the real rows back. A batch of
one sequence skips the grid entirely. (Measured on 2 CPU cores against one SDPA call per sequence
and a block-diagonal mask over all tokens: see benchmark/bench_attention_cpu.py and
benchmark/NOTES.md.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import torch
import torch.nn.functional as F

from sglang.srt.layers.attention.base import AttentionBackend

if TYPE_CHECKING:
    from sglang.srt.layers.attention.layer import AttentionLayer
    from sglang.srt.model_executor.forward_batch import ForwardBatch


@dataclass
class TorchNativeMetadata:
    batch_size: int
    max_len: int
    grid_index: Optional[torch.Tensor]  # [T] flat index into B * L_max (None: single sequence)
    key_valid: Optional[torch.Tensor]  # [B, L_max] bool
    masks: dict  # (causal, window) -> [B, 1, L, L] bool, built lazily and shared by layers


class TorchNativeAttnBackend(AttentionBackend):
    name = "torch_native"

    def init_forward_metadata(self, forward_batch: "ForwardBatch") -> None:
        b, lmax = forward_batch.batch_size, forward_batch.max_seqlen
        if b == 1:
            forward_batch.attn_metadata = TorchNativeMetadata(1, lmax, None, None, {})
            return
        device = forward_batch.input_ids.device
        grid_index = forward_batch.seq_ids * lmax + forward_batch.positions
        ar = torch.arange(lmax, device=device)
        key_valid = ar.unsqueeze(0) < forward_batch.seq_lens.to(device).unsqueeze(1)
        forward_batch.attn_metadata = TorchNativeMetadata(b, lmax, grid_index, key_valid, {})

    def _mask(self, meta: TorchNativeMetadata, layer: "AttentionLayer", device) -> Optional[torch.Tensor]:
        key = (layer.causal, layer.sliding_window)
        mask = meta.masks.get(key)
        if mask is not None or key in meta.masks:
            return mask
        lmax = meta.max_len
        mask = None
        if meta.key_valid is not None:
            mask = meta.key_valid[:, None, None, :]  # [B, 1, 1, L]
        if layer.causal or layer.sliding_window is not None:
            i = torch.arange(lmax, device=device)
            rel = i[None, :] - i[:, None]  # key - query
            allowed = torch.ones(lmax, lmax, dtype=torch.bool, device=device)
            if layer.causal:
                allowed &= rel <= 0
            if layer.sliding_window is not None:
                allowed &= rel.abs() < layer.sliding_window
            mask = allowed[None, None] if mask is None else (mask & allowed[None, None])
        meta.masks[key] = mask
        return mask

    def forward(self, q, k, v, layer: "AttentionLayer", forward_batch: "ForwardBatch") -> torch.Tensor:
        meta: TorchNativeMetadata = forward_batch.attn_metadata
        t = q.shape[0]
        h, hk, d = layer.num_heads, layer.num_kv_heads, layer.head_dim
        gqa = hk != h
        if meta.grid_index is None:
            # One sequence: [1, H, T, D] with no padding at all.
            qs = q.view(1, t, h, d).transpose(1, 2)
            ks = k.view(1, t, hk, d).transpose(1, 2)
            vs = v.view(1, t, hk, d).transpose(1, 2)
            mask = None if (layer.causal and layer.sliding_window is None) else self._mask(meta, layer, q.device)
            out = F.scaled_dot_product_attention(
                qs, ks, vs, attn_mask=mask, is_causal=layer.causal and mask is None,
                scale=layer.scaling, enable_gqa=gqa,
            )
            return out.transpose(1, 2).reshape(t, h * d)

        b, lmax = meta.batch_size, meta.max_len
        idx = meta.grid_index

        def to_grid(x: torch.Tensor, heads: int) -> torch.Tensor:
            grid = x.new_zeros(b * lmax, heads * d)
            grid.index_copy_(0, idx, x)
            return grid.view(b, lmax, heads, d).transpose(1, 2)

        out = F.scaled_dot_product_attention(
            to_grid(q, h), to_grid(k, hk), to_grid(v, hk),
            attn_mask=self._mask(meta, layer, q.device), scale=layer.scaling, enable_gqa=gqa,
        )
        return out.transpose(1, 2).reshape(b * lmax, h * d).index_select(0, idx)
