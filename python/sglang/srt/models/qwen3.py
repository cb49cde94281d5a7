"""Qwen3 (Qwen3-Embedding-0.6B / 4B / 8B): the shared decoder plus a per-head RMSNorm on q and k."""

from __future__ import annotations

from sglang.srt.models.llama import DecoderOptions, LlamaModel


class Qwen3Model(LlamaModel):
    @classmethod
    def options(cls, config) -> DecoderOptions:
        bias = bool(getattr(config, "attention_bias", False))
        return DecoderOptions(qkv_bias=bias, o_bias=bias, qk_norm=True)
