"""LLM rerankers: a decoder that answers "yes" or "no" to "does this document fit this query?".

Qwen3-Reranker (Qwen/Qwen3-Reranker-0.6B / 4B / 8B) is a plain Qwen3ForCausalLM. Its model card
wraps each (query, document) pair in a fixed chat prompt (`QWEN3_RERANKER`) and scores it as
softmax([logit("no"), logit("yes")])[1] at the last token; that equals sigmoid(logit("yes") -
logit("no")), so the model serves as a one-logit cross-encoder whose head holds just two rows of
the LM head (layers/token_score_head.py).

How a checkpoint becomes one (`resolve_llm_reranker`), as the peers start it:
- vLLM's `hf_overrides` given to --json-model-override-args (alias --hf-overrides):
  `{"architectures": ["Qwen3ForSequenceClassification"], "classifier_from_token": ["no", "yes"],
  "is_original_qwen3_reranker": true}`; `classifier_from_token` alone makes a head of those tokens'
  logits (one label per token, or the raw logit of a single token);
- `--chat-template qwen3-reranker` (SGLang starts it with --chat-template qwen3_reranker.jinja; a
  file of that name selects the same built-in prompt);
- without flags: a Qwen3ForCausalLM whose model path names "Qwen3-Reranker";
- a converted checkpoint (Qwen3ForSequenceClassification with a one-row `score` = yes - no, e.g.
  tomaarsen/Qwen3-Reranker-0.6B-seq-cls) keeps its own score head and gets the prompt when its name
  says Qwen3-Reranker (or with the flag).
`{"is_original_qwen3_reranker": false}` in the overrides turns the name-based detection off.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Optional, Sequence

from sglang.srt.errors import ConfigError

QWEN3_RERANKER_NAME = "qwen3-reranker"
_PROMPT_NAMES = (QWEN3_RERANKER_NAME, "qwen3_reranker")
_PLACEHOLDER = re.compile(r"\{(instruction|query|document)\}")


@dataclass(frozen=True)
class RerankPrompt:
    """The text around each (instruction, query, document): prefix + body + suffix, tokenized in
    those three parts as the model card does. Placeholders are replaced literally (braces in user
    text are safe)."""

    name: str
    prefix: str
    body: str  # holds {instruction}, {query} and {document}
    suffix: str
    default_instruction: str

    def format_body(self, query: str, document: str, instruction: Optional[str] = None) -> str:
        values = {
            "instruction": self.default_instruction if instruction is None else instruction,
            "query": query,
            "document": document,
        }
        # One pass over the template: placeholders inside the inserted texts stay text.
        return _PLACEHOLDER.sub(lambda m: values[m.group(1)], self.body)

    def is_formatted(self, query: str) -> bool:
        """A query that already starts with the prompt (clients that follow vLLM's recipe format
        query and document themselves): such pairs are passed through untouched."""
        return query.startswith(self.prefix.split("\n", 1)[0])


# Qwen3-Reranker's model card (format_instruction, prefix, suffix and the default task).
QWEN3_RERANKER = RerankPrompt(
    name=QWEN3_RERANKER_NAME,
    prefix=(
        "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the "
        'Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n'
    ),
    body="<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}",
    suffix="<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    default_instruction="Given a web search query, retrieve relevant passages that answer the query",
)


@dataclass(frozen=True)
class TokenScoreConfig:
    """A head made of the LM head's rows for `tokens`, read at the last token. `two_way`: the one
    relevance logit logit(tokens[1]) - logit(tokens[0]) (vLLM's is_original_qwen3_reranker)."""

    tokens: tuple[str, ...]
    two_way: bool = False

    @property
    def labels(self) -> tuple[str, ...]:
        return (self.tokens[1],) if self.two_way else self.tokens


@dataclass(frozen=True)
class LlmReranker:
    prompt: Optional[RerankPrompt]  # None: pairs go in as the client wrote them
    token_scores: Optional[TokenScoreConfig]  # None: the checkpoint's own score head (converted)


def is_rerank_prompt_name(chat_template: Optional[str]) -> bool:
    """--chat-template qwen3-reranker, or a file SGLang's users pass (qwen3_reranker.jinja)."""
    if not chat_template:
        return False
    stem = os.path.splitext(os.path.basename(chat_template))[0]
    return chat_template in _PROMPT_NAMES or stem in _PROMPT_NAMES


def _token_scores(hf_config) -> Optional[TokenScoreConfig]:
    tokens = getattr(hf_config, "classifier_from_token", None)
    two_way = bool(getattr(hf_config, "is_original_qwen3_reranker", False))
    if tokens is None:
        return None
    if not isinstance(tokens, (list, tuple)) or not tokens or not all(isinstance(t, str) and t for t in tokens):
        raise ConfigError(f"classifier_from_token must be a non-empty list of token strings, not {tokens!r}")
    if two_way and len(tokens) != 2:
        raise ConfigError(
            "is_original_qwen3_reranker needs exactly two classifier_from_token entries "
            f'(["no", "yes"]), not {tokens!r}'
        )
    return TokenScoreConfig(tuple(tokens), two_way)


def _named_qwen3_reranker(names: Sequence[Optional[str]]) -> bool:
    return any(n and "qwen3-reranker" in n.lower().replace("_", "-") for n in names)


def resolve_llm_reranker(
    architecture: str,
    is_decoder: bool,
    hf_config,
    model_names: Sequence[Optional[str]],
    chat_template: Optional[str],
) -> Optional[LlmReranker]:
    """The LLM-reranker reading of a checkpoint, or None for every other model.

    `architecture` is the resolved one (after overrides); `model_names` the --model-path as given
    and the directory it resolved to.
    """
    explicit = getattr(hf_config, "is_original_qwen3_reranker", None)
    token_scores = _token_scores(hf_config)
    flagged = is_rerank_prompt_name(chat_template)
    named = explicit is not False and _named_qwen3_reranker(model_names)
    wants_prompt = bool(explicit) or flagged or (named and architecture.startswith("Qwen3"))
    if token_scores is None and not wants_prompt:
        return None
    if not is_decoder:
        what = "classifier_from_token" if token_scores is not None else "the Qwen3-Reranker prompt"
        raise ConfigError(f"{what} applies to decoder checkpoints (Qwen3, Qwen2, Llama, Mistral), not {architecture}")
    if token_scores is None and architecture.endswith("ForCausalLM"):
        token_scores = TokenScoreConfig(("no", "yes"), two_way=True)  # the model card's scoring
    if token_scores is None and not architecture.endswith("ForSequenceClassification"):
        raise ConfigError(
            f"A Qwen3-Reranker needs a *ForCausalLM checkpoint (or a converted *ForSequenceClassification), "
            f"not {architecture}"
        )
    return LlmReranker(QWEN3_RERANKER if wants_prompt else None, token_scores)
