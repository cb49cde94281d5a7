"""The engine core stepped in-process, with a fake forward pass (no sockets, no model)."""

from __future__ import annotations

import numpy as np
import pytest

from sglang.srt.errors import ErrorKind
from sglang.srt.model_executor.forward_io import ForwardOutput
from sglang.srt.scheduler.scheduler import Scheduler
from sglang.srt.server_args import ServerArgs
from sglang.srt.wire.io_struct import TokenizedEmbeddingReqInput


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _req(rid: str, n: int = 3, t: float = 100.0) -> TokenizedEmbeddingReqInput:
    return TokenizedEmbeddingReqInput(rid=rid, worker_id=0, input_ids=np.arange(n, dtype=np.int32), arrival_time=t)


def _args(**kw) -> ServerArgs:
    return ServerArgs(**kw)


def _sum_embed(batches):
    def fn(reqs):
        batches.append([r.num_tokens for r in reqs])
        return ForwardOutput(np.stack([np.full(4, float(r.num_tokens), np.float32) for r in reqs]))

    return fn


def test_step_runs_fifo_batches_under_budget():
    seen = []
    s = Scheduler(_args(max_batch_size=2, max_num_tokens=100), _sum_embed(seen), Clock())
    assert s.add_requests([_req("a", 3), _req("b", 4), _req("c", 5)]) is None
    out, wait = s.step()
    assert out.rids == ["a", "b"] and wait == 0.0
    np.testing.assert_array_equal(out.embeddings[:, 0], [3, 4])
    out, wait = s.step()
    assert out.rids == ["c"] and wait is None
    assert s.step() == (None, None)


def test_queue_full_rejects_whole_request_with_429():
    s = Scheduler(_args(max_queue_size=3), _sum_embed([]), Clock())
    assert s.add_requests([_req("a"), _req("b")]) is None
    rejected = s.add_requests([_req("c"), _req("d")])
    assert rejected.rids == ["c", "d"] and rejected.error_codes == [ErrorKind.QUEUE_FULL] * 2
    assert "queue is full" in rejected.error_messages[0]
    assert list(s.waiting) == ["a", "b"]  # what was queued is untouched


def test_abort_drops_queued_requests_before_compute():
    seen = []
    s = Scheduler(_args(), _sum_embed(seen), Clock())
    s.add_requests([_req("a"), _req("b"), _req("c")])
    assert s.abort(["b", "zzz"]) == 1
    out, _ = s.step()
    assert out.rids == ["a", "c"] and seen == [[3, 3]]


