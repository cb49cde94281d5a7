"""vLLM's chat-form embedding body: the `messages` of /v1/embeddings and /pooling (OpenAI's chat
message shape; content is a string or a list of `text` / `image_url` parts)."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StrictStr


class TextPart(BaseModel):
    type: Literal["text"]
    text: StrictStr


class ImageURL(BaseModel):
    model_config = ConfigDict(extra="ignore")  # OpenAI's `detail` means nothing to an embedding

    url: StrictStr


class ImagePart(BaseModel):
    type: Literal["image_url"]
    image_url: ImageURL


ContentPart = Annotated[Union[TextPart, ImagePart], Field(discriminator="type")]


class ChatMessage(BaseModel):
    """One message of a conversation; other keys (name, tool_calls...) reach the template as they are."""

    model_config = ConfigDict(extra="allow")

    role: StrictStr
    content: Union[StrictStr, list[ContentPart], None] = None

    def texts(self) -> list[str]:
        if self.content is None:
            return []
        if isinstance(self.content, str):
            return [self.content]
        return [p.text for p in self.content if isinstance(p, TextPart)]

    def images(self) -> list[str]:
        if not isinstance(self.content, list):
            return []
        return [p.image_url.url for p in self.content if isinstance(p, ImagePart)]
