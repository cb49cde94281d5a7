"""Errors at the edge: each ErrorKind's HTTP status and headers, and OpenAI's error body.

The only place that decides HTTP statuses (the layers below raise errors.EmbeddingError with a
kind). Routes answer through `error_response`, the pure-ASGI middlewares through `HttpError`.
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
