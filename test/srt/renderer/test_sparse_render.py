"""Sparse rows rendered by the detokenizer: SGLang's dict, TEI's list, token texts, mixed batches."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from sglang.srt.errors import ErrorKind
from sglang.srt.renderer.detokenizer_manager import render_output
from sglang.srt.renderer.sparse_render import TokenTexts, render_sparse
from sglang.srt.wire.io_struct import (
    FORMAT_SPARSE_DICT,
    FORMAT_SPARSE_TEI,
    FORMAT_SPARSE_TEI_TEXT,
    BatchEmbeddingOutput,
)
from sglang.srt.wire.output_spec import Format, OutputSpec, Task

IDS = np.array([5, 42, 1999], np.int32)
VALUES = np.array([0.1, 2.5, 0.3333333], np.float32)


def test_dict_and_tei_forms_keep_float32_values():
    as_dict = orjson.loads(render_sparse(IDS, VALUES, FORMAT_SPARSE_DICT))
    assert list(as_dict) == ["5", "42", "1999"]
    np.testing.assert_array_equal(np.float32(list(as_dict.values())), VALUES)
    tei = orjson.loads(render_sparse(IDS, VALUES, FORMAT_SPARSE_TEI))
    assert [e["index"] for e in tei] == [5, 42, 1999] and set(tei[0]) == {"index", "value"}
    np.testing.assert_array_equal(np.float32([e["value"] for e in tei]), VALUES)
    assert render_sparse(IDS[:0], VALUES[:0], FORMAT_SPARSE_DICT) == b"{}"
    assert render_sparse(IDS[:0], VALUES[:0], FORMAT_SPARSE_TEI) == b"[]"


def test_tei_text_form_asks_for_token_strings():
    seen = []

    def texts(ids):
        seen.append(list(ids))
        return [f'tok"{i}' for i in ids]  # quotes must be escaped in the JSON

    tei = orjson.loads(render_sparse(IDS, VALUES, FORMAT_SPARSE_TEI_TEXT, texts))
    assert [e["text"] for e in tei] == ['tok"5', 'tok"42', 'tok"1999'] and seen == [[5, 42, 1999]]
    with pytest.raises(ValueError):
        render_sparse(IDS, VALUES, FORMAT_SPARSE_TEI_TEXT, None)


def test_token_texts_load_the_tokenizer_on_first_use():
    from sglang.srt.server_args import default_model_path

    texts = TokenTexts(default_model_path(), trust_remote_code=False)
    assert texts._tokenizer is None
    assert texts([101, 7592, 2088]) == ["[CLS]", "hello", "world"]


def test_mixed_batch_renders_dense_and_sparse_rows():
    out = BatchEmbeddingOutput(
        rids=["dense", "sparse", "failed", "empty"],
        worker_ids=[0, 1, 0, 0],
        embeddings=np.array([[1.0, 2.0], [0, 0], [0, 0], [0, 0]], np.float32),
        prompt_tokens=[2, 3, 1, 1],
        outputs=[
            OutputSpec(),
            OutputSpec(Task.SPARSE, Format.SPARSE_DICT),
            OutputSpec(Task.SPARSE, Format.SPARSE_TEI),
            OutputSpec(Task.SPARSE, Format.SPARSE_TEI),
        ],
        error_codes=[0, 0, ErrorKind.INTERNAL, 0],
        error_messages=[None, None, "boom", None],
        queue_times=[0.0] * 4,
        sparse_indices=IDS,
        sparse_values=VALUES,
        sparse_offsets=np.array([0, 0, 3, 3, 3], np.int64),
    )
    res = render_output(out)
    assert orjson.loads(res[0].payloads[0]) == [1.0, 2.0]
    assert res[0].payloads[1] == b"" and res[0].error_codes[1] == ErrorKind.INTERNAL
    assert res[0].payloads[2] == b"[]"
    assert list(orjson.loads(res[1].payloads[0])) == ["5", "42", "1999"]
