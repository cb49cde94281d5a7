"""One logging set-up for every process: human-readable text, or one JSON object per line.

`--log-format json` is for log shippers: each line is a self-contained JSON object with `time`,
`level`, `process` and `message`, plus the fields a caller passes as `extra={"fields": {...}}`
(the per-request line of `--log-requests` uses that). With tracing on, lines logged while a
request's span is current also carry `trace_id` and `span_id` (utils/tracing.py); the scheduler's
and detokenizer's lines about requests carry `trace_id`, or `trace_ids` and `batch_id` for a
batch, passed as `extra=` (wire/request_tracing.log_fields).
"""

from __future__ import annotations

import datetime as _dt
import logging
from typing import Any

import orjson

REQUEST_LOGGER = "sglang.request"
TRACE_FIELDS = ("trace_id", "span_id", "trace_ids", "batch_id")


class JsonFormatter(logging.Formatter):
    """One JSON object per record; never raises on odd values (they are stringified)."""

    def __init__(self, process_name: str = "") -> None:
        super().__init__()
        self.process_name = process_name or "server"

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": _dt.datetime.fromtimestamp(record.created, _dt.timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "process": self.process_name,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            for k, v in fields.items():
                out.setdefault(k, v)
        for key in TRACE_FIELDS:  # stamped by utils/tracing.TraceLogFilter or passed as extra=
            value = getattr(record, key, None)
            if value is not None:
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


class TextFormatter(logging.Formatter):
    """`[time process] LEVEL message key=value ...`."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict) and fields:
            line += " " + " ".join(f"{k}={_text_value(v)}" for k, v in fields.items() if v is not None)
        for key in ("trace_id", "trace_ids", "batch_id"):
            value = getattr(record, key, None)
            if value is not None:
                line += f" {key}={','.join(value) if isinstance(value, list) else value}"
        return line


def _text_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.2f}"
    if isinstance(v, (str, int)):
        s = str(v)
        safe = s and s.isprintable() and " " not in s and '"' not in s
        return s if safe else orjson.dumps(s).decode()
    return orjson.dumps(v, default=str).decode()


def configure_logging(level: str = "info", prefix: str = "", fmt: str = "text") -> None:
    """Route every logger (ours, uvicorn's) through one handler on stderr."""
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter(prefix))
    else:
        pattern = f"[%(asctime)s{(' ' + prefix) if prefix else ''}] %(levelname)s %(message)s"
        handler.setFormatter(TextFormatter(pattern, datefmt="%Y-%m-%d %H:%M:%S"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    # uvicorn gets log_config=None, so its loggers propagate here instead of printing their own way.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers.clear()
        lg.propagate = True
