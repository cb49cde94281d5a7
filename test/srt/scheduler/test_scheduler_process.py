"""The scheduler process's loop: batches go out (counted in the metrics before their answers leave),
the allocator hears of each, and idle time gives freed memory back without delaying a request that
arrives meanwhile."""

from __future__ import annotations

import time

import numpy as np
import pytest
import zmq

from sglang.srt.errors import QUEUE_FULL_MESSAGE, ErrorKind
from sglang.srt.metrics.scheduler_metrics import SchedulerMetrics
from sglang.srt.scheduler.scheduler_process import SchedulerLoop
from sglang.srt.utils.allocator import AllocatorPlan, SchedulerMemory
from sglang.srt.wire.io_struct import (
    AbortReq,
    BatchEmbeddingOutput,
    BatchTokenizedEmbeddingReqInput,
    TokenizedEmbeddingReqInput,
)
from sglang.srt.wire.msgcodec import decode, send
from sglang.srt.wire.output_spec import OutputSpec

IDLE_S = 0.05


def _output(tokens: int) -> BatchEmbeddingOutput:
    return BatchEmbeddingOutput(
        rids=["r"],
        worker_ids=[0],
        embeddings=np.zeros((1, 4), np.float32),
        prompt_tokens=[tokens],
        outputs=[OutputSpec()],
        error_codes=[0],
        error_messages=[None],
        queue_times=[0.0],
        batch_size=1,
        batch_tokens=tokens,
    )


class FakeScheduler:
    def __init__(self, outputs: list[BatchEmbeddingOutput]) -> None:
        self.waiting: list = []
        self.outputs = outputs
        self.steps, self.aborted = 0, []

    def step(self):
        self.steps += 1
        return (self.outputs.pop(0) if self.outputs else None), None

    def abort(self, rids: list[str]) -> None:
        self.aborted += rids


class FakeMemory:
    def __init__(self) -> None:
        self.batches: list[int] = []
        self.releases = 0
        self.holding = False

    def after_batch(self, num_tokens: int) -> None:
        self.batches.append(num_tokens)
        self.holding = True

    def idle_release_s(self):
        return IDLE_S if self.holding else None

    def release(self) -> None:
        self.releases += 1
        self.holding = False


@pytest.fixture
def sockets():
    ctx = zmq.Context()
    recv = ctx.socket(zmq.PULL)
    recv.bind("inproc://scheduler-in")
    into = ctx.socket(zmq.PUSH)
    into.connect("inproc://scheduler-in")
    out_pull = ctx.socket(zmq.PULL)
    out_pull.bind("inproc://scheduler-out")
    out_push = ctx.socket(zmq.PUSH)
    out_push.connect("inproc://scheduler-out")
    yield recv, into, out_push, out_pull
    for sock in (recv, into, out_pull, out_push):
        sock.close(linger=0)
    ctx.term()


def test_a_batch_is_sent_then_idle_time_gives_memory_back(sockets):
    recv, _, out_push, out_pull = sockets
    scheduler, memory = FakeScheduler([_output(300)]), FakeMemory()
    loop = SchedulerLoop(scheduler, recv, out_push, memory)
    assert loop.run_once(0.0) is None  # the batch ran: nothing else to do
    assert decode(out_pull.recv_multipart()).batch_tokens == 300
    assert memory.batches == [300] and memory.releases == 0
    start = time.monotonic()
    assert loop.run_once(None) is None  # idle with memory held: wakes after IDLE_S, releases
    assert memory.releases == 1 and time.monotonic() - start >= IDLE_S * 0.9
    assert scheduler.steps == 1  # the release is not a scheduler step


def test_a_request_during_the_idle_wait_is_served_first(sockets):
    recv, into, out_push, _ = sockets
    scheduler, memory = FakeScheduler([]), FakeMemory()
    memory.holding = True
    send(into, AbortReq(rids=["x"]))
    loop = SchedulerLoop(scheduler, recv, out_push, memory)
    loop.run_once(None)
    assert scheduler.aborted == ["x"] and scheduler.steps == 1 and memory.releases == 0


