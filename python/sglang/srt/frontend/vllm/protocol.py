"""vLLM's /pooling, /tokenize and /detokenize bodies (vllm/entrypoints/pooling, serve/tokenize)."""

from __future__ import annotations

from typing import Literal, Optional, Union

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
