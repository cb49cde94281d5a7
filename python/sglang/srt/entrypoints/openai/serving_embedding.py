"""OpenAIServingEmbedding: request validation, the call into the tokenizer manager, response bytes."""

from __future__ import annotations

from typing import Optional

import orjson

from sglang.srt.managers.errors import EmbeddingError
from sglang.srt.managers.io_struct import EmbeddingReqInput
from sglang.srt.managers.matryoshka import validate_dimensions
from sglang.srt.managers.tokenizer_manager import EmbeddingResult, TokenizerManager
from sglang.srt.entrypoints.openai.protocol import EmbeddingRequest


def model_not_found(name: str) -> EmbeddingError:
    return EmbeddingError(404, f"The model `{name}` does not exist.", param="model", code="model_not_found")


def to_req_input(request: EmbeddingRequest, rid: Optional[str] = None) -> EmbeddingReqInput:
    """Normalize the four OpenAI input shapes into texts or token-id lists."""
    inp = request.input
    if isinstance(inp, str):
        return EmbeddingReqInput(text=[inp], dimensions=request.dimensions,
                                 encoding_format=request.encoding_format, rid=rid)
    if not inp:
        raise EmbeddingError(400, "Input cannot be empty.", param="input")
    first = inp[0]
    if isinstance(first, str):
        return EmbeddingReqInput(text=list(inp), dimensions=request.dimensions,
                                 encoding_format=request.encoding_format, rid=rid)
    if isinstance(first, int):
        ids = [list(inp)]
    else:
        ids = [list(x) for x in inp]
    return EmbeddingReqInput(input_ids=ids, dimensions=request.dimensions,
                             encoding_format=request.encoding_format, rid=rid)


def render_response(result: EmbeddingResult, model: str) -> bytes:
    """Splice the detokenizer's ready-made payloads into OpenAI's response shape."""
    items = b",".join(
        b'{"object":"embedding","index":%d,"embedding":%s}' % (i, payload)
        for i, payload in enumerate(result.payloads)
    )
    tokens = sum(result.prompt_tokens)
    return (
        b'{"object":"list","data":[' + items + b'],"model":' + orjson.dumps(model)
        + b',"usage":{"prompt_tokens":%d,"total_tokens":%d}}' % (tokens, tokens)
    )


class OpenAIServingEmbedding:
    def __init__(self, tokenizer_manager: TokenizerManager, served_model_name: str) -> None:
        self.tm = tokenizer_manager
        self.served_model_name = served_model_name

    def validate(self, request: EmbeddingRequest) -> None:
        if request.model is not None and request.model != self.served_model_name:
            raise model_not_found(request.model)
        validate_dimensions(request.dimensions, self.tm.model_info, self.served_model_name)

    async def create_embedding(self, request: EmbeddingRequest, rid: Optional[str] = None) -> tuple[bytes, EmbeddingResult]:
        self.validate(request)
        result = await self.tm.embed(to_req_input(request, rid))
        return render_response(result, self.served_model_name), result
