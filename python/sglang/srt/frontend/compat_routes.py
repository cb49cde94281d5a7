"""The other peers' routes, registered on the app beside OpenAI's (TEI's are in tei/routes.py,
SageMaker's /invocations in sagemaker.py):

- vLLM: POST /pooling, /score and /v1/score, /tokenize (its `prompt` form), /detokenize;
- TEI: POST /tokenize (its `inputs` form; the body says which dialect);
- infinity: POST /embeddings and GET /models (no /v1 prefix);
- Cohere: POST /v2/embed (POST /v1/embed and the `{"message"}` error shape: cohere/routes.py);
- OpenAI: GET /v1/models/{model} (client.models.retrieve percent-encodes `/`, hence `:path`).
"""

from __future__ import annotations

from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import ValidationError

from sglang.srt.configs.model_info import Capability, ModelInfo
from sglang.srt.configs.prompts import resolve_prompt
from sglang.srt.errors import EmbeddingError
from sglang.srt.frontend.cohere.protocol import CohereEmbedRequest
from sglang.srt.frontend.cohere.serving import CohereServingEmbed
from sglang.srt.frontend.embed_options import invalid, refuse_unsupported
from sglang.srt.frontend.http.error_styles import TeiError, cohere_style, tei_empty, tei_style
from sglang.srt.frontend.http.json_body import read_json
from sglang.srt.frontend.openai.protocol import EmbeddingRequest, EmbeddingResponse, ModelCard
from sglang.srt.frontend.openai.serving_base import check_batch_size, model_not_found
from sglang.srt.frontend.openai.serving_embedding import OpenAIServingEmbedding
from sglang.srt.frontend.tei.protocol import SimpleToken, TokenizeRequest
from sglang.srt.frontend.token_work import check_ids_work, decode_all, tei_tokenize_answer
from sglang.srt.frontend.tokens import vllm_tokenize
from sglang.srt.frontend.vllm.protocol import (
    DetokenizeRequest,
    DetokenizeResponse,
    PoolingRequest,
    PoolingResponse,
    ScoreRequest,
    ScoreResponse,
    VllmTokenizeRequest,
    VllmTokenizeResponse,
)
from sglang.srt.frontend.vllm.serving import VllmServingPooling
from sglang.srt.frontend.vllm.serving_score import VllmServingScore
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.off_loop import off_loop


def model_card(server_args: ServerArgs, model_info: ModelInfo, name: str, created: int) -> ModelCard:
    root = server_args.shown_model_path
    caps = sorted(c.value for c in model_info.capabilities)
    return ModelCard(id=name, created=created, root=root, max_model_len=model_info.max_input_length, capabilities=caps)


def infinity_capabilities(model_info: ModelInfo) -> list[str]:
    """Infinity's names for what the model serves: its embed / classify / rerank / image_embed."""
    caps = model_info.capabilities
    if Capability.CLASSIFY in caps:
        return ["classify", "rerank"] if Capability.RERANK in caps else ["classify"]
    return ["embed", "image_embed"] if Capability.IMAGE in caps else ["embed"]


