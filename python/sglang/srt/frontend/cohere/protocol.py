"""Cohere's v2 and v1 embed requests (cohere-openapi.yaml `V2EmbedRequest`, v1 `embed`); unknown fields
are ignored."""

from __future__ import annotations

from typing import ClassVar, Literal, Optional, Union

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


class CohereV1EmbedRequest(BaseModel):
    """v1's body (`cohere.Client.embed`): texts or images, no `inputs`, `max_tokens` or `output_dimension`."""

    model_config = ConfigDict(extra="ignore")

    model: Optional[StrictStr] = Field(None, description="Any name is served (see --strict-model-name).")
    input_type: Optional[StrictStr] = Field(None, description="As on /v2/embed.")
    texts: Optional[list[StrictStr]] = None
    images: Optional[list[StrictStr]] = Field(None, description="Data URIs (or URLs); needs an image model.")
    embedding_types: Optional[list[StrictStr]] = Field(
        None, description="Absent: `embeddings_floats` (a list of vectors); else `embeddings_by_type`."
    )
    truncate: StrictStr = Field("END", description="END cuts the end, START the start, NONE refuses long inputs.")
    # what the v2 serving class reads, fixed for v1
    inputs: ClassVar[None] = None
    max_tokens: ClassVar[None] = None
    output_dimension: ClassVar[None] = None
