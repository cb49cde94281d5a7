"""The hot JSON route reached and called straight, where FastAPI's per-request machinery has nothing to do.

For every request FastAPI's handler parses the Content-Type with `email.message`, looks for its
native telemetry, runs `solve_dependencies` (a sub-Response for headers and cookies, background
tasks, the body model validated again) and then calls the endpoint. For a route whose only
parameters are one JSON body model and, optionally, the Request, with no dependencies, no status
code and no response model, all of that ends in `endpoint(body=<model>, request=<Request>)` and
the Response it returns: about 40 CPU-us of a single-text /v1/embeddings request (issue #32).

`direct_endpoint(route)` is that call for such a route, None for any other. JsonBodyRoute, which
has already parsed and validated the body, uses it when the request is plain
`Content-Type: application/json` and FastAPI's telemetry is not recording it; everything else
(an empty body, another JSON media type, telemetry) keeps FastAPI's own handler, so statuses,
headers, bodies and error messages are the same either way.

`put_first(app, path)` lets the router try that route before the others (`FirstRoute`).
"""

from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable, Optional

import fastapi.routing
from fastapi import params
from fastapi.datastructures import DefaultPlaceholder
from fastapi.encoders import jsonable_encoder
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match

try:  # FastAPI >= 0.165: native OpenTelemetry; a request it records keeps FastAPI's handler
    from fastapi.telemetry import get_telemetry_data
except ImportError:  # older FastAPI has no telemetry to keep

    def get_telemetry_data() -> None:
        return None


DirectCall = Callable[[Request, Any], Awaitable[Response]]

# Parameters FastAPI fills from the connection besides the Request: each needs its machinery.
_SPECIAL_PARAMS = (
    "websocket_param_name",
    "http_connection_param_name",
    "response_param_name",
    "background_tasks_param_name",
    "security_scopes_param_name",
)


def direct_endpoint(route: APIRoute) -> Optional[DirectCall]:
    """`call(request, body_model) -> Response` for a route FastAPI would only hand its body model
    (and Request) to; None for any route with more to it."""
    d = route.dependant
    body = route.body_field
    if (
        body is None
        or _included()
        or getattr(route, "_embed_body_fields", True)
        or isinstance(body.field_info, params.Form)
        or len(d.body_params) != 1
        or d.dependencies
        or d.path_params
        or d.query_params
        or d.header_params
        or d.cookie_params
        or any(getattr(d, name, None) is not None for name in _SPECIAL_PARAMS)
        or not inspect.iscoroutinefunction(d.call)
        or route.status_code is not None
        or route.response_field is not None
        or getattr(route, "stream_item_field", None) is not None
        or getattr(route, "is_json_stream", False)
    ):
        return None
    call, body_name, request_name = d.call, d.body_params[0].name, d.request_param_name
    cls = route.response_class
    response_class = cls.value if isinstance(cls, DefaultPlaceholder) else cls

    async def run(request: Request, value: Any) -> Response:
        kwargs = {body_name: value}
        if request_name is not None:
            kwargs[request_name] = request
        answer = await call(**kwargs)
        if isinstance(answer, Response):
            return answer
        return response_class(jsonable_encoder(answer))  # what FastAPI makes of a value, no model given

    return run


def _included() -> bool:
    """True while FastAPI (>= 0.165) builds the handler of a route included through a router: the
    inclusion may add dependencies that `route.dependant` does not show (older FastAPI copies the
    route with them, which the checks above see)."""
    current = getattr(fastapi.routing, "_effective_route_context_var", None)
    return current is not None and current.get() is not None


def plain_json(request: Request) -> bool:
    """True when the Content-Type is application/json (parameters aside): what FastAPI's own
    check (`email.message`) reads as JSON too. Other JSON media types take FastAPI's path."""
    value = request.headers.get("content-type")
    return value is not None and value.split(";", 1)[0].strip().lower() == "application/json"


def direct_ok() -> bool:
    """FastAPI's native telemetry is not recording this request (its spans need its handler)."""
    return get_telemetry_data() is None


class FirstRoute:
    """A route tried before all others, out of the OpenAPI schema (the route itself stays where it
    was, so /openapi.json and /docs list the same paths in the same order).

    FastAPI puts its docs routes first and the router tries routes in order: /v1/embeddings came
    after 11 others (/openapi.json, /docs, /health, /metrics, ...), about 14 CPU-us of misses per
    request. This stand-in answers only a full match (path and method) of its route, which
    `put_first` checked no earlier route can match; anything else, a 405 included, falls through to
    the routes in their order. Every other attribute is the route's."""

    def __init__(self, route: Any) -> None:
        self.route = route

    def matches(self, scope: dict) -> tuple[Match, dict]:
        if scope["type"] == "http" and scope.get("path") == self.route.path and not scope.get("root_path"):
            match, child = self.route.matches(scope)
            if match is Match.FULL:
                return match, child
        return Match.NONE, {}

    async def handle(self, scope: dict, receive: Any, send: Any) -> None:
        await self.route.handle(scope, receive, send)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.route, name)


def put_first(app: Any, path: str) -> bool:
    """Have `app`'s router try its route at `path` first (FirstRoute). False, and nothing changed,
    when there is no single such route or an earlier route matches the same path and method."""
    routes = app.router.routes
    found = [i for i, r in enumerate(routes) if getattr(r, "path", None) == path and not isinstance(r, FirstRoute)]
    if len(found) != 1 or any(isinstance(r, FirstRoute) and r.route is routes[found[0]] for r in routes):
        return False
    route = routes[found[0]]
    for method in getattr(route, "methods", None) or ():
        scope = {"type": "http", "path": path, "root_path": "", "method": method, "headers": []}
        if any(r.matches(scope)[0] is Match.FULL for r in routes[: found[0]]):
            return False
    routes.insert(0, FirstRoute(route))
    return True
