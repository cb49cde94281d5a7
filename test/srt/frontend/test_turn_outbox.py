"""TurnOutbox: the requests dispatched to one replica in one event-loop turn go out as one message
whose groups keep each request's inputs together; each caller's wait is its own."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import zmq
import zmq.asyncio

from sglang.srt.frontend.dp_router import ReplicaRouter
from sglang.srt.frontend.turn_outbox import TurnOutbox
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.network import PortArgs, make_socket
from sglang.srt.wire.io_struct import AbortReq, BatchTokenizedEmbeddingReqInput, TokenizedEmbeddingReqInput
from test.helpers.zmq_peer import next_raw_message, stays_quiet


def _inputs(*rids: str) -> list[TokenizedEmbeddingReqInput]:
    return [TokenizedEmbeddingReqInput(rid, 0, np.arange(3, dtype=np.int32)) for rid in rids]


@pytest.fixture
def pipe(tmp_path):
    """(the scheduler's plain PULL, a factory of the HTTP side's asyncio PUSH)."""
    address = f"ipc://{tmp_path}/scheduler-in"
    ctx, actx = zmq.Context(), zmq.asyncio.Context()
    pull = ctx.socket(zmq.PULL)
    pull.bind(address)
    pushes = []

    def push():
        sock = actx.socket(zmq.PUSH)
        sock.connect(address)
        pushes.append(sock)
        return sock

    yield pull, push
    for sock in (pull, *pushes):
        sock.close(linger=0)
    ctx.term()
    actx.term()


def test_the_requests_of_one_turn_travel_as_one_message(pipe):
    pull, push = pipe

    async def scenario():
        outbox = TurnOutbox(push())
        first, second = outbox.add(_inputs("a-0")), outbox.add(_inputs("b-0", "b-1"))
        assert not first.done()  # nothing is sent before the turn ends
        msg = await next_raw_message(pull)
        assert isinstance(msg, BatchTokenizedEmbeddingReqInput)
        assert [r.rid for r in msg.reqs] == ["a-0", "b-0", "b-1"] and msg.group_sizes == [1, 2]
        await asyncio.wait_for(asyncio.gather(first, second), 5)
        third = outbox.add(_inputs("c-0"))  # a later turn: a message of its own, one request
        msg = await next_raw_message(pull)
        assert [r.rid for r in msg.reqs] == ["c-0"] and msg.group_sizes is None
        await asyncio.wait_for(third, 5)
        assert await stays_quiet(pull, 0.1)

    asyncio.run(scenario())


def test_cancelling_one_request_does_not_cancel_the_others_wait(pipe):
    pull, push = pipe

    async def scenario():
        outbox = TurnOutbox(push())

        async def dispatch(rid: str) -> str:
            await outbox.add(_inputs(rid))
            return rid

        tasks = [asyncio.ensure_future(dispatch(rid)) for rid in ("a-0", "b-0", "c-0")]
        await asyncio.sleep(0)  # each task queued its inputs and waits
        tasks[1].cancel()
        msg = await next_raw_message(pull)
        assert [r.rid for r in msg.reqs] == ["a-0", "b-0", "c-0"]  # already queued: still sent
        assert await asyncio.wait_for(tasks[0], 5) == "a-0" and await asyncio.wait_for(tasks[2], 5) == "c-0"
        with pytest.raises(asyncio.CancelledError):
            await tasks[1]

    asyncio.run(scenario())


def test_a_failed_send_reaches_every_request_of_the_turn(pipe):
    _, push = pipe

    async def scenario():
        sock = push()
        outbox = TurnOutbox(sock)
        waits = [outbox.add(_inputs("a-0")), outbox.add(_inputs("b-0"))]
        sock.close(linger=0)
        for wait in waits:
            with pytest.raises(zmq.ZMQError):
                await asyncio.wait_for(wait, 5)

    asyncio.run(scenario())


def test_an_abort_does_not_overtake_inputs_dispatched_in_the_same_turn():
    """The scheduler must see the inputs before the abort that drops them, or it would run them."""
    port_args = PortArgs.create()
    ctx = zmq.Context()
    sched = make_socket(ctx, zmq.PULL, port_args.scheduler_input_of(0), bind=True)

    async def scenario():
        router = ReplicaRouter(ServerArgs(), port_args, zmq.asyncio.Context())
        sends = router.dispatch(_inputs("a-0", "a-1"))
        router.abort(["a-0", "a-1"])
        first, second = await next_raw_message(sched), await next_raw_message(sched)
        assert isinstance(first, BatchTokenizedEmbeddingReqInput) and [r.rid for r in first.reqs] == ["a-0", "a-1"]
        assert isinstance(second, AbortReq) and second.rids == ["a-0", "a-1"]
        await asyncio.wait_for(asyncio.gather(*sends), 5)
        assert await stays_quiet(sched, 0.1)  # the flush at the end of the turn had nothing left

    try:
        asyncio.run(scenario())
    finally:
        ctx.destroy(linger=0)
        port_args.cleanup()
