"""Activation functions by their Hugging Face config names."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


def _quick_gelu(x: torch.Tensor) -> torch.Tensor:
    """CLIP's sigmoid approximation of GELU (the Qwen2-VL vision tower's MLP)."""
    return x * torch.sigmoid(1.702 * x)


_ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_new": _gelu_tanh,
    "gelu_pytorch_tanh": _gelu_tanh,
    "gelu_fast": _gelu_tanh,
    "quick_gelu": _quick_gelu,
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
    "tanh": torch.tanh,
}


def get_activation(name: str):
    try:
        return _ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unsupported activation '{name}'; known: {', '.join(sorted(_ACTIVATIONS))}") from None


def act_and_mul(x: torch.Tensor, act) -> torch.Tensor:
    """A gated MLP's act(gate) * up on a fused [gate | up] projection. Outside autograd the product
    is written over the activation's output: one [tokens, intermediate] buffer fewer per layer, the
    largest after the fused projection itself."""
    gate, up = x.chunk(2, dim=-1)
    if torch.is_grad_enabled():
        return act(gate) * up
    return act(gate).mul_(up)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """SwiGLU (Llama, Mistral, Qwen)."""
    return act_and_mul(x, F.silu)
