"""The HTTP app: FastAPI routes, error mapping and response assembly, one TokenizerManager per process.

This module only builds the app; launch.py runs it (uvicorn_server.py) in the server process and
http_worker.py in each extra HTTP worker.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from contextlib import asynccontextmanager
from typing import Awaitable, Callable, Optional, TypeVar

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from sglang.srt.configs.model_info import ModelInfo
from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.cohere.routes import add_cohere_routes
from sglang.srt.frontend.compat_routes import add_compat_routes, model_card
from sglang.srt.frontend.http.direct_call import put_first
from sglang.srt.frontend.http.error_styles import ErrorStyles, tei_style
from sglang.srt.frontend.http.http_errors import CLIENT_CLOSED, HTTP_STATUS, HttpError
from sglang.srt.frontend.http.json_body import JsonBodyRoute
from sglang.srt.frontend.http.middleware import ServerLifecycle, install_middleware, request_info
from sglang.srt.frontend.http.response_parts import BinaryParts, Parts, PartsResponse
from sglang.srt.frontend.http.trace_middleware import TraceRequests
from sglang.srt.frontend.openai.protocol import EmbeddingRequest, ErrorResponse, ModelList
from sglang.srt.frontend.openai.serving_classify import OpenAIServingClassify
from sglang.srt.frontend.openai.serving_embed_all import ServingEmbedAll
from sglang.srt.frontend.openai.serving_embedding import OpenAIServingEmbedding
from sglang.srt.frontend.openai.serving_rerank import OpenAIServingRerank
from sglang.srt.frontend.openai.serving_sparse import ServingSparseEmbedding
from sglang.srt.frontend.openai.task_protocol import (
    ClassifyRequest,
    ClassifyResponse,
    EmbedAllRequest,
    RerankRequest,
    RerankResponse,
    SparseEmbedRequest,
    SparseValue,
)
from sglang.srt.frontend.sagemaker import add_sagemaker_routes
from sglang.srt.frontend.tei.routes import add_tei_routes
from sglang.srt.frontend.tokenizer_manager import TokenizerManager
from sglang.srt.metrics.prometheus import CONTENT_TYPE as METRICS_CONTENT_TYPE
from sglang.srt.metrics.server_metrics import ServerMetrics
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.heartbeat import HeartbeatReader
from sglang.srt.utils.network import PortArgs
from sglang.srt.utils.tracing import Tracing

logger = logging.getLogger(__name__)

_ERROR_RESPONSES = {status: {"model": ErrorResponse} for status in sorted(set(HTTP_STATUS.values()))}
_TEI_ERRORS = {422: {"description": "TEI error: {error, error_type}"}}


def json_response(body: bytes | dict | Parts, status: int = 200, headers: Optional[dict] = None) -> Response:
    if isinstance(body, BinaryParts):  # vLLM's binary embeddings: raw bytes, described by their own headers
        return PartsResponse(body, status, {**(headers or {}), **body.headers}, media_type=body.media_type)
    if isinstance(body, Parts):  # a large answer's parts, sent as they are (frontend/http/response_parts.py)
        return PartsResponse(body, status, headers)
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    return Response(content=content, status_code=status, media_type="application/json", headers=headers)


def error_response(err: EmbeddingError | HttpError, styles: Optional[ErrorStyles] = None, path: str = "") -> Response:
    """`err` in the error shape of the route at `path` (OpenAI's unless a peer's route registered its own)."""
    render = (styles or ErrorStyles()).for_path(path)
    status, body, headers = render(err)
    return json_response(body, status, headers or None)


# What each route's `input` / `inputs` may be, for the message when it is none of them.
_INPUT_SHAPES = {
    "": "a string, a list of strings, a list of token ids, or a list of token-id lists",
    "/v1/embeddings": (
        "a string, a list of strings, a list of token ids, a list of token-id lists, "
        'or a list of {"text", "image"} objects'
    ),
    "/embed_sparse": "a string or a list of strings",
    "/v2/embed": 'a list of {"content": [{"type": "text" | "image_url", ...}]} objects',
}


def _validation_message(exc: RequestValidationError, path: str = "") -> tuple[str, Optional[str]]:
    errors = exc.errors()
    if not errors:
        return "Invalid request.", None
    first = errors[0]
    loc = [str(x) for x in first.get("loc", ()) if x != "body"]
    if first.get("type") == "json_invalid":
        detail = str((first.get("ctx") or {}).get("error", ""))
        if "surrogate" in detail:
            return (
                "The request body holds a lone surrogate escape (\\ud800-\\udfff without its pair); "
                "strings must be valid Unicode.",
                None,
            )
        if "utf-8" in detail.lower() or "unicode" in detail.lower():
            return "The request body is not valid UTF-8 JSON.", None
        return "The request body is not valid JSON.", None
    if loc and loc[0] in ("input", "inputs"):
        if first.get("type") == "value_error":  # EmbeddingRequest's own check of {"text", "image"} items
            return str(first.get("msg", "")).removeprefix("Value error, "), loc[0]
        shapes = _INPUT_SHAPES.get(path, _INPUT_SHAPES[""])
        return f"'{loc[0]}' must be {shapes}.", loc[0]
    where = ".".join(loc) if loc else "body"
    return f"Invalid request: {where}: {first.get('msg', 'invalid value')}", (loc[0] if loc else None)


T = TypeVar("T")


class ClientDisconnected(Exception):
    """The client hung up before its answer was ready; its work has been cancelled."""


async def cancel_on_disconnect(raw: Request, work: Awaitable[T]) -> T:
    """Await `work`, cancelling it if the client hangs up first (then raise ClientDisconnected).

    Cancellation reaches TokenizerManager.embed, which tells the scheduler to drop the request's
    inputs before they cost any compute.
    """
    task = asyncio.ensure_future(work)
    disconnected = False

    async def watch() -> None:
        nonlocal disconnected
        while True:
            message = await raw.receive()
            if message["type"] == "http.disconnect":
                disconnected = True
                task.cancel()
                return

    watcher = asyncio.ensure_future(watch())
    try:
        return await task
    except asyncio.CancelledError:
        if disconnected:
            raise ClientDisconnected() from None
        raise
    finally:
        watcher.cancel()


def create_app(
    server_args: ServerArgs,
    port_args: PortArgs,
    model_info: ModelInfo,
    engine_alive: Callable[[], bool] = lambda: True,
    worker_id: int = 0,
    on_ready: Optional[Callable[[], None]] = None,
) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # Sockets belong to the serving event loop, so the manager is made inside it.
        tm = TokenizerManager(server_args, port_args, model_info, worker_id, metrics=metrics, tracing=tracing)
        tm.start()
        app.state.tokenizer_manager = tm
        app.state.embedding = OpenAIServingEmbedding(tm, server_args.served_model_name)
        app.state.classify = OpenAIServingClassify(tm, server_args.served_model_name)
        app.state.rerank = OpenAIServingRerank(tm, server_args.served_model_name)
        app.state.sparse = ServingSparseEmbedding(tm, server_args.served_model_name)
        app.state.embed_all = ServingEmbedAll(tm, server_args.served_model_name)
        if on_ready is not None:
            on_ready()
        yield
        await tm.close()
        tracing.shutdown()

    app = FastAPI(title="sglang-embed", version="0.1.0", lifespan=lifespan)
    app.router.route_class = JsonBodyRoute  # every route: orjson, large bodies off the loop
    app.state.model_name = server_args.served_model_name
    created = int(time.time())
    metrics = app.state.metrics = ServerMetrics(server_args.served_model_name)  # every series: model=<name>
    app.state.lifecycle = ServerLifecycle()
    styles = app.state.error_styles = ErrorStyles()  # peers' routes answer errors in their own shape
    styles.register(tei_style, "/embed_sparse", "/embed_all")  # TEI's routes served here
    install_middleware(app, server_args, metrics, app.state.lifecycle)
    tracing = Tracing.start(server_args.enable_trace, server_args.otlp_traces_endpoint, f"http-{worker_id}")
    if tracing.enabled:  # outermost: the request-log line and every other span belong to its span
        app.add_middleware(TraceRequests, tracing=tracing, app_routes=lambda: app.routes)

    @app.exception_handler(EmbeddingError)
    async def _embedding_error(request: Request, exc: EmbeddingError):
        return error_response(exc, styles, request.url.path)

    @app.exception_handler(ClientDisconnected)
    async def _client_gone(_: Request, exc: ClientDisconnected):
        return Response(status_code=CLIENT_CLOSED)  # nobody is listening

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        message, param = _validation_message(exc, request.url.path)
        return error_response(EmbeddingError(ErrorKind.INVALID_REQUEST, message, param=param), styles, request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        # unknown route, or wrong method: 405 with an Allow header naming every method the path takes
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = allowed_methods(app.routes, request.scope)
        http = HttpError(exc.status_code, str(exc.detail), headers=headers)
        return error_response(http, styles, request.url.path)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception):
        logger.exception("unhandled error")
        return error_response(EmbeddingError(ErrorKind.INTERNAL, f"Internal server error: {type(exc).__name__}"))

    heartbeats = HeartbeatReader(port_args.ipc_dir)

    @app.get("/health")
    async def health():
        tm: Optional[TokenizerManager] = getattr(app.state, "tokenizer_manager", None)
        if tm is None or not tm.healthy or not engine_alive():
            return error_response(EmbeddingError(ErrorKind.UNAVAILABLE, "The embedding engine is not ready."))
        stalled = heartbeats.stalled(server_args.watchdog_timeout)
        if stalled:
            now = time.monotonic()
            why = "; ".join(beat.describe(now) for beat, _ in stalled)
            return error_response(
                EmbeddingError(ErrorKind.UNAVAILABLE, f"The embedding engine is stalled: {why} (--watchdog-timeout).")
            )
        return Response(status_code=200)

    # HEAD as its own route, out of the schema: one route with both methods gives both the same
    # OpenAPI operation id, and FastAPI warns about the duplicate on every /openapi.json.
    app.add_api_route("/health", health, methods=["HEAD"], include_in_schema=False)
    # SageMaker's health check (docs/sagemaker.md): the same answer as /health
    app.add_api_route("/ping", health, methods=["GET"], summary="SageMaker health (as /health)")

    @app.get("/metrics")
    async def prometheus_metrics():
        return Response(metrics.render(), media_type=METRICS_CONTENT_TYPE)

    @app.get("/v1/models", response_model=ModelList)
    async def models():
        cards = [model_card(server_args, model_info, n, created) for n in server_args.served_model_names]
        return json_response(ModelList(data=cards).model_dump())

    @app.get("/model_info")
    @app.get("/get_model_info", include_in_schema=False)
    async def get_model_info():
        info = {**model_info.to_dict(), "is_embedding": True, "is_generation": False}
        # Filesystem paths tell a client about the server's disk: only behind --expose-model-path.
        if server_args.expose_model_path:
            info["tokenizer_path"] = server_args.tokenizer_path
        else:
            hide_paths(info, server_args.served_model_name)
        return json_response(info)

    async def serve_task(
        raw: Request, work: Callable[[Optional[str]], Awaitable], log_fields: Optional[dict] = None
    ) -> Response:
        """Run one inference route: cancelled on disconnect, timed, logged, timing headers set."""
        # The middleware stamped the request's arrival and id (echoed as x-request-id).
        info = request_info(raw.scope)
        start, fields = info.start_time, info.log_fields
        fields.update(log_fields or {})
        body, result = await cancel_on_disconnect(raw, work(info.request_id))
        fields.setdefault("inputs", len(result.payloads))
        fields.update(
            prompt_tokens=sum(result.prompt_tokens),
            tokenize_ms=round(result.tokenize_time * 1000, 2),
            queue_ms=round(result.queue_time * 1000, 2),
            inference_ms=round(result.inference_time * 1000, 2),
        )
        return json_response(
            body,
            headers={
                "x-queue-time": f"{result.queue_time * 1000:.2f}",
                "x-inference-time": f"{result.inference_time * 1000:.2f}",
                "x-total-time": f"{(time.monotonic() - start) * 1000:.2f}",
            },
        )

    @app.post("/v1/embeddings", responses=_ERROR_RESPONSES)
    async def embeddings(request: EmbeddingRequest, raw: Request):
        fields = {"inputs": count_inputs(request.input)}
        if server_args.log_request_text:
            fields["input"] = loggable_input(request.input, request.messages)
        return await serve_task(raw, lambda rid: app.state.embedding.handle(request, rid), fields)

    # ----- classifiers, cross-encoders and sparse heads (docs/rerank_and_classify.md, docs/sparse.md) -----
    @app.post("/v1/classify", responses={200: {"model": ClassifyResponse}, **_ERROR_RESPONSES})
    async def classify(request: ClassifyRequest, raw: Request):
        return await serve_task(raw, lambda rid: app.state.classify.handle(request, rid))

    @app.post("/v1/rerank", responses={200: {"model": RerankResponse}, **_ERROR_RESPONSES})
    async def rerank(request: RerankRequest, raw: Request):
        return await serve_task(raw, lambda rid: app.state.rerank.handle(request, rid))

    @app.post("/embed_sparse", responses={200: {"model": list[list[SparseValue]]}, **_TEI_ERRORS})
    async def embed_sparse(request: SparseEmbedRequest, raw: Request):
        return await serve_task(raw, lambda rid: app.state.sparse.handle(request, rid))

    @app.post("/embed_all", responses={200: {"model": list[list[list[float]]]}, **_TEI_ERRORS})
    async def embed_all(request: EmbedAllRequest, raw: Request):
        return await serve_task(raw, lambda rid: app.state.embed_all.handle(request, rid))

    # ----- the peers' routes (docs/migrating.md) -----
    add_tei_routes(app, server_args, model_info, serve_task, json_response, app.version)
    add_compat_routes(app, server_args, model_info, serve_task, json_response, created)
    add_cohere_routes(app, server_args.served_model_name, serve_task)
    add_sagemaker_routes(app)  # last: it hands requests to the routes above
    put_first(app, "/v1/embeddings")  # the common request: tried before the docs, /health, ... (direct_call.py)
    return app


def allowed_methods(routes, scope: dict) -> str:
    """The Allow header for a 405: the methods of every route matching the request's path.

    Starlette names only the first route whose path matched, and a path may have several routes
    (GET / and POST /, GET /health and HEAD /health)."""
    methods: set[str] = set()
    for route in routes:
        match, _ = route.matches({**scope, "type": "http"})
        if match != Match.NONE:
            methods.update(getattr(route, "methods", None) or ())
    return ", ".join(sorted(methods))


def hide_paths(info: dict, served_name: str) -> None:
    """Replace the filesystem paths in a /model_info dict (the model's, the image processor's
    directory, bge-m3's ColBERT head file): they describe the server's disk, not the model."""
    info["model_path"] = served_name
    if info.get("vision"):
        info["vision"] = {**info["vision"], "model_dir": served_name}
    if info.get("colbert") and info["colbert"].get("path"):
        info["colbert"] = {**info["colbert"], "path": os.path.basename(info["colbert"]["path"])}


def count_inputs(inp) -> int:
    """Inputs in an OpenAI `input` value (a flat token-id list is one input)."""
    if isinstance(inp, str) or not inp or isinstance(inp[0], int):
        return 1
    return len(inp)


def loggable_input(inp, messages=None, max_items: int = 64, max_chars: int = 2000):
    """The request's input for --log-request-text, capped so one request cannot flood the log;
    vLLM's chat form (`messages` instead of `input`) as each message's role, text and image count."""
    if inp is None:
        return [
            {"role": m.role, "text": " ".join(m.texts())[:max_chars], "images": len(m.images())}
            for m in (messages or [])[:max_items]
        ]
    if isinstance(inp, str):
        return inp[:max_chars]
    out = []
    for x in inp[:max_items]:
        if isinstance(x, str):
            x = x[:max_chars]
        elif hasattr(x, "image"):  # a {"text", "image"} item: image data can be megabytes of base64
            x = {"text": (x.text or "")[:max_chars], "image": "<image>" if x.image else None}
        out.append(x)
    return out
