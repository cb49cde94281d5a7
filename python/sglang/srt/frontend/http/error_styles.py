"""Error bodies in each peer's own shape, for the routes whose clients parse them.

OpenAI's nested `{"error": {"message", "type", "param", "code"}}` (http_errors.HttpError) is the
default. TEI's routes answer `{"error": str, "error_type": str}` with TEI's statuses
(http_errors.TEI_TYPE_STATUS / TEI_KIND_STATUS); Cohere's `{"message": str}`. Every status comes
from http_errors.py; this module only shapes bodies. Route modules register which paths use which
style (`ErrorStyles.register`); the app's exception handlers look the path up, and so do the
middlewares (middleware.send_error) for paths registered `at_edge`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Union

import orjson

from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.http.http_errors import TEI_KIND_STATUS, TEI_TYPE_STATUS, HttpError, encodable


class TeiError(EmbeddingError):
    """An error a TEI route names with one of TEI's own types (http_errors.TEI_TYPE_STATUS)."""

    def __init__(self, message: str, error_type: str, param: Optional[str] = None) -> None:
        if error_type not in TEI_TYPE_STATUS:
            raise ValueError(f"unknown TEI error type {error_type!r}")
        super().__init__(ErrorKind.INVALID_REQUEST, message, param=param)
        self.error_type = error_type

    @property
    def status(self) -> int:
        return TEI_TYPE_STATUS[self.error_type]


def tei_empty(what: str) -> TeiError:
    return TeiError(f"`{what}` cannot be empty", "Empty", param=what)


Rendered = tuple[int, bytes, dict[str, str]]  # status, JSON body, headers


def openai_style(err: Union[EmbeddingError, HttpError]) -> Rendered:
    http = err if isinstance(err, HttpError) else HttpError.of(err)
    return http.status, http.body(), dict(http.headers)


def tei_style(err: Union[EmbeddingError, HttpError]) -> Rendered:
    http = err if isinstance(err, HttpError) else HttpError.of(err)
    if isinstance(err, TeiError):
        status, kind = err.status, err.error_type
    elif isinstance(err, EmbeddingError) and err.kind in TEI_KIND_STATUS:
        status, kind = TEI_KIND_STATUS[err.kind]
    else:
        status, kind = http.status, ("Validation" if http.status < 500 else "Backend")
    return status, orjson.dumps({"error": encodable(http.message), "error_type": kind}), dict(http.headers)


def cohere_style(err: Union[EmbeddingError, HttpError]) -> Rendered:
    http = err if isinstance(err, HttpError) else HttpError.of(err)
    return http.status, orjson.dumps({"message": encodable(http.message)}), dict(http.headers)


Style = Callable[[Union[EmbeddingError, HttpError]], Rendered]


@dataclass
class ErrorStyles:
    """Which error shape each path answers with (OpenAI's unless registered): its routes' errors
    (`for_path`), and those the middlewares answer before any route runs (`for_edge`: only where
    registered `at_edge`, for clients that parse the shape on every status, as Cohere's SDKs do)."""

    by_path: dict[str, Style] = field(default_factory=dict)
    at_edge: dict[str, Style] = field(default_factory=dict)

    def register(self, style: Style, *paths: str, at_edge: bool = False) -> None:
        for p in paths:
            self.by_path[p] = style
            if at_edge:
                self.at_edge[p] = style

    def for_path(self, path: str) -> Style:
        return self.by_path.get(path, openai_style)

    def for_edge(self, path: str) -> Style:
        return self.at_edge.get(path, openai_style)
