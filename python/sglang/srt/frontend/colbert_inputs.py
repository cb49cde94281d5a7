"""ColBERT inputs: query and document markers, query expansion, and the lengths a ColBERT
checkpoint was trained with (configs/colbert_config.py), applied on the tokenizer side.

As PyLate and Stanford ColBERT build them: the text is tokenized and cut to `length - 1` tokens
([CLS] ... [SEP]), a query with expansion is padded with [MASK] to that many, and the marker token
goes right after [CLS], which makes `length` tokens. Expansion tokens are queries, never keys,
unless the checkpoint attends to them: `key_len` counts the tokens that are keys (None: all).
Token-id inputs are taken as given (no marker, no padding).
"""

from __future__ import annotations

import logging
from typing import Optional

import numpy as np

from sglang.srt.configs.colbert_config import ColbertConfig
from sglang.srt.frontend.tokenization import InputTokenizer

logger = logging.getLogger(__name__)

ColbertItem = tuple[np.ndarray, Optional[int]]  # (input_ids, key_len)


def _token_id(tokenizer, token: Optional[str]) -> Optional[int]:
    if not token:
        return None
    tid = tokenizer.convert_tokens_to_ids(token)
    if tid is None or (tid == tokenizer.unk_token_id and token != tokenizer.unk_token):
        logger.warning("ColBERT marker %r is not in the tokenizer's vocabulary; inputs go without it", token)
        return None
    return int(tid)


class ColbertInputs:
    def __init__(self, cfg: ColbertConfig, tokenizer) -> None:
        self.cfg = cfg
        self.query_marker = _token_id(tokenizer, cfg.query_marker)
        self.document_marker = _token_id(tokenizer, cfg.document_marker)
        pad = tokenizer.mask_token_id
        if pad is None:  # PyLate falls back to the end-of-sequence token, then padding
            pad = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.pad_token_id
        self.expansion_id = pad

    @property
    def shapes_inputs(self) -> bool:
        """Whether texts need this (bge-m3's head takes inputs as they are)."""
        return self.cfg.query_length is not None or self.cfg.document_length is not None

    def build(
        self, tokenizer: InputTokenizer, texts: list[str], is_query: bool, prompt: Optional[str] = None
    ) -> list[ColbertItem]:
        cfg = self.cfg
        marker = self.query_marker if is_query else self.document_marker
        length = (cfg.query_length if is_query else cfg.document_length) or tokenizer.context_length
        length = min(length, tokenizer.context_length)
        budget = length - 1 if marker is not None else length
        expand = is_query and cfg.query_expansion and self.expansion_id is not None
        out = []
        for ids in tokenizer.tokenize_truncated(texts, budget, prompt):
            real = len(ids)
            if expand and real < budget:
                ids = ids + [self.expansion_id] * (budget - real)
            if marker is not None:
                ids = ids[:1] + [marker] + ids[1:]
                real += 1
            key_len = real if expand and not cfg.attend_to_expansion and real < len(ids) else None
            out.append((np.asarray(ids, dtype=np.int32), key_len))
        return out
