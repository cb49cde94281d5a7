"""OpenTelemetry tracing (utils/tracing.py, wire/request_tracing.py) in one process, exported to
a local OTLP/HTTP receiver: span names, parent/child links, batch attributes, W3C traceparent;
and, with tracing off, no OpenTelemetry import at all. The three-process version is
test/srt/entrypoints/test_production_e2e.py."""

from __future__ import annotations

import logging
import subprocess
import sys
import time

import numpy as np
import orjson
import pytest

from sglang.srt.errors import ConfigError
from sglang.srt.model_executor.forward_io import ForwardOutput
from sglang.srt.scheduler.scheduler import Scheduler
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.logging_utils import JsonFormatter
from sglang.srt.utils.tracing import TraceLogFilter, Tracing, monotonic_to_ns, resolve_endpoint
from sglang.srt.wire.io_struct import (
    BatchEmbeddingOutput,
    BatchTokenizedEmbeddingReqInput,
    TokenizedEmbeddingReqInput,
)
from sglang.srt.wire.msgcodec import decode, encode
from sglang.srt.wire.output_spec import OutputSpec
from sglang.srt.wire.request_tracing import request_span, trace_render
from test.helpers.otlp_receiver import OtlpReceiver, spans_named

TRACE_A, PARENT_A = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
TRACE_B, PARENT_B = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


