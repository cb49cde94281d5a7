"""A ModelInfo for tests that drive the tokenizer side without loading a model."""

from __future__ import annotations

from sglang.srt.configs.model_info import ModelInfo

_BASE = dict(
    model_path="test-model",
    served_model_name="test-model",
    architecture="BertModel",
    embedding_dim=384,
    pooling="mean",
    normalize=True,
    max_input_length=256,
    vocab_size=30522,
    dtype="float32",
    device="cpu",
    attention_backend="torch_native",
)


def make_model_info(**fields) -> ModelInfo:
    """The all-MiniLM-L6-v2-like defaults above, with `fields` replacing any of them."""
    return ModelInfo(**{**_BASE, **fields})
