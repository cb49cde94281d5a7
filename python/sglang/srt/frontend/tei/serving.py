"""TEI's inference routes on the serving base: /embed, /rerank, /predict and /similarity.

Shapes as TEI answers them: /embed a bare `[[f32, ...], ...]` (a list even for one string),
/rerank a bare list of `{"index", "score", "text"?}` best first, /predict `[{"score", "label"}]`
sorted best first (a list of those per input for a batch). TEI's `truncate` falls back to the
server's --allow-auto-truncate; /embed normalizes unless `normalize: false`, as TEI does.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Optional

import numpy as np
import orjson

from sglang.srt.configs.model_info import Capability
from sglang.srt.frontend.embed_options import set_output, set_prompt, set_truncation_tei
from sglang.srt.frontend.embed_sides import Side, SideEmbedder, merge_results, scores_by_cosine
from sglang.srt.frontend.http.error_styles import TeiError, tei_empty
from sglang.srt.frontend.http.response_parts import Parts, json_array
from sglang.srt.frontend.inputs import normalize_input
from sglang.srt.frontend.openai.serving_base import OpenAIServingBase
from sglang.srt.frontend.openai.serving_rerank import OpenAIServingRerank
from sglang.srt.frontend.openai.task_protocol import RerankRequest as OpenAIRerankRequest
from sglang.srt.frontend.tei.protocol import (
    EmbedRequest,
    PredictRequest,
    RerankRequest,
    SimilarityParameters,
    SimilarityRequest,
)
from sglang.srt.frontend.tokenizer_manager import EmbeddingResult
from sglang.srt.wire.io_struct import FORMAT_FLOAT, FORMAT_RAW, EmbeddingReqInput
from sglang.srt.wire.matryoshka import validate_dimensions


def not_a(kind: str) -> TeiError:
    return TeiError(f"model is not a {kind} model", "Backend", param="model")


class TeiServingEmbed(OpenAIServingBase[EmbedRequest]):
    endpoint = "/embed"

    def validate(self, request: EmbedRequest) -> None:
        info = self.tm.model_info
        if Capability.EMBED not in info.capabilities:
            raise not_a("embedding")
        if request.inputs == [] or request.inputs == "":
            raise tei_empty("inputs")
        if request.dimensions is not None and request.dimensions < 1:
            raise TeiError("`dimensions` should be positive", "Validation", param="dimensions")
        validate_dimensions(request.dimensions, info, self.served_model_name)

    def convert(self, request: EmbedRequest) -> EmbeddingReqInput:
        inputs = request.inputs
        if isinstance(inputs, list) and inputs and isinstance(inputs[0], (str, list)):
            kinds = {type(x) for x in inputs}
            if len(kinds) > 1:
                raise TeiError("send either texts or token-id lists in one request, not both", "Validation")
            if any(len(x) == 0 for x in inputs):
                raise tei_empty("inputs")
        req, _ = normalize_input(inputs, dimensions=request.dimensions, encoding_format=FORMAT_FLOAT)
        set_truncation_tei(req, request.truncate, request.truncation_direction)
        set_output(req, normalize=request.normalize)
        set_prompt(req, self.tm.model_info, request.prompt_name)
        return req

    def render(self, request: EmbedRequest, result: EmbeddingResult, rid: Optional[str]) -> Parts:
        return json_array(result.payloads)


class TeiServingRerank(OpenAIServingRerank):
    """TEI's /rerank on the cross-encoder path of /v1/rerank (the same pairs, the same logits); a
    dense embedding model ranks by cosine, as /v1/rerank does (TEI itself answers 424 there)."""

    endpoint = "/rerank"

    async def handle(self, request: RerankRequest, rid: Optional[str] = None):  # type: ignore[override]
        if self.cosine is not None:
            return await self.cosine_ranks(request, rid)
        return await OpenAIServingBase.handle(self, request, rid)

    async def cosine_ranks(self, request: RerankRequest, rid: Optional[str]) -> tuple[bytes, EmbeddingResult]:
        """TEI's answer, `[{"index", "score", "text"?}]` best first, with the cosine as the score
        (`raw_scores` changes nothing: a cosine has no activation to leave out)."""
        if not request.texts:
            raise tei_empty("texts")
        info = self.tm.model_info

        def setup(req: EmbeddingReqInput) -> None:
            set_truncation_tei(req, request.truncate, request.truncation_direction)
            set_prompt(req, info)

        scores, result = await self.cosine.scores(request.query, request.texts, setup)
        return orjson.dumps(tei_ranks(scores, request.texts, request.return_text)), result

    def validate(self, request: RerankRequest) -> None:  # type: ignore[override]
        if not request.texts:
            raise tei_empty("texts")
        if Capability.RERANK not in self.tm.model_info.capabilities:
            raise not_a("re-ranker")

    def convert(self, request: RerankRequest) -> EmbeddingReqInput:  # type: ignore[override]
        req = super().convert(OpenAIRerankRequest(query=request.query, documents=request.texts))
        set_truncation_tei(req, request.truncate, request.truncation_direction)
        return req

    def render(self, request: RerankRequest, result: EmbeddingResult, rid: Optional[str]) -> bytes:  # type: ignore[override]
        logits = result.first_values()
        scores = logits if request.raw_scores else 1.0 / (1.0 + np.exp(-logits))
        return orjson.dumps(tei_ranks(scores.tolist(), request.texts, request.return_text, logits.tolist()))


def tei_ranks(scores: list[float], texts: list[str], return_text: bool, order_by: Optional[list] = None) -> list:
    """TEI's rerank answer: best first by `order_by` (default: the scores), ties in request order."""
    keys = order_by if order_by is not None else scores
    ranks = []
    for i in sorted(range(len(texts)), key=lambda i: -keys[i]):
        item = {"index": i, "score": float(scores[i])}
        if return_text:
            item["text"] = texts[i]
        ranks.append(item)
    return ranks