def add_compat_routes(
    app: FastAPI,
    server_args: ServerArgs,
    model_info: ModelInfo,
    serve_task: Callable[..., Any],
    json_response: Callable[..., Response],
    created: int,
) -> None:
    app.state.error_styles.register(cohere_style, "/v2/embed")
    name = server_args.served_model_name

    def serving(attr: str, cls):
        s = getattr(app.state, attr, None)
        if s is None:
            s = cls(app.state.tokenizer_manager, name)
            setattr(app.state, attr, s)
        return s

    # ----- OpenAI: one model by id -----
    @app.get("/v1/models/{model:path}", response_model=ModelCard)
    async def retrieve_model(model: str):
        if model not in server_args.served_model_names:
            raise model_not_found(model)
        return json_response(model_card(server_args, model_info, model, created).model_dump())

    # ----- infinity -----
    @app.post("/embeddings", response_model=EmbeddingResponse)
    async def infinity_embeddings(request: EmbeddingRequest, raw: Request):
        return await serve_task(
            raw, lambda rid: serving("compat_embedding", OpenAIServingEmbedding).handle(request, rid)
        )

    @app.get("/models")
    async def infinity_models():
        tm = app.state.tokenizer_manager
        in_flight = tm.num_in_flight
        stats = {
            "queue_fraction": round(in_flight / max(1, tm.admission_limit), 4),
            "queue_absolute": in_flight,
            "results_pending": in_flight,
            "batch_size": server_args.max_batch_size,
        }
        data = [
            {
                **model_card(server_args, model_info, n, created).model_dump(),
                "owned_by": "sglang-embed",
                "stats": stats,
                "backend": "torch",
                "capabilities": infinity_capabilities(model_info),
            }
            for n in server_args.served_model_names
        ]
        return json_response({"object": "list", "data": data})

    # ----- Cohere -----
    @app.post("/v2/embed", responses={400: {"description": 'Cohere error: {"message"}'}})
    async def cohere_embed(request: CohereEmbedRequest, raw: Request):
        return await serve_task(raw, lambda rid: serving("cohere_embed", CohereServingEmbed).handle(request, rid))

    # ----- vLLM -----
    @app.post("/pooling", response_model=PoolingResponse)
    async def pooling(request: PoolingRequest, raw: Request):
        return await serve_task(raw, lambda rid: serving("vllm_pooling", VllmServingPooling).handle(request, rid))

    @app.post("/score", response_model=ScoreResponse)
    @app.post("/v1/score", response_model=ScoreResponse, operation_id="score_v1")
    async def score(request: ScoreRequest, raw: Request):
        return await serve_task(raw, lambda rid: serving("vllm_score", VllmServingScore).handle(request, rid))

    @app.post("/detokenize", response_model=DetokenizeResponse)
    async def detokenize(request: DetokenizeRequest):
        check_model(request.model)
        check_ids_work([request.tokens], server_args, model_info.max_input_length, "tokens")
        tok = tokenizer()
        text = await off_loop(
            lambda: decode_all(tok, [request.tokens], model_info.vocab_size, False, "tokens"), len(request.tokens)
        )
        return json_response(b'{"prompt":' + text[1:-1] + b"}")

    def tokenizer():
        return app.state.tokenizer_manager.input_tokenizer.tokenizer

    def check_model(model) -> None:
        serving("compat_embedding", OpenAIServingEmbedding).check_model_name(model)

    @app.post(
        "/tokenize",
        summary="TEI's form ({inputs}) or vLLM's ({prompt}); the body says which",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {
                            "oneOf": [
                                {"$ref": "#/components/schemas/TokenizeRequest"},
                                {"$ref": "#/components/schemas/VllmTokenizeRequest"},
                            ]
                        }
                    }
                },
            }
        },
        responses={
            200: {
                "description": "TEI: a list of token lists; vLLM: VllmTokenizeResponse",
                "content": {
                    "application/json": {
                        "schema": {
                            "oneOf": [
                                {
                                    "type": "array",
                                    "items": {"type": "array", "items": {"$ref": "#/components/schemas/SimpleToken"}},
                                },
                                {"$ref": "#/components/schemas/VllmTokenizeResponse"},
                            ]
                        }
                    }
                },
            }
        },
    )
    async def tokenize(raw: Request):
        body = await read_json(raw)
        if body is None:
            raise invalid("The request body is not valid JSON.", "body")
        if not isinstance(body, dict):
            raise invalid("The request body must be a JSON object.", "body")
        if "inputs" in body:
            return await tei_tokenize(body)
        return await vllm_tokenize_route(body)

    async def tei_tokenize(body: dict) -> Response:
        try:
            try:
                request = TokenizeRequest.model_validate(body)
            except ValidationError as e:
                first = e.errors()[0]
                where = ".".join(str(x) for x in first.get("loc", ()))
                raise TeiError(f"Invalid tokenize request: {where}: {first.get('msg')}", "Validation") from None
            texts = [request.inputs] if isinstance(request.inputs, str) else request.inputs
            if not texts or any(t == "" for t in texts):
                raise tei_empty("inputs")
            check_batch_size(len(texts), server_args, "inputs")  # as /embed answers it (413)
            prefix = resolve_prompt(model_info.prompts, model_info.default_prompt, request.prompt_name) or ""
            tok, lower, limit = tokenizer(), model_info.do_lower_case, server_args.max_response_bytes
            out = await off_loop(
                lambda: tei_tokenize_answer(tok, texts, prefix, request.add_special_tokens, lower, limit),
                sum(len(t) for t in texts),
            )
            return json_response(out)
        except EmbeddingError as e:
            status, content, headers = tei_style(e)
            return Response(content, status_code=status, media_type="application/json", headers=headers or None)

    async def vllm_tokenize_route(body: dict) -> Response:
        if "messages" in body:
            raise invalid("Chat-form tokenize requests are not supported; send `prompt`.", "messages")
        try:
            request = VllmTokenizeRequest.model_validate(body)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(x) for x in first.get("loc", ())) or "body"
            raise invalid(f"Invalid request: {where}: {first.get('msg')}", where.split(".")[0]) from None
        check_model(request.model)
        refuse_unsupported(request.model_extra or {})
        tok, lower = tokenizer(), model_info.do_lower_case
        out = await off_loop(
            lambda: vllm_tokenize(
                tok,
                request.prompt,
                request.add_special_tokens,
                request.return_token_strs,
                model_info.max_input_length,
                lower,
            ),
            len(request.prompt),
        )
        return json_response(out)

    add_schemas(app, TokenizeRequest, VllmTokenizeRequest, VllmTokenizeResponse, SimpleToken)


def add_schemas(app: FastAPI, *models) -> None:
    """Put models that a route reads by hand (not through a typed parameter) into /openapi.json."""
    base = app.openapi

    def openapi() -> dict:
        if app.openapi_schema:
            return app.openapi_schema
        schema = base()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for m in models:
            js = m.model_json_schema(ref_template="#/components/schemas/{model}")
            components.update(js.pop("$defs", {}))
            components.setdefault(m.__name__, js)
        return schema

    app.openapi = openapi
