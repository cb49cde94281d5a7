"""The edge's mapping of error kinds to HTTP: statuses, OpenAI error types, Retry-After."""

from __future__ import annotations

import orjson

from sglang.srt.errors import EmbeddingError, ErrorKind, engine_error, queue_full_error
from sglang.srt.frontend.http.http_errors import HTTP_STATUS, HttpError


def test_every_kind_has_a_status():
    assert set(HTTP_STATUS) == set(ErrorKind)
    assert HTTP_STATUS[ErrorKind.INVALID_REQUEST] == 400 and HTTP_STATUS[ErrorKind.QUEUE_FULL] == 429
    assert HTTP_STATUS[ErrorKind.TIMEOUT] == 504 and HTTP_STATUS[ErrorKind.UNAVAILABLE] == 503


def test_openai_error_body_types_and_headers():
    http = HttpError.of(
        EmbeddingError(ErrorKind.MODEL_NOT_FOUND, "no such model", param="model", code="model_not_found")
    )
    assert http.status == 404 and http.headers == {}
    assert orjson.loads(http.body()) == {
        "error": {
            "message": "no such model",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
    }
    full = HttpError.of(queue_full_error())
    assert (full.status, full.headers, full.to_dict()["error"]["type"]) == (
        429,
        {"Retry-After": "1"},
        "rate_limit_error",
    )
    auth = HttpError.of(EmbeddingError(ErrorKind.UNAUTHENTICATED, "key"), {"WWW-Authenticate": "Bearer"})
    assert auth.status == 401 and auth.to_dict()["error"]["type"] == "authentication_error"
    assert auth.headers == {"WWW-Authenticate": "Bearer"}
    assert HttpError.of(EmbeddingError(ErrorKind.INTERNAL, "x")).to_dict()["error"]["type"] == "server_error"


def test_engine_codes_become_kinds():
    assert engine_error(int(ErrorKind.TIMEOUT), "late").kind is ErrorKind.TIMEOUT
    assert engine_error(999, "from a peer we do not know").kind is ErrorKind.INTERNAL


def test_an_error_echoing_a_lone_surrogate_still_encodes():
    """Issue #15 item 5: `model: "\\ud800"` echoed in a 404 made orjson raise (a 500 with a traceback)."""
    body = HttpError.of(EmbeddingError(ErrorKind.MODEL_NOT_FOUND, "The model `\ud800x` does not exist.")).body()
    assert orjson.loads(body)["error"]["message"] == "The model `\\ud800x` does not exist."
