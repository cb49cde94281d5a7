"""Chunked inputs in the scheduler: queued per chunk, answered as their token-weighted mean."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from sglang.srt.errors import ErrorKind
from sglang.srt.model_executor.forward_io import ForwardOutput
from sglang.srt.scheduler.chunk_merge import ChunkMerger, select_rows
from sglang.srt.scheduler.scheduler import Scheduler
from sglang.srt.server_args import ServerArgs
from sglang.srt.wire.io_struct import BatchEmbeddingOutput, TokenizedEmbeddingReqInput


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _req(rid, n=3, chunk_lens=None, t=100.0):
    ids = np.arange(n, dtype=np.int32) + 10 * len(rid)
    lens = None if chunk_lens is None else np.asarray(chunk_lens, dtype=np.int32)
    return TokenizedEmbeddingReqInput(rid=rid, worker_id=0, input_ids=ids, arrival_time=t, chunk_lens=lens)


def _rows_of(batches):
    """A fake forward: row = [first id, token count, 1, 1], recording each batch's token counts."""

    def fn(reqs):
        batches.append([r.num_tokens for r in reqs])
        return ForwardOutput(np.stack([np.array([r.input_ids[0], r.num_tokens, 1, 1], np.float32) for r in reqs]))

    return fn


def test_chunks_run_in_budgeted_batches_and_come_back_as_one_weighted_row():
    batches = []
    s = Scheduler(ServerArgs(max_num_tokens=8), _rows_of(batches), Clock())
    assert s.add_requests([_req("a", 2), _req("long", 12, [5, 5, 2]), _req("b", 3)]) is None
    assert list(s.waiting) == ["a", "long#0", "long#1", "long#2", "b"]
    outs = []
    while s.waiting:
        out, _ = s.step()
        outs.append(out)
    assert batches == [[2, 5], [5, 2], [3]]  # each chunk under the token budget like any input
    assert [o.rids for o in outs] == [["a"], ["long"], ["b"]]
    merged = outs[1]
    first_ids = [40, 45, 50]  # the chunks' first ids: 40 + offsets 0, 5, 10
    expect = np.array([np.dot(first_ids, [5, 5, 2]) / 12, (25 + 25 + 4) / 12, 1, 1], np.float32)
    np.testing.assert_allclose(merged.embeddings[0], expect, rtol=1e-6)
    assert merged.prompt_tokens == [12] and merged.error_codes == [0]
    assert not s.chunks.inputs and not s.chunks.owner


def test_abort_drops_every_chunk_of_the_input():
    s = Scheduler(ServerArgs(max_num_tokens=5), _rows_of([]), Clock())
    s.add_requests([_req("long", 12, [5, 5, 2]), _req("b", 3)])
    out, _ = s.step()  # chunk 0 ran; 1 and 2 still queued
    assert out.rids == []
    assert s.abort(["long"]) == 2
    assert list(s.waiting) == ["b"] and not s.chunks.inputs and not s.chunks.owner


def test_timeout_fails_the_input_once_and_drops_its_siblings():
    clock = Clock()
    s = Scheduler(ServerArgs(max_num_tokens=5, request_timeout=1.0), _rows_of([]), clock)
    s.add_requests([_req("long", 12, [5, 5, 2])])
    s.step()  # chunk 0 ran
    clock.t += 5
    out, wait = s.step()
    assert out.rids == ["long"] and out.error_codes == [ErrorKind.TIMEOUT] and out.prompt_tokens == [12]
    assert not s.waiting and wait is None and not s.chunks.inputs


def test_a_failing_forward_fails_the_input_and_drops_queued_chunks():
    def boom(reqs):
        raise RuntimeError("no")

    s = Scheduler(ServerArgs(max_num_tokens=5), boom, Clock())
    s.add_requests([_req("long", 12, [5, 5, 2]), _req("b", 3)])
    out, _ = s.step()
    assert out.rids == ["long"] and out.error_codes == [ErrorKind.INTERNAL]
    assert list(s.waiting) == ["b"]


def test_queue_full_refuses_the_input_not_its_chunks():
    s = Scheduler(ServerArgs(max_queue_size=2), _rows_of([]), Clock())
    out = s.add_requests([_req("long", 12, [5, 5, 2])])  # 3 chunks, 2 places
    assert out.rids == ["long"] and out.error_codes == [ErrorKind.QUEUE_FULL]
    assert not s.waiting and not s.chunks.inputs and not s.chunks.owner


def test_select_rows_keeps_packed_rows_of_other_inputs():
    base = BatchEmbeddingOutput.failure([_req("sparse"), _req("chunk"), _req("dense")], ErrorKind.INTERNAL, "-")
    out = replace(
        base,
        worker_ids=[0, 0, 1],
        embeddings=np.arange(6, dtype=np.float32).reshape(3, 2),
        error_codes=[0, 0, 0],
        sparse_indices=np.array([7, 8], np.int32),
        sparse_values=np.array([0.5, 0.25], np.float32),
        sparse_offsets=np.array([0, 2, 2, 2], np.int64),
    )
    new = select_rows(out, [(0, None), (2, None), (1, {"rids": "input", "embeddings": np.array([9, 9])})])
    assert new.rids == ["sparse", "dense", "input"] and new.worker_ids == [0, 1, 0]
    assert new.sparse_offsets.tolist() == [0, 2, 2, 2]
    assert new.embeddings.tolist() == [[0, 1], [4, 5], [9, 9]]


def test_merger_ignores_outputs_without_chunks():
    m = ChunkMerger()
    out = BatchEmbeddingOutput.failure([_req("x")], ErrorKind.INTERNAL, "e")
    assert m.finish(out, {}) is out


def test_chunk_lens_travel_through_the_codec():
    from sglang.srt.wire.msgcodec import decode, encode

    req = _req("long", 12, [5, 5, 2])
    back = decode(encode(req))
    assert back.chunk_lens.tolist() == [5, 5, 2] and back.chunk_lens.dtype == np.int32
    assert decode(encode(_req("x"))).chunk_lens is None
