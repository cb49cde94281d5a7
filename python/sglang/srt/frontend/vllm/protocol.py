"""vLLM's /pooling, /score, /tokenize and /detokenize bodies (vllm/entrypoints/pooling, serve/tokenize)."""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from sglang.srt.frontend.openai.protocol import EmbeddingRequest


class PoolingRequest(EmbeddingRequest):
    task: Optional[StrictStr] = Field(
        None,
        description="token_embed (default for embedding models: one vector per token), embed (one vector "
        "per input) or classify (default for classifiers).",
    )


class PoolingData(BaseModel):
    index: int
    object: Literal["pooling"] = "pooling"
    data: Union[list[list[float]], list[float], str]


class PoolingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int
    completion_tokens: int = 0


class PoolingResponse(BaseModel):
    id: str
    object: Literal["list"] = "list"
    created: int
    model: str
    data: list[PoolingData]
    usage: PoolingUsage


class VllmTokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: Optional[StrictStr] = None
    prompt: StrictStr
    add_special_tokens: StrictBool = True
    return_token_strs: StrictBool = False


class VllmTokenizeResponse(BaseModel):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: Optional[list[str]] = None


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: Optional[StrictStr] = None
    tokens: list[StrictInt]


class DetokenizeResponse(BaseModel):
    prompt: str


class ScoreRequest(BaseModel):
    """vLLM's /score body: two sides of texts under one of the key pairs (queries + documents,
    queries + items, data_1 + data_2, text_1 + text_2), each a string or a list of strings; which
    pair, and the pairing (1:1, 1:N, N:N), is read by frontend/similarity.score_sides."""

    model_config = ConfigDict(extra="allow")

    model: Optional[StrictStr] = None
    queries: Any = Field(None, description="The left side: a string or a list of strings.")
    documents: Any = Field(None, description="The right side beside `queries`.")
    items: Any = Field(None, description="The right side beside `queries` (the same as `documents`).")
    data_1: Any = Field(None, description="The left side (vLLM's other spelling).")
    data_2: Any = Field(None, description="The right side beside `data_1`.")
    text_1: Any = Field(None, description="The left side (vLLM's first spelling).")
    text_2: Any = Field(None, description="The right side beside `text_1`.")
    truncate_prompt_tokens: Optional[StrictInt] = Field(
        None,
        description="Cut every text to its last k tokens (-1: at the context); without it a text over the "
        "context is a 400.",
    )

    def sides(self) -> dict[str, Any]:
        """The side keys the body set (frontend/similarity.score_sides reads them)."""
        keys = ("queries", "documents", "items", "data_1", "data_2", "text_1", "text_2")
        return {k: getattr(self, k) for k in keys if k in self.model_fields_set}


class ScoreData(BaseModel):
    index: int
    object: Literal["score"] = "score"
    score: float


class ScoreResponse(BaseModel):
    id: str
    object: Literal["list"] = "list"
    created: int
    model: str
    data: list[ScoreData]
    usage: PoolingUsage
