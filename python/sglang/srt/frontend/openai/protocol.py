"""OpenAI-compatible request and response models for /v1/embeddings."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictBool, StrictInt, StrictStr, Tag, field_validator

from sglang.srt.frontend.openai.chat_protocol import ChatMessage


class MultimodalEmbeddingInput(BaseModel):
    """One item of a multimodal request: text, an image, or both fused into one vector."""

    model_config = ConfigDict(extra="forbid")

    text: Optional[StrictStr] = Field(None, description="Text of the item.")
    image: Optional[StrictStr] = Field(
        None, description="http(s) URL, data URI, bare base64, or a path under --allowed-local-media-path."
    )


def input_shape(value: Any) -> Optional[str]:
    """Which shape an `input` value has, read from its first element.

    The union is validated against that one shape only: tried against every shape, a body of a
    million token ids took half a second of the event loop (issue #15); now one pass does.
    """
    if isinstance(value, str):
        return "text"
    if not isinstance(value, list):
        return None
    if not value:
        return "texts"  # empty: refused later with a clear message
    first = value[0]
    if isinstance(first, str):
        return "texts"
    if isinstance(first, int) and not isinstance(first, bool):
        return "ids"
    if isinstance(first, list):
        return "id_lists"
    if isinstance(first, (dict, BaseModel)):
        return "items"
    return None


_TEXT_OR_IDS = (
    Annotated[StrictStr, Tag("text")],
    Annotated[list[StrictStr], Tag("texts")],
    Annotated[list[StrictInt], Tag("ids")],
    Annotated[list[list[StrictInt]], Tag("id_lists")],
)
TextOrIdsInput = Annotated[Union[_TEXT_OR_IDS], Discriminator(input_shape)]
EmbeddingInputField = Annotated[
    Union[(*_TEXT_OR_IDS, Annotated[list[MultimodalEmbeddingInput], Tag("items")])], Discriminator(input_shape)
]


class EmbeddingRequest(BaseModel):
    # Unknown fields are kept so that those which would change the output can be refused by name
    # (frontend/embed_options.UNSUPPORTED_FIELDS); the others are ignored, as OpenAI's API does.
    model_config = ConfigDict(extra="allow")

    input: Optional[EmbeddingInputField] = Field(
        None,
        description="A string, a list of strings, a list of token ids, a list of token-id lists, "
        'or a list of {"text", "image"} objects (one embedding each). Required unless `messages` is sent.',
    )
    # vLLM's chat form (frontend/openai/chat_request.py): one conversation, one vector
    messages: Optional[list[ChatMessage]] = Field(
        None,
        description="vLLM: a conversation instead of `input`, rendered with the chat template (one vector).",
    )
    add_generation_prompt: StrictBool = Field(False, description="vLLM, with `messages`: open an assistant turn.")
    continue_final_message: StrictBool = Field(
        False, description="vLLM, with `messages`: end the prompt inside the last message."
    )
    chat_template_kwargs: Optional[dict[str, Any]] = Field(
        None, description="vLLM, with `messages`: extra variables for the chat template."
    )
    model: Optional[str] = Field(
        None, description="Any name is served (the response names the served model); see --strict-model-name."
    )
    encoding_format: StrictStr = Field(
        "float",
        description="`float`: JSON numbers. `base64`: the vector's bytes (little-endian float32 unless "
        "`embed_dtype` / `endianness` say otherwise), base64-encoded. vLLM's `bytes`: those bytes of every "
        "input, concatenated, as an application/octet-stream body with a JSON `metadata` header; "
        "`bytes_only`: the same body without the header (docs/migrating.md).",
    )
    dimensions: Optional[StrictInt] = Field(None, description="Matryoshka output width (models that support it).")
    user: Optional[str] = Field(None, description="Accepted and ignored.")
    multi_vector: Optional[StrictBool] = Field(
        None,
        description="One vector per token from the model's multi-vector (ColBERT) head, with `token_ids`; "
        "default: true for ColBERT checkpoints, false otherwise (docs/embedding_models.md).",
    )
    input_type: Optional[StrictStr] = Field(
        None,
        description="What the input is for: query / search_query / document / passage / search_document / "
        "classification / clustering, or one of the model's prompt names. Picks the model's prompt of that kind "
        "and, for multi-vector output, ColBERT's query or document form (docs/migrating.md).",
    )
    # vLLM
    truncate_prompt_tokens: Optional[StrictInt] = Field(
        None, description="vLLM: k > 0 keeps the last k tokens of each input, -1 cuts at the model's context length."
    )
    truncation_side: Optional[StrictStr] = Field(
        None, description="vLLM: `left` (default with truncate_prompt_tokens) or `right`."
    )
    normalize: Optional[StrictBool] = Field(
        None, description="false: the raw pooled vector (default: as the checkpoint's sentence-transformers files say)."
    )
    use_activation: Optional[StrictBool] = Field(
        None, description="vLLM's newer name for `normalize` (both given and different: 400)."
    )
    embed_dtype: Optional[StrictStr] = Field(
        None, description="vLLM: element type of base64 / bytes vectors: float32 (default), float16, bfloat16."
    )
    endianness: Optional[StrictStr] = Field(
        None, description="vLLM: byte order of base64 / bytes vectors: native (default: little on x86/ARM), little, big"
    )
    add_special_tokens: StrictBool = Field(
        True,
        description="vLLM / TensorRT-LLM: false tokenizes without [CLS]/BOS/EOS (the default with `messages`).",
    )
    # TEI
    truncate: Optional[StrictBool] = Field(
        None, description="TEI: cut over-long inputs (default: the server's --allow-auto-truncate)."
    )
    truncation_direction: Optional[StrictStr] = Field(None, description="TEI: `right` (default) or `left`.")
    # prompts (sentence-transformers, TEI)
    prompt_name: Optional[StrictStr] = Field(
        None, description="A prompt of the model's config_sentence_transformers.json."
    )
    prompt: Optional[StrictStr] = Field(None, description="A raw prefix for every text input (wins over prompt_name).")
    instruction: Optional[StrictStr] = Field(None, description="The same as `prompt`.")
    # quantized outputs (Cohere)
    embedding_types: Optional[list[StrictStr]] = Field(
        None,
        description="float, int8, uint8, binary, ubinary, base64: each item then carries `embeddings` "
        "{type: value} instead of `embedding` (docs/quantized_outputs.md).",
    )
    # infinity
    modality: Optional[StrictStr] = Field(
        None, description="infinity: `text` (default) or `image` (inputs are image URLs)."
    )
    priority: Optional[StrictInt] = Field(None, description="Accepted and ignored (requests run in arrival order).")

    @field_validator("input", mode="before")
    @classmethod
    def _check_objects(cls, value):
        """Say exactly what is wrong with a list of objects (a union error would list every shape)."""
        # Only lists that start with an object are scanned (a scan of a million token ids is not free).
        if not (isinstance(value, list) and value and isinstance(value[0], dict)):
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
    embedding: Optional[Union[list[float], str, dict[str, float]]] = None
    embeddings: Optional[dict[str, Union[list[float], list[int], str]]] = Field(
        None, description="With `embedding_types`: one value per requested type."
    )


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
    # What the model answers (embed, rerank, classify, sparse, multi_vector, token_embed, image):
    # with several models behind one server, which one to name for which route.
    capabilities: list[str] = []


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
