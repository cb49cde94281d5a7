"""`input_type`: what an input is for, in one definition shared by every route that takes it
(/v1/embeddings, /embeddings, /pooling, Cohere's /v2/embed) and by Engine.encode.

Peers spell the same idea differently: Cohere sends `search_query` / `search_document` /
`classification` / `clustering` (required by its SDK), vLLM maps it to the model's prompts,
ColBERT clients send `query` / `document`. Here one value does both things it can do:
- the prompt: the model's sentence-transformers prompt of that exact name, else the names in
  PROMPT_NAMES (`search_query` -> `query`; `search_document` -> `document`, then `passage`), else
  none (as sentence-transformers' `encode_query` on a model without prompts);
- the ColBERT side (multi-vector output): query values take the query marker and expansion, every
  other value the document form.
A request's own `prompt` / `instruction` / `prompt_name` together with `input_type` is a 400 (two
prompts for one input). Any name outside the table and the model's prompts is a 400 listing them.
"""

from __future__ import annotations

from typing import Optional

from sglang.srt.configs.model_info import ModelInfo
from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.wire.token_kinds import TOKENS_DOCUMENT, TOKENS_QUERY

# value -> the model prompts it selects, tried in order (the value itself always first).
PROMPT_NAMES: dict[str, tuple[str, ...]] = {
    "query": ("query",),
    "search_query": ("search_query", "query"),
    "document": ("document", "passage"),
    "passage": ("passage", "document"),
    "search_document": ("search_document", "document", "passage"),
    "classification": ("classification",),
    "clustering": ("clustering",),
    "image": (),  # Cohere: the inputs are images (no text prompt)
}
QUERY_TYPES = frozenset({"query", "search_query"})


def known_input_types(model_info: ModelInfo) -> list[str]:
    """The values this model accepts: the standard ones, then its own prompt names."""
    return list(PROMPT_NAMES) + [n for n, _ in model_info.prompts if n not in PROMPT_NAMES]


def check_input_type(input_type: Optional[str], model_info: ModelInfo) -> None:
    if input_type is None:
        return
    known = known_input_types(model_info)
    if input_type not in known:
        raise EmbeddingError(
            ErrorKind.INVALID_REQUEST,
            f"input_type '{input_type}' is not supported; use one of: {', '.join(known)}.",
            param="input_type",
        )


def input_type_prompt(model_info: ModelInfo, input_type: Optional[str]) -> Optional[str]:
    """The prefix `input_type` selects on this model (None: none); None -> the server's default."""
    if input_type is None:
        return model_info.default_prompt
    check_input_type(input_type, model_info)
    table = dict(model_info.prompts)
    for name in (input_type, *PROMPT_NAMES.get(input_type, ())):
        if table.get(name):
            return table[name]
    return None


def token_side(input_type: Optional[str]) -> str:
    """ColBERT's side for multi-vector output: query values -> TOKENS_QUERY, the rest (and None)
    -> TOKENS_DOCUMENT."""
    return TOKENS_QUERY if input_type in QUERY_TYPES else TOKENS_DOCUMENT