def tei_scores(logits: np.ndarray, raw: bool) -> np.ndarray:
    """TEI's classifier scores: the logits, or sigmoid for one label, softmax for several."""
    if raw:
        return logits
    if logits.shape[0] == 1:
        return 1.0 / (1.0 + np.exp(-logits))
    e = np.exp(logits - logits.max())
    return e / e.sum()


class TeiServingPredict(OpenAIServingBase[PredictRequest]):
    """/predict: single texts and (text, pair) inputs, a batch of them possibly mixed."""

    endpoint = "/predict"

    async def handle(self, request: PredictRequest, rid: Optional[str] = None) -> tuple[bytes, EmbeddingResult]:
        if Capability.CLASSIFY not in self.tm.model_info.capabilities:
            raise not_a("classifier")
        single, items = self.items(request.inputs)
        self.check_batch_size(len(items))
        singles = [i for i, x in enumerate(items) if len(x) == 1]
        pairs = [i for i, x in enumerate(items) if len(x) == 2]
        jobs = []
        if singles:
            jobs.append(self._embed(EmbeddingReqInput(text=[items[i][0] for i in singles]), request))
        if pairs:
            jobs.append(self._embed(EmbeddingReqInput(text_pairs=[tuple(items[i]) for i in pairs]), request))
        results = await asyncio.gather(*jobs)
        payloads: list = [None] * len(items)
        tokens: list = [0] * len(items)
        for indices, res in zip([x for x in (singles, pairs) if x], results):
            for i, p, n in zip(indices, res.payloads, res.prompt_tokens):
                payloads[i], tokens[i] = p, n
        result = dataclasses.replace(merge_results(results), payloads=payloads, prompt_tokens=tokens)
        labels = self.tm.model_info.labels or ()
        out = []
        for p in payloads:
            scores = tei_scores(np.asarray(p, dtype=np.float64), request.raw_scores)
            ranked = sorted(range(len(scores)), key=lambda k: -scores[k])
            out.append([{"score": float(scores[k]), "label": labels[k]} for k in ranked])
        return orjson.dumps(out[0] if single else out), result

    async def _embed(self, req: EmbeddingReqInput, request: PredictRequest) -> EmbeddingResult:
        req.encoding_format = FORMAT_RAW
        set_truncation_tei(req, request.truncate, request.truncation_direction)
        return await self.tm.embed(req)

    @staticmethod
    def items(inputs) -> tuple[bool, list[list[str]]]:
        """(one input?, each input as [text] or [text, pair])."""
        if isinstance(inputs, str):
            return True, [[inputs]]
        if not inputs:
            raise tei_empty("inputs")
        if isinstance(inputs[0], str):
            batch, single = [inputs], True
        else:
            batch, single = inputs, False
        for x in batch:
            if len(x) not in (1, 2):
                raise TeiError(
                    "each input is [text] or [text, text_pair], not a list of "
                    f"{len(x)} texts (send a list of lists for a batch)",
                    "Validation",
                    param="inputs",
                )
            if any(not t for t in x):
                raise tei_empty("inputs")
        return single, [list(x) for x in batch]


class TeiServingSimilarity(OpenAIServingBase[SimilarityRequest]):
    """/similarity: the cosine of `source_sentence`'s vector with each of `sentences`', a bare list
    of floats in their order, as TEI answers it; `parameters` carries `truncate`,
    `truncation_direction` and `prompt_name` for every text."""

    endpoint = "/similarity"

    def __init__(self, tokenizer_manager, served_model_name: str) -> None:
        super().__init__(tokenizer_manager, served_model_name)
        self.sides = SideEmbedder(tokenizer_manager)

    async def handle(self, request: SimilarityRequest, rid: Optional[str] = None) -> tuple[bytes, EmbeddingResult]:
        info = self.tm.model_info
        if not scores_by_cosine(info):
            raise not_a("embedding")
        sentences = request.inputs.sentences
        if not sentences:
            raise TeiError("`inputs.sentences` cannot be empty", "Empty", param="inputs.sentences")
        self.check_batch_size(len(sentences) + 1)
        params = request.parameters or SimilarityParameters()

        def setup(req: EmbeddingReqInput) -> None:
            set_truncation_tei(req, params.truncate, params.truncation_direction)
            set_prompt(req, info, params.prompt_name)

        scores, result = await self.sides.cosines(
            Side([request.inputs.source_sentence], "source sentence", "inputs.source_sentence"),
            Side(list(sentences), "sentence", "inputs.sentences"),
            setup,
        )
        return orjson.dumps(scores.tolist()), result
