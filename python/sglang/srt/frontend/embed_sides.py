"""Cosine similarity served from an embedding model: embed the two sides of a request (a query and
its documents, vLLM's score sides, TEI's source sentence and sentences) through the tokenizer
manager's embedding call, the one /v1/embeddings uses, and score them (frontend/similarity.py).

Each side is one request to the engine, the two sent side by side; when one fails the other is
cancelled (its inputs are dropped from the queue) and the error names the side. A side may refuse
to be cut: vLLM refuses a query longer than the context rather than truncating it, whatever
--allow-auto-truncate says.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from sglang.srt.configs.model_info import Capability, ModelInfo
from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.similarity import check_texts, cosine_scores
from sglang.srt.frontend.tokenizer_manager import EmbeddingResult, TokenizerManager
from sglang.srt.wire.io_struct import FORMAT_RAW, EmbeddingReqInput


def scores_by_cosine(info: ModelInfo) -> bool:
    """Whether the model can answer similarity with the cosine of its pooled vectors: it embeds
    (cross-encoders score pairs instead; /v1/rerank ranks a ColBERT head's vectors by MaxSim)."""
    return Capability.EMBED in info.capabilities


@dataclass
class Side:
    """One side's texts, how errors name them (`what` in messages, `param` as the field), and
    whether they may be cut at the context (None: the request's or the server's setting)."""

    texts: list[str]
    what: str
    param: str
    truncate: Optional[bool] = None


async def gather_or_cancel(*works) -> list:
    """Await all of `works`; on the first failure cancel the rest (so their inputs leave the
    queue) and raise it."""
    tasks = [asyncio.ensure_future(w) for w in works]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def _named(err: EmbeddingError, side: Side) -> EmbeddingError:
    """The tokenizer's error about an `input`, told about this side's field instead."""
    if type(err) is not EmbeddingError or err.kind is not ErrorKind.INVALID_REQUEST or err.param != "input":
        return err
    message = err.message.replace("The input", f"The {side.what}", 1)
    return EmbeddingError(err.kind, message, param=side.param, code=err.code)


def merge_results(results: list[EmbeddingResult]) -> EmbeddingResult:
    """Several engine results as one (for the timing headers and the request log)."""
    return EmbeddingResult(
        [p for r in results for p in r.payloads],
        [n for r in results for n in r.prompt_tokens],
        max(r.queue_time for r in results),
        max(r.inference_time for r in results),
        max(r.tokenize_time for r in results),
    )


class SideEmbedder:
    """Embeds the sides of a similarity request and scores them by cosine."""

    def __init__(self, tokenizer_manager: TokenizerManager) -> None:
        self.tm = tokenizer_manager

    async def vectors(
        self, sides: list[Side], setup: Optional[Callable[[EmbeddingReqInput], None]] = None
    ) -> tuple[list[np.ndarray], EmbeddingResult]:
        """Each side's vectors ([n, dim] float32) and the merged engine result; `setup` sets the
        request's options (prompt, truncation) on each side's EmbeddingReqInput."""
        for side in sides:
            check_texts(side.texts, side.what, side.param)
        results = await gather_or_cancel(*(self._embed(side, setup) for side in sides))
        vectors = [r.matrix() for r in results]
        return vectors, merge_results(results)

    async def _embed(self, side: Side, setup: Optional[Callable[[EmbeddingReqInput], None]]) -> EmbeddingResult:
        req = EmbeddingReqInput(text=list(side.texts), encoding_format=FORMAT_RAW)
        if setup is not None:
            setup(req)
        if side.truncate is not None:
            req.truncate = side.truncate
        try:
            return await self.tm.embed(req)
        except EmbeddingError as e:
            raise _named(e, side) from None

    async def cosines(
        self, left: Side, right: Side, setup: Optional[Callable[[EmbeddingReqInput], None]] = None
    ) -> tuple[np.ndarray, EmbeddingResult]:
        """cos(left[i], right[i]) (one left text: against every right one), float64, and the result."""
        (a, b), result = await self.vectors([left, right], setup)
        return cosine_scores(a, b), result
