"""The HTTP span of every traced request (--enable-trace): the root of the request's trace, or a
child of the client's W3C `traceparent`. Pure ASGI and outermost, so the request-log line and
every span made while handling the request (tokenize, and through the messages queue, forward,
render) belong to it. /health and /metrics are not traced (probes and scrapes would drown the
requests).
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Iterable, Optional

from sglang.srt.frontend.http.middleware import ASGIApp, Receive, Scope, Send, request_info
from sglang.srt.utils.tracing import Tracing

UNTRACED_PATHS = frozenset({"/health", "/ping", "/metrics"})
_PROPAGATION_HEADERS = (b"traceparent", b"tracestate")


def propagation_headers(scope: Scope) -> dict[str, str]:
    """The request's W3C trace-context headers (the propagator reads only these)."""
    out: dict[str, str] = {}
    for k, v in scope.get("headers", ()):
        name = k.lower()
        if name in _PROPAGATION_HEADERS:
            out[name.decode()] = v.decode("latin-1")
    return out


class TraceRequests:
    def __init__(self, app: ASGIApp, tracing: Tracing, app_routes: Callable[[], Iterable[Any]]) -> None:
        self.app = app
        self.tracing = tracing
        self.app_routes = app_routes  # the FastAPI app's routes, read once on the first request
        self._routes: Optional[set[str]] = None

    def routes(self) -> set[str]:
        if self._routes is None:
            self._routes = {getattr(r, "path", "") for r in self.app_routes()}
        return self._routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in UNTRACED_PATHS:
            return await self.app(scope, receive, send)
        method = scope.get("method", "")
        path = scope.get("path", "")
        route = path if path in self.routes() else None
        attributes: dict[str, Any] = {
            "http.request.method": method,
            "url.path": path[:256],
            "url.scheme": scope.get("scheme", "http"),
        }
        if route:
            attributes["http.route"] = route
        client = scope.get("client")
        if client:
            attributes["client.address"] = client[0]
        parent = self.tracing.context_from_headers(propagation_headers(scope))
        span = self.tracing.start_span(f"{method} {route}" if route else method, parent, attributes, server=True)
        status: list[Any] = [None]

        async def send_traced(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        with self.tracing.activate(span):
            try:
                await self.app(scope, receive, send_traced)
            except asyncio.CancelledError:
                self.tracing.set_error(span, "cancelled")
                raise
            except Exception as e:
                self.tracing.set_error(span, f"{type(e).__name__}: {e}")
                raise
            finally:
                request_id = request_info(scope).request_id
                if request_id:
                    span.set_attribute("sglang.request_id", request_id)
                if status[0] is not None:
                    span.set_attribute("http.response.status_code", status[0])
                    if status[0] >= 500:
                        self.tracing.set_error(span, f"HTTP {status[0]}")
                span.end()