def test_endpoint_resolution():
    assert resolve_endpoint("collector:4318", {}) == "http://collector:4318/v1/traces"
    assert resolve_endpoint("https://c.example/", {}) == "https://c.example/v1/traces"
    assert resolve_endpoint("http://c:9/custom/path", {}) == "http://c:9/custom/path"
    assert resolve_endpoint(None, {}) == "http://localhost:4318/v1/traces"
    assert resolve_endpoint(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://o:4318"}) == "http://o:4318/v1/traces"
    assert resolve_endpoint(None, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t/x"}) == "http://t/x"
    for bad in ("ftp://c:1", "http://c:port", "http://:4318"):
        with pytest.raises(ConfigError, match="--otlp-traces-endpoint"):
            resolve_endpoint(bad, {})
    args = ServerArgs(otlp_traces_endpoint="127.0.0.1:4318")  # the endpoint turns tracing on
    assert args.enable_trace and args.otlp_traces_endpoint == "http://127.0.0.1:4318/v1/traces"


def test_monotonic_stamps_become_wall_clock_nanoseconds():
    assert monotonic_to_ns(9.5, now_mono=10.0, now_ns=1_000_000_000_000) == 999_500_000_000


def test_trace_contexts_survive_the_messages():
    req = _req("r-0", 3, f"00-{TRACE_A}-{PARENT_A}-01")
    back = decode([bytes(f) for f in encode(BatchTokenizedEmbeddingReqInput([req, _req("r-1", 2)]))]).reqs
    assert [r.trace_context for r in back] == [req.trace_context, None]
    out = BatchEmbeddingOutput(
        rids=["x", "y"],
        worker_ids=[0, 0],
        embeddings=np.zeros((2, 4), np.float32),
        prompt_tokens=[3, 2],
        outputs=[OutputSpec(), OutputSpec()],
        error_codes=[0, 0],
        error_messages=[None, None],
        queue_times=[0.0, 0.0],
        trace_contexts=[req.trace_context, None],
    )
    assert decode([bytes(f) for f in encode(out)]).trace_contexts == [req.trace_context, None]


def _req(rid: str, n: int, traceparent=None) -> TokenizedEmbeddingReqInput:
    ids = np.arange(n, dtype=np.int32)
    return TokenizedEmbeddingReqInput(rid, 0, ids, arrival_time=time.monotonic(), trace_context=traceparent)


def _forward(reqs):
    return ForwardOutput(np.ones((len(reqs), 4), np.float32))


def test_scheduler_without_tracing_carries_no_contexts():
    s = Scheduler(ServerArgs(), _forward)
    s.add_requests([_req("a", 3, f"00-{TRACE_A}-{PARENT_A}-01")])
    out, _ = s.step()
    assert not s.tracing.enabled and out.trace_contexts is None


@pytest.fixture
def traced(monkeypatch):
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    with OtlpReceiver() as receiver:
        tracing = Tracing.start(True, receiver.endpoint, "unit")
        try:
            yield tracing, receiver
        finally:
            tracing.provider.shutdown()
            for handler in logging.getLogger().handlers:
                for f in [f for f in handler.filters if isinstance(f, TraceLogFilter)]:
                    handler.removeFilter(f)


def test_spans_links_and_attributes_reach_the_collector(traced):
    tracing, receiver = traced
    # The HTTP span honours the client's traceparent; tokenize is recorded under it.
    parent = tracing.context_from_headers({"traceparent": f"00-{TRACE_A}-{PARENT_A}-01"})
    http_span = tracing.start_span("POST /v1/embeddings", parent, {"http.route": "/v1/embeddings"}, server=True)
    with tracing.activate(http_span), request_span(tracing) as tp_a:
        tracing.record("tokenize", tp_a, 1.0, 1.5, {"sglang.inputs": 2})
    http_span.end()
    assert tp_a == tracing.traceparent_of(http_span) and TRACE_A in tp_a
    tp_b = f"00-{TRACE_B}-{PARENT_B}-01"
    # One batch serving two traced requests (2 + 1 inputs) and an untraced one.
    s = Scheduler(ServerArgs(max_queue_delay=0), _forward, tracing=tracing)
    s.add_requests([_req("a0", 3, tp_a), _req("a1", 4, tp_a), _req("b0", 5, tp_b), _req("u", 6)])
    out, _ = s.step()
    assert out.trace_contexts == [tp_a, tp_a, tp_b, None]
    trace_render(tracing, decode([bytes(f) for f in encode(out)]), 2.0, 2.1)
    # Without an HTTP span (the offline Engine), a request gets a root span of its own.
    with request_span(tracing) as tp_engine:
        pass
    tracing.shutdown()

    spans = receiver.wait_for(lambda sp: len(sp) >= 9)
    a = [sp for sp in spans if sp.trace_id == TRACE_A]
    (root,) = spans_named(a, "POST /v1/embeddings")
    assert root.parent_span_id == PARENT_A and root.kind == 2 and root.process == "unit"
    assert root.resource["service.name"] == "sglang-embed"
    for name in ("tokenize", "queue", "forward", "render"):
        (child,) = spans_named(a, name)
        assert child.parent_span_id == root.span_id, name
    (fwd_a,) = spans_named(a, "forward")
    (fwd_b,) = spans_named(spans, "forward", TRACE_B)
    assert fwd_b.parent_span_id == PARENT_B
    assert (fwd_a.attributes["sglang.inputs"], fwd_a.attributes["sglang.tokens"]) == (2, 7)
    assert (fwd_b.attributes["sglang.inputs"], fwd_b.attributes["sglang.tokens"]) == (1, 5)
    for f in (fwd_a, fwd_b):  # the batch they shared
        assert (f.attributes["sglang.batch.size"], f.attributes["sglang.batch.tokens"]) == (4, 18)
    assert fwd_a.attributes["sglang.batch.id"] == fwd_b.attributes["sglang.batch.id"]
    assert spans_named(a, "render")[0].attributes["sglang.inputs"] == 2
    (engine_root,) = [sp for sp in spans if sp.name == "embed"]
    assert engine_root.parent_span_id == "" and engine_root.trace_id in tp_engine
    assert len(spans) == 9  # 5 for A, 3 for B, 1 for the Engine: the untraced input made none


def test_log_lines_inside_a_span_carry_its_trace_id(traced):
    tracing, _ = traced
    record = logging.LogRecord("sglang.request", logging.INFO, __file__, 1, "done", (), None)
    span = tracing.start_span("GET /v1/models")
    with tracing.activate(span):
        TraceLogFilter().filter(record)
    span.end()
    line = orjson.loads(JsonFormatter("server").format(record))
    assert line["trace_id"] == tracing.traceparent_of(span).split("-")[1]
    assert line["span_id"] == tracing.traceparent_of(span).split("-")[2]
    outside = logging.LogRecord("sglang.request", logging.INFO, __file__, 1, "done", (), None)
    TraceLogFilter().filter(outside)
    assert "trace_id" not in orjson.loads(JsonFormatter("server").format(outside))


@pytest.mark.slow
def test_off_by_default_imports_no_opentelemetry_sdk():
    # (FastAPI itself imports the small opentelemetry API package when it is installed.)
    script = """
import sys
import numpy as np
from sglang.cli import parse_serve_args
from sglang.srt.entrypoints import launch  # noqa: F401
from sglang.srt.frontend import tokenizer_manager  # noqa: F401
from sglang.srt.frontend.http import http_server  # noqa: F401
from sglang.srt.renderer import detokenizer_manager  # noqa: F401
from sglang.srt.wire.io_struct import TokenizedEmbeddingReqInput
from sglang.srt.wire.forward_output import ForwardOutput
from sglang.srt.scheduler.scheduler import Scheduler
from sglang.srt.utils.tracing import Tracing
args = parse_serve_args([])
assert not args.enable_trace and not Tracing.start(args.enable_trace, None, "x").enabled
s = Scheduler(args, lambda reqs: ForwardOutput(np.ones((len(reqs), 4), np.float32)))
s.add_requests([TokenizedEmbeddingReqInput("a", 0, np.arange(3, dtype=np.int32))])
s.step()
print(sorted(m for m in sys.modules if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))))
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
