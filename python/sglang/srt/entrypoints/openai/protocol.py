"""OpenAI-compatible request and response models for /v1/embeddings."""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, field_validator


class MultimodalEmbeddingInput(BaseModel):
    """One item of a multimodal request: text, an image, or both fused into one vector."""

    model_config = ConfigDict(extra="forbid")

    text: Optional[StrictStr] = Field(None, description="Text of the item.")
    image: Optional[StrictStr] = Field(
        None, description="http(s) URL, data URI, bare base64, or a path under --allowed-local-media-path."
    )


EmbeddingInputField = Union[
    StrictStr,
    list[StrictStr],
    list[StrictInt],
    list[list[StrictInt]],
    list[MultimodalEmbeddingInput],
]


class EmbeddingRequest(BaseModel):
    # Unknown fields are ignored, as OpenAI's API does.
    model_config = ConfigDict(extra="ignore")

    input: EmbeddingInputField = Field(
        ...,
        description="A string, a list of strings, a list of token ids, a list of token-id lists, "
        'or a list of {"text", "image"} objects (one embedding each).',
    )
    model: Optional[str] = Field(None, description="Must name the served model when given.")
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="`float`: JSON numbers. `base64`: little-endian float32 bytes, base64-encoded."
    )
    dimensions: Optional[StrictInt] = Field(None, description="Matryoshka output width (models that support it).")
    user: Optional[str] = Field(None, description="Accepted and ignored.")
    multi_vector: Optional[StrictBool] = Field(
        None,
        description="One vector per token from the model's multi-vector (ColBERT) head, with `token_ids`; "
        "default: true for ColBERT checkpoints, false otherwise (docs/embedding_models.md).",
    )
    input_type: Optional[StrictStr] = Field(
        None, description="Multi-vector inputs: `query` or `document` (default), which picks ColBERT's marker."
    )

    @field_validator("input", mode="before")
    @classmethod
    def _check_objects(cls, value):
        """Say exactly what is wrong with a list of objects (a union error would list every shape)."""
        if not (isinstance(value, list) and any(isinstance(x, dict) for x in value)):
            return value
        if not all(isinstance(x, dict) for x in value):
            raise ValueError('\'input\' cannot mix {"text", "image"} objects with strings or token ids.')
        for i, item in enumerate(value):
            unknown = sorted(set(item) - {"text", "image"})
            if unknown:
                raise ValueError(f"Item {i}: unknown field(s) {', '.join(unknown)}; use 'text' and 'image'.")
            if item.get("text") is None and item.get("image") is None:
                raise ValueError(f"Item {i}: needs 'text', 'image' or both.")
            for key in ("text", "image"):
                if item.get(key) is not None and not isinstance(item[key], str):
                    raise ValueError(f"Item {i}: '{key}' must be a string.")
        return value


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
