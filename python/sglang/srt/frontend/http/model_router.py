"""Several models behind one port: an ASGI app in front of one complete app per model.

Each model keeps the app a one-model server runs (its TokenizerManager, middlewares, routes, error
shapes), so every route behaves as it does alone; this router only picks which app answers:

- the body's `model` (OpenAI, vLLM, Cohere, infinity), else `?model=` in the query, names the model;
  a name no model serves is a 404 that lists the served ones;
- a request naming none goes to the first model that can answer its route (TEI's /embed to an
  embedder, /rerank to a cross-encoder, /predict to a classifier, /embed_sparse to a sparse model;
  /invocations by the route its body picks), else to the first model (the first live one for routes
  any model answers: /metrics, /model_info...);
- GET /v1/models and /models list every live model (GET /v1/models/<name>: one model's card, 404 for
  a name no model serves); /health and /ping report each model and are 503 only when every model is
  down (one dead model answers 503 alone, the others keep serving).

The body is read here once (within --max-payload-bytes and --body-timeout; past either the route's
app answers, as it would alone), parsed once, and handed to the chosen route parsed. A body the app
refuses unread (no API key, a declared size over the limit) is not read here either.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from typing import Any, AsyncContextManager, Callable, Optional

import orjson
from fastapi import FastAPI

from sglang.srt.configs.model_info import Capability
from sglang.srt.configs.served_models import ServedModel
from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.http.http_errors import BODY_TIMEOUT
from sglang.srt.frontend.http.json_body import LARGE_BODY_BYTES, hand_over, loads
from sglang.srt.frontend.http.middleware import (
    CLOSE,
    INFERENCE_ROUTES,
    UNMATCHED_ROUTE,
    Receive,
    Scope,
    Send,
    bearer_key_matches,
    header,
    json_content_type,
    receive_by,
    replay_body,
    request_id_for,
    send_error,
)
from sglang.srt.frontend.openai.serving_base import model_not_found
from sglang.srt.frontend.sagemaker import pick_route, requested_route

# Routes a body names its model on, and (in order of preference) what the model answering a body
# without one must be able to do.
_EMBED = (Capability.EMBED,)
_RANK = (Capability.RERANK, Capability.MULTI_VECTOR, Capability.EMBED)
ROUTE_NEEDS: dict[str, tuple[Capability, ...]] = {
    "/v1/embeddings": _EMBED,
    "/embeddings": _EMBED,
    "/embed": _EMBED,
    "/v1/embed": _EMBED,
    "/v2/embed": _EMBED,
    "/similarity": _EMBED,
    "/pooling": _EMBED,
    "/v1/rerank": _RANK,
    "/rerank": _RANK,
    "/score": _RANK,
    "/v1/score": _RANK,
    "/v1/classify": (Capability.CLASSIFY,),
    "/predict": (Capability.CLASSIFY,),
    "/embed_sparse": (Capability.SPARSE,),
    "/embed_all": (Capability.TOKEN_EMBED,),
}
BODY_ROUTES = INFERENCE_ROUTES | set(ROUTE_NEEDS) | {"/tokenize", "/detokenize"}
LISTS = ("/v1/models", "/models")  # GET: every model's cards
HEALTH = ("/health", "/ping")
MODEL_PREFIX = "/v1/models/"


class ModelRouter:
    def __init__(
        self,
        apps: list[FastAPI],
        models: list[ServedModel],
        max_payload_bytes: int,
        body_timeout: Optional[float],
        on_ready: Optional[Callable[[], None]] = None,
    ) -> None:
        self.apps = apps
        self.models = models
        self.by_name: dict[str, FastAPI] = {n: app for m, app in zip(models, apps) for n in m.args.served_model_names}
        self.max_payload_bytes = max_payload_bytes
        self.body_timeout = body_timeout
        self.on_ready = on_ready
        key = models[0].args.api_key  # server-wide: every model's args carry the command line's
        self.api_key = key.encode() if key else None

    # ----- which app -----
    def for_name(self, name: str) -> Optional[FastAPI]:
        return self.by_name.get(name)

    def for_route(self, path: str) -> FastAPI:
        """The first model that can answer `path`, in the order of the route's preferences; a route
        any model answers (/metrics, /model_info, an unknown path) goes to the first one still alive,
        so one dead model does not turn them into 503s."""
        for need in ROUTE_NEEDS.get(path, ()):
            for model, app in zip(self.models, self.apps):
                if need in model.info.capabilities:
                    return app
        return next((app for app in self.apps if not _dead(app)), self.apps[0])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            return await self._lifespan(receive, send)
        if kind != "http":
            return await self.apps[0](scope, receive, send)
        path, method = scope["path"], scope["method"]
        if path in HEALTH and method in ("GET", "HEAD"):
            return await self._health(scope, send)
        if path in LISTS and method == "GET":
            return await self._lists(scope, send)
        if path.startswith(MODEL_PREFIX):  # one model's card
            name = urllib.parse.unquote(path[len(MODEL_PREFIX) :])
            app = self.for_name(name)
            return await (app(scope, receive, send) if app is not None else self._unknown(scope, send, name))
        name = _query_model(scope)
        if method == "POST" and path in BODY_ROUTES and self._may_read_body(scope):
            try:
                body_name, path_for_body, receive = await self._read_body(scope, receive)
            except asyncio.TimeoutError:
                return await self._answer(scope, send, self._body_timeout(), CLOSE, status=BODY_TIMEOUT)
            name = body_name if body_name is not None else name
            path = path_for_body or path
        if name is None:
            return await self.for_route(path)(scope, receive, send)
        app = self.for_name(name)
        if app is None:
            return await self._unknown(scope, send, name)
        await app(scope, receive, send)

    # ----- the body -----
    def _may_read_body(self, scope: Scope) -> bool:
        """Not a body the app refuses unread (a missing or wrong API key: 401), as a one-model server
        reads none: clients without the key cannot make the server read and parse megabytes."""
        return self.api_key is None or bearer_key_matches(scope, self.api_key)

    async def _read_body(self, scope: Scope, receive: Receive) -> tuple[Optional[str], Optional[str], Receive]:
        """(the body's `model`, the route /invocations hands it to, a receive that replays the body).

        A body that is not JSON, too large or gone names no model: the first model's app reads what
        is left and answers as it would alone. One too slow raises asyncio.TimeoutError."""
        ctype = header(scope, b"content-type")
        if ctype is None or not json_content_type(ctype):
            return None, None, receive
        declared = (header(scope, b"content-length") or "0").strip()
        if not (declared.isascii() and declared.isdigit()) or int(declared) > self.max_payload_bytes:
            # The app refuses it unread (413, or 400 for a bad length): reading it here would send a
            # client waiting on `Expect: 100-continue` the go-ahead for a body that is refused anyway.
            return None, None, receive
        chunks: list[bytes] = []
        size = 0
        deadline = None if self.body_timeout is None else time.monotonic() + self.body_timeout
        while True:
            message = await receive_by(receive, deadline)
            if message["type"] != "http.request":
                return None, None, _replay_chunks(chunks, receive, message)
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            if size > self.max_payload_bytes:
                more = message.get("more_body", False)
                return None, None, _replay_chunks(chunks, receive, more=more)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            if size > LARGE_BODY_BYTES:
                value = await asyncio.get_running_loop().run_in_executor(None, loads, body)
            else:
                value = loads(body)
        except (orjson.JSONDecodeError, RecursionError):
            return None, None, replay_body(body, receive)
        hand_over(scope, value, size)  # the chosen route validates it without parsing it again
        name = value.get("model") if isinstance(value, dict) else None
        target = None
        if scope["path"] == "/invocations":
            try:
                target = pick_route(value, requested_route(scope.get("headers", [])), set(ROUTE_NEEDS))
            except EmbeddingError:
                target = None  # the chosen app's /invocations says why
        # An empty `model` names none, as an empty `?model=` does.
        return (name if isinstance(name, str) and name else None), target, replay_body(body, receive)

    # ----- answers of their own -----
    async def _unknown(self, scope: Scope, send: Send, name: str) -> None:
        """model_not_found naming the served models, shaped as the route shapes its own errors (a
        TEI route: its 422 Validation; Cohere's: {"message"}; else OpenAI's 404), as the route would
        answer a bad field of its body."""
        first = self.apps[0]
        err = model_not_found(name, [m.name for m in self.models])
        status, body, extra = first.state.error_styles.for_path(scope["path"])(err)
        headers = [(k.lower().encode("latin-1"), str(v).encode("latin-1")) for k, v in extra.items()]
        await _send(send, status, body, head=scope["method"] == "HEAD", extra=headers + _id_header(scope))
        route = scope["path"] if scope["path"] in BODY_ROUTES else UNMATCHED_ROUTE
        first.state.metrics.requests.inc(route=route, status=str(status))

    def _body_timeout(self) -> EmbeddingError:
        return EmbeddingError(
            ErrorKind.TIMEOUT,
            f"The request body did not arrive within {self.body_timeout:g} s (--body-timeout).",
            code="request_timeout",
        )

    async def _answer(self, scope: Scope, send: Send, err: EmbeddingError, headers=None, status=None) -> None:
        """An error of the router's own, in the path's style, counted with the first model's requests."""
        first = self.apps[0]
        route = scope["path"] if scope["path"] in BODY_ROUTES else UNMATCHED_ROUTE
        headers = {**(headers or {}), "x-request-id": request_id_for(scope)}
        await send_error({**scope, "app": first}, send, err, headers, status)
        first.state.metrics.requests.inc(route=route, status=str(status or 404))

    async def _health(self, scope: Scope, send: Send) -> None:
        """200 while any model serves, with each model's state; 503 when none does."""
        states = {}
        for model, app in zip(self.models, self.apps):
            status, _, body = await call_app(app, scope, "/health")
            states[model.name] = {"status": "ok"} if status == 200 else {"status": "unavailable", **_reason(body)}
        up = sum(1 for s in states.values() if s["status"] == "ok")
        overall = "ok" if up == len(states) else ("degraded" if up else "unavailable")
        payload = orjson.dumps({"status": overall, "models": states})
        await _send(send, 200 if up else 503, payload, head=scope["method"] == "HEAD", extra=_id_header(scope))

    async def _lists(self, scope: Scope, send: Send) -> None:
        """Every live model's cards in one list (the first failing answer, e.g. a 401, as it is). A
        model whose engine died is left out (/health says why): clients list what they can use."""
        data: list[Any] = []
        head: dict = {}
        apps = [app for app in self.apps if not _dead(app)] or self.apps[:1]
        for app in apps:
            status, headers, body = await call_app(app, scope, scope["path"])
            if status != 200:
                return await _send(send, status, body, extra=headers)
            answer = orjson.loads(body)
            head = head or {k: v for k, v in answer.items() if k != "data"}
            data += answer.get("data", [])
        await _send(send, 200, orjson.dumps({**head, "data": data}), extra=_id_header(scope))

    # ----- lifespan: every model's app starts (its TokenizerManager) and stops with the server -----
    async def _lifespan(self, receive: Receive, send: Send) -> None:
        message = await receive()
        assert message["type"] == "lifespan.startup"
        started: list[AsyncContextManager] = []
        try:
            for app in self.apps:
                context = app.router.lifespan_context(app)
                await context.__aenter__()
                started.append(context)
        except BaseException as e:
            await _stop(started)  # the models started so far stop again
            await send({"type": "lifespan.startup.failed", "message": f"{type(e).__name__}: {e}"})
            return
        if self.on_ready is not None:
            self.on_ready()
        await send({"type": "lifespan.startup.complete"})
        message = await receive()  # lifespan.shutdown
        failed = await _stop(started)
        if failed is not None:  # as a one-model app's failing shutdown is reported
            await send({"type": "lifespan.shutdown.failed", "message": failed})
            return
        await send({"type": "lifespan.shutdown.complete"})


async def _stop(started: list[AsyncContextManager]) -> Optional[str]:
    """Stop each started app, the last started first, each as if alone: one failing to stop does
    not skip the others' clean-up (an exit stack would throw its error into them). The first error."""
    failed = None
    for context in reversed(started):
        try:
            await context.__aexit__(None, None, None)
        except Exception as e:
            failed = failed or f"{type(e).__name__}: {e}"
    return failed


async def call_app(app, scope: Scope, path: str) -> tuple[int, list, bytes]:
    """(status, raw headers, body) of a GET `path` on `app` with the request's headers (auth, host)."""
    inner = {**scope, "method": "GET", "path": path, "raw_path": path.encode(), "query_string": b"", "state": {}}
    sent = False
    status, headers, chunks = 500, [], []

    async def receive() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # a GET route never reads on: wait to be cancelled
        return {"type": "http.disconnect"}

    async def collect(message: dict) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status, headers = message["status"], list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(inner, receive, collect)
    return status, headers, b"".join(chunks)


async def _send(send: Send, status: int, body: bytes, head: bool = False, extra: Optional[list] = None) -> None:
    headers = [(k, v) for k, v in (extra or []) if k.lower() not in (b"content-length", b"content-type")]
    headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else body})


def _id_header(scope: Scope) -> list[tuple[bytes, bytes]]:
    """x-request-id on the router's own answers too, as on every answer of a one-model server."""
    return [(b"x-request-id", request_id_for(scope).encode())]


def _dead(app: FastAPI) -> bool:
    """Whether this model's engine died (server_app.model_died): its app answers only 503s."""
    return app.state.lifecycle.dead_reason is not None


def _reason(body: bytes) -> dict:
    try:
        return {"reason": orjson.loads(body)["error"]["message"]}
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return {}


def _replay_chunks(chunks: list[bytes], receive: Receive, last: Optional[dict] = None, more: bool = True) -> Receive:
    """A receive() that gives back what was read (then `last`, or the rest of the stream)."""
    pending = [{"type": "http.request", "body": c, "more_body": True} for c in chunks]
    if pending and not more:
        pending[-1]["more_body"] = False
    if last is not None:
        pending.append(last)

    async def replay() -> dict:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay


def _query_model(scope: Scope) -> Optional[str]:
    query = scope.get("query_string", b"")
    if not query or b"model=" not in query:
        return None
    values = urllib.parse.parse_qs(query.decode("latin-1")).get("model")
    return values[0] if values else None
