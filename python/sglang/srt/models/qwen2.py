"""Qwen2 (gte-Qwen2-*-instruct, Qwen2.5 base): the shared decoder with a bias on q/k/v only."""

from __future__ import annotations

from sglang.srt.models.llama import DecoderOptions, LlamaModel


class Qwen2Model(LlamaModel):
    @classmethod
    def options(cls, config) -> DecoderOptions:
        return DecoderOptions(qkv_bias=True)
