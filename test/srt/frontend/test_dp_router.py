"""A TokenizerManager in front of two scheduler replicas (--dp-size 2) over real ZeroMQ sockets,
with the test playing both replicas and the detokenizer."""

from __future__ import annotations

import asyncio

import pytest
import zmq

from sglang.srt.errors import QUEUE_FULL_MESSAGE, EmbeddingError, ErrorKind
from sglang.srt.frontend.tokenizer_manager import TokenizerManager
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.network import PortArgs, make_socket
from sglang.srt.wire.io_struct import (
    AbortReq,
    BatchEmbeddingResult,
    BatchTokenizedEmbeddingReqInput,
    EmbeddingReqInput,
)
from sglang.srt.wire.msgcodec import encode
from test.helpers.model_info import make_model_info
from test.helpers.zmq_peer import next_message, next_message_of, stays_quiet

INFO = make_model_info(max_input_length=256, vocab_size=30522)


@pytest.fixture
def replicas():
    """Two bound scheduler inputs (replica 0 and 1) and the detokenizer's push to worker 0."""
    port_args = PortArgs.create()
    ctx = zmq.Context()
    scheds = [make_socket(ctx, zmq.PULL, port_args.scheduler_input_of(r), bind=True) for r in (0, 1)]
    detok = make_socket(ctx, zmq.PUSH, port_args.tokenizer_output(0), bind=False)
    yield port_args, scheds, detok
    ctx.destroy(linger=0)
    port_args.cleanup()


def _answer(detok, rids, codes=None):
    """Play the detokenizer: `[i]` payloads (i: the input's number in the text), or error codes."""
    n = len(rids)
    codes = codes or [0] * n
    detok.send_multipart(
        encode(
            BatchEmbeddingResult(
                rids=rids,
                payloads=[f"[{rid}]".encode() if c == 0 else b"" for rid, c in zip(rids, codes)],
                prompt_tokens=[3] * n,
                error_codes=codes,
                error_messages=[None if c == 0 else QUEUE_FULL_MESSAGE for c in codes],
                queue_times=[0.0] * n,
            )
        )
    )


def _make_tm(port_args, hf_tokenizer, **kw) -> TokenizerManager:
    tm = TokenizerManager(ServerArgs(dp_size=2, **kw), port_args, INFO, tokenizer=hf_tokenizer)
    tm.start()
    return tm


def test_a_request_is_split_over_both_replicas_and_answered_in_input_order(replicas, hf_tokenizer):
    port_args, scheds, detok = replicas

    async def scenario():
        tm = _make_tm(port_args, hf_tokenizer)
        texts = [f"text number {i}" for i in range(6)]
        task = asyncio.ensure_future(tm.embed(EmbeddingReqInput(text=texts)))
        parts = [await next_message(s) for s in scheds]
        assert all(isinstance(p, BatchTokenizedEmbeddingReqInput) for p in parts)
        assert sorted(len(p.reqs) for p in parts) == [3, 3]  # equal texts: an even split
        assert tm.router.loads[0].inputs == 3 and tm.router.loads[1].inputs == 3
        # Replica 1 answers first, each replica in reverse: the response is still in input order.
        _answer(detok, [r.rid for r in parts[1].reqs][::-1])
        _answer(detok, [r.rid for r in parts[0].reqs][::-1])
        result = await asyncio.wait_for(task, 5)
        rids_in_order = sorted((r.rid for p in parts for r in p.reqs), key=lambda rid: int(rid.rsplit("-", 1)[1]))
        assert result.payloads == [f"[{rid}]".encode() for rid in rids_in_order]
        assert [(load.inputs, load.tokens) for load in tm.router.loads] == [(0, 0), (0, 0)]
        await tm.close()

    asyncio.run(scenario())


def test_a_part_a_full_replica_refuses_is_sent_to_the_other_one(replicas, hf_tokenizer):
    port_args, scheds, detok = replicas

    async def scenario():
        tm = _make_tm(port_args, hf_tokenizer)
        task = asyncio.ensure_future(tm.embed(EmbeddingReqInput(text=["only one"])))
        first, part = await next_message_of(scheds)
        rid = part.reqs[0].rid
        _answer(detok, [rid], codes=[int(ErrorKind.QUEUE_FULL)])  # full (another worker filled it)
        again = await next_message(scheds[1 - first])
        assert [r.rid for r in again.reqs] == [rid]
        _answer(detok, [rid])
        assert (await asyncio.wait_for(task, 5)).payloads == [f"[{rid}]".encode()]

        # Refused by both: 429, and the request's part elsewhere is aborted where it is queued.
        task = asyncio.ensure_future(tm.embed(EmbeddingReqInput(text=["a", "b"])))
        a, b = [await next_message(s) for s in scheds]
        _answer(detok, [a.reqs[0].rid], codes=[int(ErrorKind.QUEUE_FULL)])
        moved = await next_message(scheds[1])
        assert [r.rid for r in moved.reqs] == [a.reqs[0].rid]
        _answer(detok, [a.reqs[0].rid], codes=[int(ErrorKind.QUEUE_FULL)])
        with pytest.raises(EmbeddingError) as err:
            await asyncio.wait_for(task, 5)
        assert err.value.kind == ErrorKind.QUEUE_FULL
        abort = await next_message(scheds[1])
        assert isinstance(abort, AbortReq) and abort.rids == [b.reqs[0].rid]
        assert await stays_quiet(scheds[0], 0.2)
        assert tm.num_in_flight == 0 and sum(load.inputs for load in tm.router.loads) == 0
        await tm.close()

    asyncio.run(scenario())


def test_cancel_aborts_on_every_replica_that_holds_inputs(replicas, hf_tokenizer):
    port_args, scheds, detok = replicas

    async def scenario():
        tm = _make_tm(port_args, hf_tokenizer)
        task = asyncio.ensure_future(tm.embed(EmbeddingReqInput(text=["one", "two", "three", "four"])))
        parts = [await next_message(s) for s in scheds]
        task.cancel()
        for sock, part in zip(scheds, parts):
            abort = await next_message(sock)
            assert isinstance(abort, AbortReq) and abort.rids == [r.rid for r in part.reqs]
        assert tm.num_in_flight == 0 and [load.inputs for load in tm.router.loads] == [0, 0]
        await tm.close()

    asyncio.run(scenario())


def test_admission_counts_every_replica_and_refuses_only_when_all_are_full(replicas, hf_tokenizer):
    port_args, scheds, detok = replicas

    async def scenario():
        # Queue 4 shared by 2 replicas (2 each) plus a batch of 2 running on each: 8 in flight.
        tm = _make_tm(port_args, hf_tokenizer, max_queue_size=4, max_batch_size=2)
        assert tm.admission_limit == 8
        first = asyncio.ensure_future(tm.embed(EmbeddingReqInput(text=["a", "b", "c", "d"])))
        assert [len((await next_message(s)).reqs) for s in scheds] == [2, 2]
        second = asyncio.ensure_future(tm.embed(EmbeddingReqInput(text=["e", "f", "g"])))
        sent = 0
        while sent < 3:  # its 3 inputs, on one replica or split over both
            sent += len((await next_message_of(scheds))[1].reqs)
        assert sent == 3
        assert tm.has_room(1) and not tm.has_room(2)
        with pytest.raises(EmbeddingError) as err:
            await tm.embed(EmbeddingReqInput(text=["h", "i"]))
        assert err.value.kind == ErrorKind.QUEUE_FULL
        for task in (first, second):
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        await tm.close()

    asyncio.run(scenario())
