"""Pure-ASGI middlewares around the FastAPI app: request ids and metrics, drain, auth, body limits.

Pure ASGI (not Starlette's BaseHTTPMiddleware) because they sit on every request and must not add
a task and a memory stream each. Outer to inner, as `install_middleware` stacks them:

    RequestContext  request id (x-request-id), requests-by-route-and-status metric, --log-requests line
    HostGuard       --allowed-hosts: 400 for a Host header the server does not answer to (host_guard.py)
    CORSMiddleware  only with --cors-allow-origin (otherwise cross-origin browser reads stay closed)
    DrainGuard      503 once SIGTERM/SIGINT started a graceful shutdown
    ApiKeyAuth      --api-key: `Authorization: Bearer KEY` on every route but /health and /ping, else 401
    BodyLimits      --max-payload-bytes -> 413; POST bodies must be JSON (415), arrive within
                    --body-timeout (408), and are read once here
    QueueFullGuard  429 for inference routes while the queue has no room, before parsing or tokenizing

Their own answers use the OpenAI error shape, like every other error of the server.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Optional

from sglang.srt.errors import EmbeddingError, ErrorKind, queue_full_error
from sglang.srt.frontend.http.error_styles import ErrorStyles, Style, openai_style
from sglang.srt.frontend.http.host_guard import OPEN_PATHS as HOST_OPEN_PATHS
from sglang.srt.frontend.http.host_guard import allowed_hosts, host_allowed, host_name
from sglang.srt.frontend.http.http_errors import BODY_TIMEOUT, CLIENT_CLOSED, HttpError
from sglang.srt.metrics.server_metrics import ServerMetrics
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.logging_utils import REQUEST_LOGGER
from sglang.srt.utils.within import within

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

EMBEDDINGS_ROUTE = "/v1/embeddings"
INFERENCE_ROUTES = frozenset(
    {EMBEDDINGS_ROUTE, "/v1/classify", "/v1/rerank", "/embed_sparse", "/embed_all"}
    | {"/embeddings", "/embed", "/rerank", "/predict", "/pooling", "/v1/embed", "/v2/embed"}  # peers' (migrating.md)
    | {"/invocations"}  # SageMaker (docs/sagemaker.md)
)
UNMATCHED_ROUTE = "unmatched"  # metric label for paths no route serves (keeps label values bounded)
_REQUEST_ID_RE = re.compile(r"^[\x21-\x7e]{1,128}$")  # printable ASCII, no spaces, at most 128
_DIGITS_RE = re.compile(r"^[0-9]{1,20}$")
_DISCARD_LIMIT = 1 << 20  # bytes of an oversized body read and dropped so the client sees the 413
CLOSE = {"Connection": "close"}  # answers after which the connection is not worth keeping
request_log = logging.getLogger(REQUEST_LOGGER)


@dataclass
class ServerLifecycle:
    """Shared between the signal handler and the middlewares of one HTTP process."""

    draining: bool = False
    dead_reason: Optional[str] = None  # an engine process died: every request gets 503 (engine_death.py)
    # The server outlives that engine (another model still serves): its 503s keep the connection open.
    server_lives: bool = False


@dataclass
class RequestInfo:
    """What this server keeps per HTTP request across its middlewares and routes: the id echoed as
    x-request-id (None until RequestContext set it), the arrival time (monotonic) and the fields the
    route adds to the request's log line."""

    request_id: Optional[str] = None
    start_time: float = field(default_factory=time.monotonic)
    log_fields: dict[str, Any] = field(default_factory=dict)


_REQUEST_INFO = "sglang.request"  # its key in the scope's per-request state (Starlette's request.state)


def request_info(scope: Scope) -> RequestInfo:
    """The request's RequestInfo, made on first use (RequestContext, the outer one, makes it)."""
    state = scope.setdefault("state", {})
    info = state.get(_REQUEST_INFO)
    if info is None:
        info = state[_REQUEST_INFO] = RequestInfo()
    return info


def edge_style(scope: Scope) -> Style:
    """The shape of an error a middleware answers on this path: the one a route registered for the
    edge (Cohere's, whose SDKs parse every status), else OpenAI's. Starlette puts the app in the
    scope before the middlewares run; a bare ASGI app (tests) has none."""
    styles = getattr(getattr(scope.get("app"), "state", None), "error_styles", None)
    return styles.for_edge(scope.get("path", "")) if isinstance(styles, ErrorStyles) else openai_style


