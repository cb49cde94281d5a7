"""Every message family survives the frame codec unchanged, and nothing unregistered decodes."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from sglang.srt.managers.io_struct import (
    AbortReq,
    BatchEmbeddingOutput,
    BatchEmbeddingResult,
    BatchTokenizedEmbeddingReqInput,
    TokenizedEmbeddingReqInput,
)
from sglang.srt.utils.msgcodec import decode, encode


def _roundtrip(msg):
    frames = encode(msg)
    # What ZMQ hands the receiver: plain bytes per frame.
    return decode([bytes(f) for f in frames])


def test_tokenized_batch_roundtrip():
    reqs = [
        TokenizedEmbeddingReqInput(rid="a-0", worker_id=1, input_ids=np.array([101, 7, 102], np.int32),
                                   token_type_ids=np.array([0, 0, 1], np.int32), dimensions=64,
                                   encoding_format="base64", arrival_time=12.5),
        TokenizedEmbeddingReqInput(rid="a-1", worker_id=1, input_ids=np.array([5], np.int32)),
    ]
    back = _roundtrip(BatchTokenizedEmbeddingReqInput(reqs))
    assert isinstance(back, BatchTokenizedEmbeddingReqInput)
    for a, b in zip(reqs, back.reqs):
        assert a.rid == b.rid and a.worker_id == b.worker_id and a.dimensions == b.dimensions
        assert a.encoding_format == b.encoding_format and a.arrival_time == b.arrival_time
        np.testing.assert_array_equal(a.input_ids, b.input_ids)
        assert b.input_ids.dtype == np.int32
    np.testing.assert_array_equal(back.reqs[0].token_type_ids, reqs[0].token_type_ids)
    assert back.reqs[1].token_type_ids is None


def test_batch_output_roundtrip_keeps_float32_buffer():
    emb = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    out = BatchEmbeddingOutput(
        rids=["x", "y", "z"], worker_ids=[0, 1, 0], embeddings=emb, prompt_tokens=[3, 4, 5],
        dimensions=[None, 4, None], encoding_formats=["float", "base64", "raw"], error_codes=[0, 0, 500],
        error_messages=[None, None, "boom"], queue_times=[0.1, 0.2, 0.3], inference_time=0.01,
    )
    back = _roundtrip(out)
    np.testing.assert_array_equal(back.embeddings, emb)
    assert back.embeddings.dtype == np.float32
    assert back.rids == out.rids and back.error_messages == out.error_messages
    assert back.dimensions == [None, 4, None] and back.inference_time == 0.01


def test_result_and_abort_roundtrip():
    res = BatchEmbeddingResult(rids=["r"], payloads=[b"[1.0,2.0]"], prompt_tokens=[2], error_codes=[0],
                               error_messages=[None], queue_times=[0.0], inference_time=0.5)
    back = _roundtrip(res)
    assert back.payloads == [b"[1.0,2.0]"] and back.inference_time == 0.5
    assert _roundtrip(AbortReq(["a", "b"])).rids == ["a", "b"]


def test_vectors_travel_as_raw_frames_not_json():
    emb = np.ones((2, 1000), np.float32)
    frames = encode(BatchEmbeddingOutput(
        rids=["a", "b"], worker_ids=[0, 0], embeddings=emb, prompt_tokens=[1, 1], dimensions=[None, None],
        encoding_formats=["float"] * 2, error_codes=[0, 0], error_messages=[None, None], queue_times=[0, 0]))
    assert len(frames[0]) < 1000  # header only
    assert sum(memoryview(f).nbytes for f in frames[1:]) == emb.nbytes


def test_unknown_type_is_rejected():
    with pytest.raises(ValueError):
        decode([orjson.dumps({"__t__": "os.system", "x": 1})])
