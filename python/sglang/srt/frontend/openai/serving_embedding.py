"""POST /v1/embeddings: OpenAI's embeddings route on the serving base (validate -> convert -> run -> render).

Besides OpenAI's fields it takes the options users of vLLM, TEI and infinity send
(frontend/embed_options.py) and Cohere-style `embedding_types` (frontend/embedding_types.py).
"""

from __future__ import annotations

import sys
from typing import Optional

import orjson

from sglang.srt.configs.model_info import ModelInfo, OutputKind
from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.binary_response import binary_body, request_id
from sglang.srt.frontend.embed_options import (
    ENDIANNESS_VALUES,
    check_choice,
    check_encoding_format,
    refuse_unsupported,
    resolve_use_activation,
    set_output,
    set_prompt,
    set_truncation_tei,
    set_truncation_vllm,
)
from sglang.srt.frontend.embedding_types import by_type, check_embedding_types
from sglang.srt.frontend.http.response_parts import Body, Parts
from sglang.srt.frontend.inputs import normalize_input
from sglang.srt.frontend.openai.chat_request import ChatForm, input_required
from sglang.srt.frontend.openai.multi_vector import check_multi_vector_options, multi_vector_output
from sglang.srt.frontend.openai.protocol import EmbeddingRequest
from sglang.srt.frontend.openai.serving_base import OpenAIServingBase
from sglang.srt.frontend.tokenizer_manager import EmbeddingResult
from sglang.srt.wire.io_struct import (
    BINARY_FORMATS,
    EMBED_DTYPES,
    FORMAT_BASE64,
    FORMAT_RAW,
    FORMAT_SPARSE_DICT,
    EmbeddingReqInput,
)
from sglang.srt.wire.matryoshka import validate_dimensions


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


def render_response(result: EmbeddingResult, model: str) -> Body:
    """Splice the detokenizer's ready-made payloads into OpenAI's response shape (multi-vector
    items also carry the `token_ids` their vectors belong to, and go as parts, not joined)."""
    if result.token_ids is not None:
        return multi_vector_parts(result, model)
    ids = [None] * len(result.payloads)
    items = b",".join(
        b'{"object":"embedding","index":%d,"embedding":%s%s}'
        % (i, payload, b',"token_ids":' + tid if tid is not None else b"")
        for i, (payload, tid) in enumerate(zip(result.payloads, ids))
    )
    return _envelope(items, result, model)


def multi_vector_parts(result: EmbeddingResult, model: str) -> Parts:
    """Per-token items as parts: each row stays the bytes the detokenizer made (response_parts.py)."""
    tokens = sum(result.prompt_tokens)
    parts = Parts([b'{"object":"list","data":['])
    for i, (payload, tid) in enumerate(zip(result.payloads, result.token_ids)):
        head = b'%s{"object":"embedding","index":%d,"embedding":' % (b"," if i else b"", i)
        parts += [head, payload, (b',"token_ids":' + tid if tid is not None else b"") + b"}"]
    parts.append(
        b'],"model":' + orjson.dumps(model) + b',"usage":{"prompt_tokens":%d,"total_tokens":%d}}' % (tokens, tokens)
    )
    return parts


def render_by_type(result: EmbeddingResult, model: str, types: list[str]) -> bytes:
    """`embedding_types`: each item carries `embeddings` {type: value} (frontend/embedding_types.py)."""
    vectors = result.matrix()
    values = by_type(vectors, types)
    items = b",".join(
        b'{"object":"embedding","index":%d,"embeddings":%s}'
        % (i, orjson.dumps({t: values[t][i] for t in types}, option=orjson.OPT_SERIALIZE_NUMPY))
        for i in range(len(result.payloads))
    )
    return _envelope(items, result, model)


def _envelope(items: bytes, result: EmbeddingResult, model: str) -> bytes:
    tokens = sum(result.prompt_tokens)
    return (
        b'{"object":"list","data":['
        + items
        + b'],"model":'
        + orjson.dumps(model)
        + b',"usage":{"prompt_tokens":%d,"total_tokens":%d}}' % (tokens, tokens)
    )


# Request options image items do not take, with the value each has when not set.
IMAGE_IGNORES = {
    "truncate_prompt_tokens": None,
    "truncation_side": None,
    "truncate": None,
    "truncation_direction": None,
    "add_special_tokens": True,
}


def refuse_set(request, options: dict, why: str) -> None:
    """400 naming the first of `options` the request sets to other than its unset value."""
    for name, unset in options.items():
        if getattr(request, name, unset) != unset:
            raise EmbeddingError(ErrorKind.INVALID_REQUEST, f"`{name}` does not apply here: {why}.", param=name)


def check_embedding_request(request: EmbeddingRequest, model_info: ModelInfo, model_name: str) -> None:
    """Every check of an OpenAI-style embeddings body that needs no tokenizing (`use_activation`
    becomes `normalize` here)."""
    refuse_unsupported(request.model_extra or {})
    resolve_use_activation(request)
    check_encoding_format(request.encoding_format, binary=True)
    check_choice(request.modality, ("text", "image"), "modality")
    validate_dimensions(request.dimensions, model_info, model_name)
    types = check_embedding_types(request.embedding_types)
    if types is not None and model_info.embeddings_output is not OutputKind.DENSE:
        raise EmbeddingError(
            ErrorKind.INVALID_REQUEST, "embedding_types needs a dense embedding model.", param="embedding_types"
        )
    check_binary_applies(request, model_info)
    check_output_applies(request, model_info)


