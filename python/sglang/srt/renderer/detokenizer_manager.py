"""The detokenizer (the renderer process): renders pooled vectors into their wire form off the
HTTP event loop.

Each payload is what its row's OutputSpec asks for (renderer/vector_render.py): a finished JSON
value or bare bytes, which the HTTP process splices into the response, or a float32 array for a
route that computes on the numbers (scores, MaxSim, cosine, quantized types).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import Optional

import zmq

from sglang.srt.errors import ErrorKind
from sglang.srt.renderer.sparse_render import TokenTextFn, TokenTexts, render_sparse
from sglang.srt.renderer.token_render import render_token_ids, token_row
from sglang.srt.renderer.vector_render import render_rows, render_vectors, shape_pooled
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.gc_freeze import freeze_startup_objects
from sglang.srt.utils.heartbeat import Heartbeat, heartbeat_interval, stage_name
from sglang.srt.utils.logging_utils import configure_logging
from sglang.srt.utils.network import PortArgs, make_socket
from sglang.srt.utils.process import prepare_child_process
from sglang.srt.utils.tracing import Tracing
from sglang.srt.wire.io_struct import BatchEmbeddingOutput, BatchEmbeddingResult
from sglang.srt.wire.msgcodec import decode, send
from sglang.srt.wire.output_spec import Task
from sglang.srt.wire.request_tracing import log_fields, trace_render

POOLED = (Task.DENSE, Task.SCORES)  # one vector per input, in BatchEmbeddingOutput.embeddings

logger = logging.getLogger(__name__)


def render_output(
    out: BatchEmbeddingOutput, token_texts: Optional[TokenTextFn] = None
) -> dict[int, BatchEmbeddingResult]:
    """Split one scheduler output by tokenizer worker and render every vector (or sparse row;
    `token_texts` maps token ids to strings for the formats that show them)."""
    per_worker: dict[int, BatchEmbeddingResult] = defaultdict(
        lambda: BatchEmbeddingResult(
            [],
            [],
            [],
            [],
            [],
            [],
            out.inference_time,
        )
    )
    pooled = [i for i, (c, s) in enumerate(zip(out.error_codes, out.outputs)) if c == 0 and s.task in POOLED]
    shaped = shape_pooled(out.embeddings, out.outputs, pooled)  # cut and normalized, batched
    for i, rid in enumerate(out.rids):
        res = per_worker[out.worker_ids[i]]
        code = out.error_codes[i]
        per_token = code == 0 and out.outputs[i].task is Task.TOKENS
        if out.token_offsets is not None and res.token_ids is None:
            res.token_ids = [b""] * len(res.rids)
        if res.token_ids is not None:
            res.token_ids.append(b"")
        spec = out.outputs[i]
        if per_token:
            vectors, ids = token_row(out, i)
            payload = render_vectors(vectors, spec)
            res.token_ids[-1] = render_token_ids(ids)
        elif code == 0 and spec.task is Task.SPARSE:
            lo, hi = int(out.sparse_offsets[i]), int(out.sparse_offsets[i + 1])
            payload = render_sparse(out.sparse_indices[lo:hi], out.sparse_values[lo:hi], spec.format.value, token_texts)
        elif code == 0:
            payload = render_rows(shaped[i], spec)
        else:
            payload = b""
        res.rids.append(rid)
        res.payloads.append(payload)
        res.prompt_tokens.append(out.prompt_tokens[i])
        res.error_codes.append(code)
        res.error_messages.append(out.error_messages[i])
        res.queue_times.append(out.queue_times[i])
    return dict(per_worker)


def render_or_fail(
    out: BatchEmbeddingOutput, token_texts: Optional[TokenTextFn] = None
) -> dict[int, BatchEmbeddingResult]:
    """render_output, or when rendering fails (a bug) an internal error for every row of the
    batch rather than requests left hanging; the log line names the batch's traces."""
    try:
        return render_output(out, token_texts)
    except Exception as e:
        logger.exception("failed to render an output: %s", e, extra=output_log_extra(out))
        out.error_codes = [ErrorKind.INTERNAL] * len(out.rids)
        out.error_messages = [f"Internal error while rendering the embedding: {e}"] * len(out.rids)
        return render_output(out)


def output_log_extra(out: BatchEmbeddingOutput, worker_id: Optional[int] = None) -> Optional[dict]:
    """The trace ids (and batch id) of a log line about an output's rows (only `worker_id`'s when
    given); None when nothing in it is traced (tracing off)."""
    if not out.trace_contexts:
        return None
    contexts = out.trace_contexts
    if worker_id is not None:
        contexts = [tp for tp, w in zip(contexts, out.worker_ids) if w == worker_id]
    return log_fields(contexts, out.batch_id)


def run_detokenizer_process(server_args: ServerArgs, port_args: PortArgs, ready_pipe, parent_pid: int) -> None:
    on_stop: list = []
    wakeup = prepare_child_process(parent_pid, port_args.ipc_dir, on_stop)
    configure_logging(server_args.log_level, "detokenizer", server_args.log_format)
    tracing = Tracing.start(server_args.enable_trace, server_args.otlp_traces_endpoint, "detokenizer")
    on_stop.append(tracing.shutdown)
    ctx = zmq.Context()
    recv = make_socket(ctx, zmq.PULL, port_args.detokenizer_input, bind=True)
    senders = {
        w: make_socket(ctx, zmq.PUSH, port_args.tokenizer_output(w), bind=False)
        for w in range(server_args.tokenizer_worker_num)
    }
    # Beats from a thread; holds one piece of work while it renders (utils/heartbeat.py).
    heartbeat = Heartbeat(port_args.ipc_dir, stage_name(), heartbeat_interval(server_args.watchdog_timeout)).start()
    ready_pipe.send({"status": "ready"})
    ready_pipe.close()
    token_texts = TokenTexts(  # loaded on first use
        server_args.tokenizer_path, server_args.trust_remote_code, server_args.tokenizer_class
    )
    freeze_startup_objects()
    poller = zmq.Poller()
    poller.register(recv, zmq.POLLIN)
    poller.register(wakeup, zmq.POLLIN)  # a signal taken by another thread must still wake the wait
    while True:
        ready = poller.poll()
        wakeup.woke(ready)
        if not any(entry is recv for entry, _ in ready):
            continue
        frames = recv.recv_multipart(copy=False)
        heartbeat.set_pending(1)
        try:
            out = decode(frames)
        except Exception as e:
            logger.exception("dropping an undecodable message: %s", e)
            heartbeat.progressed(0)
            continue
        start = time.monotonic()
        results = render_or_fail(out, token_texts)
        # The span ends before the answers leave: the HTTP process may finish its own span as soon
        # as they arrive, and a child span must not end after its parent.
        rendered = time.monotonic()
        for worker_id, result in results.items():
            sock = senders.get(worker_id)
            if sock is None:
                logger.error(
                    "result for unknown tokenizer worker %d dropped", worker_id, extra=output_log_extra(out, worker_id)
                )
                continue
            send(sock, result)
        if tracing.enabled:
            trace_render(tracing, out, start, rendered)
        heartbeat.progressed(0)
