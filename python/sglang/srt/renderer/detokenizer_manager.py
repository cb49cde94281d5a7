"""The detokenizer: renders pooled vectors into their wire form off the HTTP event loop.

Each payload is a finished JSON value (an array of numbers, or a base64 string), so the HTTP
process only splices bytes together.
"""

from __future__ import annotations

import base64
import logging
import time
from collections import defaultdict
from typing import Optional

import numpy as np
import orjson
import zmq

from sglang.srt.errors import ErrorKind
from sglang.srt.renderer.sparse_render import TokenTextFn, TokenTexts, render_sparse
from sglang.srt.renderer.token_render import render_token_ids, render_token_row, token_row
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.heartbeat import Heartbeat, heartbeat_interval, stage_name
from sglang.srt.utils.logging_utils import configure_logging
from sglang.srt.utils.network import PortArgs, make_socket
from sglang.srt.utils.process import prepare_child_process
from sglang.srt.utils.tracing import Tracing
from sglang.srt.wire.io_struct import (
    FORMAT_BASE64,
    FORMAT_RAW,
    SPARSE_FORMATS,
    BatchEmbeddingOutput,
    BatchEmbeddingResult,
)
from sglang.srt.wire.msgcodec import decode, send
from sglang.srt.wire.request_tracing import log_fields, trace_render

logger = logging.getLogger(__name__)


def shape_vector(vec: np.ndarray, dimensions: int | None, normalize: Optional[bool] = True) -> np.ndarray:
    """Matryoshka: keep the first `dimensions` values, L2-normalized again when the vector was
    (`normalize` False: the raw pooled values, cut)."""
    if dimensions is None or dimensions >= vec.shape[0]:
        return vec
    head = vec[:dimensions]
    if normalize is False:
        return head
    norm = float(np.linalg.norm(head))
    return head / norm if norm > 0 else head


def to_bfloat16_bits(vec: np.ndarray) -> np.ndarray:
    """float32 -> the uint16 bit patterns of bfloat16, rounded to nearest even (as torch converts)."""
    bits = np.ascontiguousarray(vec, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    nan = np.isnan(vec)
    out = rounded.astype(np.uint16)
    if nan.any():
        out[nan] = np.uint16(0x7FC0)
    return out


def vector_bytes(vec: np.ndarray, embed_dtype: str = "float32", endianness: str = "little") -> bytes:
    """The vector's bytes as `embed_dtype` (float32, float16, bfloat16) in `endianness` order."""
    order = "<" if endianness == "little" else ">"
    if embed_dtype == "bfloat16":
        return to_bfloat16_bits(vec).astype(order + "u2", copy=False).tobytes()
    kind = "f2" if embed_dtype == "float16" else "f4"
    return np.asarray(vec, dtype=np.float32).astype(order + kind).tobytes()


def render_vector(vec: np.ndarray, fmt: str, embed_dtype: str = "float32", endianness: str = "little") -> bytes:
    """JSON numbers (`float`, always float32 values), a base64 JSON string of `embed_dtype` values in
    `endianness` order, or those bytes bare (FORMAT_RAW, in-process callers)."""
    if fmt == FORMAT_BASE64:
        return b'"' + base64.b64encode(vector_bytes(vec, embed_dtype, endianness)) + b'"'
    if fmt == FORMAT_RAW:
        return vector_bytes(vec, embed_dtype, endianness)
    vec = np.ascontiguousarray(vec, dtype="<f4")
    return orjson.dumps(vec, option=orjson.OPT_SERIALIZE_NUMPY)


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
    for i, rid in enumerate(out.rids):
        res = per_worker[out.worker_ids[i]]
        code = out.error_codes[i]
        per_token = code == 0 and out.token_outputs is not None and out.token_outputs[i] is not None
        if out.token_outputs is not None and res.token_ids is None:
            res.token_ids = [b""] * len(res.rids)
        if res.token_ids is not None:
            res.token_ids.append(b"")
        if per_token:
            vectors, ids = token_row(out, i)
            payload = render_token_row(vectors, out.encoding_formats[i])
            res.token_ids[-1] = render_token_ids(ids)
        elif code == 0 and out.encoding_formats[i] in SPARSE_FORMATS:
            lo, hi = int(out.sparse_offsets[i]), int(out.sparse_offsets[i + 1])
            payload = render_sparse(
                out.sparse_indices[lo:hi], out.sparse_values[lo:hi], out.encoding_formats[i], token_texts
            )
        elif code == 0:
            normalize = out.normalize[i] if out.normalize is not None else True
            dtype = out.embed_dtypes[i] if out.embed_dtypes is not None else "float32"
            order = out.endianness[i] if out.endianness is not None else "little"
            vec = shape_vector(out.embeddings[i], out.dimensions[i], normalize)
            payload = render_vector(vec, out.encoding_formats[i], dtype, order)
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
    prepare_child_process(parent_pid, port_args.ipc_dir, on_stop)
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
    token_texts = TokenTexts(server_args.tokenizer_path, server_args.trust_remote_code)  # loaded on first use
    while True:
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
