"""OpenTelemetry traces over OTLP/HTTP (--enable-trace / --otlp-traces-endpoint), one per request.

Each process (HTTP workers, scheduler, detokenizer, the Engine's caller) holds one `Tracing`,
passed explicitly to whoever makes spans. Off by default: `Tracing()` is disabled, callers check
`tracing.enabled` before any tracing work, and nothing of the OpenTelemetry SDK or exporter is
imported. A request's context crosses processes as a W3C `traceparent` string in the messages.

Spans outside the HTTP process are recorded after the fact from `time.monotonic()` stamps (one
clock for every process on the machine), converted to wall-clock nanoseconds here.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import time
from typing import Any, Iterator, Mapping, Optional
from urllib.parse import urlsplit

from sglang.srt.errors import ConfigError

DEFAULT_ENDPOINT = "http://localhost:4318/v1/traces"
TRACES_PATH = "/v1/traces"
SERVICE_NAME = "sglang-embed"
FLUSH_TIMEOUT_MS = 2000  # at shutdown, how long to wait for spans still queued for export
INSTALL_HINT = "pip install 'sglang-embed[tracing]' (opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http)"


def check_tracing_installed() -> None:
    """ConfigError with the install command when the SDK or the OTLP/HTTP exporter is missing."""
    for module in ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter"):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            raise ConfigError(f"Tracing needs the OpenTelemetry SDK and OTLP/HTTP exporter: {INSTALL_HINT}")


def resolve_endpoint(flag: Optional[str], environ: Optional[Mapping[str, str]] = None) -> str:
    """The OTLP/HTTP traces URL: the flag, else OTel's own variables, else the local collector.

    `host:port` and URLs without a path get `/v1/traces` (the OTLP/HTTP path), as
    OTEL_EXPORTER_OTLP_ENDPOINT does; a URL with a path is used as it is.
    """
    environ = os.environ if environ is None else environ
    if not flag:
        if environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
            return environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
        flag = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or DEFAULT_ENDPOINT
    url = flag.strip()
    if "://" not in url:
        url = "http://" + url
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as e:
        raise ConfigError(f"--otlp-traces-endpoint {flag!r} is not a valid URL ({e})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--otlp-traces-endpoint {flag!r} must be an http(s) URL or host:port (OTLP/HTTP)")
    if parts.path in ("", "/"):
        url = url.rstrip("/") + TRACES_PATH
    return url


def format_traceparent(span_context: Any) -> str:
    """W3C traceparent of an OpenTelemetry SpanContext: version-traceid-spanid-flags."""
    return f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-{int(span_context.trace_flags):02x}"


def monotonic_to_ns(t: float, now_mono: Optional[float] = None, now_ns: Optional[int] = None) -> int:
    """A time.monotonic() stamp as wall-clock epoch nanoseconds (what spans carry)."""
    now_mono = time.monotonic() if now_mono is None else now_mono
    now_ns = time.time_ns() if now_ns is None else now_ns
    return now_ns - int((now_mono - t) * 1e9)


class TraceLogFilter(logging.Filter):
    """Stamps `trace_id` / `span_id` of the current span on log records (the formatters print
    them), so every line logged while handling a traced request names its trace."""

    def filter(self, record: logging.LogRecord) -> bool:
        from opentelemetry import trace

        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            record.trace_id = f"{ctx.trace_id:032x}"
            record.span_id = f"{ctx.span_id:016x}"
        return True


class Tracing:
    """One process's tracer, or a disabled stand-in (`Tracing()`) that costs nothing."""

    def __init__(self, provider: Any = None, process: str = "") -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("sglang-embed") if provider is not None else None
        self.enabled = provider is not None
        self.process = process
        self._propagator: Any = None
        if self.enabled:
            from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

            self._propagator = TraceContextTextMapPropagator()

    @classmethod
    def start(cls, enabled: bool, endpoint: Optional[str], process: str) -> "Tracing":
        """A tracer exporting to `endpoint` in batches, or a disabled one (then nothing is imported)."""
        if not enabled:
            return cls()
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        attributes = {"sglang.process": process}
        if not os.environ.get("OTEL_SERVICE_NAME"):
            attributes["service.name"] = SERVICE_NAME
        # The sampler (OTEL_TRACES_SAMPLER, default parent-based always-on) and the batching
        # (OTEL_BSP_*) follow OpenTelemetry's own environment variables.
        provider = TracerProvider(resource=Resource.create(attributes))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint or DEFAULT_ENDPOINT)))
        root = logging.getLogger()
        for handler in root.handlers:
            if not any(isinstance(f, TraceLogFilter) for f in handler.filters):
                handler.addFilter(TraceLogFilter())
        return cls(provider, process)

    def shutdown(self) -> None:
        """Export what is still queued (bounded), e.g. before the process exits."""
        if self.provider is not None:
            try:
                self.provider.force_flush(FLUSH_TIMEOUT_MS)
            except Exception:  # a collector that is down must not block or break the shutdown
                pass

    # ----- contexts -----
    def context_from_headers(self, headers: Mapping[str, str]) -> Any:
        """The parent context of a client's W3C `traceparent` / `tracestate` headers (or none)."""
        return self._propagator.extract(carrier=headers)

    def context_from_traceparent(self, traceparent: Optional[str]) -> Any:
        return self._propagator.extract(carrier={"traceparent": traceparent}) if traceparent else None

    @staticmethod
    def current_traceparent() -> Optional[str]:
        """The traceparent of the span current in this task, or None."""
        from opentelemetry import trace

        ctx = trace.get_current_span().get_span_context()
        return format_traceparent(ctx) if ctx.is_valid else None

    @staticmethod
    def traceparent_of(span: Any) -> str:
        return format_traceparent(span.get_span_context())

    # ----- spans -----
    def start_span(self, name: str, context: Any = None, attributes: Optional[dict] = None, server: bool = False):
        from opentelemetry.trace import SpanKind

        kind = SpanKind.SERVER if server else SpanKind.INTERNAL
        return self.tracer.start_span(name, context=context, kind=kind, attributes=attributes)

    @staticmethod
    @contextlib.contextmanager
    def activate(span: Any) -> Iterator[Any]:
        """Make `span` the current one (log lines and child spans see it); does not end it."""
        from opentelemetry import trace

        with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
            yield span

    @staticmethod
    def set_error(span: Any, description: str) -> None:
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR, description))

    def record(
        self,
        name: str,
        traceparent: Optional[str],
        start: float,
        end: float,
        attributes: Optional[dict] = None,
        error: Optional[str] = None,
    ) -> None:
        """A finished span between two time.monotonic() stamps, child of `traceparent`."""
        now_mono, now_ns = time.monotonic(), time.time_ns()
        span = self.tracer.start_span(
            name,
            context=self.context_from_traceparent(traceparent),
            attributes=attributes,
            start_time=monotonic_to_ns(start, now_mono, now_ns),
        )
        if error is not None:
            self.set_error(span, error)
        span.end(end_time=monotonic_to_ns(max(start, end), now_mono, now_ns))
