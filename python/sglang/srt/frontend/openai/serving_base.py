"""The common shape of an inference route: validate -> convert -> run -> render.

`handle` runs the steps in that order; a route says what its request must satisfy (`validate`,
by default the `model` check of check_model_name), how it becomes an EmbeddingReqInput
(`convert`), and how the tokenizer manager's result becomes the response body (`render`). Between
convert and run, it refuses more inputs than one request may carry. Routes that need more than
one engine request per HTTP request (a query and its documents: MaxSim or cosine rerank, vLLM's
/score, TEI's mixed /predict batches) or that hand off to another serving class override `handle`
and call the same checks themselves.
"""

from __future__ import annotations

import time
import uuid
from typing import Generic, Optional, Sequence, TypeVar

from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.http.response_parts import Body
from sglang.srt.frontend.tokenizer_manager import EmbeddingResult, TokenizerManager
from sglang.srt.server_args import ServerArgs
from sglang.srt.wire.io_struct import EmbeddingReqInput

RequestT = TypeVar("RequestT")


def model_not_found(requested: str, served: Sequence[str] = ()) -> EmbeddingError:
    """OpenAI's 404 for a `model` this server does not serve (a long name is echoed shortened); a
    server with several models names the ones it serves."""
    shown = requested if len(requested) <= 200 else requested[:200] + "..."
    names = f" This server serves {', '.join(f'`{n}`' for n in served)}." if served else ""
    return EmbeddingError(
        ErrorKind.MODEL_NOT_FOUND, f"The model `{shown}` does not exist.{names}", param="model", code="model_not_found"
    )


def check_batch_size(n: int, args: ServerArgs, param: str = "input") -> None:
    """Refuse more inputs than one request may carry (413): --max-client-batch-size, and never more
    than --max-queue-size (such a request could never be queued; a queue-full answer would invite
    retries). The inference routes and TEI's /tokenize and /decode share it."""
    limit, flag = args.max_client_batch_size, "--max-client-batch-size"
    if args.max_queue_size < limit:
        limit, flag = args.max_queue_size, "--max-queue-size"
    if n > limit:
        raise EmbeddingError(
            ErrorKind.TOO_LARGE,
            f"The request has {n} inputs; this server takes at most {limit} per request ({flag}).",
            param=param,
        )


class OpenAIServingBase(Generic[RequestT]):
    endpoint: str = ""  # the route, for messages ("/v1/classify")

    def __init__(self, tokenizer_manager: TokenizerManager, served_model_name: str) -> None:
        self.tm = tokenizer_manager
        self.served_model_name = served_model_name

    async def handle(self, request: RequestT, rid: Optional[str] = None) -> tuple[Body, EmbeddingResult]:
        """The response body (bytes, or a large answer's parts) and the result behind it (for timing
        headers and logs); `rid` is the HTTP request id, which some responses echo."""
        self.validate(request)
        req = self.convert(request)
        self.check_batch_size(req.batch_size)
        result = await self.tm.embed(req)
        return self.render(request, result, rid), result

    # ----- the route's steps -----
    def validate(self, request: RequestT) -> None:
        self.check_model_name(getattr(request, "model", None))

    def convert(self, request: RequestT) -> EmbeddingReqInput:
        raise NotImplementedError

    def render(self, request: RequestT, result: EmbeddingResult, rid: Optional[str]) -> Body:
        raise NotImplementedError

    # ----- checks the routes share -----
    def check_model_name(self, requested: Optional[str]) -> None:
        """Any `model` is served, as SGLang and TEI do; with --strict-model-name one that is none of
        the served names (--served-model-name and its aliases) is OpenAI's 404 model_not_found."""
        args = self.tm.server_args
        if requested is None or not args.strict_model_name:
            return
        if requested not in args.served_model_names:
            raise model_not_found(requested)

    def check_batch_size(self, n: int) -> None:
        check_batch_size(n, self.tm.server_args)

    def list_head(self, prefix: str, rid: Optional[str]) -> dict:
        """The fields every `"object": "list"` answer opens with (id `<prefix>-<rid>`, created, model)."""
        return {
            "id": f"{prefix}-{rid or uuid.uuid4().hex}",
            "object": "list",
            "created": int(time.time()),
            "model": self.served_model_name,
        }

    def require_classifier(self) -> None:
        if not self.tm.model_info.is_classifier:
            raise EmbeddingError(
                ErrorKind.INVALID_REQUEST,
                f"Model '{self.served_model_name}' is not a classification model; {self.endpoint} "
                "needs a *ForSequenceClassification checkpoint.",
                param="model",
            )
