"""POST /v2/embed and /v1/embed: Cohere's embed API on the serving base.

`input_type` picks a prompt as on /v1/embeddings (frontend/input_types.py): the model's prompt
of exactly that name, else `query` for search_query and `document` (or `passage`) for
search_document; other types and models without such prompts embed the text as it is.
`truncate` END / START cut the end / start of an input longer than `max_tokens` (or the context
length); NONE refuses it. The answer is Cohere's
`embeddings_by_type` object with one list per `embedding_types` entry.
"""

from __future__ import annotations

import uuid
from typing import Optional

import orjson

from sglang.srt.configs.model_info import Capability
from sglang.srt.frontend.cohere.protocol import TRUNCATE_MODES, CohereEmbedRequest
from sglang.srt.frontend.embed_options import check_choice, invalid, set_output
from sglang.srt.frontend.embedding_types import by_type, check_embedding_types
from sglang.srt.frontend.input_types import check_input_type, input_type_prompt
from sglang.srt.frontend.inputs import normalize_input
from sglang.srt.frontend.openai.serving_base import OpenAIServingBase
from sglang.srt.frontend.tokenizer_manager import EmbeddingResult
from sglang.srt.wire.io_struct import FORMAT_RAW, EmbeddingReqInput
from sglang.srt.wire.matryoshka import validate_dimensions


def cohere_inputs(request: CohereEmbedRequest) -> list:
    """The request's inputs as normalize_input takes them (strings or {"text", "image"} items)."""
    given = [n for n in ("texts", "images", "inputs") if getattr(request, n) is not None]
    if len(given) != 1:
        raise invalid("Send exactly one of `texts`, `images` or `inputs`.", "texts")
    if request.texts is not None:
        return list(request.texts)
    if request.images is not None:
        return [{"image": url} for url in request.images]
    items = []
    for i, one in enumerate(request.inputs or []):
        texts = [c.text for c in one.content if c.type == "text"]
        images = [c.image_url.url for c in one.content if c.type == "image_url"]
        if len(images) > 1:
            raise invalid(f"inputs[{i}] holds {len(images)} images; one vector takes at most one.", "inputs")
        if not texts and not images:
            raise invalid(f"inputs[{i}] has no content.", "inputs")
        text = "\n".join(texts) if texts else None
        items.append({"text": text, "image": images[0]} if images else text)
    if any(isinstance(x, dict) for x in items):
        items = [x if isinstance(x, dict) else {"text": x} for x in items]
    return items


class CohereServingEmbed(OpenAIServingBase[CohereEmbedRequest]):
    endpoint = "/v2/embed"

    def validate(self, request: CohereEmbedRequest) -> None:
        super().validate(request)
        check_input_type(request.input_type, self.tm.model_info)
        check_choice(request.truncate, TRUNCATE_MODES, "truncate")
        check_embedding_types(request.embedding_types)
        if request.max_tokens is not None and request.max_tokens < 1:
            raise invalid(f"max_tokens must be at least 1, got {request.max_tokens}.", "max_tokens")
        validate_dimensions(request.output_dimension, self.tm.model_info, self.served_model_name)
        if self.tm.model_info.is_classifier:
            raise invalid(f"Model '{self.served_model_name}' is a classifier, not an embedding model.", "model")
        if Capability.EMBED not in self.tm.model_info.capabilities:
            raise invalid(
                f"Model '{self.served_model_name}' has no dense vector for {self.endpoint}; use /v1/embeddings.",
                "model",
            )

    def convert(self, request: CohereEmbedRequest) -> EmbeddingReqInput:
        inputs = cohere_inputs(request)
        if not inputs:
            raise invalid("Input cannot be empty.", "texts")
        req, _ = normalize_input(inputs, dimensions=request.output_dimension, encoding_format=FORMAT_RAW)
        req.truncate = request.truncate != "NONE"
        req.truncation_side = "left" if request.truncate == "START" else "right"
        req.max_tokens = request.max_tokens
        set_output(req, endianness="little")
        if req.text is not None:
            req.prompt = input_type_prompt(self.tm.model_info, request.input_type)
        return req

    api_version = "2"

    def render(self, request: CohereEmbedRequest, result: EmbeddingResult, rid: Optional[str]) -> bytes:
        vectors = result.matrix()
        types = check_embedding_types(request.embedding_types) or ["float"]
        return self.answer(request, result, by_type(vectors, types), "embeddings_by_type")

    def answer(self, request, result: EmbeddingResult, embeddings, response_type: str) -> bytes:
        body = {
            "id": str(uuid.uuid4()),
            "embeddings": embeddings,
            "texts": list(request.texts or []),
            "meta": {
                "api_version": {"version": self.api_version},
                "billed_units": {"input_tokens": sum(result.prompt_tokens)},
            },
            "response_type": response_type,
        }
        return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)


class CohereV1ServingEmbed(CohereServingEmbed):
    """POST /v1/embed, as `cohere.Client(...).embed(...)` (the v1 SDK) calls it: the v2 route's
    inputs and options, answered `embeddings_floats` (a bare list of vectors) unless
    `embedding_types` asks for `embeddings_by_type`."""

    endpoint = "/v1/embed"
    api_version = "1"

    def render(self, request: CohereEmbedRequest, result: EmbeddingResult, rid: Optional[str]) -> bytes:
        if request.embedding_types is not None:
            return super().render(request, result, rid)
        vectors = result.matrix()
        return self.answer(request, result, vectors, "embeddings_floats")
