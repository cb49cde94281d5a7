"""Errors a request can end in, with the HTTP status and OpenAI error fields they map to."""

from __future__ import annotations

from typing import Optional

# OpenAI's error types: request problems, auth, rate limits, and everything on our side.
_TYPES = {401: "authentication_error", 429: "rate_limit_error"}


class EmbeddingError(Exception):
    """A request-level failure; never affects other requests."""

    def __init__(self, status: int, message: str, param: Optional[str] = None, code: Optional[str] = None,
                 headers: Optional[dict] = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    @property
    def type(self) -> str:
        return _TYPES.get(self.status, "invalid_request_error" if self.status < 500 else "server_error")

    def to_dict(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


QUEUE_FULL_MESSAGE = "Embedding request queue is full; retry later."
REQUEST_TIMEOUT_MESSAGE = "The request waited longer than the server's --request-timeout and was dropped."


def engine_error(status: int, message: str) -> EmbeddingError:
    """An error the engine answered with a status; a 429 tells the client when to retry."""
    return EmbeddingError(status, message, headers={"Retry-After": "1"} if status == 429 else None)


def queue_full_error() -> EmbeddingError:
    """The 429 of a full queue, wherever it is decided (HTTP middleware, tokenizer manager)."""
    return engine_error(429, QUEUE_FULL_MESSAGE)
