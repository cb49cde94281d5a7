"""Build a model and fill it from the checkpoint."""

from __future__ import annotations

import logging

import torch
from torch import nn

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.configs.model_registry import ModelRegistry
from sglang.srt.errors import ConfigError
from sglang.srt.model_loader.weight_utils import iterate_weights

logger = logging.getLogger(__name__)


def load_model(model_config: ModelConfig, device: torch.device, cls: type[nn.Module]) -> nn.Module:
    """An instance of `cls` (the architecture's class, models.model_class) with the checkpoint's weights."""
    spec = ModelRegistry.spec(model_config.architecture)
    old_dtype = torch.get_default_dtype()
    torch.set_default_dtype(model_config.dtype)
    try:
        with torch.device(device):
            kwargs = {"position_offset": spec.position_offset(model_config.hf_config)} if spec.padding_offset else {}
            if not spec.absolute_positions:
                # Rotary models size their cos/sin table to the longest input actually served.
                kwargs["max_positions"] = model_config.context_length
            model = cls(model_config.hf_config, **kwargs)
    finally:
        torch.set_default_dtype(old_dtype)
    skip = tuple(getattr(model, "skip_checkpoint_prefixes", ()))
    loaded = model.load_weights(iterate_weights(model_config.model_path, skip))
    missing = sorted(n for n, _ in model.named_parameters() if n not in loaded)
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ConfigError(f"The checkpoint in {model_config.model_path} lacks weights for: {shown}")
    return model.eval()
