"""SageMaker's inference-container contract: POST /invocations (GET /ping is /health's handler).

SageMaker forwards every InvokeEndpoint call as POST /invocations with the client's body. This
route parses the body once, picks the route its keys belong to (`ROUTES`, first match), and hands
the request and the parsed value to that route (json_body.hand_over): the answer, errors and their
shape included, is the direct route's, and the body is not parsed twice. The middlewares (auth,
size, content type, deadline, queue) have already run for /invocations itself. A client can name
the route instead, in the header SageMaker passes through from InvokeEndpoint's CustomAttributes:
`X-Amzn-SageMaker-Custom-Attributes: route=/v2/embed`. docs/sagemaker.md has the contract.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Optional

from starlette.requests import Request
from starlette.routing import Match, Route

from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.http.json_body import LARGE_BODY_BYTES, PARSED_BODY, ParsedBody, hand_over, parse_body

ATTRIBUTES_HEADER = b"x-amzn-sagemaker-custom-attributes"
# The inference routes /invocations may hand a request to (those the app has).
TARGETS = frozenset(
    {"/v1/embeddings", "/v1/rerank", "/v1/classify", "/embed_sparse", "/embed_all", "/pooling", "/embeddings"}
    | {"/embed", "/rerank", "/predict", "/", "/v1/embed", "/v2/embed", "/score", "/v1/score"}
)


def _has(*keys: str) -> Callable[[dict], bool]:
    return lambda body: all(k in body for k in keys)


def _any(*keys: str) -> Callable[[dict], bool]:
    return lambda body: any(k in body for k in keys)


def _cohere_v2_inputs(body: dict) -> bool:
    """Cohere v2's `inputs` is a list of {"content": [...]} objects (TEI's: strings or token ids)."""
    inputs = body.get("inputs")
    return isinstance(inputs, list) and bool(inputs) and isinstance(inputs[0], dict)


# (what the body holds, the route that takes it, how the 400 names it), tried in order.
ROUTES: tuple[tuple[Callable[[dict], bool], str, str], ...] = (
    (_any("input", "messages"), "/v1/embeddings", "`input` or `messages` (/v1/embeddings)"),
    (_has("query", "documents"), "/v1/rerank", "`query` + `documents` (/v1/rerank)"),
    (_has("query", "texts"), "/rerank", "`query` + `texts` (TEI /rerank)"),
    (_has("queries", "documents"), "/score", "`queries` + `documents` or `items` (/score)"),
    (_has("queries", "items"), "/score", ""),
    (_has("data_1", "data_2"), "/score", "`data_1` + `data_2` or `text_1` + `text_2` (/score)"),
    (_has("text_1", "text_2"), "/score", ""),
    (_cohere_v2_inputs, "/v2/embed", "`inputs` of {content} objects (Cohere /v2/embed)"),
    (_has("inputs"), "/", "`inputs` (TEI: /embed, or /predict on a classifier)"),
    (_any("texts", "images"), "/v1/embed", "`texts` or `images` (Cohere /v1/embed)"),
)


def requested_route(headers: list[tuple[bytes, bytes]]) -> Optional[str]:
    """`route=/path` from the custom-attributes header (`key=value` pairs split by `,` or `;`)."""
    for name, value in headers:
        if name.lower() != ATTRIBUTES_HEADER:
            continue
        for pair in value.decode("latin-1").replace(";", ",").split(","):
            key, _, val = pair.strip().partition("=")
            if key.strip().lower() == "route":
                return val.strip()
    return None


def pick_route(body: Any, requested: Optional[str], available: set[str]) -> str:
    """The path whose route takes `body` (or the one the client named); 400 when there is none."""
    if requested is not None:
        if requested not in available:
            raise EmbeddingError(
                ErrorKind.INVALID_REQUEST,
                f"route={requested} in X-Amzn-SageMaker-Custom-Attributes is not an inference route of this "
                f"server; use one of {', '.join(sorted(available))}.",
                param="route",
            )
        return requested
    if not isinstance(body, dict):
        raise EmbeddingError(ErrorKind.INVALID_REQUEST, "The request body must be a JSON object.", param="body")
    for matches, path, _ in ROUTES:
        if path in available and matches(body):
            return path
    shapes = "; ".join(name for _, path, name in ROUTES if name and path in available)
    raise EmbeddingError(
        ErrorKind.INVALID_REQUEST,
        f"POST /invocations routes by the body's keys and found none it knows: {shapes}; "
        "or name the route in X-Amzn-SageMaker-Custom-Attributes (route=/path).",
        param="body",
    )


class Invocations:
    """The ASGI endpoint of POST /invocations (a plain Route: the body is read here, by hand)."""

    def __init__(self, routes: Callable[[], list], targets: frozenset[str]) -> None:
        self.routes = routes  # the app's routes, read on first use (others are added after this one)
        self.targets = targets  # paths /invocations may hand a request to
        self._by_path: Optional[dict[str, Any]] = None

    def by_path(self) -> dict[str, Any]:
        if self._by_path is None:
            self._by_path = {
                r.path: r
                for r in self.routes()
                if r.path in self.targets and "POST" in (getattr(r, "methods", None) or ())
            }
        return self._by_path

    async def __call__(self, scope: dict, receive, send) -> None:
        body = await Request(scope, receive).body()
        parsed: Optional[ParsedBody] = scope.pop(PARSED_BODY, None)
        if parsed is not None:  # a server of several models read it to pick this model (model_router.py)
            value = parsed.value
        elif len(body) > LARGE_BODY_BYTES:  # as JsonBodyRoute does: a large body is parsed off the loop
            value = await asyncio.get_running_loop().run_in_executor(None, parse_body, body, None)
        else:
            value = parse_body(body, None)
        routes = self.by_path()
        path = pick_route(value, requested_route(scope.get("headers", [])), set(routes))
        route = routes[path]
        inner = {**scope, "path": path, "raw_path": path.encode()}  # state (request id, log fields) is shared
        match, child = route.matches(inner)
        if match != Match.FULL:  # cannot happen for a POST route found by its path
            raise EmbeddingError(ErrorKind.INTERNAL, f"/invocations could not hand the request to {path}")
        inner.update(child)
        hand_over(inner, value, len(body))
        delivered = False

        async def replay() -> dict:
            nonlocal delivered
            if not delivered:  # the body once (a route may still read it), then the real channel
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await route.handle(inner, replay, send)


def add_sagemaker_routes(app) -> None:
    """POST /invocations on `app`, handing requests to its POST routes among TARGETS."""
    app.router.routes.append(Route("/invocations", Invocations(lambda: app.routes, TARGETS), methods=["POST"]))
