"""The spans of a request outside its HTTP span: tokenization, queue wait, forward, rendering.

A batch serves inputs of many requests, and a request's inputs may span several batches. Each
request (each distinct traceparent) gets its own `queue` and `forward` span per batch that served
it, in its own trace, all with the batch's size, tokens and `sglang.batch.id`, so one trace shows
the whole life of one request and the batch id finds the requests that shared a forward pass.
Only called when tracing is on.

The scheduler's and detokenizer's log lines about requests name them by trace id (`log_fields`):
those processes have no current span, so the fields go on the line explicitly.
"""

from __future__ import annotations

import contextlib
import uuid
from collections import defaultdict
from typing import Any, Iterator, Optional, Sequence

from sglang.srt.utils.tracing import Tracing
from sglang.srt.wire.io_struct import BatchEmbeddingOutput, TokenizedEmbeddingReqInput


def group_by_trace(contexts: Sequence[Optional[str]]) -> dict[str, list[int]]:
    """traceparent -> the row indices carrying it (untraced rows left out), in first-seen order."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, tp in enumerate(contexts):
        if tp is not None:
            groups[tp].append(i)
    return dict(groups)


def trace_id_of(traceparent: str) -> str:
    """The 32-hex trace id of a W3C traceparent (version-traceid-spanid-flags)."""
    return traceparent.split("-")[1]


def new_batch_id() -> str:
    """The id of one forward pass: `sglang.batch.id` on its spans, `batch_id` on its log lines."""
    return uuid.uuid4().hex[:16]


def log_fields(contexts: Sequence[Optional[str]], batch_id: Optional[str] = None) -> dict[str, Any]:
    """`extra=` for a log line about these rows: `trace_id` when they belong to one trace (one
    request), else `trace_ids` (distinct, first-seen order); a forward batch's line always has
    `trace_ids` and its `batch_id`. Untraced rows add nothing."""
    ids = list(dict.fromkeys(trace_id_of(tp) for tp in contexts if tp is not None))
    if batch_id is not None:
        return {"trace_ids": ids, "batch_id": batch_id}
    if len(ids) == 1:
        return {"trace_id": ids[0]}
    return {"trace_ids": ids} if ids else {}


def trace_contexts(reqs: Sequence[TokenizedEmbeddingReqInput]) -> Optional[list[Optional[str]]]:
    """The per-row traceparents for an output message, or None when no input is traced."""
    contexts = [r.trace_context for r in reqs]
    return contexts if any(tp is not None for tp in contexts) else None


def trace_batch(
    tracing: Tracing,
    reqs: Sequence[TokenizedEmbeddingReqInput],
    start: float,
    end: float,
    error: Optional[str] = None,
    batch_id: Optional[str] = None,
) -> None:
    """Scheduler: `queue` (earliest arrival -> forward start) and `forward` spans per request."""
    batch_attrs = {
        "sglang.batch.id": batch_id or new_batch_id(),
        "sglang.batch.size": len(reqs),
        "sglang.batch.tokens": sum(r.num_tokens for r in reqs),
    }
    for tp, rows in group_by_trace([r.trace_context for r in reqs]).items():
        mine = [reqs[i] for i in rows]
        own = {"sglang.inputs": len(mine), "sglang.tokens": sum(r.num_tokens for r in mine)}
        tracing.record("queue", tp, min(r.arrival_time for r in mine), start, {**own, **batch_attrs})
        tracing.record("forward", tp, start, end, {**own, **batch_attrs}, error=error)


def trace_refused(tracing: Tracing, reqs: Sequence[TokenizedEmbeddingReqInput], now: float, reason: str) -> None:
    """Scheduler: a `queue` span ending in an error for inputs refused (queue full) or timed out."""
    for tp, rows in group_by_trace([r.trace_context for r in reqs]).items():
        start = min(reqs[i].arrival_time for i in rows)
        tracing.record("queue", tp, min(start, now), now, {"sglang.inputs": len(rows)}, error=reason)


def trace_render(tracing: Tracing, out: BatchEmbeddingOutput, start: float, end: float) -> None:
    """Detokenizer: one `render` span per request of a rendered output."""
    if not out.trace_contexts:
        return
    for tp, rows in group_by_trace(out.trace_contexts).items():
        formats = sorted({out.outputs[i].format.value for i in rows})
        attrs = {"sglang.inputs": len(rows), "sglang.encoding_format": ",".join(formats)}
        if out.batch_id is not None:
            attrs["sglang.batch.id"] = out.batch_id
        tracing.record("render", tp, start, end, attrs)


@contextlib.contextmanager
def request_span(tracing: Tracing, name: str = "embed") -> Iterator[str]:
    """The traceparent of the request's span: the HTTP span when one is current, else (the
    offline Engine) a new root span `name` for the length of the block."""
    current = tracing.current_traceparent()
    if current is not None:
        yield current
        return
    span = tracing.start_span(name)
    try:
        with tracing.activate(span):
            yield tracing.traceparent_of(span)
    except BaseException as e:
        tracing.set_error(span, f"{type(e).__name__}: {e}")
        raise
    finally:
        span.end()
