"""The ids transformers' tokenizer call gives: what the server's own tokenization paths must match."""

from __future__ import annotations

from typing import Any, Optional


def wrapper_ids(tok: Any, texts: list[str], special: bool = True, max_length: Optional[int] = None) -> list[list[int]]:
    """Ids of `texts` through the wrapper, cut to `max_length` (on the tokenizer's side) when given."""
    enc = tok(
        texts,
        add_special_tokens=special,
        truncation=max_length is not None,
        max_length=max_length,
        return_attention_mask=False,
        return_token_type_ids=False,
    )
    return [list(x) for x in enc["input_ids"]]
