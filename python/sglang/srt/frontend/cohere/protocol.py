"""Cohere's v2 embed request (cohere-openapi.yaml `V2EmbedRequest`); unknown fields are ignored."""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

TRUNCATE_MODES = ("NONE", "START", "END")


class TextContent(BaseModel):
    type: Literal["text"]
    text: StrictStr


class ImageURL(BaseModel):
    url: StrictStr


class ImageContent(BaseModel):
    type: Literal["image_url"]
    image_url: ImageURL


class EmbedInput(BaseModel):
    content: list[Union[TextContent, ImageContent]]


class CohereEmbedRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: Optional[StrictStr] = Field(None, description="Any name is served (see --strict-model-name).")
    input_type: Optional[StrictStr] = Field(
        None,
        description="search_query / search_document / classification / clustering / image: picks the "
        "model's prompt of that name (or query / document), as on /v1/embeddings (docs/migrating.md).",
    )
    texts: Optional[list[StrictStr]] = None
    images: Optional[list[StrictStr]] = Field(None, description="Data URIs (or URLs); needs an image model.")
    inputs: Optional[list[EmbedInput]] = Field(None, description="Mixed text and image content, one vector each.")
    max_tokens: Optional[StrictInt] = Field(None, description="Most tokens per input (see `truncate`).")
    output_dimension: Optional[StrictInt] = Field(None, description="Matryoshka width (`dimensions`).")
    embedding_types: Optional[list[StrictStr]] = Field(
        None, description="float (default), int8, uint8, binary, ubinary, base64 (docs/quantized_outputs.md)."
    )
    truncate: StrictStr = Field("END", description="END cuts the end, START the start, NONE refuses long inputs.")
    priority: Optional[StrictInt] = Field(None, description="Accepted and ignored.")
