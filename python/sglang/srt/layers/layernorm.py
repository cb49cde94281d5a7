"""Normalization layers (LayerNorm with checkpoint-compatible names, RMSNorm)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from sglang.srt.model_loader.weight_utils import default_weight_loader


class LayerNorm(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-12, bias: bool = True) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden), requires_grad=False)
        self.weight.weight_loader = default_weight_loader
        if bias:  # ModernBERT's norms have none
            self.bias = nn.Parameter(torch.zeros(hidden), requires_grad=False)
            self.bias.weight_loader = default_weight_loader
        else:
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in float32. `offset=1.0` gives Gemma's (1 + weight) variant."""

    def __init__(self, hidden: int, eps: float = 1e-6, offset: float = 0.0) -> None:
        super().__init__()
        self.eps = eps
        self.offset = offset
        self.weight = nn.Parameter(torch.ones(hidden), requires_grad=False)
        self.weight.weight_loader = default_weight_loader

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * (self.weight.float() + self.offset)).to(dtype)
