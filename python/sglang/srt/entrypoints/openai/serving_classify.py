"""POST /v1/classify: a sequence classifier's label, probabilities and logits per input.

The scheduler already returns each input's logits as its "embedding" (FORMAT_RAW float32 here);
this module only turns them into probabilities the way transformers' text-classification
pipeline does: sigmoid for one-label or multi-label models, nothing for regression, softmax
otherwise.
"""

from __future__ import annotations

import time
import uuid
from typing import Optional, Sequence

import numpy as np
import orjson

from sglang.srt.configs.model_info import ModelInfo
from sglang.srt.entrypoints.openai.serving_embedding import check_client_batch_size, check_model_name
from sglang.srt.entrypoints.openai.task_protocol import ClassifyRequest, TextOrIdsInput
from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.managers.io_struct import FORMAT_RAW, EmbeddingReqInput
from sglang.srt.managers.tokenizer_manager import EmbeddingResult, TokenizerManager, payload_to_array


def text_or_ids_request(inp: TextOrIdsInput) -> EmbeddingReqInput:
    """A string, strings, token ids or token-id lists -> raw-logit requests, one per input."""
    if isinstance(inp, str):
        return EmbeddingReqInput(text=[inp], encoding_format=FORMAT_RAW)
    if not inp:
        raise EmbeddingError(ErrorKind.INVALID_REQUEST, "Input cannot be empty.", param="input")
    if isinstance(inp[0], str):
        return EmbeddingReqInput(text=list(inp), encoding_format=FORMAT_RAW)
    ids = [list(inp)] if isinstance(inp[0], int) else [list(x) for x in inp]
    return EmbeddingReqInput(input_ids=ids, encoding_format=FORMAT_RAW)


def require_classifier(model_info: ModelInfo, name: str, endpoint: str) -> None:
    if not model_info.is_classifier:
        raise EmbeddingError(ErrorKind.INVALID_REQUEST, f"Model '{name}' is not a classification model; {endpoint} needs a "
                                  "*ForSequenceClassification checkpoint.", param="model")


def probabilities(logits: np.ndarray, problem_type: Optional[str]) -> np.ndarray:
    """[num_labels] float logits -> probabilities, as transformers' text-classification pipeline."""
    if problem_type == "regression":
        return logits
    if problem_type == "multi_label_classification" or logits.shape[0] == 1:
        return 1.0 / (1.0 + np.exp(-logits))
    shifted = np.exp(logits - logits.max())
    return shifted / shifted.sum()


def classify_items(logit_rows: Sequence[np.ndarray], labels: Sequence[str], problem_type: Optional[str]) -> list[dict]:
    items = []
    for i, logits in enumerate(logit_rows):
        logits = logits.astype(np.float64)
        probs = probabilities(logits, problem_type)
        items.append({"index": i, "label": labels[int(np.argmax(probs))], "probs": probs.tolist(),
                      "logits": logits.tolist(), "num_classes": len(labels)})
    return items


class OpenAIServingClassify:
    def __init__(self, tokenizer_manager: TokenizerManager, served_model_name: str) -> None:
        self.tm = tokenizer_manager
        self.served_model_name = served_model_name

    async def create_classify(self, request: ClassifyRequest, rid: Optional[str] = None) -> tuple[bytes, EmbeddingResult]:
        check_model_name(request.model, self.served_model_name)
        info = self.tm.model_info
        require_classifier(info, self.served_model_name, "/v1/classify")
        req = text_or_ids_request(request.input)
        check_client_batch_size(req.batch_size, self.tm.server_args)
        result = await self.tm.embed(req)
        rows = [payload_to_array(p) for p in result.payloads]
        tokens = sum(result.prompt_tokens)
        body = {
            "id": f"classify-{rid or uuid.uuid4().hex}",
            "object": "list",
            "created": int(time.time()),
            "model": self.served_model_name,
            "data": classify_items(rows, info.labels, info.problem_type),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        return orjson.dumps(body), result
