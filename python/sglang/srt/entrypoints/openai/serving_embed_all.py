"""POST /embed_all (TEI-compatible): every token's final hidden state, for any model.

TEI answers `[[[f32, ...], ...], ...]`: per input, one vector per token ([CLS] and [SEP]
included), no pooling, no normalization. `truncate` / `truncation_direction` and `prompt_name`
apply as on TEI's /embed (entrypoints/embed_options.py). The vectors are the backbone's last hidden states (for
a ColBERT checkpoint too: its projected, normalized vectors are /v1/embeddings' multi-vector
output).
"""

from __future__ import annotations

from typing import Optional

from sglang.srt.configs.model_info import VISION_IMAGE_TEXT
from sglang.srt.entrypoints.embed_options import set_prompt, set_truncation_tei
from sglang.srt.entrypoints.inputs import normalize_input
from sglang.srt.entrypoints.openai.serving_base import OpenAIServingBase
from sglang.srt.entrypoints.openai.task_protocol import EmbedAllRequest
from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.layers.token_outputs import TOKENS_HIDDEN
from sglang.srt.managers.io_struct import FORMAT_FLOAT, EmbeddingReqInput
from sglang.srt.managers.tokenizer_manager import EmbeddingResult


class ServingEmbedAll(OpenAIServingBase[EmbedAllRequest]):
    endpoint = "/embed_all"

    def validate(self, request: EmbedAllRequest) -> None:
        if self.tm.model_info.is_classifier:
            raise EmbeddingError(
                ErrorKind.INVALID_REQUEST,
                f"Model '{self.served_model_name}' is a classifier; /embed_all serves embedding models.",
                param="model",
            )
        if self.tm.model_info.vision is not None and self.tm.model_info.vision.kind == VISION_IMAGE_TEXT:
            raise EmbeddingError(
                ErrorKind.INVALID_REQUEST,
                f"Model '{self.served_model_name}' is a text-image model (CLIP / SigLIP) with one vector per "
                "input; /embed_all serves text encoders.",
                param="model",
            )

    def convert(self, request: EmbedAllRequest) -> EmbeddingReqInput:
        req, _ = normalize_input(request.inputs, encoding_format=FORMAT_FLOAT)
        req.token_output = TOKENS_HIDDEN
        set_truncation_tei(req, request.truncate, request.truncation_direction)
        set_prompt(req, self.tm.model_info, request.prompt_name)
        return req

    def render(self, request: EmbedAllRequest, result: EmbeddingResult, rid: Optional[str]) -> bytes:
        return b"[" + b",".join(result.payloads) + b"]"
