"""The model code, one module per architecture family; configs/model_registry.py says which
class serves which architecture."""

from __future__ import annotations

import importlib

from torch import nn

from sglang.srt.configs.model_registry import ModelRegistry


def model_class(architecture: str) -> type[nn.Module]:
    """The class that serves `architecture` (a ModelRegistry key), imported on first use."""
    spec = ModelRegistry.spec(architecture)
    return getattr(importlib.import_module(f"{__name__}.{spec.module}"), spec.class_name)
