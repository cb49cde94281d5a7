"""The Qwen2-VL vision tower: patch embedding, 2-D RoPE, attention within each image, patch merger.

Every image of a batch goes through one forward: their patches are packed end to end (as the
language model packs tokens), and each patch attends to all patches of its own image and to no
other (`cu_seqlens` of the images). Images of equal size share one SDPA call; the rest run as views
of the packed patches, so mixing sizes costs no padding.

The attention here calls SDPA directly rather than through the server's attention backend: the
backend plans every bound layer shape for each language-model batch (FlashInfer) and its CUDA
graphs capture only the decoder, so vision layers there would cost a plan per text batch for nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from sglang.srt.layers.activation import get_activation
from sglang.srt.layers.attention.torch_native_backend import plan_groups
from sglang.srt.layers.layernorm import LayerNorm
from sglang.srt.layers.linear import Linear
from sglang.srt.layers.rotary_embedding import apply_rotary
from sglang.srt.model_loader.weight_utils import default_weight_loader


@dataclass
class VisionBatch:
    """What every block of one vision forward shares: rotary angles and the attention groups."""

    cos_sin: torch.Tensor  # [patches, head_dim] float32
    # One entry per SDPA call: (images in it, patches per image, span of a lone image or None,
    # packed patch rows of a multi-image group or None).
    groups: list[tuple[int, int, Optional[tuple[int, int]], Optional[torch.Tensor]]]


def patch_positions(grid_thw: np.ndarray, merge: int) -> np.ndarray:
    """(row, column) of every patch [patches, 2], in the processor's order: each frame's patches
    come in merge x merge blocks, block rows first (as transformers' get_vision_position_ids)."""
    out = []
    for t, h, w in grid_thw.tolist():
        hpos = np.broadcast_to(np.arange(h)[:, None], (h, w))
        wpos = np.broadcast_to(np.arange(w)[None, :], (h, w))
        blocks = [
            p.reshape(h // merge, merge, w // merge, merge).transpose(0, 2, 1, 3).reshape(-1) for p in (hpos, wpos)
        ]
        out.append(np.tile(np.stack(blocks, axis=1), (t, 1)))
    return np.concatenate(out).astype(np.int64)


class PatchEmbed(nn.Module):
    """The checkpoint's Conv3d whose kernel equals its stride is one matmul over flattened patches;
    its weight [embed, C, T, P, P] is loaded flattened into a Linear."""

    def __init__(self, patch_dim: int, embed_dim: int) -> None:
        super().__init__()
        self.proj = Linear(patch_dim, embed_dim, bias=False)
        self.proj.weight.weight_loader = self._load_conv

    @staticmethod
    def _load_conv(param: torch.Tensor, loaded: torch.Tensor, shard_id=None) -> None:
        default_weight_loader(param, loaded.reshape(loaded.shape[0], -1))

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.proj(pixel_values.to(self.proj.weight.dtype))


class VisionAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.qkv = Linear(dim, 3 * dim)
        self.proj = Linear(dim, dim)

    def forward(self, x: torch.Tensor, vb: VisionBatch) -> torch.Tensor:
        n, h, d = x.shape[0], self.num_heads, self.head_dim
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k = apply_rotary(q, vb.cos_sin, d), apply_rotary(k, vb.cos_sin, d)
        out = torch.empty_like(q)
        for count, length, span, rows in vb.groups:
            if span is not None:
                qg, kg, vg = q[span[0] : span[1]], k[span[0] : span[1]], v[span[0] : span[1]]
            else:
                qg, kg, vg = (t.index_select(0, rows) for t in (q, k, v))
            og = (
                F.scaled_dot_product_attention(*(t.reshape(count, length, h, d).transpose(1, 2) for t in (qg, kg, vg)))
                .transpose(1, 2)
                .reshape(count * length, h * d)
            )
            if span is not None:
                out[span[0] : span[1]] = og
            else:
                out.index_copy_(0, rows, og)
        return self.proj(out.reshape(n, h * d))


class VisionMlp(nn.Module):
    def __init__(self, dim: int, hidden: int, act: str) -> None:
        super().__init__()
        self.fc1 = Linear(dim, hidden)
        self.fc2 = Linear(hidden, dim)
        self.act = get_activation(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class VisionBlock(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        dim = config.embed_dim
        self.norm1 = LayerNorm(dim, 1e-6)
        self.norm2 = LayerNorm(dim, 1e-6)
        self.attn = VisionAttention(dim, config.num_heads)
        self.mlp = VisionMlp(dim, int(dim * config.mlp_ratio), config.hidden_act)

    def forward(self, x: torch.Tensor, vb: VisionBatch) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), vb)
        return x + self.mlp(self.norm2(x))


class PatchMerger(nn.Module):
    """LayerNorm, then each merge x merge block of patches (consecutive rows) -> one LM token."""

    def __init__(self, out_dim: int, embed_dim: int, merge: int) -> None:
        super().__init__()
        self.block_dim = embed_dim * merge * merge
        self.ln_q = LayerNorm(embed_dim, 1e-6)
        self.mlp = nn.Sequential(Linear(self.block_dim, self.block_dim), nn.GELU(), Linear(self.block_dim, out_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.ln_q(x).reshape(-1, self.block_dim))


class Qwen2VisionTransformer(nn.Module):
    """pixel_values [patches, C * T * P * P] of all images + their (t, h, w) grids -> one LM
    embedding per merged patch block [patches / merge^2, text hidden], image after image."""

    def __init__(self, config) -> None:
        super().__init__()
        channels = getattr(config, "in_channels", None) or getattr(config, "in_chans", 3)
        patch_dim = channels * config.temporal_patch_size * config.patch_size**2
        self.merge = int(config.spatial_merge_size)
        self.head_dim = config.embed_dim // config.num_heads
        self.patch_embed = PatchEmbed(patch_dim, config.embed_dim)
        self.blocks = nn.ModuleList(VisionBlock(config) for _ in range(config.depth))
        self.merger = PatchMerger(config.hidden_size, config.embed_dim, self.merge)
        theta = float((getattr(config, "rope_parameters", None) or {}).get("rope_theta", 10000.0))
        quarter = torch.arange(0, self.head_dim // 2, 2, dtype=torch.float32) / (self.head_dim // 2)
        self.register_buffer("inv_freq", 1.0 / theta**quarter, persistent=False)  # [head_dim / 4]

    def prepare(self, grid_thw: np.ndarray, device: torch.device) -> VisionBatch:
        """Rotary angles and attention groups of one batch, from the host-side grids (no syncs)."""
        pos = torch.from_numpy(patch_positions(grid_thw, self.merge)).to(device, non_blocking=True)
        freqs = (pos.unsqueeze(-1).float() * self.inv_freq).flatten(1)  # [patches, head_dim / 2]: rows | cols
        cos_sin = torch.cat([freqs.cos(), freqs.sin()], dim=-1)
        lens = [int(h * w) for t, h, w in grid_thw.tolist() for _ in range(t)]  # attention is per frame
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
        groups = []
        for members in plan_groups(lens, 0.0):  # equal sizes only: no padding, no mask
            length = lens[members[0]]
            if len(members) == 1:
                s = int(starts[members[0]])
                groups.append((1, length, (s, s + length), None))
            else:
                rows = (starts[members][:, None] + np.arange(length)[None, :]).reshape(-1)
                groups.append((len(members), length, None, torch.from_numpy(rows).to(device, non_blocking=True)))
        return VisionBatch(cos_sin, groups)

    def forward(self, pixel_values: torch.Tensor, grid_thw: np.ndarray) -> torch.Tensor:
        vb = self.prepare(grid_thw, pixel_values.device)
        x = self.patch_embed(pixel_values)
        for block in self.blocks:
            x = block(x, vb)
        return self.merger(x)
