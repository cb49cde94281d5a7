"""SigLIP (SiglipModel) and SigLIP 2 (Siglip2Model) as embedding models: text and image towers.

The layers are CLIP's (models/clip.py); what differs:
- text: bidirectional attention, and the pooled vector is the LAST position's hidden state after
  final_layer_norm, through `head` (a Linear). SigLIP was trained on texts padded to 64 tokens
  with the pad token and no attention mask, so the pooled position is a pad token that attended
  to everything (the end token, when the tokenizer pads on the left as transformers'
  Siglip2Tokenizer does): the runner pads every text to `text_padding` tokens with the
  tokenizer's pad id on its padding side before the forward (model_executor/image_text_batch.py),
  which reproduces the reference's `padding="max_length"` output exactly;
- image: patch embedding without a class token, post_layernorm over every patch, then the
  multi-head attention pooling head (a learned probe attends to the image's patches; LayerNorm;
  MLP residual), computed here per image over packed rows;
- SigLIP 2 (NaFlex): images keep their aspect ratio as h x w patches (pre-patchified by its image
  processor, a Linear patch embedding), the learned 16x16 position grid resized per image
  (bilinear, antialiased), so images of different sizes share one packed forward.
No projection: the pooled outputs are the embeddings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from sglang.srt.errors import ConfigError
from sglang.srt.layers.layernorm import LayerNorm
from sglang.srt.layers.linear import Linear
from sglang.srt.model_loader.weight_utils import load_weights_into
from sglang.srt.models.bert import frozen_embedding
from sglang.srt.models.clip import (
    TOWER_STACKED_PARAMS,
    PatchEmbedding,
    TextEmbeddings,
    TowerEncoder,
    TowerMLP,
    TwoTowerModel,
    check_image_size,
    loadable,
)

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch import ForwardBatch


class SiglipTextTransformer(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        self.embeddings = TextEmbeddings(config)
        self.encoder = TowerEncoder(config, causal=False)
        self.final_layer_norm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.head = Linear(config.hidden_size, getattr(config, "projection_size", None) or config.hidden_size)

    def pool(self, hidden: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        """The encoder's per-token output -> each text's last position, normalized, through `head`."""
        last = hidden.index_select(0, fb.cu_seqlens[1:].long() - 1)
        return self.head(self.final_layer_norm(last))


class PoolingAttention(nn.Module):
    """torch.nn.MultiheadAttention's parameters under its names: fused q/k/v in, out_proj."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.in_proj_weight = loadable(torch.zeros(3 * dim, dim))
        self.in_proj_bias = loadable(torch.zeros(3 * dim))
        self.out_proj = Linear(dim, dim)


