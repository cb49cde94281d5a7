"""TokenizerManager over real ZeroMQ sockets, with the test playing scheduler and detokenizer."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import zmq

from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.tokenizer_manager import TokenizerManager
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.network import make_socket
from sglang.srt.wire.io_struct import (
    AbortReq,
    BatchEmbeddingResult,
    BatchTokenizedEmbeddingReqInput,
    EmbeddingReqInput,
    MultimodalItem,
)
from sglang.srt.wire.msgcodec import encode
from test.helpers.model_info import make_model_info
from test.helpers.zmq_peer import next_message, stays_quiet

INFO = make_model_info(max_input_length=256, vocab_size=30522)


def _send_results(detok, rids, payloads, prompt_tokens, queue_times=None, inference_time=0.01, **batch):
    """Play the detokenizer: successful results for `rids`."""
    n = len(rids)
    detok.send_multipart(
        encode(
            BatchEmbeddingResult(
                rids=rids,
                payloads=payloads,
                prompt_tokens=prompt_tokens,
                error_codes=[0] * n,
                error_messages=[None] * n,
                queue_times=queue_times or [0.0] * n,
                inference_time=inference_time,
                **batch,
            )
        )
    )


def test_results_resolve_in_order_and_cancel_sends_abort(harness, hf_tokenizer):
    port_args, ctx, sched = harness

    async def scenario():
        tm = TokenizerManager(ServerArgs(), port_args, INFO, tokenizer=hf_tokenizer)
        tm.start()
        detok = make_socket(ctx, zmq.PUSH, port_args.tokenizer_output(0), bind=False)
        task = asyncio.ensure_future(tm.embed(EmbeddingReqInput(text=["first", "second"])))
        msg = await next_message(sched)
        assert isinstance(msg, BatchTokenizedEmbeddingReqInput) and len(msg.reqs) == 2
        rids = [r.rid for r in msg.reqs]
        # Answer out of order: the result still comes back in input order.
        _send_results(detok, rids[::-1], [b"[2.0]", b"[1.0]"], [3, 3], queue_times=[0.001, 0.002])
        result = await asyncio.wait_for(task, 5)
        assert result.payloads == [b"[1.0]", b"[2.0]"] and tm.num_in_flight == 0

        # A cancelled request (client gone) is aborted at the scheduler.
        task = asyncio.ensure_future(tm.embed(EmbeddingReqInput(text=["third"])))
        queued = await next_message(sched)
        task.cancel()
        abort = await next_message(sched)
        assert isinstance(abort, AbortReq) and abort.rids == [queued.reqs[0].rid]
        assert tm.num_in_flight == 0

        # An error for one input fails the request and aborts its other inputs.
        task = asyncio.ensure_future(tm.embed(EmbeddingReqInput(text=["a", "b"])))
        queued = await next_message(sched)
        detok.send_multipart(
            encode(
                BatchEmbeddingResult(
                    rids=[queued.reqs[0].rid],
                    payloads=[b""],
                    prompt_tokens=[3],
                    error_codes=[ErrorKind.QUEUE_FULL],
                    error_messages=["Embedding request queue is full; retry later."],
                    queue_times=[0.0],
                )
            )
        )
        with pytest.raises(EmbeddingError) as err:
            await asyncio.wait_for(task, 5)
        assert err.value.kind == ErrorKind.QUEUE_FULL
        assert (await next_message(sched)).rids == [queued.reqs[1].rid]

        # The engine dying fails in-flight and later requests with 503.
        task = asyncio.ensure_future(tm.embed(EmbeddingReqInput(text=["c"])))
        await next_message(sched)  # in flight at the scheduler
        tm.on_engine_dead("scheduler exited")
        with pytest.raises(EmbeddingError) as err:
            await task
        assert err.value.kind == ErrorKind.UNAVAILABLE
        with pytest.raises(EmbeddingError):
            await tm.embed(EmbeddingReqInput(text=["d"]))
        await tm.close()

    asyncio.run(scenario())


def test_cancel_on_disconnect_cancels_work():
    from sglang.srt.frontend.http.http_server import ClientDisconnected, cancel_on_disconnect

    class FakeRequest:
        def __init__(self) -> None:
            self.gone = asyncio.Event()

        async def receive(self):
            await self.gone.wait()
            return {"type": "http.disconnect"}

    async def scenario():
        req = FakeRequest()
        started = asyncio.Event()
        cancelled = []

        async def work():
            started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(True)
                raise

        task = asyncio.ensure_future(cancel_on_disconnect(req, work()))
        await started.wait()
        req.gone.set()
        with pytest.raises(ClientDisconnected):
            await task
        assert cancelled == [True]
        # A client that stays connected gets its result.
        assert await cancel_on_disconnect(FakeRequest(), asyncio.sleep(0, result=7)) == 7

    asyncio.run(scenario())


def test_backstop_answers_504_and_aborts_when_no_answer_comes(harness, hf_tokenizer):
    port_args, ctx, sched = harness

    async def scenario():
        tm = TokenizerManager(ServerArgs(request_timeout=0.2), port_args, INFO, tokenizer=hf_tokenizer)
        tm.start()
        assert tm.backstop_timeout == pytest.approx(0.4)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(EmbeddingError) as err:
            await asyncio.wait_for(tm.embed(EmbeddingReqInput(text=["never answered"])), 5)
        assert err.value.kind == ErrorKind.TIMEOUT and 0.35 < loop.time() - t0 < 2.0
        queued = await next_message(sched)
        abort = await next_message(sched)
        assert isinstance(abort, AbortReq) and abort.rids == [queued.reqs[0].rid]
        assert tm.num_in_flight == 0
        await tm.close()

    asyncio.run(scenario())


def test_two_requests_keep_answers_apart_and_metrics_count(harness, hf_tokenizer):
    port_args, ctx, sched = harness

    async def scenario():
        tm = TokenizerManager(ServerArgs(), port_args, INFO, tokenizer=hf_tokenizer)
        tm.start()
        detok = make_socket(ctx, zmq.PUSH, port_args.tokenizer_output(0), bind=False)
        first = asyncio.ensure_future(tm.embed(EmbeddingReqInput(text=["one"])))
        second = asyncio.ensure_future(tm.embed(EmbeddingReqInput(text=["two two"])))
        rids = [(await next_message(sched)).reqs[0].rid for _ in range(2)]
        assert len(set(rids)) == 2  # every input gets a fresh internal id
        _send_results(
            detok,
            rids,
            [b"[1.0]", b"[2.0]"],
            [3, 4],
            queue_times=[0.01, 0.02],
            inference_time=0.03,
        )
        a, b = await asyncio.wait_for(asyncio.gather(first, second), 5)
        assert a.payloads == [b"[1.0]"] and b.payloads == [b"[2.0]"]
        m = tm.metrics
        assert m.prompt_tokens.get() == 7 and m.inputs.get() == 2
        # Batch shapes and the queue are the scheduler's own metrics now (scheduler_metrics.py).
        assert m.queue_duration.count() == 2 and m.inference_duration.sum() == pytest.approx(0.06)
        await tm.close()

    asyncio.run(scenario())


@pytest.mark.slow
def test_huge_text_is_tokenized_off_the_event_loop(harness, hf_tokenizer):
    port_args, ctx, sched = harness

    async def scenario():
        tm = TokenizerManager(ServerArgs(), port_args, INFO, tokenizer=hf_tokenizer)
        tm.start()
        loop = asyncio.get_running_loop()
        gaps = []

        async def ticker():
            last = loop.time()
            while True:
                await asyncio.sleep(0.01)
                now = loop.time()
                gaps.append(now - last)
                last = now

        tick = asyncio.ensure_future(ticker())
        t0 = loop.time()
        with pytest.raises(EmbeddingError) as err:  # 400: far beyond the context length
            await tm.embed(EmbeddingReqInput(text=["hello world " * 150_000]))
        took = loop.time() - t0
        tick.cancel()
        assert err.value.kind == ErrorKind.INVALID_REQUEST and "context length" in err.value.message
        blocked = max(gaps, default=took)
        assert blocked < max(0.25, took / 3), f"event loop blocked {blocked:.2f} s of {took:.2f} s"
        await tm.close()

    asyncio.run(scenario())


def test_refuses_at_once_when_its_inputs_in_flight_fill_queue_and_batch(harness, hf_tokenizer):
    port_args, ctx, sched = harness

    async def scenario():
        # Queue 2, batch 8: the scheduler holds at most 2 waiting + 2 running, so 4 in flight.
        tm = TokenizerManager(ServerArgs(max_queue_size=2, max_batch_size=8), port_args, INFO, tokenizer=hf_tokenizer)
        tm.start()
        assert tm.admission_limit == 4
        detok = make_socket(ctx, zmq.PUSH, port_args.tokenizer_output(0), bind=False)
        first = asyncio.ensure_future(tm.embed(EmbeddingReqInput(text=["one", "two"])))
        second = asyncio.ensure_future(tm.embed(EmbeddingReqInput(text=["three"])))
        sent = [await next_message(sched), await next_message(sched)]
        assert tm.num_in_flight == 3

        with pytest.raises(EmbeddingError) as err:  # 3 + 2 > 4: refused without reaching the scheduler
            await tm.embed(EmbeddingReqInput(text=["four", "five"]))
        assert err.value.kind == ErrorKind.QUEUE_FULL
        assert err.value.message == "Embedding request queue is full; retry later."
        assert await stays_quiet(sched, 0.2), "a refused request reached the scheduler"
        assert tm.num_in_flight == 3

        third = asyncio.ensure_future(tm.embed(EmbeddingReqInput(text=["six"])))  # 3 + 1 fits
        sent.append(await next_message(sched))
        rids = [r.rid for msg in sent for r in msg.reqs]
        _send_results(detok, rids, [b"[1.0]"] * 4, [3] * 4)
        for task in (first, second, third):
            await asyncio.wait_for(task, 5)
        assert tm.num_in_flight == 0
        later = asyncio.ensure_future(tm.embed(EmbeddingReqInput(text=["four", "five"])))  # room again
        assert len((await next_message(sched)).reqs) == 2
        later.cancel()
        with pytest.raises(asyncio.CancelledError):
            await later
        await tm.close()

    asyncio.run(scenario())


def test_a_request_with_items_counts_as_image_work_until_answered(harness, hf_tokenizer):
    """The HTTP process trims its heap once no request with images is in flight
    (multimodal/image_heap_trim.py): a request's pixels travel in its messages, so it counts until
    its answer, not until its images are loaded. Text requests do not count."""
    port_args, ctx, sched = harness
    events = []

    @contextlib.contextmanager
    def request_in_flight():
        events.append("begin")
        try:
            yield
        finally:
            events.append("end")

    async def scenario():
        tm = TokenizerManager(ServerArgs(), port_args, INFO, tokenizer=hf_tokenizer)
        tm.multimodal.request_in_flight = request_in_flight
        tm.start()
        detok = make_socket(ctx, zmq.PUSH, port_args.tokenizer_output(0), bind=False)
        task = asyncio.ensure_future(tm.embed(EmbeddingReqInput(items=[MultimodalItem(text="a cat")])))
        msg = await next_message(sched)
        assert events == ["begin"]  # sent to the scheduler, not answered yet
        _send_results(detok, [msg.reqs[0].rid], [b"[1.0]"], [3])
        await asyncio.wait_for(task, 5)
        assert events == ["begin", "end"]
        task = asyncio.ensure_future(tm.embed(EmbeddingReqInput(text=["a dog"])))
        msg = await next_message(sched)
        _send_results(detok, [msg.reqs[0].rid], [b"[1.0]"], [3])
        await asyncio.wait_for(task, 5)
        assert events == ["begin", "end"]
        await tm.close()

    asyncio.run(scenario())
