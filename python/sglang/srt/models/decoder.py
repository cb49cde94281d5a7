"""The decoder shared by Llama, Mistral, Qwen2 and Qwen3, run as an embedding model.

One pre-norm block (RMSNorm -> grouped-query causal attention with RoPE -> residual -> RMSNorm ->
SwiGLU MLP -> residual) covers all four families; they differ only in where the linear layers have
biases and whether q/k get a per-head RMSNorm, which `DecoderOptions` says. `DecoderModel` is that
decoder; LlamaModel, MistralModel, Qwen2Model and Qwen3Model at the end are thin aliases that pick
the options, and the checkpoint mapping (fused q/k/v and gate/up) sits beside them. The LM head is
never built, loaded or run: embeddings are the final-norm hidden states.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Optional

import torch
from torch import nn

from sglang.srt.errors import ConfigError
from sglang.srt.layers.activation import silu_and_mul
from sglang.srt.layers.attention.layer import AttentionLayer
from sglang.srt.layers.layernorm import RMSNorm
from sglang.srt.layers.linear import Linear, MergedLinear, QKVLinear
from sglang.srt.layers.rotary_embedding import RotaryEmbedding
from sglang.srt.layers.row_chunks import in_row_chunks
from sglang.srt.model_loader.weight_utils import default_weight_loader, load_weights_into

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch import ForwardBatch


@dataclass(frozen=True)
class DecoderOptions:
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False  # Qwen3: RMSNorm over each q / k head before RoPE


def head_dim_of(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def sliding_window_of(config, layer_id: int) -> Optional[int]:
    """Mistral windows every layer; Qwen2/3 only layers typed "sliding_attention", and only with
    `use_sliding_window`. The window counts the query itself (HF: q - k < window)."""
    window = getattr(config, "sliding_window", None)
    if not window or getattr(config, "use_sliding_window", True) is False:
        return None
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        return int(window) if layer_types[layer_id] == "sliding_attention" else None
    return int(window)


class DecoderAttention(nn.Module):
    def __init__(self, config, layer_id: int, opts: DecoderOptions) -> None:
        super().__init__()
        hidden, heads = config.hidden_size, config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        self.head_dim = head_dim_of(config)
        self.qkv_proj = QKVLinear(hidden, self.head_dim, heads, kv_heads, bias=opts.qkv_bias)
        self.o_proj = Linear(heads * self.head_dim, hidden, bias=opts.o_bias)
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps) if opts.qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps) if opts.qk_norm else None
        self.attn = AttentionLayer(
            heads,
            self.head_dim,
            kv_heads,
            causal=True,
            sliding_window=sliding_window_of(config, layer_id),
            layer_id=layer_id,
        )

    def forward(
        self, x: torch.Tensor, cos_sin: torch.Tensor, rotary: RotaryEmbedding, fb: ForwardBatch
    ) -> torch.Tensor:
        return rotary_self_attention(self, x, cos_sin, rotary, fb)


def rotary_self_attention(
    m: nn.Module, x: torch.Tensor, cos_sin: torch.Tensor, rotary: RotaryEmbedding, fb: ForwardBatch
) -> torch.Tensor:
    """A decoder attention block's forward: fused qkv, optional per-head q/k RMSNorm (Qwen3,
    Gemma3), RoPE, attention, output projection. `m` has qkv_proj, q_norm / k_norm (or None),
    head_dim, attn and o_proj. Everything before the attention itself is per token, so on CPU it
    runs in row chunks (its norm and RoPE temporaries are the block's largest tensors)."""
    q, k, v = in_row_chunks(lambda rows, cs: _rotated_qkv(m, rows, cs, rotary), x, cos_sin)
    return m.o_proj(m.attn(q, k, v, fb))


def _rotated_qkv(
    m: nn.Module, x: torch.Tensor, cos_sin: torch.Tensor, rotary: RotaryEmbedding
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q, k, v = m.qkv_proj.split(m.qkv_proj(x))
    if m.q_norm is not None:
        t = x.shape[0]
        q = m.q_norm(q.reshape(t, -1, m.head_dim)).reshape(t, -1)
        k = m.k_norm(k.reshape(t, -1, m.head_dim)).reshape(t, -1)
    return rotary.rotate(q, cos_sin), rotary.rotate(k, cos_sin), v


class DecoderMLP(nn.Module):
    def __init__(self, config, opts: DecoderOptions) -> None:
        super().__init__()
        if config.hidden_act not in ("silu", "swish"):
            raise ConfigError(f"decoder MLP activation '{config.hidden_act}' is not supported (only silu)")
        inter = config.intermediate_size
        self.gate_up_proj = MergedLinear(config.hidden_size, {0: inter, 1: inter}, bias=opts.mlp_bias)
        self.down_proj = Linear(inter, config.hidden_size, bias=opts.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return in_row_chunks(self._swiglu, x)

    def _swiglu(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(silu_and_mul(self.gate_up_proj(x)))


class DecoderLayer(nn.Module):
    def __init__(self, config, layer_id: int, opts: DecoderOptions) -> None:
        super().__init__()
        self.self_attn = DecoderAttention(config, layer_id, opts)
        self.mlp = DecoderMLP(config, opts)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self, x: torch.Tensor, cos_sin: torch.Tensor, rotary: RotaryEmbedding, fb: ForwardBatch
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos_sin, rotary, fb)
        return x + self.mlp(self.post_attention_layernorm(x))


# Decoder checkpoints (Llama, Mistral, Qwen, Gemma3) keep q/k/v and gate/up as separate tensors;
# our layers fuse them: (our parameter prefix, checkpoint prefix, shard).
DECODER_STACKED_PARAMS = [
    ("qkv_proj.", "q_proj.", "q"),
    ("qkv_proj.", "k_proj.", "k"),
    ("qkv_proj.", "v_proj.", "v"),
    ("gate_up_proj.", "gate_proj.", 0),
    ("gate_up_proj.", "up_proj.", 1),
]


def load_decoder_weights(model: nn.Module, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
    """`load_weights_into` for decoder checkpoints, whose fused-parameter mapping and skipped
    heads are the model's `stacked_params_mapping` and `skip_checkpoint_prefixes`.

    *ForCausalLM checkpoints nest the decoder under `model.`; bare *Model checkpoints do not;
    heads such as `lm_head.` are listed in `skip_checkpoint_prefixes` and never loaded.
    """
    skip = tuple(model.skip_checkpoint_prefixes)

    def rename(name: str) -> Optional[str]:
        if name.startswith(skip):
            return None
        return name[len("model.") :] if name.startswith("model.") else name

    return load_weights_into(model, weights, model.stacked_params_mapping, rename)


class DecoderModel(nn.Module):
    """Returns per-token hidden states [T, hidden] after the final norm; pooling happens in the runner.

    `options` reads the biases from the config (Llama's and Mistral's `attention_bias` /
    `mlp_bias`); the Qwen aliases below fix them instead.
    """

    stacked_params_mapping = DECODER_STACKED_PARAMS
    # Checkpoint tensors never read from disk: the LM head of *ForCausalLM checkpoints.
    skip_checkpoint_prefixes = ("lm_head.",)

    @classmethod
    def options(cls, config) -> DecoderOptions:
        bias = bool(getattr(config, "attention_bias", False))
        return DecoderOptions(qkv_bias=bias, o_bias=bias, mlp_bias=bool(getattr(config, "mlp_bias", False)))

    def __init__(self, config, max_positions: Optional[int] = None) -> None:
        """`max_positions`: the longest input served (the RoPE table's size); default: the config's."""
        super().__init__()
        self.config = config
        opts = self.options(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.embed_tokens.weight.requires_grad_(False)
        self.embed_tokens.weight.weight_loader = default_weight_loader
        self.layers = nn.ModuleList(DecoderLayer(config, i, opts) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding.from_config(config, head_dim_of(config), max_positions)

    def embed(self, fb: ForwardBatch) -> torch.Tensor:
        return self.embed_tokens(fb.input_ids)

    def run_layers(self, hidden: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        """Everything after the embedding (layers and final norm): the part a CUDA graph captures."""
        cos_sin = self.rotary_emb.lookup(fb.positions)
        for layer in self.layers:
            hidden = layer(hidden, cos_sin, self.rotary_emb, fb)
        return self.norm(hidden)

    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        return self.run_layers(self.embed(fb), fb)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return load_decoder_weights(self, weights)


class LlamaModel(DecoderModel):
    """LlamaModel / LlamaForCausalLM checkpoints, as they are."""


class MistralModel(DecoderModel):
    """MistralModel / MistralForCausalLM: Llama's decoder with every layer windowed (sliding_window_of)."""


class Qwen2Model(DecoderModel):
    """Qwen2 (gte-Qwen2-*-instruct, Qwen2.5 base): a bias on q/k/v only."""

    @classmethod
    def options(cls, config) -> DecoderOptions:
        return DecoderOptions(qkv_bias=True)


class Qwen3Model(DecoderModel):
    """Qwen3 (Qwen3-Embedding-0.6B / 4B / 8B): a per-head RMSNorm on q and k."""

    @classmethod
    def options(cls, config) -> DecoderOptions:
        bias = bool(getattr(config, "attention_bias", False))
        return DecoderOptions(qkv_bias=bias, o_bias=bias, qk_norm=True)
