"""Member apps for ModelRouter tests: small FastAPI apps, one per model, with the real middlewares
(install_middleware: request ids and metrics, API key, body limits, engine death) whose routes echo
which model answered, the path and body they got, and the value the router handed over parsed
(json_body.PARSED_BODY); and `call`, which drives any ASGI app through one request (no server)."""

from __future__ import annotations

import asyncio
import json
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from sglang.srt.configs.colbert_config import ColbertConfig
from sglang.srt.configs.model_info import OutputKind
from sglang.srt.configs.served_models import ServedModel
from sglang.srt.frontend import sagemaker
from sglang.srt.frontend.compat_routes import model_card
from sglang.srt.frontend.http.error_styles import ErrorStyles, cohere_style
from sglang.srt.frontend.http.json_body import PARSED_BODY, JsonBodyRoute
from sglang.srt.frontend.http.middleware import ServerLifecycle, install_middleware
from sglang.srt.frontend.http.model_router import ROUTE_NEEDS, ModelRouter
from sglang.srt.metrics.server_metrics import ServerMetrics
from sglang.srt.server_args import ServerArgs
from test.helpers.model_info import make_model_info

LIMIT = 4096  # --max-payload-bytes of the router and every member
TIMEOUT = 0.3  # --body-timeout

KINDS = {
    "embed": {},
    "rerank": {"embeddings_output": OutputKind.LOGITS, "labels": ("relevant",), "embedding_dim": 1},
    "classify": {"embeddings_output": OutputKind.LOGITS, "labels": ("neg", "pos"), "embedding_dim": 2},
    "sparse": {"embeddings_output": OutputKind.SPARSE, "sparse_head": "splade"},
    "colbert": {"colbert": ColbertConfig(projection="checkpoint", dim=8)},
}
ECHO_PATHS = sorted({*ROUTE_NEEDS, "/tokenize", "/detokenize", "/", "/v1/embed"})


class TokenizeBody(BaseModel):
    prompt: str
    model: Optional[str] = None


def member(name: str, kind: str, aliases=(), cohere: bool = False, events: Optional[list] = None, **flags):
    """(a member app, its ServedModel): a model of `kind` (KINDS) served as `name` and `aliases`."""
    defaults = {"allowed_hosts": ["*"], "max_payload_bytes": LIMIT, "body_timeout": TIMEOUT}
    args = ServerArgs(model_path=f"/models/{name}", served_model_name=[name, *aliases], **{**defaults, **flags})
    info = make_model_info(model_path=args.model_path, served_model_name=name, **KINDS[kind])
    events = [] if events is None else events

    @asynccontextmanager
    async def lifespan(app):
        if name == "broken":
            raise RuntimeError("no weights")
        events.append(("start", name))
        yield
        events.append(("stop", name))
        if name == "fragile":
            raise OSError("socket already closed")

    app = FastAPI(lifespan=lifespan)
    app.router.route_class = JsonBodyRoute
    app.state.model_name = name
    app.state.metrics = ServerMetrics(name)
    app.state.lifecycle = ServerLifecycle()
    app.state.error_styles = ErrorStyles()
    if cohere:
        app.state.error_styles.register(cohere_style, "/v1/embed", "/v2/embed", at_edge=True)
    install_middleware(app, args, app.state.metrics, app.state.lifecycle)

    async def echo(raw: Request):
        parsed = raw.scope.get(PARSED_BODY)
        body = await raw.body()
        out = {"app": name, "path": raw.url.path, "body": body.decode("latin-1")}
        out["parsed"] = parsed.value if parsed is not None else None
        return JSONResponse(out)

    for path in ECHO_PATHS:
        if path != "/tokenize":
            app.add_api_route(path, echo, methods=["POST"])

    @app.post("/tokenize")
    async def tokenize(body: TokenizeBody):  # a validated body, as the real routes have
        return {"app": name, "prompt": body.prompt, "model": body.model}

    async def health():
        return Response(status_code=200)

    app.add_api_route("/health", health, methods=["GET", "HEAD"])
    app.add_api_route("/ping", health, methods=["GET"])

    @app.get("/v1/models")
    @app.get("/models")
    async def models():
        cards = [model_card(args, info, n, 1234).model_dump() for n in args.served_model_names]
        return {"object": "list", "data": cards}

    @app.get("/v1/models/{card}")
    async def one_model(card: str):
        return {"id": card, "app": name}

    @app.get("/metrics")
    async def metrics():
        return {"app": name}

    sagemaker.add_sagemaker_routes(app)
    return app, ServedModel(args, None, info)


def router(*specs, on_ready=None, **flags) -> ModelRouter:
    """A ModelRouter over members given as (name, kind) or (name, kind, aliases)."""
    pairs = [member(*spec, **flags) for spec in specs]
    first = pairs[0][1].args  # the server-wide limits: every member has the same
    apps, models = [a for a, _ in pairs], [m for _, m in pairs]
    return ModelRouter(apps, models, first.max_payload_bytes, first.body_timeout, on_ready=on_ready)


@dataclass
class Answer:
    status: Optional[int]  # None: nothing was sent
    headers: dict[str, str]
    body: bytes
    unread: int  # body chunks the app never asked for

    def json(self):
        return json.loads(self.body)


def call(
    app,
    method: str = "POST",
    path: str = "/v1/embeddings",
    body=None,
    *,
    query: str = "",
    headers: Optional[dict] = None,
    chunks: Optional[list[bytes]] = None,
    then: str = "end",
) -> Answer:
    """One request through `app`. `body`: a JSON value (or bytes); `chunks`: the body in pieces,
    the last one ending it (`then="end"`), or the client leaves after them (`"leave"`) or goes
    quiet (`"stall"`)."""
    if chunks is None:
        raw = body if isinstance(body, bytes) else (b"" if body is None else json.dumps(body).encode())
        chunks = [raw]
    hdrs = {"content-type": "application/json", **(headers or {})}
    pending = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1 or then != "end"}
        for i, c in enumerate(chunks)
    ]
    sent: list[dict] = []

    async def receive() -> dict:
        if pending:
            return pending.pop(0)
        if then == "stall":
            await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query.encode(),
        "headers": [(k.lower().encode(), str(v).encode()) for k, v in hdrs.items() if v is not None],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 30000),
    }
    asyncio.run(app(scope, receive, send))
    if not sent:
        return Answer(None, {}, b"", len(pending))
    start = sent[0]
    out = b"".join(m.get("body", b"") for m in sent[1:])
    return Answer(start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, out, len(pending))


def app_of(router: ModelRouter, name: str) -> FastAPI:
    return router.by_name[name]


def counted(router: ModelRouter, name: str, route: str, status: int) -> float:
    return app_of(router, name).state.metrics.requests.get(route=route, status=str(status))


def openai_error(answer: Answer) -> dict:
    err = answer.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err
