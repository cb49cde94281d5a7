"""TEI's routes on the app: POST /embed, /rerank, /predict, /similarity, /decode, GET /info, and
POST / (what huggingface_hub's InferenceClient(model="http://host:port") posts to: /similarity for
`{"inputs": {"source_sentence", "sentences"}}`, /predict for a classifier, /rerank for a
cross-encoder body, /embed otherwise). /rerank also takes the `{"query", "documents"}` body of
/v1/rerank (answered and refused as /v1/rerank answers). /tokenize is shared with vLLM
(compat_routes). Errors answer `{"error", "error_type"}` (frontend/http/error_styles.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from sglang.srt.configs.model_info import Capability, ModelInfo
from sglang.srt.errors import EmbeddingError
from sglang.srt.frontend.compat_routes import add_schemas
from sglang.srt.frontend.embed_options import invalid
from sglang.srt.frontend.http.error_styles import TeiError, openai_style, tei_empty, tei_style
from sglang.srt.frontend.http.json_body import read_json
from sglang.srt.frontend.openai.serving_base import check_batch_size
from sglang.srt.frontend.openai.task_protocol import RerankRequest as DocumentsRerankRequest
from sglang.srt.frontend.tei.protocol import (
    DecodeRequest,
    EmbedRequest,
    Info,
    Prediction,
    PredictRequest,
    RerankRequest,
    SimilarityRequest,
)
from sglang.srt.frontend.tei.serving import (
    TeiServingEmbed,
    TeiServingPredict,
    TeiServingRerank,
    TeiServingSimilarity,
)
from sglang.srt.frontend.token_work import check_ids_work, decode_all
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.off_loop import off_loop

TEI_PATHS = ("/embed", "/rerank", "/predict", "/similarity", "/decode", "/info", "/")
TEI_POOLING = {"cls": "cls", "mean": "mean", "lasttoken": "last-token", "max": "max"}


@dataclass
class TeiServings:
    embed: TeiServingEmbed
    rerank: TeiServingRerank
    predict: TeiServingPredict
    similarity: TeiServingSimilarity


async def read_tei_object(raw: Request) -> dict:
    """A route's body read by hand (to check sizes before validating it), refused in TEI's shape
    when it is not a JSON object."""
    body = await read_json(raw)
    if body is None:
        raise TeiError("The request body is not valid JSON.", "Validation")
    if not isinstance(body, dict):
        raise TeiError("The request body must be a JSON object.", "Validation")
    return body


def tei_info(server_args: ServerArgs, model_info: ModelInfo, version: str) -> dict:
    """GET /info in TEI's shape."""
    if Capability.CLASSIFY in model_info.capabilities:
        labels = list(model_info.labels or ())
        kind = "reranker" if Capability.RERANK in model_info.capabilities else "classifier"
        model_type: dict = {
            kind: {
                "id2label": {str(i): n for i, n in enumerate(labels)},
                "label2id": {n: i for i, n in enumerate(labels)},
            }
        }
    else:
        pooling = (
            "splade" if model_info.sparse_head == "splade" else TEI_POOLING.get(model_info.pooling, model_info.pooling)
        )
        model_type = {"embedding": {"pooling": pooling}}
    return Info(
        model_id=server_args.shown_model_path,
        model_dtype=model_info.dtype,
        served_model_name=server_args.served_model_name,
        model_type=model_type,
        max_concurrent_requests=server_args.max_queue_size,
        max_input_length=model_info.max_input_length,
        max_batch_tokens=server_args.max_num_tokens,
        max_batch_requests=server_args.max_batch_size,
        max_client_batch_size=server_args.max_client_batch_size,
        auto_truncate=server_args.allow_auto_truncate,
        tokenization_workers=server_args.tokenizer_worker_num,
        version=version,
    ).model_dump()


