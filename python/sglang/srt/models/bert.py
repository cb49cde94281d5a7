"""BERT-family encoder (BertModel) over packed sequences."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Optional

import torch
from torch import nn

from sglang.srt.layers.activation import get_activation
from sglang.srt.layers.attention.layer import AttentionLayer
from sglang.srt.layers.int8_linear import QuantizedRows
from sglang.srt.layers.layernorm import LayerNorm
from sglang.srt.layers.linear import Linear, QKVLinear
from sglang.srt.layers.row_chunks import in_row_chunks
from sglang.srt.model_loader.weight_utils import default_weight_loader, load_weights_into, strip_prefix

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch import ForwardBatch


def frozen_embedding(num: int, dim: int) -> nn.Embedding:
    """An embedding table that loads from the checkpoint and is never trained."""
    emb = nn.Embedding(num, dim)
    emb.weight.requires_grad_(False)
    emb.weight.weight_loader = default_weight_loader
    return emb


class BertEmbeddings(nn.Module):
    def __init__(self, config, position_offset: int = 0) -> None:
        super().__init__()
        self.word_embeddings = frozen_embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = frozen_embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = frozen_embedding(max(1, config.type_vocab_size), config.hidden_size)
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.position_offset = position_offset  # RoBERTa numbers positions from padding_idx + 1

    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        x = self.word_embeddings(fb.input_ids)
        x = x + self.position_embeddings(fb.positions + self.position_offset)
        if fb.token_type_ids is not None:
            x = x + self.token_type_embeddings(fb.token_type_ids)
        else:
            x = x + self.token_type_embeddings.weight[0]
        return self.LayerNorm(x)


class BertSelfAttention(nn.Module):
    def __init__(self, config, layer_id: int) -> None:
        super().__init__()
        heads = config.num_attention_heads
        head_dim = config.hidden_size // heads
        self.qkv_proj = QKVLinear(config.hidden_size, head_dim, heads, bias=True)
        self.attn = AttentionLayer(heads, head_dim, causal=False, layer_id=layer_id)

    def forward(self, x: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        q, k, v = self.qkv_proj.split(self.qkv_proj(x))
        return self.attn(q, k, v, fb)


class BertOutput(nn.Module):
    """dense -> residual add -> LayerNorm (used after attention and after the MLP)."""

    def __init__(self, in_features: int, hidden: int, eps: float) -> None:
        super().__init__()
        self.dense = Linear(in_features, hidden)
        self.LayerNorm = LayerNorm(hidden, eps)

    def forward(self, x: torch.Tensor | QuantizedRows, residual: torch.Tensor) -> torch.Tensor:
        return self.dense.forward_add_norm(x, residual, self.LayerNorm)

    def forward_then(
        self, x: torch.Tensor, residual: torch.Tensor, then: Linear
    ) -> tuple[torch.Tensor, Optional[QuantizedRows]]:
        """forward, and its result already quantized for the int8 layer `then` (None unless int8)."""
        return self.dense.forward_add_norm_then(x, residual, self.LayerNorm, then)


class BertAttention(nn.Module):
    def __init__(self, config, layer_id: int) -> None:
        super().__init__()
        self.self = BertSelfAttention(config, layer_id)
        self.output = BertOutput(config.hidden_size, config.hidden_size, config.layer_norm_eps)

    def forward(self, x: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        return self.output(self.self(x, fb), x)

    def forward_then(
        self, x: torch.Tensor, fb: ForwardBatch, then: Linear
    ) -> tuple[torch.Tensor, Optional[QuantizedRows]]:
        return self.output.forward_then(self.self(x, fb), x, then)


class BertIntermediate(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.intermediate_size)
        self.act = get_activation(config.hidden_act)
        self.exact_gelu = config.hidden_act == "gelu"

    def forward(self, x: torch.Tensor | QuantizedRows, then: Optional[Linear] = None) -> torch.Tensor | QuantizedRows:
        """With `then` (the layer that alone reads the result), an int8 model gets `then`'s
        QuantizedRows back (Linear.forward_gelu): the activations are never written as float."""
        if self.exact_gelu:
            return self.dense.forward_gelu(x, then)
        return self.act(self.dense(x))


class BertLayer(nn.Module):
    def __init__(self, config, layer_id: int) -> None:
        super().__init__()
        self.attention = BertAttention(config, layer_id)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config.intermediate_size, config.hidden_size, config.layer_norm_eps)

    def forward(self, x: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        # The feed-forward half is per token: on CPU it runs in row chunks, which bounds its
        # [tokens, intermediate] activation (the layer's largest) for a long batch. In int8 each
        # dequantize pass also quantizes its rows for the next matmul (QuantizedRows).
        h, h_rows = self.attention.forward_then(x, fb, self.intermediate.dense)
        if h_rows is None:
            return in_row_chunks(self._feed_forward, h)
        return in_row_chunks(self._feed_forward, h, h_rows)

    def _feed_forward(self, h: torch.Tensor, h_rows: Optional[QuantizedRows] = None) -> torch.Tensor:
        return self.output(self.intermediate(h if h_rows is None else h_rows, self.output.dense), h)


class BertEncoder(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config, i) for i in range(config.num_hidden_layers))

    def forward(self, x: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        for layer in self.layer:
            x = layer(x, fb)
        return x


class BertModel(nn.Module):
    """Returns per-token hidden states [T, hidden]; pooling happens in the output head
    (model_executor/output_head.py)."""

    stacked_params_mapping = [
        ("self.qkv_proj.", "self.query.", "q"),
        ("self.qkv_proj.", "self.key.", "k"),
        ("self.qkv_proj.", "self.value.", "v"),
    ]
    # Prefixes that wrap the encoder in task checkpoints (BertForMaskedLM, RobertaModel, ...).
    checkpoint_prefixes = ("bert.", "roberta.", "model.")

    def __init__(self, config, position_offset: int = 0) -> None:
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config, position_offset)
        self.encoder = BertEncoder(config)

    def embed(self, fb: ForwardBatch) -> torch.Tensor:
        return self.embeddings(fb)

    def run_layers(self, hidden: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        return self.encoder(hidden, fb)

    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        return self.run_layers(self.embed(fb), fb)

    def _rename(self, name: str) -> Optional[str]:
        name = strip_prefix(name, self.checkpoint_prefixes)
        if not name.startswith(("embeddings.", "encoder.")):
            return None  # pooler, MLM / classification heads
        # Old TF-converted checkpoints call LayerNorm parameters gamma / beta.
        return name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return load_weights_into(self, weights, self.stacked_params_mapping, self._rename)
