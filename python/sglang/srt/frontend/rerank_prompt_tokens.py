"""Token ids of (query, document) pairs wrapped in an LLM reranker's prompt (Qwen3-Reranker,
configs/llm_reranker.py): prefix + body + suffix, each part tokenized on its own and joined, as the
model card's process_inputs does."""

from __future__ import annotations

from typing import Optional, Sequence

from sglang.srt.configs.llm_reranker import RerankPrompt
from sglang.srt.errors import EmbeddingError, ErrorKind


def check_instruction(prompt: Optional[RerankPrompt], instruction: Optional[str], formatted: bool) -> None:
    """A request's `instruction` needs a model with a prompt, and a query that is not already
    formatted; it must be non-empty text."""
    if instruction is None:
        return
    if prompt is None:
        raise EmbeddingError(
            ErrorKind.INVALID_REQUEST,
            "instruction applies only to LLM rerankers with a prompt (Qwen3-Reranker); this model "
            "scores the query and document as given.",
            param="instruction",
        )
    if formatted:
        raise EmbeddingError(
            ErrorKind.INVALID_REQUEST,
            "instruction cannot be combined with a query that already holds the reranker's prompt.",
            param="instruction",
        )
    try:
        instruction.encode("utf-8")
    except UnicodeEncodeError:
        instruction = ""
    if not instruction.strip():
        raise EmbeddingError(
            ErrorKind.INVALID_REQUEST, "instruction must be non-empty, valid Unicode text.", param="instruction"
        )


class PromptedPairs:
    def __init__(self, tokenizer, prompt: RerankPrompt) -> None:
        self.tokenizer = tokenizer
        self.prompt = prompt
        self._ends: Optional[tuple[list[int], list[int]]] = None  # prefix and suffix ids, on first use

    def is_formatted(self, queries: Sequence[str]) -> bool:
        """The client wrote the prompt itself (vLLM's recipe): the pairs go in as they are."""
        return any(self.prompt.is_formatted(q) for q in queries)

    def ends(self) -> tuple[list[int], list[int]]:
        """The prompt's prefix and suffix ids (tokenized once)."""
        if self._ends is None:
            encode = self.tokenizer.encode
            self._ends = (
                encode(self.prompt.prefix, add_special_tokens=False),
                encode(self.prompt.suffix, add_special_tokens=False),
            )
        return self._ends

    def room(self, context_length: int) -> int:
        """Tokens left for a pair's body within `context_length`; 400 when the prompt fills it."""
        prefix, suffix = self.ends()
        room = context_length - len(prefix) - len(suffix)
        if room < 1:
            raise EmbeddingError(
                ErrorKind.INVALID_REQUEST,
                f"The reranker's prompt alone ({len(prefix) + len(suffix)} tokens) fills the context length "
                f"({context_length} tokens).",
                param="documents",
            )
        return room

    def shared_body(self, query: str, instruction: Optional[str]) -> Optional[str]:
        """The part of every pair's body before its document, when the document ends the body
        (frontend/shared_inputs.py joins the documents to it by ids); None otherwise."""
        if not self.prompt.body.endswith("{document}"):
            return None
        return self.prompt.format_body(query, "", instruction)

    def encode(
        self,
        queries: Sequence[str],
        documents: Sequence[str],
        instruction: Optional[str],
        context_length: int,
        truncate: bool,
    ) -> list[list[int]]:
        """One id list per pair; with `truncate` the body is cut so that the whole fits
        `context_length` (the document's end goes, the suffix stays); without, the caller checks
        the length."""
        prefix, suffix = self.ends()
        room = self.room(context_length)
        bodies = [self.prompt.format_body(q, d, instruction) for q, d in zip(queries, documents)]
        enc = self.tokenizer(
            bodies,
            truncation=truncate,
            max_length=room if truncate else None,
            return_attention_mask=False,
            return_token_type_ids=False,
        )
        return [prefix + list(ids) + suffix for ids in enc["input_ids"]]
