"""Every message family survives the frame codec unchanged, and nothing unregistered decodes."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from sglang.srt.errors import ErrorKind
from sglang.srt.wire.io_struct import (
    AbortReq,
    BatchEmbeddingOutput,
    BatchEmbeddingResult,
    BatchTokenizedEmbeddingReqInput,
    EmbeddingReqInput,
    TokenizedEmbeddingReqInput,
)
from sglang.srt.wire.msgcodec import decode, encode
from sglang.srt.wire.output_spec import Format, OutputSpec, Task


def _roundtrip(msg):
    frames = encode(msg)
    # What ZMQ hands the receiver: plain bytes per frame.
    return decode([bytes(f) for f in frames])


def test_tokenized_batch_roundtrip():
    reqs = [
        TokenizedEmbeddingReqInput(
            rid="a-0",
            worker_id=1,
            input_ids=np.array([101, 7, 102], np.int32),
            token_type_ids=np.array([0, 0, 1], np.int32),
            output=OutputSpec(Task.DENSE, Format.BASE64, dimensions=64, normalize=True),
            arrival_time=12.5,
        ),
        TokenizedEmbeddingReqInput(rid="a-1", worker_id=1, input_ids=np.array([5], np.int32)),
    ]
    back = _roundtrip(BatchTokenizedEmbeddingReqInput(reqs))
    assert isinstance(back, BatchTokenizedEmbeddingReqInput)
    for a, b in zip(reqs, back.reqs):
        assert a.rid == b.rid and a.worker_id == b.worker_id and a.output == b.output
        assert a.arrival_time == b.arrival_time
        np.testing.assert_array_equal(a.input_ids, b.input_ids)
        assert b.input_ids.dtype == np.int32
    np.testing.assert_array_equal(back.reqs[0].token_type_ids, reqs[0].token_type_ids)
    assert back.reqs[1].token_type_ids is None


def test_image_fields_roundtrip_as_raw_frames():
    rng = np.random.default_rng(0)
    pixels = rng.standard_normal((32, 1176)).astype(np.float32)
    grid = np.array([[1, 4, 8]], np.int64)
    positions = np.arange(3 * 12, dtype=np.int64).reshape(3, 12)
    req = TokenizedEmbeddingReqInput(
        rid="m-0",
        worker_id=0,
        input_ids=np.arange(12, dtype=np.int32),
        pixel_values=pixels,
        image_grid_thw=grid,
        mrope_positions=positions,
    )
    frames = encode(BatchTokenizedEmbeddingReqInput([req, TokenizedEmbeddingReqInput("t-0", 0, np.ones(3, np.int32))]))
    assert len(frames[0]) < 2000  # the pixels are a frame of their own, not JSON
    back = decode([bytes(f) for f in frames])
    image, text = back.reqs
    for name, want in (("pixel_values", pixels), ("image_grid_thw", grid), ("mrope_positions", positions)):
        got = getattr(image, name)
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert getattr(text, name) is None


def test_batch_output_roundtrip_keeps_float32_buffer():
    emb = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    out = BatchEmbeddingOutput(
        rids=["x", "y", "z"],
        worker_ids=[0, 1, 0],
        embeddings=emb,
        prompt_tokens=[3, 4, 5],
        outputs=[OutputSpec(), OutputSpec(format=Format.BASE64, dimensions=4), OutputSpec(format=Format.ARRAY)],
        error_codes=[0, 0, ErrorKind.INTERNAL],
        error_messages=[None, None, "boom"],
        queue_times=[0.1, 0.2, 0.3],
        inference_time=0.01,
    )
    back = _roundtrip(out)
    np.testing.assert_array_equal(back.embeddings, emb)
    assert back.embeddings.dtype == np.float32
    assert back.rids == out.rids and back.error_messages == out.error_messages
    assert back.outputs == out.outputs and back.inference_time == 0.01


def test_batch_output_roundtrip_keeps_sparse_columns():
    out = BatchEmbeddingOutput(
        rids=["d", "s1", "s2"],
        worker_ids=[0, 0, 0],
        embeddings=np.zeros((3, 4), np.float32),
        prompt_tokens=[3, 4, 2],
        outputs=[OutputSpec(), OutputSpec(Task.SPARSE, Format.SPARSE_TEI), OutputSpec(Task.SPARSE, Format.SPARSE_DICT)],
        error_codes=[0, 0, 0],
        error_messages=[None] * 3,
        queue_times=[0.0] * 3,
        sparse_indices=np.array([7, 19, 4], np.int32),
        sparse_values=np.array([0.5, 1.25, 2.0], np.float32),
        sparse_offsets=np.array([0, 0, 2, 3], np.int64),
    )
    back = _roundtrip(out)
    for name in ("sparse_indices", "sparse_values", "sparse_offsets"):
        np.testing.assert_array_equal(getattr(back, name), getattr(out, name))
        assert getattr(back, name).dtype == getattr(out, name).dtype
    dense_only = _roundtrip(BatchEmbeddingOutput.failure([], 500, "x"))
    assert dense_only.sparse_indices is None and dense_only.sparse_offsets is None


def test_result_and_abort_roundtrip():
    res = BatchEmbeddingResult(
        rids=["r"],
        payloads=[b"[1.0,2.0]"],
        prompt_tokens=[2],
        error_codes=[0],
        error_messages=[None],
        queue_times=[0.0],
        inference_time=0.5,
    )
    back = _roundtrip(res)
    assert back.payloads == [b"[1.0,2.0]"] and back.inference_time == 0.5
    assert _roundtrip(AbortReq(["a", "b"])).rids == ["a", "b"]


def test_vectors_travel_as_raw_frames_not_json():
    emb = np.ones((2, 1000), np.float32)
    frames = encode(
        BatchEmbeddingOutput(
            rids=["a", "b"],
            worker_ids=[0, 0],
            embeddings=emb,
            prompt_tokens=[1, 1],
            outputs=[OutputSpec()] * 2,
            error_codes=[0, 0],
            error_messages=[None, None],
            queue_times=[0, 0],
        )
    )
    assert len(frames[0]) < 1000  # header only
    assert sum(memoryview(f).nbytes for f in frames[1:]) == emb.nbytes


def test_unknown_type_is_rejected():
    with pytest.raises(ValueError):
        decode([orjson.dumps({"__t__": "os.system", "x": 1})])


def test_request_split_keeps_order_and_every_other_field():
    req = EmbeddingReqInput(text=[f"t{i}" for i in range(7)], dimensions=64, encoding_format="base64")
    parts = req.split(3)
    assert [p.text for p in parts] == [["t0", "t1", "t2"], ["t3", "t4", "t5"], ["t6"]]
    assert all((p.dimensions, p.encoding_format, p.input_ids) == (64, "base64", None) for p in parts)
    pairs = EmbeddingReqInput(text_pairs=[("q", f"d{i}") for i in range(4)])
    assert [len(p.text_pairs) for p in pairs.split(2)] == [2, 2]
    ids = EmbeddingReqInput(input_ids=[[1], [2], [3]])
    assert [p.input_ids for p in ids.split(2)] == [[[1], [2]], [[3]]]
    assert req.split(7) == [req]


def test_output_options_cross_both_links():
    """An input's OutputSpec reaches the scheduler (tokenized input) and the renderer (output
    column) unchanged; an input without one gets the plain dense float vector's."""
    spec = OutputSpec(Task.DENSE, Format.BASE64, normalize=False, dtype="bfloat16", endianness="big")
    req = TokenizedEmbeddingReqInput(rid="o-0", worker_id=0, input_ids=np.ones(2, np.int32), output=spec)
    (back,) = _roundtrip(BatchTokenizedEmbeddingReqInput([req])).reqs
    assert back.output == spec
    plain = _roundtrip(BatchTokenizedEmbeddingReqInput([TokenizedEmbeddingReqInput("p", 0, np.ones(1, np.int32))]))
    assert plain.reqs[0].output == OutputSpec()
    assert _roundtrip(BatchEmbeddingOutput.failure([req], ErrorKind.INTERNAL, "x")).outputs == [spec]


