"""Gemma 3 text model (google/embeddinggemma-300m and Gemma3ForCausalLM checkpoints).

What sets it apart from the Llama-style decoder in models/decoder.py, all following transformers'
modeling_gemma3.py:
- RMSNorm multiplies by (1 + weight), and each block has four of them: before and after attention,
  before and after the MLP (the "after" ones apply to the branch, before the residual add);
- per-head RMSNorm on q and k, grouped-query attention, scores scaled by
  `query_pre_attn_scalar ** -0.5` rather than head_dim ** -0.5;
- token embeddings multiplied by sqrt(hidden_size), rounded to the weights' dtype first as
  transformers does (55.4256 becomes 55.5 in bfloat16);
- a gelu(tanh) gated MLP;
- layers alternate between sliding-window and full attention (`layer_types`), each kind with its
  own RoPE base (`rope_parameters`: 10k local, 1M global by default).

EmbeddingGemma sets `use_bidirectional_attention`: every layer attends both ways, and a sliding
layer lets a token see keys with |query - key| <= sliding_window // 2 (config.json's value).
transformers >= 4.57 stores that bound as `sliding_window // 2 + 1` on the loaded config (an
exclusive bound, restored to the original by `to_dict`); `_bidirectional_window` reads the
config.json value either way. `attn_logit_softcapping` is not applied: transformers' Gemma3
ignores it too (EmbeddingGemma sets it to null).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Optional

import torch
from torch import nn

from sglang.srt.layers.activation import act_and_mul, get_activation
from sglang.srt.layers.attention.layer import AttentionLayer
from sglang.srt.layers.layernorm import RMSNorm
from sglang.srt.layers.linear import Linear, MergedLinear, QKVLinear
from sglang.srt.layers.rotary_embedding import RotaryEmbedding, run_local_global
from sglang.srt.layers.row_chunks import in_row_chunks
from sglang.srt.model_loader.weight_utils import default_weight_loader
from sglang.srt.models.decoder import DECODER_STACKED_PARAMS, load_decoder_weights, rotary_self_attention

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch import ForwardBatch

SLIDING, FULL = "sliding_attention", "full_attention"


def layer_types_of(config) -> list[str]:
    types = getattr(config, "layer_types", None)
    if types:
        return list(types)
    pattern = int(getattr(config, "sliding_window_pattern", 6))  # transformers < 4.53 configs
    return [SLIDING if (i + 1) % pattern else FULL for i in range(config.num_hidden_layers)]


def is_bidirectional(config) -> bool:
    return bool(getattr(config, "use_bidirectional_attention", False))


def _bidirectional_window(config) -> int:
    raw = config.to_dict().get("sliding_window") or config.sliding_window
    return int(raw) // 2 + 1


def sliding_window_of(config) -> Optional[int]:
    """The window of sliding layers in AttentionLayer's convention (|q - k| < W both ways, or
    q - k < W causally), or None when the config has none."""
    if not getattr(config, "sliding_window", None):
        return None
    return _bidirectional_window(config) if is_bidirectional(config) else int(config.sliding_window)


def rope_params_for(config, layer_type: str) -> dict:
    """RoPE parameters of one layer kind, from transformers 5 (`rope_parameters[layer_type]`) or
    4.x configs (`rope_theta` + `rope_scaling` global, `rope_local_base_freq` local)."""
    per_type = getattr(config, "rope_parameters", None)
    if isinstance(per_type, dict) and isinstance(per_type.get(layer_type), dict):
        params = dict(per_type[layer_type])
    elif layer_type == SLIDING:
        params = {"rope_theta": getattr(config, "rope_local_base_freq", None) or 10_000.0}
    else:
        params = dict(getattr(config, "rope_scaling", None) or {})
        params.setdefault("rope_theta", getattr(config, "rope_theta", None) or 1_000_000.0)
    params["rope_type"] = params.get("rope_type") or params.get("type") or "default"
    return params


class Gemma3Attention(nn.Module):
    def __init__(self, config, layer_id: int, sliding: bool) -> None:
        super().__init__()
        heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.head_dim
        bias = bool(getattr(config, "attention_bias", False))
        self.qkv_proj = QKVLinear(config.hidden_size, self.head_dim, heads, kv_heads, bias=bias)
        self.o_proj = Linear(heads * self.head_dim, config.hidden_size, bias=bias)
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps, offset=1.0)
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps, offset=1.0)
        self.attn = AttentionLayer(
            heads,
            self.head_dim,
            kv_heads,
            scaling=float(config.query_pre_attn_scalar) ** -0.5,
            causal=not is_bidirectional(config),
            sliding_window=sliding_window_of(config) if sliding else None,
            layer_id=layer_id,
        )

    def forward(
        self, x: torch.Tensor, cos_sin: torch.Tensor, rotary: RotaryEmbedding, fb: ForwardBatch
    ) -> torch.Tensor:
        return rotary_self_attention(self, x, cos_sin, rotary, fb)


class Gemma3MLP(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        inter = config.intermediate_size
        self.gate_up_proj = MergedLinear(config.hidden_size, {0: inter, 1: inter}, bias=False)
        self.down_proj = Linear(inter, config.hidden_size, bias=False)
        self.act = get_activation(getattr(config, "hidden_activation", None) or "gelu_pytorch_tanh")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return in_row_chunks(self._gated, x)

    def _gated(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(act_and_mul(self.gate_up_proj(x), self.act))


class Gemma3Layer(nn.Module):
    def __init__(self, config, layer_id: int, sliding: bool) -> None:
        super().__init__()
        self.sliding = sliding
        eps = config.rms_norm_eps
        self.self_attn = Gemma3Attention(config, layer_id, sliding)
        self.mlp = Gemma3MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, eps, offset=1.0)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps, offset=1.0)
        self.pre_feedforward_layernorm = RMSNorm(config.hidden_size, eps, offset=1.0)
        self.post_feedforward_layernorm = RMSNorm(config.hidden_size, eps, offset=1.0)

    def forward(
        self, x: torch.Tensor, cos_sin: torch.Tensor, rotary: RotaryEmbedding, fb: ForwardBatch
    ) -> torch.Tensor:
        x = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), cos_sin, rotary, fb))
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))


class Gemma3Model(nn.Module):
    """Per-token hidden states [T, hidden] after the final norm; pooling happens in the runner."""

    stacked_params_mapping = DECODER_STACKED_PARAMS
    skip_checkpoint_prefixes = ("lm_head.",)

    def __init__(self, config, max_positions: Optional[int] = None) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.embed_tokens.weight.requires_grad_(False)
        self.embed_tokens.weight.weight_loader = default_weight_loader
        scale = torch.tensor(config.hidden_size**0.5, dtype=self.embed_tokens.weight.dtype)
        self.register_buffer("embed_scale", scale, persistent=False)
        types = layer_types_of(config)
        self.layers = nn.ModuleList(
            Gemma3Layer(config, i, types[i] == SLIDING) for i in range(config.num_hidden_layers)
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, offset=1.0)
        positions = max_positions or int(config.max_position_embeddings)
        self.rotary_local = RotaryEmbedding(config.head_dim, positions, rope_params_for(config, SLIDING))
        self.rotary_global = RotaryEmbedding(config.head_dim, positions, rope_params_for(config, FULL))

    def embed(self, fb: ForwardBatch) -> torch.Tensor:
        return self.embed_tokens(fb.input_ids) * self.embed_scale

    def run_layers(self, hidden: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        """Layers and final norm (no host syncs: the part a CUDA graph captures)."""
        hidden = run_local_global(self.layers, hidden, fb, self.rotary_local, self.rotary_global)
        return self.norm(hidden)

    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        return self.run_layers(self.embed(fb), fb)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return load_decoder_weights(self, weights)