def test_failing_forward_fails_only_its_batch():
    calls = []

    def flaky(reqs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("kernel exploded")
        return ForwardOutput(np.zeros((len(reqs), 4), np.float32))

    s = Scheduler(_args(max_batch_size=1), flaky, Clock())
    s.add_requests([_req("a"), _req("b")])
    out, _ = s.step()
    assert out.error_codes == [ErrorKind.INTERNAL] and "kernel exploded" in out.error_messages[0]
    out, _ = s.step()
    assert out.rids == ["b"] and out.error_codes == [0]


def test_batch_output_carries_the_runner_rows_unchanged():
    rows = ForwardOutput(
        np.ones((2, 3), np.float32),
        token_values=np.arange(6, dtype=np.float32),
        token_ids=np.array([4, 5], np.int32),
        token_offsets=np.array([0, 2, 2], np.int64),
        token_value_offsets=np.array([0, 6, 6], np.int64),
    )
    s = Scheduler(_args(max_queue_delay=0), lambda reqs: rows, Clock())
    s.add_requests([_req("a"), _req("b")])
    out, _ = s.step()
    assert out.rids == ["a", "b"] and out.error_codes == [0, 0] and out.batch_size == 2
    for name, value in rows.columns().items():
        assert getattr(out, name) is value


def test_forward_with_malformed_rows_fails_only_its_batch():
    calls = []

    def forward(reqs):
        calls.append(1)
        width = 4 if len(calls) > 1 else None  # the first batch's rows are 1-D: refused by ForwardOutput
        return ForwardOutput(np.zeros((len(reqs), width) if width else len(reqs), np.float32))

    s = Scheduler(_args(max_batch_size=1), forward, Clock())
    s.add_requests([_req("a"), _req("b")])
    out, _ = s.step()
    assert out.error_codes == [ErrorKind.INTERNAL] and "[batch, dim]" in out.error_messages[0]
    out, _ = s.step()
    assert out.rids == ["b"] and out.error_codes == [0] and out.embeddings.shape == (1, 4)


def test_hold_window_reports_wait_and_fires_later():
    clock = Clock()
    s = Scheduler(_args(max_queue_delay=0.05), _sum_embed([]), clock)
    # A first request finds an idle server and runs at once; its batch size sets what to wait for.
    s.add_requests([_req("x", t=clock.t), _req("y", t=clock.t)])
    out, _ = s.step()
    assert out.rids == ["x", "y"]
    s.add_requests([_req("a", t=clock.t)])
    out, wait = s.step()
    assert out is None and abs(wait - 0.05) < 1e-9
    s.add_requests([_req("b", t=clock.t + 0.01)])  # the second expected input arrives: go
    clock.t += 0.01
    out, _ = s.step()
    assert out.rids == ["a", "b"]
    assert abs(out.queue_times[0] - 0.01) < 1e-9


def test_hold_window_expires_when_fewer_arrive():
    clock = Clock()
    s = Scheduler(_args(max_queue_delay=0.05), _sum_embed([]), clock)
    s.add_requests([_req("x"), _req("y"), _req("z")])
    s.step()
    s.add_requests([_req("a", t=clock.t)])
    assert s.step()[0] is None
    clock.t += 0.06
    out, _ = s.step()
    assert out.rids == ["a"] and abs(out.queue_times[0] - 0.06) < 1e-9


def test_requests_queued_past_the_deadline_get_504_before_any_compute():
    clock = Clock()
    seen = []
    s = Scheduler(_args(max_batch_size=1, request_timeout=2.0), _sum_embed(seen), clock)
    s.add_requests([_req("old1", t=100.0), _req("old2", t=100.5)])
    s.add_requests([_req("young", t=101.5)])
    clock.t = 102.6  # old1 and old2 are past 2 s, young is not
    out, wait = s.step()
    assert out.rids == ["old1", "old2"] and out.error_codes == [ErrorKind.TIMEOUT] * 2 and wait == 0.0
    assert "--request-timeout" in out.error_messages[0]
    assert out.queue_times == [pytest.approx(2.6), pytest.approx(2.1)]
    assert out.batch_size == 0 and list(s.waiting) == ["young"] and seen == []
    out, wait = s.step()
    assert out.rids == ["young"] and out.error_codes == [0] and wait is None
    assert seen == [[3]]


def test_deadline_exactly_reached_expires_and_zero_means_never():
    clock = Clock()
    s = Scheduler(_args(request_timeout=1.0), _sum_embed([]), clock)
    s.add_requests([_req("a", t=99.0)])
    assert s.step()[0].error_codes == [ErrorKind.TIMEOUT]
    s = Scheduler(_args(request_timeout=0), _sum_embed([]), clock)
    s.add_requests([_req("a", t=0.0)])
    assert s.step()[0].error_codes == [0]


def test_hold_window_wakes_up_for_the_deadline():
    clock = Clock()
    s = Scheduler(_args(max_queue_delay=5.0, request_timeout=1.0), _sum_embed([]), clock)
    s.add_requests([_req("x", t=clock.t), _req("y", t=clock.t)])
    s.step()  # a batch of two: the hold window now waits for two inputs
    s.add_requests([_req("a", t=clock.t)])
    out, wait = s.step()
    assert out is None and wait == pytest.approx(1.0)
    clock.t += 1.0
    out, _ = s.step()
    assert out.error_codes == [ErrorKind.TIMEOUT]


def test_abort_frees_queue_room_at_once():
    s = Scheduler(_args(max_queue_size=2), _sum_embed([]), Clock())
    assert s.add_requests([_req("a"), _req("b")]) is None
    assert s.add_requests([_req("c")]).error_codes == [ErrorKind.QUEUE_FULL]
    s.abort(["a"])
    assert s.add_requests([_req("c")]) is None
    assert list(s.waiting) == ["b", "c"]


def test_outputs_carry_batch_shape_for_metrics():
    s = Scheduler(_args(max_batch_size=2, max_queue_size=3), _sum_embed([]), Clock())
    s.add_requests([_req("a", 3), _req("b", 4), _req("c", 5)])
    rejected = s.add_requests([_req("d")])
    assert rejected.batch_size == 0 and rejected.error_codes == [ErrorKind.QUEUE_FULL]
    out, _ = s.step()
    assert (out.batch_size, out.batch_tokens) == (2, 7)
    out, _ = s.step()
    assert (out.batch_size, out.batch_tokens) == (1, 5)


def test_a_replica_owns_its_share_of_the_queue():
    """--dp-size 2, --max-queue-size 5: replica 0 queues 3, replica 1 queues 2 (5 server-wide)."""
    args = _args(max_queue_size=5, dp_size=2)
    first, second = (Scheduler(args, _sum_embed([]), Clock(), dp_rank=r) for r in (0, 1))
    assert (first.max_queue_size, second.max_queue_size) == (3, 2)
    assert second.add_requests([_req("a"), _req("b")]) is None
    refused = second.add_requests([_req("c")])
    assert refused.error_codes == [ErrorKind.QUEUE_FULL]
    out, _ = second.step()
    assert out.rids == ["a", "b"]
