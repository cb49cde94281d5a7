"""Errors at the edge: each ErrorKind's HTTP status and headers, and OpenAI's error body.

The app's one table of error statuses: the layers below raise errors.EmbeddingError with a kind,
TEI's routes name one of TEI's error types, a client that left gets CLIENT_CLOSED; the statuses
of all three are decided here (error_styles.py only shapes the bodies). Routes answer through
`error_response`, the pure-ASGI middlewares through `HttpError`. Refusals made before the app sees
a request (http_protocol.py: 431, 408, 503, 400, 501) belong to the HTTP protocol, not to a kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import orjson

from sglang.srt.errors import EmbeddingError, ErrorKind

HTTP_STATUS: dict[ErrorKind, int] = {
    ErrorKind.INVALID_REQUEST: 400,
    ErrorKind.UNAUTHENTICATED: 401,
    ErrorKind.MODEL_NOT_FOUND: 404,
    ErrorKind.TOO_LARGE: 413,
    ErrorKind.UNSUPPORTED_MEDIA_TYPE: 415,
    ErrorKind.QUEUE_FULL: 429,
    ErrorKind.INTERNAL: 500,
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.TIMEOUT: 504,
}
# A full queue tells the client when to try again.
KIND_HEADERS: dict[ErrorKind, dict[str, str]] = {ErrorKind.QUEUE_FULL: {"Retry-After": "1"}}
# nginx's "client closed request": nobody reads the answer; logs and metrics say why there was none.
CLIENT_CLOSED = 499
# A request body that did not arrive within --body-timeout: the client's delay (a TIMEOUT kind
# otherwise means the engine's, 504).
BODY_TIMEOUT = 408

# TEI's routes (error_styles.tei_style): the status of each TEI error type a route raises itself
# (error_styles.TeiError: Empty for an empty input, Backend when the model cannot do what the route
# does) ...
TEI_TYPE_STATUS: dict[str, int] = {"Validation": 422, "Empty": 400, "Backend": 424}
# ... and TEI's status and type for the kinds it names (a request it cannot take is its 422). Other
# kinds keep HTTP_STATUS, typed Validation below 500 and Backend from 500.
TEI_KIND_STATUS: dict[ErrorKind, tuple[int, str]] = {
    ErrorKind.INVALID_REQUEST: (422, "Validation"),
    ErrorKind.MODEL_NOT_FOUND: (422, "Validation"),
    ErrorKind.TOO_LARGE: (413, "Validation"),
    ErrorKind.QUEUE_FULL: (429, "Overloaded"),
    ErrorKind.UNAVAILABLE: (503, "Unhealthy"),
}

# OpenAI's error types: request problems, auth, rate limits, and everything on our side.
_OPENAI_TYPES = {401: "authentication_error", 429: "rate_limit_error"}


def openai_error_type(status: int) -> str:
    return _OPENAI_TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")


@dataclass(frozen=True)
class HttpError:
    """An error as it goes on the wire: status, headers and the OpenAI-shaped JSON body."""

    status: int
    message: str
    param: Optional[str] = None
    code: Optional[str] = None
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls, err: EmbeddingError, headers: Optional[dict[str, str]] = None, status: Optional[int] = None
    ) -> "HttpError":
        """`err` mapped to HTTP; `headers` adds what only the edge knows (Connection: close, ...)."""
        return cls(
            status or HTTP_STATUS[err.kind],
            err.message,
            err.param,
            err.code,
            {**KIND_HEADERS.get(err.kind, {}), **(headers or {})},
        )

    def to_dict(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": openai_error_type(self.status),
                "param": self.param,
                "code": self.code,
            }
        }

    def body(self) -> bytes:
        try:
            return orjson.dumps(self.to_dict())
        except TypeError:  # a lone surrogate echoed from the request: escape it rather than fail
            err = {k: encodable(v) if isinstance(v, str) else v for k, v in self.to_dict()["error"].items()}
            return orjson.dumps({"error": err})


def encodable(text: str) -> str:
    """`text` with every lone surrogate written as its escape (`\\ud800`), so UTF-8 can carry it."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
