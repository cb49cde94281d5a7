"""sentence-transformers `Dense` modules, applied to pooled vectors (EmbeddingGemma's 2_Dense, 3_Dense).

Each module lives in its own folder (`config.json` + `model.safetensors` or `pytorch_model.bin`,
tensors `linear.weight`, `linear.bias`, and `residual.weight` when `use_residual` projects) and
computes `activation(linear(x))` (+ x, or + residual(x), with `use_residual`). They run after
pooling and before Normalize, in float32, as the last step of the dense output head.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from sglang.srt.configs.sentence_transformers import DenseLayerSpec
from sglang.srt.errors import ConfigError

# sentence-transformers stores the activation as a class path; these are the ones we run.
_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "torch.nn.modules.linear.Identity": lambda x: x,
    "torch.nn.modules.activation.Tanh": torch.tanh,
    "torch.nn.modules.activation.ReLU": F.relu,
    "torch.nn.modules.activation.GELU": F.gelu,
    "torch.nn.modules.activation.SiLU": F.silu,
    "torch.nn.modules.activation.Sigmoid": torch.sigmoid,
}


def _read_state(folder: str) -> dict[str, torch.Tensor]:
    path = os.path.join(folder, "model.safetensors")
    if os.path.isfile(path):
        from safetensors.torch import load_file

        return load_file(path, device="cpu")
    path = os.path.join(folder, "pytorch_model.bin")
    if os.path.isfile(path):
        return torch.load(path, map_location="cpu", weights_only=True)
    raise ConfigError(
        f"The sentence-transformers Dense module in {folder} has no weights (model.safetensors or pytorch_model.bin)"
    )


class STDense(nn.Module):
    def __init__(self, spec: DenseLayerSpec) -> None:
        super().__init__()
        if spec.activation not in _ACTIVATIONS:
            raise ConfigError(
                f"sentence-transformers Dense activation {spec.activation} in {spec.path} is not "
                f"supported; supported: {', '.join(sorted(_ACTIVATIONS))}"
            )
        self.activation = _ACTIVATIONS[spec.activation]
        self.use_residual = spec.use_residual
        self.linear = nn.Linear(spec.in_features, spec.out_features, bias=spec.bias, dtype=torch.float32)
        self.residual = None
        if spec.use_residual and spec.in_features != spec.out_features:
            self.residual = nn.Linear(spec.in_features, spec.out_features, bias=False, dtype=torch.float32)
        state = {k: v.float() for k, v in _read_state(spec.path).items()}
        try:
            self.load_state_dict(state, strict=True)
        except RuntimeError as e:
            first = str(e).strip().splitlines()
            raise ConfigError(
                f"The Dense weights in {spec.path} do not match its config.json: "
                f"{first[1].strip() if len(first) > 1 else first[0]}"
            ) from e
        self.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.activation(self.linear(x))
        if self.use_residual:
            out = out + (self.residual(x) if self.residual is not None else x)
        return out


class STDenseStack(nn.Module):
    """The checkpoint's Dense modules in order; float32 in, float32 out."""

    def __init__(self, specs: Sequence[DenseLayerSpec]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(STDense(s) for s in specs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x
