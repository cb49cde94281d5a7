"""ModernBERT encoder (Alibaba-NLP/gte-modernbert-base, nomic-ai/modernbert-embed-base) over
packed sequences, which is how ModernBERT itself runs (unpadded).

Following transformers' modeling_modernbert.py:
- token embeddings then a LayerNorm; no position table (RoPE) and no token types;
- pre-norm layers (layer 0 has no attention norm), fused `Wqkv` and `Wo` without biases,
  LayerNorms without biases (`norm_bias: false`), a final norm;
- a GeGLU MLP: `Wi` projects to twice the intermediate size, act(first half) * second half, `Wo`;
- layers alternate global and local attention (`layer_types`, or every
  `global_attn_every_n_layers`-th layer global in older configs). A local layer lets a token see
  keys with |query - key| <= local_attention / 2 (64 for 128) and turns RoPE with its own base
  (`local_rope_theta`, 10k) where global layers use `global_rope_theta` (160k); transformers 5
  configs keep both under `rope_parameters`.
The sliding window is AttentionLayer's |q - k| < W convention, so W = local_attention // 2 + 1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Optional

import torch
from torch import nn

from sglang.srt.layers.activation import get_activation
from sglang.srt.layers.attention.layer import AttentionLayer
from sglang.srt.layers.layernorm import LayerNorm
from sglang.srt.layers.linear import Linear
from sglang.srt.layers.rotary_embedding import RotaryEmbedding, run_local_global
from sglang.srt.model_loader.weight_utils import load_weights_into, strip_prefix
from sglang.srt.models.bert import frozen_embedding

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch import ForwardBatch

SLIDING, FULL = "sliding_attention", "full_attention"
_DEFAULT_THETA = {FULL: 160_000.0, SLIDING: 10_000.0}


def layer_types_of(config) -> list[str]:
    types = getattr(config, "layer_types", None)
    if types:
        return list(types)
    every = int(getattr(config, "global_attn_every_n_layers", 3) or 3)
    return [SLIDING if i % every else FULL for i in range(config.num_hidden_layers)]


def rope_theta_of(config, layer_type: str) -> float:
    """RoPE base of one layer kind: transformers 5 `rope_parameters[kind]`, else the 4.x fields."""
    per_type = getattr(config, "rope_parameters", None)
    if isinstance(per_type, dict) and isinstance(per_type.get(layer_type), dict):
        theta = per_type[layer_type].get("rope_theta")
        if theta:
            return float(theta)
    legacy = "global_rope_theta" if layer_type == FULL else "local_rope_theta"
    return float(getattr(config, legacy, None) or _DEFAULT_THETA[layer_type])


def _rope_params(config, layer_type: str) -> dict:
    return {"rope_type": "default", "rope_theta": rope_theta_of(config, layer_type)}


def _norm(config) -> LayerNorm:
    return LayerNorm(config.hidden_size, config.norm_eps, bias=bool(getattr(config, "norm_bias", False)))


class ModernBertAttention(nn.Module):
    def __init__(self, config, layer_id: int, sliding: bool) -> None:
        super().__init__()
        heads = config.num_attention_heads
        self.head_dim = config.hidden_size // heads
        bias = bool(getattr(config, "attention_bias", False))
        self.Wqkv = Linear(config.hidden_size, 3 * config.hidden_size, bias=bias)
        self.Wo = Linear(config.hidden_size, config.hidden_size, bias=bias)
        window = int(config.local_attention) // 2 + 1 if sliding else None
        self.attn = AttentionLayer(heads, self.head_dim, causal=False, sliding_window=window, layer_id=layer_id)

    def forward(self, x: torch.Tensor, cos_sin: torch.Tensor, rotary: RotaryEmbedding, fb: ForwardBatch):
        q, k, v = self.Wqkv(x).chunk(3, dim=-1)
        q, k = rotary.rotate(q, cos_sin), rotary.rotate(k, cos_sin)
        return self.Wo(self.attn(q, k, v, fb))


class ModernBertMLP(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        bias = bool(getattr(config, "mlp_bias", False))
        self.Wi = Linear(config.hidden_size, 2 * config.intermediate_size, bias=bias)
        self.Wo = Linear(config.intermediate_size, config.hidden_size, bias=bias)
        self.act = get_activation(getattr(config, "hidden_activation", None) or "gelu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inp, gate = self.Wi(x).chunk(2, dim=-1)
        return self.Wo(self.act(inp) * gate)


class ModernBertLayer(nn.Module):
    def __init__(self, config, layer_id: int, sliding: bool) -> None:
        super().__init__()
        self.sliding = sliding
        self.attn_norm = _norm(config) if layer_id > 0 else None
        self.attn = ModernBertAttention(config, layer_id, sliding)
        self.mlp_norm = _norm(config)
        self.mlp = ModernBertMLP(config)

    def forward(self, x: torch.Tensor, cos_sin: torch.Tensor, rotary: RotaryEmbedding, fb: ForwardBatch):
        h = self.attn_norm(x) if self.attn_norm is not None else x
        x = x + self.attn(h, cos_sin, rotary, fb)
        return x + self.mlp(self.mlp_norm(x))


class ModernBertEmbeddings(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        self.tok_embeddings = frozen_embedding(config.vocab_size, config.hidden_size)
        self.norm = _norm(config)

    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        return self.norm(self.tok_embeddings(fb.input_ids))


class ModernBertModel(nn.Module):
    """Per-token hidden states [T, hidden] after the final norm; pooling happens in the output head."""

    checkpoint_prefixes = ("model.",)  # ModernBertForMaskedLM / ForSequenceClassification

    def __init__(self, config, max_positions: Optional[int] = None) -> None:
        super().__init__()
        self.config = config
        self.embeddings = ModernBertEmbeddings(config)
        types = layer_types_of(config)
        self.layers = nn.ModuleList(
            ModernBertLayer(config, i, types[i] == SLIDING) for i in range(config.num_hidden_layers)
        )
        self.final_norm = _norm(config)
        head_dim = config.hidden_size // config.num_attention_heads
        positions = max_positions or int(config.max_position_embeddings)
        self.rotary_local = RotaryEmbedding(head_dim, positions, _rope_params(config, SLIDING))
        self.rotary_global = RotaryEmbedding(head_dim, positions, _rope_params(config, FULL))

    def embed(self, fb: ForwardBatch) -> torch.Tensor:
        return self.embeddings(fb)

    def run_layers(self, hidden: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        hidden = run_local_global(self.layers, hidden, fb, self.rotary_local, self.rotary_global)
        return self.final_norm(hidden)

    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        return self.run_layers(self.embed(fb), fb)

    def _rename(self, name: str) -> Optional[str]:
        name = strip_prefix(name, self.checkpoint_prefixes)
        return name if name.startswith(("embeddings.", "layers.", "final_norm.")) else None  # MLM head

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return load_weights_into(self, weights, rename=self._rename)