async def send_error(
    scope: Scope,
    send: Send,
    err: EmbeddingError,
    headers: Optional[dict[str, str]] = None,
    status: Optional[int] = None,
) -> None:
    """Answer with `err` in the path's edge style (edge_style); `headers` adds what only the edge
    knows, and `status` overrides the kind's status where HTTP has a more precise one
    (http_errors.BODY_TIMEOUT)."""
    status, body, extra = edge_style(scope)(HttpError.of(err, headers, status))
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode("latin-1"), str(v).encode("latin-1")) for k, v in extra.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def header(scope: Scope, name: bytes) -> Optional[str]:
    """A request header's value (`name` lower-case, as ASGI gives header names), or None."""
    for k, v in scope.get("headers", ()):
        if k.lower() == name:
            return v.decode("latin-1")
    return None


def request_id_for(scope: Scope) -> str:
    """The id a response echoes as x-request-id: the client's when sane, else a new uuid4 hex."""
    given = header(scope, b"x-request-id")
    return given if given is not None and _REQUEST_ID_RE.match(given) else uuid.uuid4().hex


class RequestContext:
    """Gives every request an id (the client's `x-request-id` when sane, else a uuid4 hex) that is
    echoed on every response, counts responses by route and status, and writes the request line."""

    def __init__(
        self, app: ASGIApp, metrics: ServerMetrics, routes: Callable[[], set[str]], log_requests: bool = False
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes
        self.log_requests = log_requests

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.monotonic()
        rid = request_id_for(scope)
        info = request_info(scope)
        info.request_id, info.start_time = rid, start
        status: list[Any] = [None]
        disconnected = False

        async def receive_watching() -> dict:
            nonlocal disconnected
            message = await receive()
            if message["type"] == "http.disconnect":
                disconnected = True
            return message

        async def send_with_id(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != b"x-request-id"]
                headers.append((b"x-request-id", rid.encode()))
                message = {**message, "headers": headers}
            await send(message)

        self.metrics.in_flight.inc()
        outcome = "500"
        try:
            await self.app(scope, receive_watching, send_with_id)
        except asyncio.CancelledError:
            # --graceful-timeout ran out: answer rather than leave uvicorn to send a bare 500.
            outcome = "cancelled"
            if status[0] is None:
                try:
                    await send_error(
                        scope,
                        send_with_id,
                        EmbeddingError(
                            ErrorKind.UNAVAILABLE,
                            "The server shut down before this request finished (--graceful-timeout).",
                        ),
                        CLOSE,
                    )
                except Exception:
                    pass
            # The request is over and answered: ending its task here instead of re-raising keeps
            # uvicorn from logging a traceback per cancelled request (a shutdown is not an error).
        finally:
            self.metrics.in_flight.dec()
            # No answer because the client left (mid-body, say): not a server error.
            code = str(status[0]) if status[0] is not None else (str(CLIENT_CLOSED) if disconnected else outcome)
            path = scope.get("path", "")
            route = path if path in self.routes() else UNMATCHED_ROUTE
            self.metrics.requests.inc(route=route, status=code)
            elapsed = time.monotonic() - start
            if route == EMBEDDINGS_ROUTE and code == "200":
                self.metrics.request_duration.observe(elapsed)
            if self.log_requests:
                self._log(scope, rid, route, path, code, elapsed, info.log_fields)

    @staticmethod
    def _log(scope: Scope, rid: str, route: str, path: str, code: str, elapsed: float, extra: dict) -> None:
        client = scope.get("client")
        fields: dict[str, Any] = {
            "request_id": rid,
            "method": scope.get("method"),
            "route": route,
            "status": int(code) if code.isdigit() else code,
            "client": client[0] if client else None,
            "total_ms": round(elapsed * 1000, 2),
        }
        if route == UNMATCHED_ROUTE:
            fields["path"] = path[:256]
        fields.update(extra)
        request_log.info("%s %s %s", scope.get("method"), route, code, extra={"fields": fields})


class DrainGuard:
    """Once a graceful shutdown began, or an engine process died, new requests get 503 (and their
    connection closes) instead of waiting on a closing server."""

    def __init__(self, app: ASGIApp, lifecycle: ServerLifecycle) -> None:
        self.app = app
        self.lifecycle = lifecycle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if self.lifecycle.dead_reason is not None:
                message = f"The embedding engine is unavailable: {self.lifecycle.dead_reason}"
                close = None if self.lifecycle.server_lives else CLOSE
                return await send_error(scope, send, EmbeddingError(ErrorKind.UNAVAILABLE, message), close)
            if self.lifecycle.draining:
                message = "The server is shutting down."
                return await send_error(scope, send, EmbeddingError(ErrorKind.UNAVAILABLE, message), CLOSE)
        await self.app(scope, receive, send)


class HostGuard:
    """400 for a request whose Host header is not in the allowed list (host_guard.py). A missing
    Host passes: HTTP/1.0 clients send none, and browsers always send one."""

    def __init__(self, app: ASGIApp, allowed: list[str]) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path") not in HOST_OPEN_PATHS:
            host = header(scope, b"host")
            if host is not None and not host_allowed(host_name(host), self.allowed):
                shown = host[:100].encode("ascii", "backslashreplace").decode("ascii")
                return await send_error(
                    scope,
                    send,
                    EmbeddingError(
                        ErrorKind.INVALID_REQUEST,
                        f"Invalid Host header {shown!r}: this server answers to "
                        f"{', '.join(self.allowed)} (--allowed-hosts).",
                        code="invalid_host",
                    ),
                    CLOSE,
                )
        await self.app(scope, receive, send)


def bearer_key_matches(scope: Scope, key: bytes) -> bool:
    """Whether the request sends `Authorization: Bearer <key>` (compared in constant time)."""
    value = header(scope, b"authorization")
    if value is None:
        return False
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(token.strip().encode("latin-1"), key)


class ApiKeyAuth:
    """`Authorization: Bearer KEY` on every route but /health and /ping, compared in constant time."""

    OPEN_PATHS = frozenset({"/health", "/ping"})  # /ping: SageMaker's health check sends no key

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self.key = api_key.encode()

    def authorized(self, scope: Scope) -> bool:
        return bearer_key_matches(scope, self.key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in self.OPEN_PATHS and not self.authorized(scope):
            return await send_error(
                scope,
                send,
                EmbeddingError(
                    ErrorKind.UNAUTHENTICATED,
                    "Invalid or missing API key: send `Authorization: Bearer <key>`.",
                    code="invalid_api_key",
                ),
                {"WWW-Authenticate": "Bearer"},
            )
        await self.app(scope, receive, send)


def json_content_type(value: str) -> bool:
    media, *params = [p.strip().lower() for p in value.split(";")]
    if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
        return False
    for p in params:
        name, _, v = p.partition("=")
        if name.strip() == "charset" and v.strip().strip('"') not in ("utf-8", "utf8"):
            return False
    return True


class BodyLimits:
    """Caps request bodies at --max-payload-bytes (413), requires JSON on POST (415) and the whole
    body within --body-timeout seconds (408).

    The body is read here, counting bytes as they arrive (a missing or lying Content-Length does
    not help), and handed to the app in one piece. A POST without Content-Type is refused: a
    browser may send one cross-origin without a CORS preflight, an API client never does.
    """

    BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})

    def __init__(self, app: ASGIApp, max_bytes: int, timeout: Optional[float] = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout

    def too_large(self) -> EmbeddingError:
        return EmbeddingError(
            ErrorKind.TOO_LARGE,
            f"Payload Too Large: the request body is larger than the server's limit of {self.max_bytes} bytes "
            "(--max-payload-bytes).",
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = header(scope, b"content-length")
        if declared is not None:
            if not _DIGITS_RE.match(declared.strip()):
                return await send_error(
                    scope, send, EmbeddingError(ErrorKind.INVALID_REQUEST, "Invalid Content-Length header.")
                )
            size = int(declared)
            if size > self.max_bytes:
                # A client that sent `Expect: 100-continue` waits for our go-ahead, which uvicorn
                # sends at the first receive(): it gets the 413 instead, and sends no body at all.
                waiting = (header(scope, b"expect") or "").strip().lower() == "100-continue"
                if not waiting:
                    await _discard(receive, size if size <= self.max_bytes + _DISCARD_LIMIT else 0)
                return await send_error(scope, send, self.too_large(), CLOSE)
        if scope["method"] not in self.BODY_METHODS:
            return await self.app(scope, receive, send)
        ctype = header(scope, b"content-type")
        if ctype is None or not json_content_type(ctype):
            shown = "no Content-Type" if ctype is None else f"Content-Type {ctype[:100]!r}"
            return await send_error(
                scope,
                send,
                EmbeddingError(
                    ErrorKind.UNSUPPORTED_MEDIA_TYPE,
                    f"Unsupported media type ({shown}): send `Content-Type: application/json` (UTF-8).",
                ),
                CLOSE,
            )
        body = bytearray()
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            try:
                message = await receive_by(receive, deadline)
            except asyncio.TimeoutError:
                return await send_error(
                    scope,
                    send,
                    EmbeddingError(
                        ErrorKind.TIMEOUT,
                        f"The request body did not arrive within {self.timeout:g} s (--body-timeout).",
                        code="request_timeout",
                    ),
                    CLOSE,
                    status=BODY_TIMEOUT,
                )
            if message["type"] == "http.disconnect":
                return  # the client left before sending its body: nobody to answer
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_bytes:
                if more:
                    await _discard(receive, _DISCARD_LIMIT)
                return await send_error(scope, send, self.too_large(), CLOSE)
            if not more:
                break
        await self.app(scope, replay_body(bytes(body), receive), send)


class QueueFullGuard:
    """429 for an inference request while this process's inputs in flight leave no room for even
    one more (TokenizerManager.has_room). Under overload most requests end here, before JSON
    parsing, validation and tokenization, so refusing them costs the accepted ones little."""

    def __init__(self, app: ASGIApp, has_room: Callable[[], bool]) -> None:
        self.app = app
        self.has_room = has_room

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in INFERENCE_ROUTES and not self.has_room():
            return await send_error(scope, send, queue_full_error())
        await self.app(scope, receive, send)


async def receive_by(receive: Receive, deadline: Optional[float]) -> dict:
    """receive(), or asyncio.TimeoutError once `deadline` (time.monotonic()) passed."""
    if deadline is None:
        return await receive()
    return await within(receive(), max(0.0, deadline - time.monotonic()))


def replay_body(body: bytes, receive: Receive) -> Receive:
    """A receive() that yields the already-read body once, then defers (disconnect detection)."""
    sent = False

    async def replay() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _discard(receive: Receive, budget: int) -> None:
    """Read and drop up to `budget` bytes of a rejected body, so a client still sending it can read
    our answer instead of a connection reset; beyond that the connection is simply closed."""
    while budget > 0:
        message = await receive()
        if message["type"] != "http.request":
            return
        budget -= len(message.get("body", b""))
        if not message.get("more_body", False):
            return


def install_middleware(app, server_args: ServerArgs, metrics: ServerMetrics, lifecycle: ServerLifecycle) -> None:
    """Stack the middlewares on a FastAPI app (added innermost first)."""

    def has_room() -> bool:  # the tokenizer manager exists once the app's lifespan started
        tm = getattr(app.state, "tokenizer_manager", None)
        return tm is None or tm.has_room()

    app.add_middleware(QueueFullGuard, has_room=has_room)
    app.add_middleware(BodyLimits, max_bytes=server_args.max_payload_bytes, timeout=server_args.body_timeout)
    if server_args.api_key:
        app.add_middleware(ApiKeyAuth, api_key=server_args.api_key)
    app.add_middleware(DrainGuard, lifecycle=lifecycle)
    if server_args.cors_allow_origin:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=server_args.cors_allow_origin,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "X-Request-Id"],
            expose_headers=["x-request-id", "x-queue-time", "x-inference-time", "x-total-time"],
            max_age=600,
        )
    routes: set[str] = set()

    def known_routes() -> set[str]:
        if not routes:
            routes.update(getattr(r, "path", "") for r in app.routes)
        return routes

    allowed = allowed_hosts(server_args)
    if allowed is not None:
        app.add_middleware(HostGuard, allowed=allowed)
    if server_args.log_requests:  # asked for explicitly: logged even under --log-level warning
        request_log.setLevel(logging.INFO)
    app.add_middleware(RequestContext, metrics=metrics, routes=known_routes, log_requests=server_args.log_requests)
