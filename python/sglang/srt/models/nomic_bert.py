"""NomicBERT encoder (nomic-ai/nomic-embed-text-v1, v1.5) over packed sequences.

The architecture as nomic-ai publishes it (their config.json fields, configs/nomic_bert_config.py
normalizes them) and as transformers >= 5.x implements it:
- word + token-type embeddings (no position table), then a LayerNorm (`emb_ln`);
- post-norm layers: x = norm1(x + out_proj(attention)), x = norm2(x + fc2(act(fc12(x)) * fc11(x)))
  with a fused `Wqkv`, no biases by default (`qkv_proj_bias`, `mlp_fc1_bias`, `mlp_fc2_bias`);
- SwiGLU (silu gate on fc12) or GeGLU; rotary embeddings over the whole head (rotate-half style,
  base `rotary_emb_base`, 1000 for v1.5).
Checkpoints name tensors nomic's way (transformers 5 writes them so too); transformers' own names
(`layers.N.self_attn.q_proj`, `post_attention_layernorm`, ...) are mapped onto them as well.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterable, Optional

import torch
from torch import nn

from sglang.srt.layers.activation import get_activation
from sglang.srt.layers.attention.layer import AttentionLayer
from sglang.srt.layers.layernorm import LayerNorm
from sglang.srt.layers.linear import Linear, MergedLinear, QKVLinear
from sglang.srt.layers.rotary_embedding import RotaryEmbedding
from sglang.srt.model_loader.weight_utils import load_weights_into, strip_prefix
from sglang.srt.models.bert import frozen_embedding

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch import ForwardBatch

# transformers' NomicBertModel names -> nomic's (the checkpoint convention this model follows).
_TRANSFORMERS_NAMES = [
    (r"^embeddings\.LayerNorm\.", "emb_ln."),
    (r"^layers\.(\d+)\.self_attn\.o_proj\.", r"encoder.layers.\1.attn.out_proj."),
    (r"^layers\.(\d+)\.self_attn\.([qkv])_proj\.", r"encoder.layers.\1.attn.\2_proj."),
    (r"^layers\.(\d+)\.mlp\.up_proj\.", r"encoder.layers.\1.mlp.fc11."),
    (r"^layers\.(\d+)\.mlp\.gate_proj\.", r"encoder.layers.\1.mlp.fc12."),
    (r"^layers\.(\d+)\.mlp\.down_proj\.", r"encoder.layers.\1.mlp.fc2."),
    (r"^layers\.(\d+)\.post_attention_layernorm\.", r"encoder.layers.\1.norm1."),
    (r"^layers\.(\d+)\.post_mlp_layernorm\.", r"encoder.layers.\1.norm2."),
]


class NomicBertEmbeddings(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        self.word_embeddings = frozen_embedding(config.vocab_size, config.hidden_size)
        self.token_type_embeddings = frozen_embedding(
            max(1, int(getattr(config, "type_vocab_size", 2))), config.hidden_size
        )

    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        x = self.word_embeddings(fb.input_ids)
        if fb.token_type_ids is not None:
            return x + self.token_type_embeddings(fb.token_type_ids)
        return x + self.token_type_embeddings.weight[0]


class NomicBertAttention(nn.Module):
    def __init__(self, config, layer_id: int) -> None:
        super().__init__()
        heads = config.num_attention_heads
        head_dim = config.hidden_size // heads
        self.Wqkv = QKVLinear(config.hidden_size, head_dim, heads, bias=bool(getattr(config, "qkv_proj_bias", False)))
        self.out_proj = Linear(
            config.hidden_size, config.hidden_size, bias=bool(getattr(config, "qkv_proj_bias", False))
        )
        self.attn = AttentionLayer(heads, head_dim, causal=False, layer_id=layer_id)

    def forward(self, x: torch.Tensor, cos_sin: torch.Tensor, rotary: RotaryEmbedding, fb: ForwardBatch):
        q, k, v = self.Wqkv.split(self.Wqkv(x))
        q, k = rotary.rotate(q, cos_sin), rotary.rotate(k, cos_sin)
        return self.out_proj(self.attn(q, k, v, fb))


class NomicBertGatedMLP(nn.Module):
    """fc2(act(fc12(x)) * fc11(x)); fc11 and fc12 run as one matmul (`fc1`, up then gate)."""

    def __init__(self, config) -> None:
        super().__init__()
        inter = config.intermediate_size
        self.fc1 = MergedLinear(
            config.hidden_size, {"up": inter, "gate": inter}, bias=bool(getattr(config, "mlp_fc1_bias", False))
        )
        self.fc2 = Linear(inter, config.hidden_size, bias=bool(getattr(config, "mlp_fc2_bias", False)))
        self.act = get_activation(getattr(config, "gated_activation", "silu"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        up, gate = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(self.act(gate) * up)


class NomicBertLayer(nn.Module):
    def __init__(self, config, layer_id: int) -> None:
        super().__init__()
        eps = config.layer_norm_eps
        self.attn = NomicBertAttention(config, layer_id)
        self.mlp = NomicBertGatedMLP(config)
        self.norm1 = LayerNorm(config.hidden_size, eps)
        self.norm2 = LayerNorm(config.hidden_size, eps)

    def forward(self, x: torch.Tensor, cos_sin: torch.Tensor, rotary: RotaryEmbedding, fb: ForwardBatch):
        x = self.norm1(x + self.attn(x, cos_sin, rotary, fb))
        return self.norm2(x + self.mlp(x))


class NomicBertEncoder(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        self.layers = nn.ModuleList(NomicBertLayer(config, i) for i in range(config.num_hidden_layers))


class NomicBertModel(nn.Module):
    """Per-token hidden states [T, hidden]; pooling happens in the output head."""

    stacked_params_mapping = [
        ("attn.Wqkv.", "attn.q_proj.", "q"),
        ("attn.Wqkv.", "attn.k_proj.", "k"),
        ("attn.Wqkv.", "attn.v_proj.", "v"),
        ("mlp.fc1.", "mlp.fc11.", "up"),
        ("mlp.fc1.", "mlp.fc12.", "gate"),
    ]
    checkpoint_prefixes = ("nomic_bert.", "bert.")  # masked-LM / pre-training checkpoints

    def __init__(self, config, max_positions: Optional[int] = None) -> None:
        super().__init__()
        self.config = config
        self.embeddings = NomicBertEmbeddings(config)
        self.emb_ln = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.encoder = NomicBertEncoder(config)
        head_dim = config.hidden_size // config.num_attention_heads
        positions = max_positions or int(config.max_position_embeddings)
        theta = float(getattr(config, "rotary_emb_base", 1000.0))
        self.rotary = RotaryEmbedding(head_dim, positions, {"rope_type": "default", "rope_theta": theta})

    def embed(self, fb: ForwardBatch) -> torch.Tensor:
        return self.emb_ln(self.embeddings(fb))

    def run_layers(self, hidden: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        cos_sin = self.rotary.lookup(fb.positions)
        for layer in self.encoder.layers:
            hidden = layer(hidden, cos_sin, self.rotary, fb)
        return hidden

    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        return self.run_layers(self.embed(fb), fb)

    def _rename(self, name: str) -> Optional[str]:
        name = strip_prefix(name, self.checkpoint_prefixes)
        for pattern, repl in _TRANSFORMERS_NAMES:
            name = re.sub(pattern, repl, name)
        return name if name.startswith(("embeddings.", "emb_ln.", "encoder.")) else None  # MLM head, pooler

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return load_weights_into(self, weights, self.stacked_params_mapping, self._rename)
