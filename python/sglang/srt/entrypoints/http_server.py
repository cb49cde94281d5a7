"""The HTTP front end: FastAPI routes on uvicorn + uvloop, one TokenizerManager per process."""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager
from typing import Awaitable, Callable, Optional, TypeVar

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from sglang.srt.entrypoints.engine_processes import EngineProcesses
from sglang.srt.entrypoints.http_worker import make_listen_socket, make_server, on_loop, serve
from sglang.srt.entrypoints.openai.protocol import EmbeddingRequest, ErrorResponse, ModelCard, ModelList
from sglang.srt.entrypoints.openai.serving_embedding import OpenAIServingEmbedding
from sglang.srt.managers.errors import EmbeddingError
from sglang.srt.managers.tokenizer_manager import TokenizerManager
from sglang.srt.server_args import ConfigError, ServerArgs
from sglang.srt.utils.logging_utils import configure_logging
from sglang.srt.utils.network import PortArgs

logger = logging.getLogger(__name__)

_ERROR_RESPONSES = {code: {"model": ErrorResponse} for code in (400, 404, 429, 500, 503)}


def json_response(body: bytes | dict, status: int = 200, headers: Optional[dict] = None) -> Response:
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    return Response(content=content, status_code=status, media_type="application/json", headers=headers)


def error_response(err: EmbeddingError) -> Response:
    return json_response(err.to_dict(), err.status, err.headers or None)


def _validation_message(exc: RequestValidationError) -> tuple[str, Optional[str]]:
    errors = exc.errors()
    if not errors:
        return "Invalid request.", None
    first = errors[0]
    loc = [str(x) for x in first.get("loc", ()) if x != "body"]
    if first.get("type") == "json_invalid":
        return "The request body is not valid JSON.", None
    if loc and loc[0] == "input":
        return ("'input' must be a string, a list of strings, a list of token ids, "
                "or a list of token-id lists."), "input"
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


def create_app(server_args: ServerArgs, port_args: PortArgs, model_info: dict,
               engine_alive: Callable[[], bool] = lambda: True, worker_id: int = 0,
               on_ready: Optional[Callable[[], None]] = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # Sockets belong to the serving event loop, so the manager is made inside it.
        tm = TokenizerManager(server_args, port_args, model_info, worker_id)
        tm.start()
        app.state.tokenizer_manager = tm
        app.state.serving = OpenAIServingEmbedding(tm, server_args.served_model_name)
        if on_ready is not None:
            on_ready()
        yield
        await tm.close()

    app = FastAPI(title="sglang-embed", version="0.1.0", lifespan=lifespan)
    created = int(time.time())

    @app.exception_handler(EmbeddingError)
    async def _embedding_error(_: Request, exc: EmbeddingError):
        return error_response(exc)

    @app.exception_handler(ClientDisconnected)
    async def _client_gone(_: Request, exc: ClientDisconnected):
        # Nobody is listening; 499 (nginx's "client closed request") keeps logs and metrics honest.
        return Response(status_code=499)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError):
        message, param = _validation_message(exc)
        return error_response(EmbeddingError(400, message, param=param))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException):
        return error_response(EmbeddingError(exc.status_code, str(exc.detail)))

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception):
        logger.exception("unhandled error")
        return error_response(EmbeddingError(500, f"Internal server error: {type(exc).__name__}"))

    @app.get("/health", include_in_schema=True)
    async def health():
        tm: Optional[TokenizerManager] = getattr(app.state, "tokenizer_manager", None)
        if tm is not None and tm.healthy and engine_alive():
            return Response(status_code=200)
        return error_response(EmbeddingError(503, "The embedding engine is not ready."))

    @app.get("/v1/models", response_model=ModelList)
    async def models():
        card = ModelCard(id=server_args.served_model_name, created=created, root=server_args.model_path,
                         max_model_len=model_info.get("max_input_length"))
        return json_response(ModelList(data=[card]).model_dump())

    @app.get("/model_info")
    @app.get("/get_model_info", include_in_schema=False)
    async def get_model_info():
        return json_response({**model_info, "is_embedding": True, "is_generation": False,
                              "tokenizer_path": server_args.tokenizer_path})

    @app.post("/v1/embeddings", responses=_ERROR_RESPONSES)
    async def embeddings(request: EmbeddingRequest, raw: Request):
        start = time.monotonic()
        rid = raw.headers.get("x-request-id")
        body, result = await cancel_on_disconnect(raw, app.state.serving.create_embedding(request, rid))
        total = time.monotonic() - start
        headers = {
            "x-queue-time": f"{result.queue_time * 1000:.2f}",
            "x-inference-time": f"{result.inference_time * 1000:.2f}",
            "x-total-time": f"{total * 1000:.2f}",
        }
        if rid:
            headers["x-request-id"] = rid
        return json_response(body, headers=headers)

    return app


def launch_server(server_args: ServerArgs) -> int:
    """Run the server until Ctrl-C / SIGTERM (exit 0) or a child process dies (exit 1)."""
    configure_logging(server_args.log_level)
    workers = server_args.tokenizer_worker_num
    try:
        sock = make_listen_socket(server_args.host, server_args.port, reuse_port=workers > 1)
    except OSError as e:
        raise ConfigError(f"Cannot listen on {server_args.host}:{server_args.port}: {e.strerror}") from e
    engine = EngineProcesses(server_args)
    logger.info("starting the engine for %s", server_args.model_path)
    exit_code = 0
    try:
        model_info = engine.start()
        engine.start_http_workers(model_info)
        app = create_app(server_args, engine.port_args, model_info, engine.alive)
        server = make_server(app, server_args)
        server.on_signal = engine.begin_stop

        def on_death(reason: str) -> None:
            nonlocal exit_code
            exit_code = 1
            # Fail in-flight requests first, then stop serving so a supervisor restarts us.
            on_loop(server, lambda: _fail_all(app, reason))
            server.should_exit = True

        engine.watch(on_death)
        logger.info("serving %s on %s with %d HTTP worker(s)", server_args.served_model_name, server_args.url, workers)
        serve(server, sock)
    finally:
        sock.close()
        engine.shutdown()
    if exit_code:
        logger.error("the engine died; exiting with status %d", exit_code)
    return exit_code


def _fail_all(app: FastAPI, reason: str) -> None:
    tm: Optional[TokenizerManager] = getattr(app.state, "tokenizer_manager", None)
    if tm is not None:
        tm.on_engine_dead(reason)