def add_tei_routes(
    app: FastAPI,
    server_args: ServerArgs,
    model_info: ModelInfo,
    serve_task: Callable[..., Any],
    json_response: Callable[..., Response],
    version: str,
) -> None:
    app.state.error_styles.register(tei_style, *TEI_PATHS)
    errors = {422: {"description": "TEI error: {error, error_type}"}}

    def servings() -> TeiServings:
        s = getattr(app.state, "tei", None)
        if s is None:
            tm, name = app.state.tokenizer_manager, server_args.served_model_name
            s = app.state.tei = TeiServings(
                TeiServingEmbed(tm, name),
                TeiServingRerank(tm, name),
                TeiServingPredict(tm, name),
                TeiServingSimilarity(tm, name),
            )
        return s

    @app.post("/embed", responses={200: {"model": list[list[float]]}, **errors})
    async def embed(request: EmbedRequest, raw: Request):
        return await serve_task(raw, lambda rid: servings().embed.handle(request, rid))

    @app.post(
        "/rerank",
        summary="TEI's body ({query, texts}) or /v1/rerank's ({query, documents}); the body says which",
        responses={
            200: {"description": "TEI's body: a bare list of ranks; /v1/rerank's: RerankResponse"},
            **errors,
        },
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": RERANK_SCHEMA}}}},
    )
    async def rerank(raw: Request):
        body = await read_tei_object(raw)
        if "documents" in body and "texts" not in body:
            return await rerank_documents(raw, body)
        request = tei_validate(RerankRequest, body, "rerank")
        return await serve_task(raw, lambda rid: servings().rerank.handle(request, rid))

    async def rerank_documents(raw: Request, body: dict) -> Response:
        """/v1/rerank's body on /rerank (vLLM, Jina and Cohere clients post it there): /v1/rerank's
        answer, and its errors in OpenAI's shape."""
        try:
            try:
                request = DocumentsRerankRequest.model_validate(body)
            except ValidationError as e:
                first = e.errors()[0] if e.errors() else {}
                where = ".".join(str(x) for x in first.get("loc", ())) or "body"
                raise invalid(f"Invalid request: {where}: {first.get('msg', 'invalid value')}", where.split(".")[0])
            return await serve_task(raw, lambda rid: app.state.rerank.handle(request, rid))
        except EmbeddingError as e:
            status, content, headers = openai_style(e)
            return Response(content, status_code=status, media_type="application/json", headers=headers or None)

    @app.post("/similarity", responses={200: {"model": list[float]}, **errors})
    async def similarity(request: SimilarityRequest, raw: Request):
        return await serve_task(raw, lambda rid: servings().similarity.handle(request, rid))

    @app.post("/predict", responses={200: {"model": list[Prediction]}, **errors})
    async def predict(request: PredictRequest, raw: Request):
        return await serve_task(raw, lambda rid: servings().predict.handle(request, rid))

    @app.post(
        "/decode",
        responses={200: {"model": list[str]}, **errors},
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": DECODE_SCHEMA}}}},
    )
    async def decode_route(raw: Request):
        # Read by hand: the count is checked before a million id lists are validated.
        body = await read_tei_object(raw)
        if isinstance(body.get("ids"), list):
            check_batch_size(len(body["ids"]), server_args, "ids")
        request = tei_validate(DecodeRequest, body, "decode")
        ids = request.ids
        if not ids:
            raise tei_empty("ids")
        batch = ids if isinstance(ids[0], list) else [ids]
        check_ids_work(batch, server_args, model_info.max_input_length, "ids")  # 413 before any work
        if not all(batch):
            raise tei_empty("ids")
        tokenizer = app.state.tokenizer_manager.input_tokenizer.tokenizer
        vocab, skip = model_info.vocab_size, request.skip_special_tokens
        body = await off_loop(lambda: decode_all(tokenizer, batch, vocab, skip, "ids"), sum(len(x) for x in batch))
        return json_response(body)

    @app.get("/info", response_model=Info)
    async def info():
        return json_response(tei_info(server_args, model_info, version))

    @app.get("/", include_in_schema=True, summary="TEI health (200 when ready)")
    async def root_health():
        tm = getattr(app.state, "tokenizer_manager", None)
        return Response(status_code=200 if tm is not None and tm.healthy else 503)

    @app.post(
        "/",
        summary="TEI's root route: /similarity for {inputs: {source_sentence, sentences}}, /predict for "
        "classifiers, /rerank for {query, texts}, /embed otherwise",
        responses=errors,
    )
    async def root(raw: Request):
        body = await read_tei_object(raw)
        if isinstance(body.get("inputs"), dict):  # huggingface_hub's sentence_similarity
            kind, model, serving = "similarity", SimilarityRequest, lambda: servings().similarity
        elif Capability.CLASSIFY in model_info.capabilities and "query" in body:
            kind, model, serving = "rerank", RerankRequest, lambda: servings().rerank
        elif Capability.CLASSIFY in model_info.capabilities:
            kind, model, serving = "predict", PredictRequest, lambda: servings().predict
        else:
            kind, model, serving = "embed", EmbedRequest, lambda: servings().embed
        request = tei_validate(model, body, kind)
        return await serve_task(raw, lambda rid: serving().handle(request, rid))

    add_schemas(app, DecodeRequest)


DECODE_SCHEMA = {"$ref": "#/components/schemas/DecodeRequest"}
# Both bodies inline: the two request models share a name, so neither can be a component by it.
RERANK_SCHEMA = {"oneOf": [RerankRequest.model_json_schema(), DocumentsRerankRequest.model_json_schema()]}


def tei_validate(model: type[BaseModel], body: dict, kind: str) -> Any:
    """`body` as `model`, or TEI's 422 naming the first invalid field."""
    try:
        return model.model_validate(body)
    except ValidationError as e:
        first = e.errors()[0] if e.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ())) or "body"
        raise TeiError(f"Invalid {kind} request: {where}: {first.get('msg', 'invalid value')}", "Validation") from None
