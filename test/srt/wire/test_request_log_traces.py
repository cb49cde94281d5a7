"""With tracing on, the scheduler's and detokenizer's log lines about requests name their traces:
`trace_id` for one request, `trace_ids` + `batch_id` for a forward batch (the id on its spans).
Lines are captured through the JSON formatter `--log-format json` uses."""

from __future__ import annotations

import logging

import numpy as np
import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sglang.srt.errors import ErrorKind
from sglang.srt.model_executor.forward_io import ForwardOutput
from sglang.srt.renderer.detokenizer_manager import output_log_extra, render_or_fail
from sglang.srt.scheduler.scheduler import Scheduler
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.logging_utils import JsonFormatter, TextFormatter
from sglang.srt.utils.tracing import Tracing
from sglang.srt.wire.io_struct import TokenizedEmbeddingReqInput
from sglang.srt.wire.output_spec import Format, OutputSpec, Task
from sglang.srt.wire.request_tracing import log_fields

TRACE_A, TRACE_B = "0af7651916cd43dd8448eb211c80319c", "4bf92f3577b34da6a3ce929d0e0e4736"
TP_A = f"00-{TRACE_A}-b7ad6b7169203331-01"
TP_A2 = f"00-{TRACE_A}-00f067aa0ba902b7-01"  # another request of the same client trace
TP_B = f"00-{TRACE_B}-00f067aa0ba902b7-01"


