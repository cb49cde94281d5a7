"""OpenAIServingEmbedding: request validation, the call into the tokenizer manager, response bytes."""

from __future__ import annotations

from typing import Optional

import orjson

from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.configs.model_info import ModelInfo, OutputKind
from sglang.srt.managers.io_struct import FORMAT_BASE64, FORMAT_SPARSE_DICT, EmbeddingReqInput, MultimodalItem
from sglang.srt.managers.matryoshka import validate_dimensions
from sglang.srt.managers.tokenizer_manager import EmbeddingResult, TokenizerManager
from sglang.srt.entrypoints.openai.protocol import EmbeddingRequest, MultimodalEmbeddingInput


def check_model_name(requested: Optional[str], served: str) -> None:
    """A `model` other than the served one is OpenAI's 404 model_not_found (omitted is fine)."""
    if requested is not None and requested != served:
        raise EmbeddingError(ErrorKind.MODEL_NOT_FOUND, f"The model `{requested}` does not exist.", param="model", code="model_not_found")


def to_req_input(request: EmbeddingRequest) -> EmbeddingReqInput:
    """Normalize the OpenAI input shapes into texts or token-id lists, and {"text", "image"}
    objects into multimodal items."""
    inp = request.input
    if isinstance(inp, str):
        return EmbeddingReqInput(text=[inp], dimensions=request.dimensions,
                                 encoding_format=request.encoding_format)
    if not inp:
        raise EmbeddingError(ErrorKind.INVALID_REQUEST, "Input cannot be empty.", param="input")
    first = inp[0]
    if isinstance(first, str):
        return EmbeddingReqInput(text=list(inp), dimensions=request.dimensions,
                                 encoding_format=request.encoding_format)
    if isinstance(first, MultimodalEmbeddingInput):
        return EmbeddingReqInput(items=[MultimodalItem(x.text, x.image) for x in inp], dimensions=request.dimensions,
                                 encoding_format=request.encoding_format)
    if isinstance(first, int):
        ids = [list(inp)]
    else:
        ids = [list(x) for x in inp]
    return EmbeddingReqInput(input_ids=ids, dimensions=request.dimensions,
                             encoding_format=request.encoding_format)


def check_client_batch_size(n: int, server_args) -> None:
    """413 for more inputs than one request may carry: --max-client-batch-size, and never more
    than --max-queue-size (such a request could never be queued, and a 429 would invite retries)."""
    limit, flag = server_args.max_client_batch_size, "--max-client-batch-size"
    if server_args.max_queue_size < limit:
        limit, flag = server_args.max_queue_size, "--max-queue-size"
    if n > limit:
        raise EmbeddingError(ErrorKind.TOO_LARGE, f"The request has {n} inputs; this server takes at most {limit} per request "
                                  f"({flag}).", param="input")


def sparse_embeddings_format(model_info: ModelInfo, requested: str) -> Optional[str]:
    """Sparse models (SPLADE, --sparse-head) answer {"token_id": weight} objects, as SGLang does:
    FORMAT_SPARSE_DICT (base64 cannot carry them); None keeps a dense model's requested format."""
    if model_info.embeddings_output is not OutputKind.SPARSE:
        return None
    if requested == FORMAT_BASE64:
        raise EmbeddingError(ErrorKind.INVALID_REQUEST, "encoding_format 'base64' is not available for sparse embeddings; "
                                  "use 'float' ({token_id: weight} objects).", param="encoding_format")
    return FORMAT_SPARSE_DICT


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
        check_model_name(request.model, self.served_model_name)
        validate_dimensions(request.dimensions, self.tm.model_info, self.served_model_name)

    async def create_embedding(self, request: EmbeddingRequest, rid: Optional[str] = None) -> tuple[bytes, EmbeddingResult]:
        self.validate(request)
        req = to_req_input(request)
        check_client_batch_size(req.batch_size, self.tm.server_args)
        req.encoding_format = sparse_embeddings_format(self.tm.model_info, req.encoding_format) or req.encoding_format
        result = await self.tm.embed(req)
        return render_response(result, self.served_model_name), result
