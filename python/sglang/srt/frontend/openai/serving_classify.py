"""POST /v1/classify: a sequence classifier's label, probabilities and logits per input.

The scheduler already returns each input's logits as its "embedding" (FORMAT_RAW float32 here);
this module only turns them into probabilities the way transformers' text-classification
pipeline does: sigmoid for one-label or multi-label models, nothing for regression, softmax
otherwise.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import orjson

from sglang.srt.frontend.inputs import normalize_input
from sglang.srt.frontend.openai.serving_base import OpenAIServingBase
from sglang.srt.frontend.openai.task_protocol import ClassifyRequest
from sglang.srt.frontend.tokenizer_manager import EmbeddingResult
from sglang.srt.wire.io_struct import FORMAT_RAW, EmbeddingReqInput


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
        items.append(
            {
                "index": i,
                "label": labels[int(np.argmax(probs))],
                "probs": probs.tolist(),
                "logits": logits.tolist(),
                "num_classes": len(labels),
            }
        )
    return items


class OpenAIServingClassify(OpenAIServingBase[ClassifyRequest]):
    endpoint = "/v1/classify"

    def validate(self, request: ClassifyRequest) -> None:
        super().validate(request)
        self.require_classifier()

    def convert(self, request: ClassifyRequest) -> EmbeddingReqInput:
        return normalize_input(request.input, encoding_format=FORMAT_RAW)[0]  # raw logits, one row per input

    def render(self, request: ClassifyRequest, result: EmbeddingResult, rid: Optional[str]) -> bytes:
        info = self.tm.model_info
        rows = result.arrays()
        tokens = sum(result.prompt_tokens)
        body = {
            **self.list_head("classify", rid),
            "data": classify_items(rows, info.labels, info.problem_type),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        return orjson.dumps(body)
