"""One input normaliser for the HTTP routes and Engine.encode.

Every shape an `input` may take becomes an EmbeddingReqInput: a string, a list of strings, a list
of token ids (one input), a list of token-id lists, one `{"text", "image"}` item or a list of
them (dicts from Engine callers, already-validated protocol objects from HTTP).
"""

from __future__ import annotations

from typing import Any, Union

from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.openai.protocol import MultimodalEmbeddingInput
from sglang.srt.wire.io_struct import EmbeddingReqInput, MultimodalItem

Prompt = Union[str, list[str], list[int], list[list[int]], dict, list[dict], list[MultimodalEmbeddingInput]]


def normalize_input(prompt: Prompt, **fields: Any) -> tuple[EmbeddingReqInput, bool]:
    """(the request, whether `prompt` was one input rather than a list of them); `fields` are the
    request's other EmbeddingReqInput fields (dimensions, encoding_format)."""
    if isinstance(prompt, str):
        return EmbeddingReqInput(text=[prompt], **fields), True
    if _is_item(prompt):
        return EmbeddingReqInput(items=[_item(prompt)], **fields), True
    if not prompt:
        raise EmbeddingError(ErrorKind.INVALID_REQUEST, "Input cannot be empty.", param="input")
    first = prompt[0]
    if isinstance(first, int):
        return EmbeddingReqInput(input_ids=[list(prompt)], **fields), True
    if isinstance(first, str):
        return EmbeddingReqInput(text=list(prompt), **fields), False
    if _is_item(first):
        return EmbeddingReqInput(items=[_item(p) for p in prompt], **fields), False
    return EmbeddingReqInput(input_ids=[list(p) for p in prompt], **fields), False


def _is_item(x: object) -> bool:
    return isinstance(x, (dict, MultimodalEmbeddingInput))


def _item(x: Union[dict, MultimodalEmbeddingInput]) -> MultimodalItem:
    if isinstance(x, MultimodalEmbeddingInput):  # the HTTP protocol has checked its fields
        return MultimodalItem(text=x.text, image=x.image)
    unknown = set(x) - {"text", "image"}
    if unknown or not (x.get("text") or x.get("image")):
        raise EmbeddingError(
            ErrorKind.INVALID_REQUEST,
            'A multimodal input is {"text": ..., "image": ...} with at least one of the two.',
            param="input",
        )
    return MultimodalItem(text=x.get("text"), image=x.get("image"))