class Lines(logging.Handler):
    """The JSON lines logged by the scheduler and detokenizer modules."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(JsonFormatter("scheduler"))
        self.lines: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(orjson.loads(self.format(record)))

    def matching(self, text: str) -> list[dict]:
        return [ln for ln in self.lines if text in ln["message"]]


@pytest.fixture
def lines():
    handler = Lines()
    loggers = [
        logging.getLogger(m) for m in ("sglang.srt.scheduler.scheduler", "sglang.srt.renderer.detokenizer_manager")
    ]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
    yield handler
    for lg, level in zip(loggers, levels):
        lg.removeHandler(handler)
        lg.setLevel(level)


@pytest.fixture
def tracing():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield Tracing(provider, "unit"), exporter
    provider.shutdown()


class Clock:
    t = 100.0

    def __call__(self) -> float:
        return self.t


def _req(rid: str, tp=None, n: int = 3, worker: int = 0) -> TokenizedEmbeddingReqInput:
    ids = np.arange(n, dtype=np.int32)
    return TokenizedEmbeddingReqInput(rid, worker, ids, arrival_time=100.0, trace_context=tp)


def _ok(reqs):
    return ForwardOutput(np.ones((len(reqs), 4), np.float32))


def _boom(reqs):
    raise RuntimeError("kernel exploded")


def test_log_fields_one_trace_several_and_a_batch():
    assert log_fields([TP_A, TP_A2, None]) == {"trace_id": TRACE_A}  # one trace id, however many spans
    assert log_fields([TP_B, None, TP_A]) == {"trace_ids": [TRACE_B, TRACE_A]}
    assert log_fields([None]) == {}
    assert log_fields([TP_A], "b1") == {"trace_ids": [TRACE_A], "batch_id": "b1"}


def test_batch_lines_carry_trace_ids_and_the_forward_spans_batch_id(lines, tracing):
    tracing, exporter = tracing
    s = Scheduler(ServerArgs(max_queue_delay=0), _ok, Clock(), tracing=tracing)
    s.add_requests([_req("a0", TP_A), _req("a1", TP_A), _req("b0", TP_B), _req("u")])
    out, _ = s.step()
    (line,) = lines.matching("batch of 4 inputs")
    assert line["trace_ids"] == [TRACE_A, TRACE_B] and line["process"] == "scheduler"
    assert line["batch_id"] == out.batch_id and len(out.batch_id) == 16
    forwards = [sp for sp in exporter.get_finished_spans() if sp.name == "forward"]
    assert len(forwards) == 2 and {sp.attributes["sglang.batch.id"] for sp in forwards} == {out.batch_id}


def test_failing_forward_line_names_every_trace_of_the_batch(lines, tracing):
    tracing, exporter = tracing
    s = Scheduler(ServerArgs(max_queue_delay=0), _boom, Clock(), tracing=tracing)
    s.add_requests([_req("a0", TP_A), _req("b0", TP_B)])
    out, _ = s.step()
    assert out.error_codes == [ErrorKind.INTERNAL] * 2
    (line,) = lines.matching("forward pass failed for 2 requests")
    assert line["level"] == "error" and "kernel exploded" in line["message"]
    assert line["trace_ids"] == [TRACE_A, TRACE_B]
    (fwd,) = {sp.attributes["sglang.batch.id"] for sp in exporter.get_finished_spans() if sp.name == "forward"}
    assert line["batch_id"] == fwd


def test_refused_expired_and_aborted_requests_carry_their_trace_id(lines, tracing):
    tracing, _ = tracing
    clock = Clock()
    s = Scheduler(ServerArgs(max_queue_size=2, request_timeout=1.0, max_queue_delay=5.0), _ok, clock, tracing=tracing)
    assert s.add_requests([_req("a0", TP_A), _req("a1", TP_A)]) is None
    refused = s.add_requests([_req("b0", TP_B)])
    assert refused.error_codes == [ErrorKind.QUEUE_FULL]
    assert lines.matching("the queue is full")[0]["trace_id"] == TRACE_B
    assert s.abort(["a1", "missing"]) == 1
    assert lines.matching("aborted 1 queued inputs")[0]["trace_id"] == TRACE_A
    clock.t = 102.0
    out, _ = s.step()
    assert out.error_codes == [ErrorKind.TIMEOUT]
    (line,) = lines.matching("--request-timeout")
    assert line["trace_id"] == TRACE_A and "trace_ids" not in line and "batch_id" not in line


def test_tracing_off_adds_no_trace_fields(lines):
    s = Scheduler(ServerArgs(max_queue_delay=0), _boom, Clock())
    s.add_requests([_req("a0", TP_A)])
    out, _ = s.step()
    assert out.batch_id is None
    (line,) = lines.matching("forward pass failed")
    assert not {"trace_id", "trace_ids", "batch_id"} & line.keys()


def test_detokenizer_render_failure_names_the_batch_and_answers_every_row(lines, tracing):
    tracing, _ = tracing
    s = Scheduler(ServerArgs(max_queue_delay=0), _ok, Clock(), tracing=tracing)
    reqs = [_req("a0", TP_A), _req("b0", TP_B, worker=1)]
    reqs[1].output = OutputSpec(Task.SPARSE, Format.SPARSE_DICT)  # no sparse rows in the output: rendering fails
    s.add_requests(reqs)
    out, _ = s.step()
    results = render_or_fail(out)
    assert [r.error_codes for _, r in sorted(results.items())] == [[ErrorKind.INTERNAL]] * 2
    (line,) = lines.matching("failed to render an output")
    assert line["trace_ids"] == [TRACE_A, TRACE_B] and line["batch_id"] == out.batch_id
    assert "exception" in line
    # A line about one tokenizer worker's rows (e.g. a result for an unknown worker) names only theirs.
    assert output_log_extra(out, 1) == {"trace_ids": [TRACE_B], "batch_id": out.batch_id}
    out.trace_contexts = None  # tracing off: nothing
    assert output_log_extra(out) is None


def test_text_format_prints_the_trace_fields():
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "forward pass failed", (), None)
    record.trace_ids, record.batch_id = [TRACE_A, TRACE_B], "b1"
    line = TextFormatter("%(levelname)s %(message)s").format(record)
    assert line == f"ERROR forward pass failed trace_ids={TRACE_A},{TRACE_B} batch_id=b1"