def test_array_payloads_roundtrip_typed():
    """Format.ARRAY rows reach the HTTP process as float32 arrays, not bytes to decode."""
    rows = [np.array([0.5, -1.0], np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)]
    res = BatchEmbeddingResult(["a", "b", "c"], rows + [b"[1.0]"], [1, 1, 1], [0, 0, 0], [None] * 3, [0.0] * 3)
    back = _roundtrip(res)
    for got, want in zip(back.payloads, rows):
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    assert back.payloads[2] == b"[1.0]"


def test_request_split_keeps_the_per_request_options():
    req = EmbeddingReqInput(
        text=["a", "b", "c"], truncate=True, truncation_side="left", max_tokens=5, prompt="query: ", normalize=False
    )
    for part in req.split(2):
        assert (part.truncate, part.truncation_side, part.max_tokens, part.prompt, part.normalize) == (
            True,
            "left",
            5,
            "query: ",
            False,
        )


def test_several_requests_in_one_message_keep_their_groups():
    """The requests one HTTP process dispatched in one event-loop turn travel as one message; the
    group sizes say where each request's inputs start, and survive the trip."""
    reqs = [TokenizedEmbeddingReqInput(f"g-{i}", 0, np.full(i + 1, i, np.int32)) for i in range(4)]
    back = _roundtrip(BatchTokenizedEmbeddingReqInput(reqs, [1, 3]))
    assert back.group_sizes == [1, 3]
    assert [[r.rid for r in g] for g in back.groups()] == [["g-0"], ["g-1", "g-2", "g-3"]]
    assert [[r.rid for r in g] for g in BatchTokenizedEmbeddingReqInput(reqs).groups()] == [[r.rid for r in reqs]]


@pytest.mark.parametrize("sizes", [[1, 2], [2, 3], [4, 0], [5, -1]])
def test_group_sizes_that_do_not_split_the_inputs_are_refused(sizes):
    reqs = [TokenizedEmbeddingReqInput(f"g-{i}", 0, np.ones(1, np.int32)) for i in range(4)]
    with pytest.raises(ValueError, match="do not split"):
        BatchTokenizedEmbeddingReqInput(reqs, sizes).groups()