def test_without_an_allocator_set_up_idle_waits_have_no_deadline(sockets):
    recv, _, out_push, _ = sockets
    memory = SchedulerMemory(AllocatorPlan("off", "off"))
    memory.after_batch(10_000)
    assert memory.idle_release_s() is None and memory.releases == 0
    loop = SchedulerLoop(FakeScheduler([]), recv, out_push)  # the default memory is "off" too
    assert loop.memory.idle_release_s() is None


def test_a_batch_is_counted_before_its_answer_is_sent(sockets, monkeypatch):
    # A client that scrapes /metrics right after its response must see the batch that served it.
    import sglang.srt.scheduler.scheduler_process as scheduler_process

    recv, _, out_push, out_pull = sockets
    metrics = SchedulerMetrics("m", {"dp_rank": "1"})
    counted_at_send = []
    real_send = scheduler_process.send

    def send_after_looking(sock, msg):
        counted_at_send.append(_batches_counted(metrics))
        real_send(sock, msg)

    monkeypatch.setattr(scheduler_process, "send", send_after_looking)
    loop = SchedulerLoop(FakeScheduler([_output(300)]), recv, out_push, FakeMemory(), metrics)
    loop.run_once(0.0)
    assert decode(out_pull.recv_multipart()).batch_tokens == 300
    assert counted_at_send == [1.0]


def _batches_counted(metrics: SchedulerMetrics) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(metrics.registry.render().decode()):
        for sample in family.samples:
            if sample.name == "sglang_batch_size_count":
                return sample.value
    return 0.0


class RecordingScheduler(FakeScheduler):
    """Takes requests as Scheduler.add_requests does: a request whose inputs exceed the room left
    is refused whole; the others queue."""

    def __init__(self, room: int) -> None:
        super().__init__([])
        self.room = room
        self.groups: list[list[str]] = []

    def add_requests(self, reqs):
        self.groups.append([r.rid for r in reqs])
        if len(reqs) > self.room:
            return BatchEmbeddingOutput.failure(reqs, ErrorKind.QUEUE_FULL, QUEUE_FULL_MESSAGE)
        self.room -= len(reqs)
        return None


def _inputs(*rids: str) -> list[TokenizedEmbeddingReqInput]:
    return [TokenizedEmbeddingReqInput(rid, 0, np.ones(3, np.int32)) for rid in rids]


def test_each_request_of_a_several_request_message_is_accepted_or_refused_whole(sockets):
    """One message holds three requests (one event-loop turn of an HTTP process): with room for
    three inputs, the first two requests fit and the third (two inputs) is refused, alone."""
    recv, into, out_push, out_pull = sockets
    scheduler = RecordingScheduler(room=3)
    send(into, BatchTokenizedEmbeddingReqInput(_inputs("a-0", "b-0", "b-1", "c-0", "c-1"), [1, 2, 2]))
    SchedulerLoop(scheduler, recv, out_push, FakeMemory()).run_once(0.0)
    assert scheduler.groups == [["a-0"], ["b-0", "b-1"], ["c-0", "c-1"]]
    refused = decode(out_pull.recv_multipart())
    assert refused.rids == ["c-0", "c-1"] and refused.error_codes == [ErrorKind.QUEUE_FULL] * 2


def test_a_message_whose_groups_do_not_split_its_inputs_is_dropped(sockets):
    recv, into, out_push, out_pull = sockets
    scheduler = RecordingScheduler(room=10)
    send(into, BatchTokenizedEmbeddingReqInput(_inputs("x-0", "x-1"), [3]))
    send(into, AbortReq(rids=["y"]))
    SchedulerLoop(scheduler, recv, out_push, FakeMemory()).run_once(0.0)
    assert scheduler.groups == [] and scheduler.aborted == ["y"]  # the next message is read as usual
