"""Error bodies in each peer's own shape, for the routes whose clients parse them.

OpenAI's nested `{"error": {"message", "type", "param", "code"}}` (http_errors.HttpError) is the
default. TEI's routes answer `{"error": str, "error_type": str}` with TEI's statuses (422 for a
request it cannot take, 400 for an empty one, 424 when the model cannot do what the route does,
429 overloaded, 503 unhealthy); Cohere's `{"message": str}`. The HTTP status of the other kinds
stays http_errors.HTTP_STATUS's. Route modules register which paths use which style
(`ErrorStyles.register`); the app's exception handlers look the path up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Union

import orjson

from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.http.http_errors import HttpError, encodable


class TeiError(EmbeddingError):
    """An error with TEI's own status and `error_type` (Empty -> 400, Backend -> 424)."""

    def __init__(self, message: str, status: int, error_type: str, param: Optional[str] = None) -> None:
        super().__init__(ErrorKind.INVALID_REQUEST, message, param=param)
        self.status = status
        self.error_type = error_type


def tei_empty(what: str) -> TeiError:
    return TeiError(f"`{what}` cannot be empty", 400, "Empty", param=what)


# TEI's status and error_type for each kind (INVALID_REQUEST is its 422 "Validation").
_TEI_KINDS: dict[ErrorKind, tuple[int, str]] = {
    ErrorKind.INVALID_REQUEST: (422, "Validation"),
    ErrorKind.MODEL_NOT_FOUND: (422, "Validation"),
    ErrorKind.TOO_LARGE: (413, "Validation"),
    ErrorKind.QUEUE_FULL: (429, "Overloaded"),
    ErrorKind.UNAVAILABLE: (503, "Unhealthy"),
}

Rendered = tuple[int, bytes, dict[str, str]]  # status, JSON body, headers


def openai_style(err: Union[EmbeddingError, HttpError]) -> Rendered:
    http = err if isinstance(err, HttpError) else HttpError.of(err)
    return http.status, http.body(), dict(http.headers)


def tei_style(err: Union[EmbeddingError, HttpError]) -> Rendered:
    http = err if isinstance(err, HttpError) else HttpError.of(err)
    if isinstance(err, TeiError):
        status, kind = err.status, err.error_type
    elif isinstance(err, EmbeddingError) and err.kind in _TEI_KINDS:
        status, kind = _TEI_KINDS[err.kind]
    else:
        status, kind = http.status, ("Validation" if http.status < 500 else "Backend")
    return status, orjson.dumps({"error": encodable(http.message), "error_type": kind}), dict(http.headers)


def cohere_style(err: Union[EmbeddingError, HttpError]) -> Rendered:
    http = err if isinstance(err, HttpError) else HttpError.of(err)
    return http.status, orjson.dumps({"message": encodable(http.message)}), dict(http.headers)


Style = Callable[[Union[EmbeddingError, HttpError]], Rendered]


@dataclass
class ErrorStyles:
    """Which error shape each path answers with (OpenAI's unless registered)."""

    by_path: dict[str, Style] = field(default_factory=dict)

    def register(self, style: Style, *paths: str) -> None:
        for p in paths:
            self.by_path[p] = style

    def for_path(self, path: str) -> Style:
        return self.by_path.get(path, openai_style)
