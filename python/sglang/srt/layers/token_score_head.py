"""Scores from a few rows of a decoder's LM head, read at each sequence's last token.

LLM rerankers (Qwen3-Reranker, configs/llm_reranker.py) answer "yes" or "no": only the logits of
those tokens matter, so instead of the [vocab, hidden] LM head this head holds their rows alone
([n, hidden], read from the checkpoint's `lm_head.weight`, or from the input embeddings when the
checkpoint ties them) and computes n logits per sequence, in float32. With `two_way` it returns the
one logit logit(tokens[1]) - logit(tokens[0]), whose sigmoid is the two-way softmax of the model
card.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from sglang.srt.errors import ConfigError
from sglang.srt.model_loader.weight_utils import read_rows

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch import ForwardBatch

_LM_HEAD = ("lm_head.weight",)
_EMBEDDINGS = ("model.embed_tokens.weight", "embed_tokens.weight")


class TokenScoreHead(nn.Module):
    def __init__(self, rows: torch.Tensor, two_way: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(rows.float(), requires_grad=False)  # [n, hidden], float32
        self.two_way = two_way

    def forward(self, hidden: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        last = hidden.index_select(0, fb.cu_seqlens[1:].long() - 1).float()
        logits = F.linear(last, self.weight)
        if self.two_way:
            return (logits[:, 1] - logits[:, 0]).unsqueeze(1)
        return logits


def token_ids(tokenizer, tokens: Sequence[str]) -> list[int]:
    """Each token's id in the vocabulary (as the model card's convert_tokens_to_ids)."""
    ids = []
    for token in tokens:
        i = tokenizer.convert_tokens_to_ids(token)
        if i is None or (i == tokenizer.unk_token_id and token != tokenizer.unk_token):
            raise ConfigError(f"The scoring token '{token}' is not in the tokenizer's vocabulary")
        ids.append(int(i))
    return ids


def build_token_score_head(
    model_dir: str, hf_config, ids: list[int], two_way: bool, device: torch.device
) -> TokenScoreHead:
    tied = bool(getattr(hf_config, "tie_word_embeddings", False))
    vocab = int(hf_config.vocab_size)
    bad = [i for i in ids if not 0 <= i < vocab]
    if bad:
        raise ConfigError(f"Scoring token id {bad[0]} is outside the model's vocabulary of {vocab}")
    # Tied checkpoints may not even store lm_head.weight; the embeddings are the head then.
    rows = read_rows(model_dir, _EMBEDDINGS + _LM_HEAD if tied else _LM_HEAD, ids)
    if rows is None:
        raise ConfigError(f"The checkpoint in {model_dir} has no LM head (lm_head.weight) to score tokens with")
    return TokenScoreHead(rows, two_way).to(device).eval()
