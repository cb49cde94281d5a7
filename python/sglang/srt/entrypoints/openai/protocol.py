"""OpenAI-compatible request and response models for /v1/embeddings."""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

EmbeddingInputField = Union[
    StrictStr,
    list[StrictStr],
    list[StrictInt],
    list[list[StrictInt]],
]


class EmbeddingRequest(BaseModel):
    # Unknown fields are ignored, as OpenAI's API does.
    model_config = ConfigDict(extra="ignore")

    input: EmbeddingInputField = Field(
        ..., description="A string, a list of strings, a list of token ids, or a list of token-id lists."
    )
    model: Optional[str] = Field(None, description="Must name the served model when given.")
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="`float`: JSON numbers. `base64`: little-endian float32 bytes, base64-encoded."
    )
    dimensions: Optional[StrictInt] = Field(None, description="Matryoshka output width (models that support it).")
    user: Optional[str] = Field(None, description="Accepted and ignored.")


class EmbeddingObject(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: Union[list[float], str]


class UsageInfo(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingObject]
    model: str
    usage: UsageInfo


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: Optional[str] = None
    code: Optional[Union[str, int]] = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "sglang"
    root: Optional[str] = None
    max_model_len: Optional[int] = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
