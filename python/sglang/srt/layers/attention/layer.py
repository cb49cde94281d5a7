"""AttentionLayer: a layer's attention shape, delegating the computation to the batch's backend."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch
from torch import nn

if TYPE_CHECKING:
    from sglang.srt.layers.attention.position_bias import PositionBias
    from sglang.srt.model_executor.forward_batch import ForwardBatch


class AttentionLayer(nn.Module):
    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        num_kv_heads: Optional[int] = None,
        scaling: Optional[float] = None,
        causal: bool = False,
        sliding_window: Optional[int] = None,
        layer_id: int = 0,
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads or num_heads
        self.head_dim = head_dim
        self.scaling = scaling if scaling is not None else head_dim**-0.5
        self.causal = causal
        self.sliding_window = sliding_window  # tokens on each side (None: unlimited)
        self.layer_id = layer_id

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        forward_batch: "ForwardBatch",
        position_bias: Optional["PositionBias"] = None,
    ) -> torch.Tensor:
        if position_bias is None:
            return forward_batch.attn_backend.forward(q, k, v, self, forward_batch)
        return forward_batch.attn_backend.forward(q, k, v, self, forward_batch, position_bias=position_bias)

    def extra_repr(self) -> str:
        return (
            f"heads={self.num_heads}, kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, "
            f"causal={self.causal}, sliding_window={self.sliding_window}"
        )
