"""Per-token rows through the messages: BatchEmbeddingOutput / BatchEmbeddingResult round trips,
the detokenizer's rendering (float, base64, array, token ids), and the route-side decisions
(multi_vector_output, maxsim)."""

from __future__ import annotations

import base64

import numpy as np
import orjson
import pytest

from sglang.srt.configs.colbert_config import ColbertConfig
from sglang.srt.configs.model_info import OutputKind
from sglang.srt.errors import EmbeddingError
from sglang.srt.frontend.openai.multi_vector import maxsim, multi_vector_output
from sglang.srt.frontend.output_options import output_format
from sglang.srt.renderer.detokenizer_manager import render_output
from sglang.srt.wire.io_struct import (
    FORMAT_BASE64,
    FORMAT_FLOAT,
    FORMAT_RAW,
    BatchEmbeddingOutput,
    TokenizedEmbeddingReqInput,
)
from sglang.srt.wire.msgcodec import decode, encode
from sglang.srt.wire.output_spec import OutputSpec, Task
from sglang.srt.wire.token_kinds import TOKENS_DOCUMENT, TOKENS_HIDDEN, TOKENS_QUERY
from test.helpers.model_info import make_model_info

KINDS = [TOKENS_DOCUMENT, None, TOKENS_HIDDEN]  # what each row's input asked for


def _output(formats) -> BatchEmbeddingOutput:
    # Row 0: 2 vectors of width 3; row 1: pooled (no token rows); row 2: 3 vectors of width 2.
    values = np.arange(12, dtype=np.float32) / 10
    return BatchEmbeddingOutput(
        rids=["a", "b", "c"],
        worker_ids=[0, 0, 1],
        embeddings=np.ones((3, 4), dtype=np.float32),
        prompt_tokens=[3, 4, 5],
        outputs=[OutputSpec(Task.TOKENS if kind else Task.DENSE, output_format(f)) for f, kind in zip(formats, KINDS)],
        error_codes=[0, 0, 0],
        error_messages=[None, None, None],
        queue_times=[0.0, 0.0, 0.0],
        token_values=values,
        token_ids=np.array([7, 8, 9, 10, 11], dtype=np.int32),
        token_offsets=np.array([0, 2, 2, 5], dtype=np.int64),
        token_value_offsets=np.array([0, 6, 6, 12], dtype=np.int64),
    )


def _roundtrip(msg):
    return decode([bytes(f) if not isinstance(f, bytes) else f for f in encode(msg)])


def test_messages_round_trip():
    out = _roundtrip(_output([FORMAT_FLOAT] * 3))
    assert [o.task for o in out.outputs] == [Task.TOKENS, Task.DENSE, Task.TOKENS]
    np.testing.assert_array_equal(out.token_values, np.arange(12, dtype=np.float32) / 10)
    np.testing.assert_array_equal(out.token_offsets, [0, 2, 2, 5])
    req = _roundtrip(
        TokenizedEmbeddingReqInput("r", 0, np.arange(5, dtype=np.int32), token_output=TOKENS_QUERY, key_len=3)
    )
    assert (req.token_output, req.key_len) == (TOKENS_QUERY, 3)
    results = render_output(out)
    again = _roundtrip(results[0])
    assert again.token_ids == [b"[7,8]", b""] and again.payloads == results[0].payloads


def test_rendering_per_format():
    out = _output([FORMAT_FLOAT, FORMAT_FLOAT, FORMAT_BASE64])
    results = render_output(out)
    first = results[0]
    np.testing.assert_allclose(orjson.loads(first.payloads[0]), [[0.0, 0.1, 0.2], [0.3, 0.4, 0.5]], rtol=1e-6)
    assert len(orjson.loads(first.payloads[1])) == 4  # the pooled row is a plain vector
    flat = np.frombuffer(base64.b64decode(orjson.loads(results[1].payloads[0])), dtype="<f4")
    np.testing.assert_allclose(flat.reshape(3, 2), (np.arange(6, 12) / 10).reshape(3, 2), rtol=1e-6)
    assert results[1].token_ids == [b"[9,10,11]"]
    raw = render_output(_output([FORMAT_RAW] * 3))[0].payloads[0]
    assert raw.dtype == np.float32 and raw.shape == (2, 3)  # typed numbers, for a route that computes


def test_route_decisions():
    colbert = ColbertConfig("checkpoint", dim=8)
    multi = make_model_info(embeddings_output=OutputKind.MULTI_VECTOR, colbert=colbert)
    m3 = make_model_info(colbert=ColbertConfig("file", maxsim="mean"))
    plain = make_model_info()
    assert multi_vector_output(multi, "m", None, None, None) == TOKENS_DOCUMENT
    assert multi_vector_output(multi, "m", None, "search_query", None) == TOKENS_QUERY
    assert multi_vector_output(m3, "m", None, None, None) is None
    assert multi_vector_output(m3, "m", True, "query", None) == TOKENS_QUERY
    assert multi_vector_output(plain, "m", None, "query", None) is None
    for info, wanted, kind, dims, param in [
        (multi, False, None, None, "multi_vector"),
        (plain, True, None, None, "multi_vector"),
        (multi, None, None, 4, "dimensions"),
        (multi, None, "passages", None, "input_type"),
    ]:
        with pytest.raises(EmbeddingError) as e:
            multi_vector_output(info, "m", wanted, kind, dims)
        assert e.value.param == param
    q = np.array([[1.0, 0.0], [0.0, 1.0]])
    d = np.array([[0.6, 0.8], [1.0, 0.0]])
    assert maxsim(q, d, "sum") == pytest.approx(1.8) and maxsim(q, d, "mean") == pytest.approx(0.9)
    assert maxsim(q, np.zeros((0, 2)), "sum") == 0.0
