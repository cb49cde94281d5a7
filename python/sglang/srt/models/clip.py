"""CLIP (CLIPModel) as an embedding model: a text tower and an image tower projected into one space.

Both towers are pre-LayerNorm transformers over packed sequences, their attention going through the
server's attention backend like BERT's: the text tower is causal (as CLIP was trained), the image
tower attends within each image (each image is one sequence of 1 class token + its patches).

- text: token + learned position embeddings -> layers -> final_layer_norm -> the hidden state of
  the first end-of-text token (or, for old configs with eos_token_id 2, of the highest token id,
  as transformers does) -> text_projection;
- image: patch embedding (a Conv2d whose kernel is its stride, run as one matmul over flattened
  patches) with the class token prepended, + position embeddings -> pre_layrnorm -> layers ->
  post_layernorm of the class token -> visual_projection.

The model pools itself (configs/model_registry: pooling "model"): the runner
(model_executor/image_text_batch.py) runs text inputs like any text model's (eagerly or as a CUDA
graph of `run_layers`) and the output head calls `pool_text`; images go to `encode_images`; both
are then L2-normalized. models/siglip.py reuses the towers' layers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Optional

import numpy as np
import torch
from torch import nn

from sglang.srt.layers.activation import get_activation
from sglang.srt.layers.attention.layer import AttentionLayer
from sglang.srt.layers.layernorm import LayerNorm
from sglang.srt.layers.linear import Linear, QKVLinear
from sglang.srt.model_loader.weight_utils import default_weight_loader, load_weights_into
from sglang.srt.models.bert import frozen_embedding

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch import ForwardBatch

# Checkpoint q/k/v projections -> our fused qkv_proj (both towers, CLIP and SigLIP alike).
TOWER_STACKED_PARAMS = [
    ("self_attn.qkv_proj.", "self_attn.q_proj.", "q"),
    ("self_attn.qkv_proj.", "self_attn.k_proj.", "k"),
    ("self_attn.qkv_proj.", "self_attn.v_proj.", "v"),
]


def loadable(value: torch.Tensor) -> nn.Parameter:
    """A plain parameter the checkpoint fills (class token, probe, fused in-projections)."""
    param = nn.Parameter(value, requires_grad=False)
    param.weight_loader = default_weight_loader
    return param


class TowerAttention(nn.Module):
    def __init__(self, config, causal: bool, layer_id: int) -> None:
        super().__init__()
        dim, heads = config.hidden_size, config.num_attention_heads
        head_dim = dim // heads
        self.qkv_proj = QKVLinear(dim, head_dim, heads, bias=True)
        self.out_proj = Linear(dim, dim)
        self.attn = AttentionLayer(heads, head_dim, causal=causal, layer_id=layer_id)

    def forward(self, x: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        q, k, v = self.qkv_proj.split(self.qkv_proj(x))
        return self.out_proj(self.attn(q, k, v, fb))


class TowerMLP(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        self.fc1 = Linear(config.hidden_size, config.intermediate_size)
        self.fc2 = Linear(config.intermediate_size, config.hidden_size)
        self.act = get_activation(config.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class TowerLayer(nn.Module):
    """x + attn(ln1(x)), then + mlp(ln2(x)): CLIP's and SigLIP's encoder layer."""

    def __init__(self, config, causal: bool, layer_id: int) -> None:
        super().__init__()
        self.layer_norm1 = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.self_attn = TowerAttention(config, causal, layer_id)
        self.layer_norm2 = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.mlp = TowerMLP(config)

    def forward(self, x: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        x = x + self.self_attn(self.layer_norm1(x), fb)
        return x + self.mlp(self.layer_norm2(x))


class TowerEncoder(nn.Module):
    def __init__(self, config, causal: bool) -> None:
        super().__init__()
        self.layers = nn.ModuleList(TowerLayer(config, causal, i) for i in range(config.num_hidden_layers))

    def forward(self, x: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, fb)
        return x


class TextEmbeddings(nn.Module):
    """Token + learned absolute position embeddings (CLIP and SigLIP)."""

    def __init__(self, config) -> None:
        super().__init__()
        self.token_embedding = frozen_embedding(config.vocab_size, config.hidden_size)
        self.position_embedding = frozen_embedding(config.max_position_embeddings, config.hidden_size)

    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        return self.token_embedding(fb.input_ids) + self.position_embedding(fb.positions)


class PatchEmbedding(nn.Module):
    """A Conv2d with kernel == stride is a matmul over flattened (C, P, P) patches: its checkpoint
    weight [dim, C, P, P] loads flattened into a Linear."""

    def __init__(self, channels: int, patch: int, dim: int, bias: bool) -> None:
        super().__init__()
        self.patch = patch
        self.proj = Linear(channels * patch * patch, dim, bias=bias)
        self.proj.weight.weight_loader = self._load_conv

    @staticmethod
    def _load_conv(param: torch.Tensor, loaded: torch.Tensor, shard_id=None) -> None:
        default_weight_loader(param, loaded.reshape(loaded.shape[0], -1))

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """[N, C, H, W] -> [N, H/P * W/P, dim], patches in row-major order."""
        n, c, h, w = pixels.shape
        p = self.patch
        x = pixels.reshape(n, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5)
        return self.proj(x.reshape(n * (h // p) * (w // p), c * p * p).to(self.proj.weight.dtype)).reshape(
            n, (h // p) * (w // p), -1
        )


def check_image_size(pixels: torch.Tensor, image_size: int) -> None:
    if tuple(pixels.shape[-2:]) != (image_size, image_size):
        raise ValueError(f"images must be {image_size}x{image_size} pixels, got {tuple(pixels.shape[-2:])}")


def first_match_rows(fb: ForwardBatch, match: torch.Tensor) -> torch.Tensor:
    """Packed row of each sequence's first token where `match` holds (its first token if none),
    as transformers' `(...).int().argmax(-1)` picks it."""
    big = torch.iinfo(torch.int64).max
    cand = torch.where(match, fb.positions, torch.full_like(fb.positions, big))
    first = torch.full((fb.batch_size,), big, dtype=torch.int64, device=cand.device)
    first = first.scatter_reduce(0, fb.seq_ids, cand, "amin")
    first = torch.where(first == big, torch.zeros_like(first), first)
    return fb.cu_seqlens[:-1].long() + first


