"""POST /v1/embeddings: OpenAI's embeddings route on the serving base (validate -> convert -> run -> render)."""

from __future__ import annotations

from typing import Optional

import orjson

from sglang.srt.configs.model_info import ModelInfo, OutputKind
from sglang.srt.entrypoints.inputs import normalize_input
from sglang.srt.entrypoints.openai.multi_vector import multi_vector_output
from sglang.srt.entrypoints.openai.protocol import EmbeddingRequest
from sglang.srt.entrypoints.openai.serving_base import OpenAIServingBase
from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.managers.io_struct import FORMAT_BASE64, FORMAT_SPARSE_DICT, EmbeddingReqInput
from sglang.srt.managers.matryoshka import validate_dimensions
from sglang.srt.managers.tokenizer_manager import EmbeddingResult


def sparse_embeddings_format(model_info: ModelInfo, requested: str) -> Optional[str]:
    """Sparse models (SPLADE, --sparse-head) answer {"token_id": weight} objects, as SGLang does:
    FORMAT_SPARSE_DICT (base64 cannot carry them); None keeps a dense model's requested format."""
    if model_info.embeddings_output is not OutputKind.SPARSE:
        return None
    if requested == FORMAT_BASE64:
        raise EmbeddingError(
            ErrorKind.INVALID_REQUEST,
            "encoding_format 'base64' is not available for sparse "
            "embeddings; use 'float' ({token_id: weight} objects).",
            param="encoding_format",
        )
    return FORMAT_SPARSE_DICT


def render_response(result: EmbeddingResult, model: str) -> bytes:
    """Splice the detokenizer's ready-made payloads into OpenAI's response shape (multi-vector
    items also carry the `token_ids` their vectors belong to)."""
    ids = result.token_ids or [None] * len(result.payloads)
    items = b",".join(
        b'{"object":"embedding","index":%d,"embedding":%s%s}'
        % (i, payload, b',"token_ids":' + tid if tid is not None else b"")
        for i, (payload, tid) in enumerate(zip(result.payloads, ids))
    )
    tokens = sum(result.prompt_tokens)
    return (
        b'{"object":"list","data":['
        + items
        + b'],"model":'
        + orjson.dumps(model)
        + b',"usage":{"prompt_tokens":%d,"total_tokens":%d}}' % (tokens, tokens)
    )


class OpenAIServingEmbedding(OpenAIServingBase[EmbeddingRequest]):
    endpoint = "/v1/embeddings"

    def validate(self, request: EmbeddingRequest) -> None:
        super().validate(request)
        validate_dimensions(request.dimensions, self.tm.model_info, self.served_model_name)

    def convert(self, request: EmbeddingRequest) -> EmbeddingReqInput:
        req, _ = normalize_input(request.input, dimensions=request.dimensions, encoding_format=request.encoding_format)
        info = self.tm.model_info
        req.token_output = multi_vector_output(
            info, self.served_model_name, request.multi_vector, request.input_type, request.dimensions
        )
        if req.token_output is None:
            req.encoding_format = sparse_embeddings_format(info, req.encoding_format) or req.encoding_format
        return req

    def render(self, request: EmbeddingRequest, result: EmbeddingResult, rid: Optional[str]) -> bytes:
        return render_response(result, self.served_model_name)
