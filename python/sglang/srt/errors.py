"""The project's exceptions, at the ground floor: every layer may raise them, none decides HTTP.

- `ConfigError`: a start-up problem the user can fix (a flag, the checkpoint, the machine); the
  CLI prints it as one line and exits 2, `sglang.Engine(...)` raises it.
- `EmbeddingError`: one request failed, and only that request. Its `ErrorKind` says what went
  wrong; the HTTP status, the OpenAI error `type` and headers such as Retry-After are decided at
  the edge (frontend/http/http_errors.py). Kinds also cross the scheduler -> detokenizer ->
  tokenizer-manager link as the `error_codes` of the output messages (0: no error).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Optional


class ConfigError(ValueError):
    """A start-up problem the user can fix; printed as one line, without a traceback."""


class ErrorKind(IntEnum):
    """What went wrong with a request (never 0: that is "no error" in the output messages)."""

    INVALID_REQUEST = 1  # the request itself is wrong: its input, a parameter, the model's abilities
    MODEL_NOT_FOUND = 2  # `model` names a model this server does not serve
    UNAUTHENTICATED = 3  # missing or wrong API key
    TOO_LARGE = 4  # the body, or the number of inputs in it, is over the server's limit
    UNSUPPORTED_MEDIA_TYPE = 5  # the body is not JSON
    QUEUE_FULL = 6  # no room in the scheduler's queue now; retrying later may succeed
    INTERNAL = 7  # our fault: a failing forward pass, render, or a bug
    UNAVAILABLE = 8  # the engine died, is not ready, or the server is shutting down
    TIMEOUT = 9  # queued or in flight past the server's time limit


class EmbeddingError(Exception):
    """A request-level failure; never affects other requests.

    `param` names the request field at fault and `code` is OpenAI's machine-readable error code
    (`model_not_found`, `invalid_api_key`), both reported in the error body as they are.
    """

    def __init__(self, kind: ErrorKind, message: str, param: Optional[str] = None, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.kind = ErrorKind(kind)
        self.message = message
        self.param = param
        self.code = code


QUEUE_FULL_MESSAGE = "Embedding request queue is full; retry later."
REQUEST_TIMEOUT_MESSAGE = "The request waited longer than the server's --request-timeout and was dropped."


def queue_full_error() -> EmbeddingError:
    """The refusal of a full queue, wherever it is decided (HTTP middleware, tokenizer manager)."""
    return EmbeddingError(ErrorKind.QUEUE_FULL, QUEUE_FULL_MESSAGE)


def engine_error(code: int, message: str) -> EmbeddingError:
    """An error the engine answered with (an `error_codes` entry of an output message)."""
    try:
        kind = ErrorKind(code)
    except ValueError:  # a code from a newer or broken peer: still the request's failure, ours to own
        kind = ErrorKind.INTERNAL
    return EmbeddingError(kind, message)
