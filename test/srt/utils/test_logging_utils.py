"""Log formats: one JSON object per line, or text whose fields cannot forge extra lines."""

from __future__ import annotations

import json
import logging

from sglang.srt.utils.logging_utils import JsonFormatter, TextFormatter


def _record(msg: str = "POST /v1/embeddings 200", **fields) -> logging.LogRecord:
    rec = logging.LogRecord("sglang.request", logging.INFO, __file__, 1, msg, None, None)
    rec.fields = fields
    return rec


def test_json_lines_carry_the_request_fields():
    line = JsonFormatter("http-1").format(_record(request_id="r1", status=200, total_ms=1.5, odd=object()))
    assert "\n" not in line
    obj = json.loads(line)
    assert obj["level"] == "info" and obj["process"] == "http-1" and obj["message"] == "POST /v1/embeddings 200"
    assert obj["request_id"] == "r1" and obj["status"] == 200 and obj["total_ms"] == 1.5
    assert obj["time"].endswith("+00:00") and isinstance(obj["odd"], str)


def test_json_fields_do_not_override_the_envelope():
    obj = json.loads(JsonFormatter().format(_record(level="forged", message="forged")))
    assert obj["level"] == "info" and obj["message"] == "POST /v1/embeddings 200"


def test_text_fields_are_quoted_when_they_could_break_the_line():
    fmt = TextFormatter("%(levelname)s %(message)s")
    line = fmt.format(_record(request_id="abc", path="/x\nERROR forged line", ms=2.0, skip=None))
    assert "\n" not in line
    assert "\n" not in fmt.format(_record(path="/x\nERROR:forged"))
    assert line.startswith("INFO POST /v1/embeddings 200 request_id=abc ")
    assert 'path="/x\\nERROR forged line"' in line and "ms=2.00" in line and "skip" not in line
