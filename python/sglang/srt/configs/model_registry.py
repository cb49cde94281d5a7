"""Which architectures the engine implements, and what each one needs to know up front.

A pure table: the model code it names (`module`, `class_name` under sglang.srt.models) is imported
only by the executor (models.model_class), so configs and the loader never import models/.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from sglang.srt.errors import ConfigError


@dataclass(frozen=True)
class ModelSpec:
    module: str  # under sglang.srt.models
    class_name: str
    is_encoder: bool  # bidirectional encoders are embedding models without flags
    default_pooling: str
    absolute_positions: bool  # a learned position table caps the context length
    padding_offset: int = 0  # RoBERTa-style position ids start after padding_idx
    image_inputs: bool = False  # takes {"image": ...} inputs (frontend/multimodal/)
    # Sequence-classification head on top of the backbone (layers/classifier_heads.py): such a
    # checkpoint is served as-is and answers with its logits.
    classifier: Optional[str] = None
    # Naming of the checkpoint's masked-LM head, which SPLADE reads ("bert": cls.predictions.*,
    # "roberta": lm_head.*); None: the family has none.
    mlm_head: Optional[str] = None
    # A config flag that turns a decoder into a bidirectional encoder (EmbeddingGemma's
    # `use_bidirectional_attention`); such a checkpoint is then an encoder with mean pooling.
    bidirectional_flag: Optional[str] = None
    # The padding_idx positions are numbered after when the model fixes it whatever pad_token_id
    # says (MPNet: 1, so token i reads position row i + 2).
    fixed_padding_idx: Optional[int] = None
    # Attention adds a relative-position score bias (MPNet): only backends that support one serve it.
    position_bias: bool = False
    # A text tower and an image tower embedding into one space (CLIP, SigLIP): each item is a text
    # or an image, the model pools itself (pooling "model"), model_executor/image_text_batch.py.
    image_text: bool = False

    @property
    def is_classifier(self) -> bool:
        return self.classifier is not None

    def is_bidirectional(self, hf_config) -> bool:
        return self.is_encoder or bool(self.bidirectional_flag and getattr(hf_config, self.bidirectional_flag, False))

    def default_pooling_for(self, hf_config) -> str:
        if self.bidirectional_flag and self.is_bidirectional(hf_config):
            return "mean"
        return self.default_pooling

    def position_offset(self, hf_config) -> int:
        if not self.padding_offset:
            return 0
        if self.fixed_padding_idx is not None:
            return self.fixed_padding_idx + 1
        return int(getattr(hf_config, "pad_token_id", 1) or 0) + 1


_BERT = ModelSpec("bert", "BertModel", is_encoder=True, default_pooling="cls", absolute_positions=True, mlm_head="bert")
# RoBERTa and XLM-RoBERTa (bge-m3, multilingual-e5): BERT with positions numbered from padding_idx + 1.
_ROBERTA = ModelSpec(
    "xlm_roberta",
    "XLMRobertaModel",
    is_encoder=True,
    default_pooling="cls",
    absolute_positions=True,
    padding_offset=1,
    mlm_head="roberta",
)
# MPNet (all-mpnet-base-v2): BERT-like, positions from 2, a relative position bias in attention.
_MPNET = ModelSpec(
    "mpnet",
    "MPNetModel",
    is_encoder=True,
    default_pooling="mean",
    absolute_positions=True,
    padding_offset=1,
    fixed_padding_idx=1,
    position_bias=True,
)
# ModernBERT (gte-modernbert, modernbert-embed): RoPE, alternating global / sliding-window layers.
_MODERNBERT = ModelSpec(
    "modernbert", "ModernBertModel", is_encoder=True, default_pooling="cls", absolute_positions=False
)
# NomicBERT (nomic-embed-text-v1 / v1.5): rotary, SwiGLU, post-norm; configs/nomic_bert_config.py.
_NOMIC_BERT = ModelSpec(
    "nomic_bert", "NomicBertModel", is_encoder=True, default_pooling="mean", absolute_positions=False
)
_GEMMA3 = ModelSpec(
    "gemma3",
    "Gemma3Model",
    is_encoder=False,
    default_pooling="lasttoken",
    absolute_positions=False,
    bidirectional_flag="use_bidirectional_attention",
)


def _decoder(module: str, class_name: str) -> ModelSpec:
    """A causal decoder: an embedding model only with --is-embedding or sentence-transformers files."""
    return ModelSpec(module, class_name, is_encoder=False, default_pooling="lasttoken", absolute_positions=False)


# Llama, Mistral, Qwen2 and Qwen3 share one decoder (models/decoder.py).
_QWEN3 = _decoder("decoder", "Qwen3Model")
_QWEN2 = _decoder("decoder", "Qwen2Model")
_LLAMA = _decoder("decoder", "LlamaModel")
_MISTRAL = _decoder("decoder", "MistralModel")
# GME (gme-Qwen2-VL-*-Instruct): vision tower + the Qwen2 decoder with M-RoPE, last-token pooling.
_QWEN2_VL = ModelSpec(
    "qwen2_vl",
    "Qwen2VLForConditionalGeneration",
    is_encoder=False,
    default_pooling="lasttoken",
    absolute_positions=False,
    image_inputs=True,
)

# CLIP / SigLIP / SigLIP 2 (models/clip.py, models/siglip.py): text or image items, one space.
_CLIP = ModelSpec(
    "clip",
    "CLIPModel",
    is_encoder=True,
    default_pooling="model",
    absolute_positions=True,
    image_inputs=True,
    image_text=True,
)
_SIGLIP = replace(_CLIP, module="siglip", class_name="SiglipModel")
_SIGLIP2 = replace(_CLIP, module="siglip", class_name="Siglip2Model")

_MODELS: dict[str, ModelSpec] = {
    "BertModel": _BERT,
    "BertForMaskedLM": _BERT,
    "BertForPreTraining": _BERT,
    "BertForSequenceClassification": replace(_BERT, classifier="bert_pooler"),
    "HF_ColBERT": _BERT,  # Stanford ColBERT checkpoints: BERT + `linear` (configs/colbert_config.py)
    "XLMRobertaModel": _ROBERTA,
    "XLMRobertaForMaskedLM": _ROBERTA,
    "XLMRobertaForSequenceClassification": replace(_ROBERTA, classifier="roberta"),
    "RobertaModel": _ROBERTA,
    "RobertaForMaskedLM": _ROBERTA,
    "RobertaForSequenceClassification": replace(_ROBERTA, classifier="roberta"),
    "MPNetModel": _MPNET,
    "MPNetForMaskedLM": _MPNET,
    "MPNetForSequenceClassification": replace(_MPNET, classifier="roberta"),
    "ModernBertModel": _MODERNBERT,
    "ModernBertForMaskedLM": _MODERNBERT,
    "NomicBertModel": _NOMIC_BERT,
    "NomicBertForPreTraining": _NOMIC_BERT,
    "NomicBertForMaskedLM": _NOMIC_BERT,
    "Gemma3TextModel": _GEMMA3,
    "Gemma3ForCausalLM": _GEMMA3,
    "Qwen3ForCausalLM": _QWEN3,
    "Qwen3Model": _QWEN3,
    "Qwen2ForCausalLM": _QWEN2,
    "Qwen2Model": _QWEN2,
    "LlamaForCausalLM": _LLAMA,
    "LlamaModel": _LLAMA,
    "MistralForCausalLM": _MISTRAL,
    "MistralModel": _MISTRAL,
    "Qwen2VLForConditionalGeneration": _QWEN2_VL,
    "CLIPModel": _CLIP,
    "SiglipModel": _SIGLIP,
    "Siglip2Model": _SIGLIP2,
    # Decoder rewards / classifiers: the score head reads the last token that is not padding.
    "Qwen3ForSequenceClassification": replace(_QWEN3, classifier="score"),
    "Qwen2ForSequenceClassification": replace(_QWEN2, classifier="score"),
    "LlamaForSequenceClassification": replace(_LLAMA, classifier="score"),
    "MistralForSequenceClassification": replace(_MISTRAL, classifier="score"),
}


# Checkpoints whose config.json names no `architectures` (some SigLIP 2 uploads): the model_type
# says which model it is.
_BY_MODEL_TYPE = {"clip": "CLIPModel", "siglip": "SiglipModel", "siglip2": "Siglip2Model"}


class ModelRegistry:
    @staticmethod
    def architectures_for_model_type(model_type: Optional[str]) -> list[str]:
        """The architecture a config without `architectures` implies by its model_type ([]: none)."""
        arch = _BY_MODEL_TYPE.get(model_type or "")
        return [arch] if arch else []

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
