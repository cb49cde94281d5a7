"""Render one sparse row ({token_id: weight}) into its JSON wire form, in the detokenizer.

- FORMAT_SPARSE_DICT: `{"2054": 0.73, ...}`, the `embedding` of SGLang's /v1/embeddings for
  sparse models;
- FORMAT_SPARSE_TEI: `[{"index": 2054, "value": 0.73}, ...]`, one input of TEI's /embed_sparse;
- FORMAT_SPARSE_TEI_TEXT: the same with `"text"`, the token's vocabulary string (`##ing`,
  `▁hello`), from a tokenizer the detokenizer loads on first use.

Weights are written as their shortest float32 representation, as dense vectors are.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np
import orjson

from sglang.srt.wire.io_struct import FORMAT_SPARSE_DICT, FORMAT_SPARSE_TEI_TEXT

TokenTextFn = Callable[[Sequence[int]], list[str]]


class TokenTexts:
    """Token id -> vocabulary string. The tokenizer is loaded on the first call, so a detokenizer
    that never renders a `return_text` request never loads one."""

    def __init__(self, tokenizer_path: str, trust_remote_code: bool, tokenizer_class: Optional[str] = None) -> None:
        self.tokenizer_path = tokenizer_path
        self.trust_remote_code = trust_remote_code
        self.tokenizer_class = tokenizer_class  # ServerArgs.tokenizer_class: loaded without torch
        self._tokenizer = None

    def __call__(self, ids: Sequence[int]) -> list[str]:
        if self._tokenizer is None:
            from sglang.srt.utils.hf_tokenizer import load_tokenizer

            self._tokenizer = load_tokenizer(self.tokenizer_path, self.trust_remote_code, self.tokenizer_class)
        return [str(t) for t in self._tokenizer.convert_ids_to_tokens(list(ids))]


def render_sparse(
    indices: np.ndarray, values: np.ndarray, fmt: str, token_texts: Optional[TokenTextFn] = None
) -> bytes:
    """One row: int32 token ids (ascending) and their float32 weights -> a JSON value (bytes)."""
    ids = indices.tolist()
    if not ids:
        return b"{}" if fmt == FORMAT_SPARSE_DICT else b"[]"
    weights = orjson.dumps(np.ascontiguousarray(values, dtype=np.float32), option=orjson.OPT_SERIALIZE_NUMPY)
    weights = weights[1:-1].split(b",")
    if fmt == FORMAT_SPARSE_DICT:
        return b"{" + b",".join(b'"%d":%s' % (i, w) for i, w in zip(ids, weights)) + b"}"
    if fmt == FORMAT_SPARSE_TEI_TEXT:
        if token_texts is None:
            raise ValueError("rendering token texts needs a tokenizer")
        texts = token_texts(ids)
        items = (b'{"index":%d,"value":%s,"text":%s}' % (i, w, orjson.dumps(t)) for i, w, t in zip(ids, weights, texts))
    else:
        items = (b'{"index":%d,"value":%s}' % (i, w) for i, w in zip(ids, weights))
    return b"[" + b",".join(items) + b"]"
