"""TEI's request and response bodies (text-embeddings-inference 1.9, router/src/http/types.rs).

Unknown fields are ignored, as TEI's serde structs do.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictBool, StrictInt, StrictStr, Tag

# One input is a string or a list of token ids; a request is one input or a list of them.
TeiInput = Union[StrictStr, list[StrictInt], list[Union[StrictStr, list[StrictInt]]]]


class TeiRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")


class EmbedRequest(TeiRequest):
    inputs: TeiInput = Field(..., description="A string, token ids, or a list of them (one vector each).")
    truncate: Optional[StrictBool] = Field(
        None, description="Cut over-long inputs (default: the server's --allow-auto-truncate)."
    )
    truncation_direction: StrictStr = Field("right", description="`right` or `left`.")
    prompt_name: Optional[StrictStr] = Field(None, description="A prompt of config_sentence_transformers.json.")
    normalize: StrictBool = Field(True, description="L2-normalize the vectors.")
    dimensions: Optional[StrictInt] = Field(None, description="Matryoshka width.")


class RerankRequest(TeiRequest):
    query: StrictStr
    texts: list[StrictStr]
    truncate: Optional[StrictBool] = None
    truncation_direction: StrictStr = "right"
    raw_scores: StrictBool = Field(False, description="The logit instead of its sigmoid.")
    return_text: StrictBool = Field(False, description="Add each text to its result.")


class Rank(BaseModel):
    index: int
    text: Optional[str] = Field(None, description="Only with return_text.")
    score: float


class SimilarityInput(TeiRequest):
    source_sentence: StrictStr = Field(..., description="The text every other one is compared with.")
    sentences: list[StrictStr] = Field(..., description="The texts compared with `source_sentence`.")


class SimilarityParameters(TeiRequest):
    truncate: Optional[StrictBool] = None
    truncation_direction: StrictStr = "right"
    prompt_name: Optional[StrictStr] = Field(None, description="A prompt of config_sentence_transformers.json.")


class SimilarityRequest(TeiRequest):
    """/similarity (and POST / with these `inputs`: huggingface_hub's sentence_similarity)."""

    inputs: SimilarityInput
    parameters: Optional[SimilarityParameters] = None


PredictInput = Union[StrictStr, list[StrictStr], list[list[StrictStr]]]


class PredictRequest(TeiRequest):
    inputs: PredictInput = Field(
        ..., description='A text, ["text", "pair"] (one pair), or [["a"], ["a", "b"], ...] (a batch).'
    )
    truncate: Optional[StrictBool] = None
    truncation_direction: StrictStr = "right"
    raw_scores: StrictBool = Field(False, description="Logits instead of softmax (sigmoid for one label).")


class Prediction(BaseModel):
    score: float
    label: str


class TokenizeRequest(TeiRequest):
    inputs: Union[StrictStr, list[StrictStr]]
    add_special_tokens: StrictBool = True
    prompt_name: Optional[StrictStr] = None


class SimpleToken(BaseModel):
    id: int
    text: str
    special: bool
    start: Optional[int] = Field(None, description="Byte offset into the (prompt-prefixed) input; null for specials.")
    stop: Optional[int] = None


def _ids_shape(value: Any) -> str:
    return "batch" if isinstance(value, list) and value and isinstance(value[0], list) else "one"


# One id list or a batch of them, told apart by the first element: a plain union tried the flat
# shape on a million one-id lists first and built a million errors (5.7 s holding the GIL).
DecodeIds = Annotated[
    Union[Annotated[list[StrictInt], Tag("one")], Annotated[list[list[StrictInt]], Tag("batch")]],
    Discriminator(_ids_shape),
]


class DecodeRequest(TeiRequest):
    ids: DecodeIds
    skip_special_tokens: StrictBool = True


class Info(BaseModel):
    model_id: str
    model_sha: Optional[str] = None
    model_dtype: str
    served_model_name: Optional[str] = None
    model_type: dict
    max_concurrent_requests: int
    max_input_length: int
    max_batch_tokens: int
    max_batch_requests: Optional[int] = None
    max_client_batch_size: int
    auto_truncate: bool
    tokenization_workers: int
    version: str
    sha: Optional[str] = None
    docker_label: Optional[str] = None