class ClipTextTransformer(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        self.embeddings = TextEmbeddings(config)
        self.encoder = TowerEncoder(config, causal=True)
        self.final_layer_norm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.eos_token_id = config.eos_token_id

    def pooled_rows(self, fb: ForwardBatch) -> torch.Tensor:
        ids = fb.input_ids
        if self.eos_token_id == 2:  # configs from before transformers#24773: the highest id is the end
            top = torch.zeros(fb.batch_size, dtype=ids.dtype, device=ids.device)
            top = top.scatter_reduce(0, fb.seq_ids, ids, "amax", include_self=False)
            return first_match_rows(fb, ids == top[fb.seq_ids])
        return first_match_rows(fb, ids == self.eos_token_id)

    def pool(self, hidden: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        """The encoder's per-token output -> the pooled token's row after final_layer_norm (a
        per-row norm, so only the pooled rows are normalized)."""
        return self.final_layer_norm(hidden.index_select(0, self.pooled_rows(fb)))


class ClipVisionTransformer(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        dim = config.hidden_size
        self.image_size = config.image_size
        self.class_embedding = loadable(torch.zeros(dim))
        self.patch_embedding = PatchEmbedding(config.num_channels, config.patch_size, dim, bias=False)
        self.position_embedding = frozen_embedding((config.image_size // config.patch_size) ** 2 + 1, dim)
        self.pre_layrnorm = LayerNorm(dim, config.layer_norm_eps)  # sic: the checkpoint's name
        self.encoder = TowerEncoder(config, causal=False)
        self.post_layernorm = LayerNorm(dim, config.layer_norm_eps)

    def forward(self, fb: ForwardBatch, pixels: torch.Tensor, grids: np.ndarray) -> torch.Tensor:
        """pixels [N, C, H, W]; fb packs N sequences of 1 + patches rows each."""
        check_image_size(pixels, self.image_size)
        patches = self.patch_embedding(pixels)
        n, count, dim = patches.shape
        x = torch.cat([self.class_embedding.to(patches.dtype).expand(n, 1, dim), patches], dim=1)
        x = (x + self.position_embedding.weight).reshape(n * (count + 1), dim)
        if x.shape[0] != fb.num_tokens:
            raise ValueError(f"{n} images of {count + 1} tokens for a batch of {fb.num_tokens} image tokens")
        hidden = self.encoder(self.pre_layrnorm(x), fb)
        return self.post_layernorm(hidden.index_select(0, fb.cu_seqlens[:-1].long()))


class TwoTowerModel(nn.Module):
    """What CLIP and SigLIP share. Texts: `embed(fb)` and `run_layers(hidden, fb)` (the part CUDA
    graphs capture) give the text tower's per-token states, `pool_text(hidden, fb)` the vectors;
    images: `encode_images(fb, pixels, grids)`. Vectors are unnormalized [B, dim]. Subclasses set
    `text_model` (with `embeddings`, `encoder`, `pool`) and `vision_model`, and project."""

    # Sequences images become: CLIP's class token, then the patches (the tokenizer side counts them).
    class_token = False
    text_padding: Optional[int] = None  # SigLIP: every text padded to this many tokens

    def embed(self, fb: ForwardBatch) -> torch.Tensor:
        return self.text_model.embeddings(fb)

    def run_layers(self, hidden: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        return self.text_model.encoder(hidden, fb)

    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        """The text tower's per-token states [T, hidden] (texts are what plain batches hold)."""
        return self.run_layers(self.embed(fb), fb)

    def pool_text(self, hidden: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        return self.project_text(self.text_model.pool(hidden, fb))

    def encode_images(self, fb: ForwardBatch, pixels: torch.Tensor, grids: np.ndarray) -> torch.Tensor:
        return self.project_image(self.vision_model(fb, pixels, grids))

    def project_text(self, pooled: torch.Tensor) -> torch.Tensor:
        return pooled

    def project_image(self, pooled: torch.Tensor) -> torch.Tensor:
        return pooled


class CLIPModel(TwoTowerModel):
    class_token = True  # an image is its class token, then its patches

    def __init__(self, config) -> None:
        super().__init__()
        self.config = config
        self.text_model = ClipTextTransformer(config.text_config)
        self.vision_model = ClipVisionTransformer(config.vision_config)
        self.text_projection = Linear(config.text_config.hidden_size, config.projection_dim, bias=False)
        self.visual_projection = Linear(config.vision_config.hidden_size, config.projection_dim, bias=False)

    def project_text(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.text_projection(pooled)

    def project_image(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.visual_projection(pooled)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return load_weights_into(self, weights, TOWER_STACKED_PARAMS, _clip_rename)


def _clip_rename(name: str) -> Optional[str]:
    """Checkpoint names onto ours: the image tower keeps its embeddings at its top level."""
    if name.startswith("vision_model.embeddings."):
        name = "vision_model." + name[len("vision_model.embeddings.") :]
        return name.replace("patch_embedding.", "patch_embedding.proj.")
    return name  # logit_scale (and logit_bias) match no parameter and are skipped
