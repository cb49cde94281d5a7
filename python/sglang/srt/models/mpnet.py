"""MPNet encoder (sentence-transformers/all-mpnet-base-v2, multi-qa-mpnet-*) over packed sequences.

BERT's layer layout (post-LayerNorm, GELU MLP) with two differences, both following transformers'
modeling_mpnet.py:
- no token-type table, and learned positions numbered from padding_idx + 1 = 2 (as RoBERTa's);
- every layer adds the same relative position bias to its attention scores: the key's offset
  from the query (j - i) falls into one of 32 log-spaced buckets (16 per direction, exact up to 8,
  capped at a distance of 128), and `encoder.relative_attention_bias` holds one bias per bucket
  and head. The bias depends on the offset only, so each batch builds it once as a small
  PositionBias table shared by all layers; the CPU varlen kernel indexes that table directly and
  torch_native turns it into a float mask. FlashInfer has no additive bias, so on CUDA MPNet runs
  on torch_native (layers/attention/registry.py).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterable, Optional

import torch
from torch import nn

from sglang.srt.layers.attention.layer import AttentionLayer
from sglang.srt.layers.attention.position_bias import PositionBias
from sglang.srt.layers.layernorm import LayerNorm
from sglang.srt.layers.linear import Linear, QKVLinear
from sglang.srt.model_loader.weight_utils import load_weights_into, strip_prefix
from sglang.srt.models.bert import BertIntermediate, BertOutput, frozen_embedding

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch import ForwardBatch

# transformers computes the buckets with these constants whatever the config says (the bias table
# has config.relative_attention_num_buckets rows, 32 in every released checkpoint).
NUM_BUCKETS = 32
MAX_DISTANCE = 128


def relative_position_bucket(offset: torch.Tensor) -> torch.Tensor:
    """Bucket of each key - query offset, exactly as MPNet computes it (float32 logs included)."""
    half = NUM_BUCKETS // 2
    n = -offset
    bucket = (n < 0).to(torch.long) * half
    n = n.abs()
    max_exact = half // 2
    is_small = n < max_exact
    # The small offsets go through the log too (and are discarded): clamp keeps log(0) out.
    scaled = torch.log(n.clamp(min=1).float() / max_exact) / math.log(MAX_DISTANCE / max_exact) * (half - max_exact)
    large = torch.clamp(max_exact + scaled.to(torch.long), max=half - 1)
    return bucket + torch.where(is_small, n, large)


class MPNetEmbeddings(nn.Module):
    def __init__(self, config, position_offset: int) -> None:
        super().__init__()
        self.word_embeddings = frozen_embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = frozen_embedding(config.max_position_embeddings, config.hidden_size)
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.position_offset = position_offset

    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        x = self.word_embeddings(fb.input_ids) + self.position_embeddings(fb.positions + self.position_offset)
        return self.LayerNorm(x)


class MPNetSelfAttention(nn.Module):
    def __init__(self, config, layer_id: int) -> None:
        super().__init__()
        heads = config.num_attention_heads
        head_dim = config.hidden_size // heads
        self.qkv_proj = QKVLinear(config.hidden_size, head_dim, heads, bias=True)
        self.o = Linear(config.hidden_size, config.hidden_size)
        self.attn = AttentionLayer(heads, head_dim, causal=False, layer_id=layer_id)

    def forward(self, x: torch.Tensor, fb: ForwardBatch, bias: PositionBias) -> torch.Tensor:
        q, k, v = self.qkv_proj.split(self.qkv_proj(x))
        return self.o(self.attn(q, k, v, fb, position_bias=bias))


class MPNetAttention(nn.Module):
    def __init__(self, config, layer_id: int) -> None:
        super().__init__()
        self.attn = MPNetSelfAttention(config, layer_id)
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, x: torch.Tensor, fb: ForwardBatch, bias: PositionBias) -> torch.Tensor:
        return self.LayerNorm(self.attn(x, fb, bias) + x)


class MPNetLayer(nn.Module):
    def __init__(self, config, layer_id: int) -> None:
        super().__init__()
        self.attention = MPNetAttention(config, layer_id)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config.intermediate_size, config.hidden_size, config.layer_norm_eps)

    def forward(self, x: torch.Tensor, fb: ForwardBatch, bias: PositionBias) -> torch.Tensor:
        h = self.attention(x, fb, bias)
        return self.output(self.intermediate(h), h)


class MPNetEncoder(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        self.layer = nn.ModuleList(MPNetLayer(config, i) for i in range(config.num_hidden_layers))
        self.relative_attention_bias = frozen_embedding(
            config.relative_attention_num_buckets, config.num_attention_heads
        )

    def position_bias(self, fb: ForwardBatch) -> PositionBias:
        weight = self.relative_attention_bias.weight
        return PositionBias.build(fb.max_seqlen, lambda off: weight[relative_position_bucket(off)], weight.device)

    def forward(self, x: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        bias = self.position_bias(fb)
        for layer in self.layer:
            x = layer(x, fb, bias)
        return x


class MPNetModel(nn.Module):
    """Per-token hidden states [T, hidden]; pooling happens in the output head."""

    stacked_params_mapping = [
        ("attn.qkv_proj.", "attn.q.", "q"),
        ("attn.qkv_proj.", "attn.k.", "k"),
        ("attn.qkv_proj.", "attn.v.", "v"),
    ]
    checkpoint_prefixes = ("mpnet.",)  # MPNetForMaskedLM / ForSequenceClassification checkpoints

    def __init__(self, config, position_offset: int = 2) -> None:
        super().__init__()
        self.config = config
        self.embeddings = MPNetEmbeddings(config, position_offset)
        self.encoder = MPNetEncoder(config)

    def embed(self, fb: ForwardBatch) -> torch.Tensor:
        return self.embeddings(fb)

    def run_layers(self, hidden: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        return self.encoder(hidden, fb)

    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        return self.run_layers(self.embed(fb), fb)

    def _rename(self, name: str) -> Optional[str]:
        name = strip_prefix(name, self.checkpoint_prefixes)
        return name if name.startswith(("embeddings.", "encoder.")) else None  # pooler, heads

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return load_weights_into(self, weights, self.stacked_params_mapping, self._rename)
