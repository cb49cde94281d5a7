"""Cohere's routes' registration: POST /v1/embed here (/v2/embed is in compat_routes.py), and
Cohere's `{"message"}` error shape on both, the middlewares' 401 / 413 / 415 / 429 included
(registered `at_edge`: http/middleware.send_error answers in it), so that Cohere's SDKs read every error."""

from __future__ import annotations

from typing import Any, Callable

from fastapi import FastAPI, Request

from sglang.srt.frontend.cohere.protocol import CohereV1EmbedRequest
from sglang.srt.frontend.cohere.serving import CohereV1ServingEmbed
from sglang.srt.frontend.http.error_styles import cohere_style

COHERE_PATHS = frozenset({"/v1/embed", "/v2/embed"})


def add_cohere_routes(app: FastAPI, served_model_name: str, serve_task: Callable[..., Any]) -> None:
    app.state.error_styles.register(cohere_style, *COHERE_PATHS, at_edge=True)

    def serving() -> CohereV1ServingEmbed:
        s = getattr(app.state, "cohere_v1_embed", None)
        if s is None:
            s = app.state.cohere_v1_embed = CohereV1ServingEmbed(app.state.tokenizer_manager, served_model_name)
        return s

    @app.post("/v1/embed", responses={400: {"description": 'Cohere error: {"message"}'}})
    async def cohere_v1_embed(request: CohereV1EmbedRequest, raw: Request):
        return await serve_task(raw, lambda rid: serving().handle(request, rid))
