"""Rerank pairs through InputTokenizer.tokenize_pairs, on the bundled (BERT) MiniLM tokenizer."""

from __future__ import annotations

import dataclasses

import pytest

from sglang.srt.errors import EmbeddingError
from sglang.srt.frontend.tokenization import InputTokenizer
from sglang.srt.server_args import ServerArgs
from sglang.srt.wire.io_struct import EmbeddingReqInput
from test.helpers.model_info import make_model_info

INFO = make_model_info(max_input_length=12, vocab_size=30522, pair_token_types=True)


def _tok(hf_tokenizer, info=INFO, **kw) -> InputTokenizer:
    return InputTokenizer(ServerArgs(**kw), info, tokenizer=hf_tokenizer)


def test_pairs_are_joined_with_segment_ids(hf_tokenizer):
    ((ids, types),) = _tok(hf_tokenizer).tokenize(EmbeddingReqInput(text_pairs=[("hello", "big world")]))
    assert ids.tolist() == [101, 7592, 102, 2502, 2088, 102]
    assert types.tolist() == [0, 0, 0, 1, 1, 1] and types.dtype.name == "int32"
    ((_, no_types),) = _tok(hf_tokenizer, dataclasses.replace(INFO, pair_token_types=False)).tokenize(
        EmbeddingReqInput(text_pairs=[("hello", "big world")])
    )
    assert no_types is None  # RoBERTa-style models: one token type


def test_empty_parts_and_long_pairs(hf_tokenizer):
    tok = _tok(hf_tokenizer)
    with pytest.raises(EmbeddingError) as e:
        tok.tokenize(EmbeddingReqInput(text_pairs=[("q", "a doc"), ("q", "  ")]))
    assert e.value.message == "The document at index 1 is empty or whitespace only." and e.value.param == "documents"
    with pytest.raises(EmbeddingError) as e:
        tok.tokenize(EmbeddingReqInput(text_pairs=[("", "doc")]))
    assert e.value.param == "query"
    long_doc = "word " * 20
    with pytest.raises(EmbeddingError, match="longer than the model's context length"):
        tok.tokenize(EmbeddingReqInput(text_pairs=[("hello", long_doc)]))
    # --allow-auto-truncate cuts the document, keeping the query and the final [SEP].
    ((ids, types),) = _tok(hf_tokenizer, allow_auto_truncate=True).tokenize(
        EmbeddingReqInput(text_pairs=[("hello", long_doc)])
    )
    assert len(ids) == 12 and ids[:3].tolist() == [101, 7592, 102] and ids[-1] == 102 and len(types) == 12
