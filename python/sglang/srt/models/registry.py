"""Which architectures the engine implements, and what each one needs to know up front."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from sglang.srt.server_args import ConfigError


@dataclass(frozen=True)
class ModelSpec:
    module: str  # under sglang.srt.models
    class_name: str
    is_encoder: bool  # bidirectional encoders are embedding models without flags
    default_pooling: str
    absolute_positions: bool  # a learned position table caps the context length
    padding_offset: int = 0  # RoBERTa-style position ids start after padding_idx

    def position_offset(self, hf_config) -> int:
        if not self.padding_offset:
            return 0
        return int(getattr(hf_config, "pad_token_id", 1) or 0) + 1


_BERT = ModelSpec("bert", "BertModel", is_encoder=True, default_pooling="cls", absolute_positions=True)


def _decoder(module: str, class_name: str) -> ModelSpec:
    """A causal decoder: an embedding model only with --is-embedding or sentence-transformers files."""
    return ModelSpec(module, class_name, is_encoder=False, default_pooling="lasttoken", absolute_positions=False)


_QWEN3 = _decoder("qwen3", "Qwen3Model")
_QWEN2 = _decoder("qwen2", "Qwen2Model")
_LLAMA = _decoder("llama", "LlamaModel")  # Mistral is the same decoder (plus a sliding window)

_MODELS: dict[str, ModelSpec] = {
    "BertModel": _BERT,
    "BertForMaskedLM": _BERT,
    "BertForPreTraining": _BERT,
    "Qwen3ForCausalLM": _QWEN3,
    "Qwen3Model": _QWEN3,
    "Qwen2ForCausalLM": _QWEN2,
    "Qwen2Model": _QWEN2,
    "LlamaForCausalLM": _LLAMA,
    "LlamaModel": _LLAMA,
    "MistralForCausalLM": _LLAMA,
    "MistralModel": _LLAMA,
}


class ModelRegistry:
    @staticmethod
    def register(architecture: str, spec: ModelSpec) -> None:
        _MODELS[architecture] = spec

    @staticmethod
    def supported() -> list[str]:
        return sorted(_MODELS)

    @staticmethod
    def resolve(architectures: list[str]) -> str:
        for arch in architectures:
            if arch in _MODELS:
                return arch
        raise ConfigError(
            f"Model architecture {', '.join(architectures)} is not supported. "
            f"Supported architectures: {', '.join(ModelRegistry.supported())}"
        )

    @staticmethod
    def spec(architecture: str) -> ModelSpec:
        return _MODELS[architecture]

    @staticmethod
    def model_class(architecture: str):
        spec = _MODELS[architecture]
        module = importlib.import_module(f"sglang.srt.models.{spec.module}")
        return getattr(module, spec.class_name)
