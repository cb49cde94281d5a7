"""A local OTLP/HTTP trace receiver for tests: collects the spans a server exports, on loopback.

It decodes the protobuf `ExportTraceServiceRequest` the OTLP/HTTP exporter posts to /v1/traces
(gzip or not) into plain `ReceivedSpan`s, so tests can check names, parent/child links and
attributes without any collector.
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Optional

from test.helpers.waiting import wait_until


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str  # "" for a root span
    kind: int
    start_ns: int
    end_ns: int
    status_code: int  # 0 unset, 1 ok, 2 error
    attributes: dict[str, Any] = field(default_factory=dict)
    resource: dict[str, Any] = field(default_factory=dict)

    @property
    def process(self) -> str:
        return str(self.resource.get("sglang.process", ""))


def _value(v) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def _attrs(kvs) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


def decode_spans(body: bytes) -> list[ReceivedSpan]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    req = ExportTraceServiceRequest()
    req.ParseFromString(body)
    out = []
    for rs in req.resource_spans:
        resource = _attrs(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(
                    ReceivedSpan(
                        name=s.name,
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_span_id=s.parent_span_id.hex(),
                        kind=s.kind,
                        start_ns=s.start_time_unix_nano,
                        end_ns=s.end_time_unix_nano,
                        status_code=s.status.code,
                        attributes=_attrs(s.attributes),
                        resource=resource,
                    )
                )
    return out


class OtlpReceiver:
    """`with OtlpReceiver() as r:` ... `r.endpoint` for --otlp-traces-endpoint, `r.spans` received."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.posts = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                spans = decode_spans(body) if self.path == "/v1/traces" else []
                with receiver._lock:
                    receiver.spans.extend(spans)
                    receiver.posts += 1
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> "OtlpReceiver":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def snapshot(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self.spans)

    def wait_for(self, predicate: Callable[[list[ReceivedSpan]], bool], timeout: float = 15.0) -> list[ReceivedSpan]:
        """The spans once `predicate(spans)` holds; AssertionError with what arrived after `timeout`."""
        spans: list[ReceivedSpan] = []

        def matched() -> bool:
            spans[:] = self.snapshot()
            return predicate(spans)

        if not wait_until(matched, timeout, interval=0.05):
            names = sorted((s.name, s.process) for s in spans)
            raise AssertionError(f"spans never matched within {timeout} s; received: {names}")
        return spans

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        return [s for s in self.snapshot() if s.trace_id == trace_id]


def spans_named(spans: list[ReceivedSpan], name: str, trace_id: Optional[str] = None) -> list[ReceivedSpan]:
    return [s for s in spans if s.name == name and (trace_id is None or s.trace_id == trace_id)]
