"""Request and response models for /v1/classify, /v1/rerank and TEI's /embed_sparse and /embed_all.

Unknown fields are ignored, as in /v1/embeddings (TEI clients send `truncate`, Cohere clients
`max_chunks_per_doc`, ...).
"""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from sglang.srt.frontend.openai.protocol import TextOrIdsInput


class ClassifyRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    input: TextOrIdsInput = Field(
        ..., description="A string, a list of strings, a list of token ids, or a list of token-id lists."
    )
    model: Optional[str] = Field(None, description="Must name the served model when given.")
    user: Optional[str] = Field(None, description="Accepted and ignored.")


class ClassifyData(BaseModel):
    index: int
    label: str = Field(..., description="id2label of the most probable class.")
    probs: list[float] = Field(
        ...,
        description="softmax of the logits (sigmoid for one label or multi-label "
        "models; the logits themselves for regression).",
    )
    logits: list[float]
    num_classes: int


class ClassifyUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class ClassifyResponse(BaseModel):
    id: str
    object: Literal["list"] = "list"
    created: int
    model: str
    data: list[ClassifyData]
    usage: ClassifyUsage


class RerankRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    query: StrictStr = Field(..., description="The query every document is scored against.")
    documents: list[StrictStr] = Field(..., description="Texts to rank.")
    model: Optional[str] = Field(None, description="Must name the served model when given.")
    top_n: Optional[StrictInt] = Field(None, description="Return only the best N (default, or 0 as in vLLM: all).")
    return_documents: StrictBool = Field(True, description="Echo each document's text in its result.")
    instruction: Optional[StrictStr] = Field(
        None,
        validation_alias=AliasChoices("instruction", "instruct"),
        description="LLM rerankers (Qwen3-Reranker): the task instruction of the prompt (default: the "
        "model card's). Also accepted as `instruct` (SGLang's name).",
    )


class RerankDocument(BaseModel):
    text: str


class RerankResult(BaseModel):
    index: int = Field(..., description="Position of the document in the request.")
    relevance_score: float = Field(..., description="sigmoid of the cross-encoder's logit, in (0, 1).")
    document: Optional[RerankDocument] = None


class RerankResponse(BaseModel):
    id: str
    model: str
    results: list[RerankResult] = Field(..., description="Best first.")
    usage: ClassifyUsage


class SparseEmbedRequest(BaseModel):
    """TEI's /embed_sparse body (`truncate`, `truncation_direction` and `prompt_name` are ignored:
    over-long inputs follow --allow-auto-truncate)."""

    model_config = ConfigDict(extra="ignore")

    inputs: Union[StrictStr, list[StrictStr]] = Field(..., description="A string or a list of strings.")
    return_text: StrictBool = Field(False, description="Add each token's vocabulary string as `text`.")


class SparseValue(BaseModel):
    index: int
    value: float
    text: Optional[str] = None


class EmbedAllRequest(BaseModel):
    """TEI's /embed_all body: `truncate` (None: --allow-auto-truncate), `truncation_direction` and
    `prompt_name` as on /embed."""

    model_config = ConfigDict(extra="ignore")

    inputs: TextOrIdsInput = Field(
        ..., description="A string, a list of strings, a list of token ids, or a list of token-id lists."
    )
    truncate: Optional[StrictBool] = None
    truncation_direction: Optional[StrictStr] = None
    prompt_name: Optional[StrictStr] = None