def check_binary_applies(request: EmbeddingRequest, model_info: ModelInfo) -> None:
    """vLLM's `bytes` / `bytes_only` carry float vectors: not sparse weights, not `embedding_types`."""
    if request.encoding_format not in BINARY_FORMATS:
        return
    if request.embedding_types is not None:
        raise EmbeddingError(
            ErrorKind.INVALID_REQUEST,
            f"encoding_format '{request.encoding_format}' and `embedding_types` are two answer shapes; send one.",
            param="encoding_format",
        )
    if model_info.embeddings_output is OutputKind.SPARSE:
        raise EmbeddingError(
            ErrorKind.INVALID_REQUEST,
            f"encoding_format '{request.encoding_format}' is not available for sparse embeddings; use 'float' "
            "({token_id: weight} objects).",
            param="encoding_format",
        )


def check_output_applies(request: EmbeddingRequest, model_info: ModelInfo) -> None:
    """400 naming an output option this request's answer would not honour: `normalize` on logits or
    sparse weights; `embed_dtype` / `endianness` anywhere but base64 and bytes vectors (float JSON
    numbers are always float32 values; `embedding_types` are computed from float32)."""
    check_choice(request.embed_dtype, EMBED_DTYPES, "embed_dtype")  # a bad value is named as such first
    check_choice(request.endianness, ENDIANNESS_VALUES, "endianness")
    kind = model_info.embeddings_output
    if request.normalize is not None and kind in (OutputKind.LOGITS, OutputKind.SPARSE):
        raise EmbeddingError(
            ErrorKind.INVALID_REQUEST,
            f"`normalize` applies to embedding vectors; this model answers {kind.value} output.",
            param="normalize",
        )
    packed = request.encoding_format in (FORMAT_BASE64, *BINARY_FORMATS) and request.embedding_types is None
    if packed and kind is not OutputKind.SPARSE:
        return
    for name, value, defaults in (
        ("embed_dtype", request.embed_dtype, (None, "float32")),
        ("endianness", request.endianness, (None, "little", "native") if sys.byteorder == "little" else (None,)),
    ):
        if value not in defaults:
            raise EmbeddingError(
                ErrorKind.INVALID_REQUEST,
                f'`{name}` applies to base64 and bytes vectors (`encoding_format: "base64"`, "bytes" or '
                '"bytes_only", without `embedding_types`).',
                param=name,
            )


def embedding_request_input(request: EmbeddingRequest, model_info: ModelInfo, served: str) -> EmbeddingReqInput:
    """An OpenAI-style embeddings body (with vLLM's, TEI's and infinity's extras) as one request."""
    prompt = request.input
    if prompt is None:
        raise input_required()
    if request.modality == "image":  # infinity: the inputs are image URLs / data URIs
        urls = [prompt] if isinstance(prompt, str) else prompt
        if not urls or not all(isinstance(u, str) for u in urls):
            raise EmbeddingError(
                ErrorKind.INVALID_REQUEST, "With modality 'image', input is a URL or a list of URLs.", param="input"
            )
        prompt = [{"image": u} for u in urls]
    req, _ = normalize_input(prompt, dimensions=request.dimensions, encoding_format=request.encoding_format)
    if req.items is not None:  # image items are tokenized by the processor, whole
        refuse_set(request, IMAGE_IGNORES, "image inputs are embedded whole, with the processor's special tokens")
    set_truncation_tei(req, request.truncate, request.truncation_direction)
    set_truncation_vllm(
        req,
        request.truncate_prompt_tokens,
        request.truncation_side,
        model_info.max_input_length,
        "truncate_prompt_tokens",
    )
    set_output(req, request.normalize, request.embed_dtype, request.endianness)
    req.add_special_tokens = request.add_special_tokens
    set_prompt(req, model_info, request.prompt_name, request.prompt, request.instruction, input_type=request.input_type)
    if request.embedding_types is not None:  # quantized on the HTTP side, from float32 vectors
        req.encoding_format, req.embed_dtype, req.endianness = FORMAT_RAW, "float32", "little"
    req.token_output = multi_vector_output(
        model_info, served, request.multi_vector, request.input_type, request.dimensions
    )
    if req.token_output is not None:
        check_multi_vector_options(request, model_info)
    else:
        req.encoding_format = sparse_embeddings_format(model_info, req.encoding_format) or req.encoding_format
    return req


class OpenAIServingEmbedding(ChatForm, OpenAIServingBase[EmbeddingRequest]):
    endpoint = "/v1/embeddings"

    def validate(self, request: EmbeddingRequest) -> None:
        super().validate(request)
        check_embedding_request(request, self.tm.model_info, self.served_model_name)

    def convert(self, request: EmbeddingRequest) -> EmbeddingReqInput:
        return embedding_request_input(request, self.tm.model_info, self.served_model_name)

    def render(self, request: EmbeddingRequest, result: EmbeddingResult, rid: Optional[str]) -> Body:
        if request.encoding_format in BINARY_FORMATS:
            return binary_body(
                result,
                self.served_model_name,
                request.encoding_format,
                request.embed_dtype,
                request.endianness,
                request_id("embd", rid),
            )
        if request.embedding_types is not None:
            return render_by_type(result, self.served_model_name, check_embedding_types(request.embedding_types))
        return render_response(result, self.served_model_name)
