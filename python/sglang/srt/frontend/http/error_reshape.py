"""The middlewares' own errors (401, 413, 415, 408, 429, 503) in a peer's shape on that peer's paths.

The pure-ASGI middlewares answer in OpenAI's shape, before any route runs. A client that parses
another shape on every status (Cohere's SDK reads `{"message"}`) needs those answers in its shape
too: this outermost wrapper rewrites an OpenAI-shaped error body on the paths it is given into the
style's body, keeping the status and headers. Routes' own errors already have the path's shape and
pass through untouched, as does every success.
"""

from __future__ import annotations

from typing import Any, Optional

import orjson

from sglang.srt.frontend.http.error_styles import Style
from sglang.srt.frontend.http.http_errors import HttpError

_MAX_ERROR_BODY = 64 * 1024  # the middlewares' answers are a few hundred bytes


def reshaped(status: int, body: bytes, style: Style) -> Optional[bytes]:
    """`body` in `style`'s shape when it is OpenAI's error shape, else None (leave it as it is)."""
    if len(body) > _MAX_ERROR_BODY:
        return None
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    err = value.get("error") if isinstance(value, dict) else None
    if not isinstance(err, dict) or not isinstance(err.get("message"), str):
        return None
    code = err.get("code")
    http = HttpError(status, err["message"], err.get("param"), code if isinstance(code, str) else None)
    return style(http)[1]


class ReshapeErrors:
    def __init__(self, app: Any, paths: frozenset[str], style: Style) -> None:
        self.app = app
        self.paths = paths
        self.style = style

    async def __call__(self, scope: dict, receive, send) -> None:
        if scope["type"] != "http" or scope.get("path") not in self.paths:
            return await self.app(scope, receive, send)
        start: Optional[dict] = None
        chunks: list[bytes] = []

        async def send_reshaped(message: dict) -> None:
            nonlocal start
            if message["type"] == "http.response.start" and message["status"] >= 400:
                start = message  # held until the body is known
                return
            if start is None or message["type"] != "http.response.body":
                return await send(message)
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = b"".join(chunks)
            new = reshaped(start["status"], body, self.style)
            if new is not None:
                headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
                start = {**start, "headers": headers + [(b"content-length", str(len(new)).encode())]}
                body = new
            await send(start)
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, send_reshaped)
