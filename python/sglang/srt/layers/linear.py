"""Linear layers whose parameters know how to load their checkpoint shards.

Checkpoints store q/k/v (and gate/up) separately; we fuse them into one matmul. Each parameter
carries a `weight_loader(param, loaded, shard_id)` so the model loader never needs to know the layout.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn


def default_weight_loader(param: torch.Tensor, loaded: torch.Tensor, shard_id=None) -> None:
    if param.shape != loaded.shape:
        raise ValueError(f"shape mismatch: parameter {tuple(param.shape)} vs checkpoint {tuple(loaded.shape)}")
    with torch.no_grad():
        param.copy_(loaded)


class Linear(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features), requires_grad=False)
        self.weight.weight_loader = default_weight_loader
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features), requires_grad=False)
            self.bias.weight_loader = default_weight_loader
        else:
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class MergedLinear(Linear):
    """Several checkpoint matrices stacked along the output dimension.

    `shard_sizes` maps a shard id (e.g. "q", "k", "v" or 0, 1) to its number of output rows, in
    the order they are stacked.
    """

    def __init__(self, in_features: int, shard_sizes: dict, bias: bool = True) -> None:
        super().__init__(in_features, sum(shard_sizes.values()), bias)
        self.shard_offsets: dict = {}
        offset = 0
        for shard_id, size in shard_sizes.items():
            self.shard_offsets[shard_id] = (offset, size)
            offset += size
        self.weight.weight_loader = self._load_shard
        if self.bias is not None:
            self.bias.weight_loader = self._load_shard

    def _load_shard(self, param: torch.Tensor, loaded: torch.Tensor, shard_id=None) -> None:
        if shard_id is None:  # already fused in the checkpoint
            default_weight_loader(param, loaded)
            return
        offset, size = self.shard_offsets[shard_id]
        default_weight_loader(param.narrow(0, offset, size), loaded)

    def split(self, out: torch.Tensor) -> Sequence[torch.Tensor]:
        return out.split([size for _, size in self.shard_offsets.values()], dim=-1)


class QKVLinear(MergedLinear):
    def __init__(self, hidden: int, head_dim: int, num_heads: int, num_kv_heads: Optional[int] = None,
                 bias: bool = True) -> None:
        num_kv_heads = num_kv_heads or num_heads
        super().__init__(
            hidden,
            {"q": num_heads * head_dim, "k": num_kv_heads * head_dim, "v": num_kv_heads * head_dim},
            bias,
        )