class AttentionPoolingHead(nn.Module):
    """SigLIP's MAP head over packed images: one learned probe query per image attends to that
    image's rows (torch.nn.MultiheadAttention's math and checkpoint names), then x + mlp(ln(x))."""

    def __init__(self, config) -> None:
        super().__init__()
        dim, self.heads = config.hidden_size, config.num_attention_heads
        self.probe = loadable(torch.zeros(1, 1, dim))
        self.attention = PoolingAttention(dim)
        self.layernorm = LayerNorm(dim, config.layer_norm_eps)
        self.mlp = TowerMLP(config)

    def forward(self, hidden: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        dim = hidden.shape[-1]
        h, d = self.heads, dim // self.heads
        w, b = self.attention.in_proj_weight, self.attention.in_proj_bias
        q = F.linear(self.probe.reshape(1, dim).to(hidden.dtype), w[:dim], b[:dim]).reshape(h, d)
        kv = F.linear(hidden, w[dim:], b[dim:])
        k, v = kv[:, :dim].reshape(-1, h, d), kv[:, dim:].reshape(-1, h, d)
        scores = (k.float() * q.float()).sum(-1) * d**-0.5  # [T, heads]
        # Softmax within each image: subtract its max, sum its exponentials.
        seq = fb.seq_ids
        top = scores.new_full((fb.batch_size, h), float("-inf"))
        top = top.scatter_reduce(0, seq[:, None].expand(-1, h), scores, "amax")
        p = torch.exp(scores - top[seq])
        total = scores.new_zeros(fb.batch_size, h).index_add_(0, seq, p)
        pooled = scores.new_zeros(fb.batch_size, h, d).index_add_(0, seq, p[..., None] * v.float())
        x = self.attention.out_proj((pooled / total[..., None]).reshape(fb.batch_size, dim).to(hidden.dtype))
        return x + self.mlp(self.layernorm(x))


class SiglipVisionTransformer(nn.Module):
    def __init__(self, config, naflex: bool = False) -> None:
        super().__init__()
        dim = config.hidden_size
        self.naflex = naflex
        if naflex:  # pre-patchified pixels [patches, P * P * C], a Linear in the checkpoint too
            self.patch_embedding = Linear(config.num_channels * config.patch_size**2, dim)
            self.grid = int(round(config.num_patches**0.5))
            self.position_embedding = frozen_embedding(config.num_patches, dim)
        else:
            self.image_size = config.image_size
            self.patch_embedding = PatchEmbedding(config.num_channels, config.patch_size, dim, bias=True)
            self.position_embedding = frozen_embedding((config.image_size // config.patch_size) ** 2, dim)
        self.encoder = TowerEncoder(config, causal=False)
        self.post_layernorm = LayerNorm(dim, config.layer_norm_eps)
        if not getattr(config, "vision_use_head", True):
            raise ConfigError("SigLIP checkpoints without the attention-pooling head (vision_use_head) are not served")
        self.head = AttentionPoolingHead(config)

    def embed(self, pixels: torch.Tensor, grids: np.ndarray) -> torch.Tensor:
        if not self.naflex:
            check_image_size(pixels, self.image_size)
            x = self.patch_embedding(pixels) + self.position_embedding.weight
            return x.reshape(-1, x.shape[-1])
        x = self.patch_embedding(pixels.to(self.patch_embedding.weight.dtype))
        return x + self.resized_positions([(int(hh), int(ww)) for _, hh, ww in grids.tolist()])

    def resized_positions(self, shapes: list[tuple[int, int]]) -> torch.Tensor:
        """The learned grid x grid position table resized to each image's h x w patches (bilinear,
        antialiased, in float32, as transformers' Siglip2VisionEmbeddings), rows packed in order."""
        table = self.position_embedding.weight
        grid = table.float().reshape(self.grid, self.grid, -1).permute(2, 0, 1)[None]
        resized = {
            s: F.interpolate(grid, size=s, mode="bilinear", align_corners=False, antialias=True)[0]
            .reshape(table.shape[-1], -1)
            .T.to(table.dtype)
            for s in dict.fromkeys(shapes)
        }
        return torch.cat([resized[s] for s in shapes])

    def forward(self, fb: ForwardBatch, pixels: torch.Tensor, grids: np.ndarray) -> torch.Tensor:
        x = self.embed(pixels, grids)
        if x.shape[0] != fb.num_tokens:
            raise ValueError(f"{x.shape[0]} patches for a batch of {fb.num_tokens} image tokens")
        return self.head(self.post_layernorm(self.encoder(x, fb)), fb)


class SiglipModel(TwoTowerModel):
    naflex = False

    def __init__(self, config) -> None:
        super().__init__()
        self.config = config
        self.text_model = SiglipTextTransformer(config.text_config)
        self.vision_model = SiglipVisionTransformer(config.vision_config, naflex=self.naflex)
        # Every text is padded to this many tokens before the forward (see the module docstring).
        self.text_padding = int(config.text_config.max_position_embeddings)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return load_weights_into(self, weights, TOWER_STACKED_PARAMS, self._rename)

    def _rename(self, name: str) -> Optional[str]:
        if name.startswith("vision_model.embeddings."):
            name = "vision_model." + name[len("vision_model.embeddings.") :]
            if not self.naflex:
                name = name.replace("patch_embedding.", "patch_embedding.proj.")
        return name  # logit_scale / logit_bias match no parameter and are skipped


class Siglip2Model(SiglipModel):
    """SigLIP 2: the same text tower; NaFlex images (variable h x w patches each)."""

    naflex = True
