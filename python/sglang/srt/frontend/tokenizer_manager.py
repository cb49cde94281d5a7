"""TokenizerManager: validates and tokenizes requests, ships them to the scheduler, awaits results.

Lives in the HTTP process (and in the caller's process for the offline Engine). Keeps
`rid -> state` and resolves each request's future when all of its inputs are back.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Optional

import numpy as np
import zmq
import zmq.asyncio

from sglang.srt.configs.model_info import ModelInfo
from sglang.srt.errors import EmbeddingError, ErrorKind, engine_error, queue_full_error
from sglang.srt.frontend.colbert_inputs import ColbertInputs
from sglang.srt.frontend.dp_policy import replica_capacities
from sglang.srt.frontend.dp_router import ReplicaRouter
from sglang.srt.frontend.multimodal.preparer import MultimodalPreparer
from sglang.srt.frontend.multimodal.preparer import attach as attach_images
from sglang.srt.frontend.output_options import output_spec
from sglang.srt.frontend.response_size import check_per_token_size
from sglang.srt.frontend.shared_inputs import work_chars
from sglang.srt.frontend.tokenization import InputTokenizer
from sglang.srt.metrics.server_metrics import ServerMetrics
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.network import PortArgs, make_socket
from sglang.srt.utils.off_loop import off_loop
from sglang.srt.utils.tracing import Tracing
from sglang.srt.utils.within import within
from sglang.srt.wire.io_struct import (
    BatchEmbeddingResult,
    EmbeddingReqInput,
    TokenizedEmbeddingReqInput,
)
from sglang.srt.wire.msgcodec import decode
from sglang.srt.wire.request_tracing import request_span
from sglang.srt.wire.token_kinds import TOKENS_DOCUMENT, TOKENS_QUERY

logger = logging.getLogger(__name__)


@dataclass
class EmbeddingResult:
    """What one request comes back as: rendered payloads in input order, plus accounting."""

    payloads: list[bytes]
    prompt_tokens: list[int]
    queue_time: float = 0.0
    inference_time: float = 0.0
    tokenize_time: float = 0.0
    token_ids: Optional[list[Optional[bytes]]] = None  # per-token rows: the JSON array of their token ids

    def arrays(self) -> list[np.ndarray]:
        """A FORMAT_RAW request's rows as the renderer made them (Format.ARRAY): float32 [dim] per
        input, [tokens, dim] for per-token rows. Typed numbers: nothing to decode or reshape."""
        for p in self.payloads:
            if not isinstance(p, np.ndarray):
                raise TypeError("rendered payloads are not numbers: the request did not ask for FORMAT_RAW")
        return self.payloads

    def matrix(self) -> np.ndarray:
        """The pooled rows of a FORMAT_RAW request stacked: float32 [n, dim]."""
        rows = self.arrays()
        return np.stack(rows) if rows else np.zeros((0, 0), np.float32)

    def first_values(self) -> np.ndarray:
        """Each row's first value as float64 [n]: a one-label model's logit (rerankers)."""
        return np.array([row[0] for row in self.arrays()], dtype=np.float64)


@dataclass
class ReqState:
    """One request's inputs in flight: filled in as results arrive, resolved when none remain."""

    future: asyncio.Future
    payloads: list
    prompt_tokens: list
    remaining: int
    queue_time: float = 0.0
    inference_time: float = 0.0
    token_ids: Optional[list] = None  # filled for per-token rows

    @classmethod
    def for_inputs(cls, n: int) -> "ReqState":
        return cls(asyncio.get_running_loop().create_future(), [None] * n, [0] * n, n)


class TokenizerManager:
    def __init__(
        self,
        server_args: ServerArgs,
        port_args: PortArgs,
        model_info: ModelInfo,
        worker_id: int = 0,
        tokenizer=None,
        metrics: Optional[ServerMetrics] = None,
        tracing: Optional[Tracing] = None,
    ) -> None:
        self.server_args = server_args
        self.metrics = metrics or ServerMetrics(server_args.served_model_name)
        self.tracing = tracing or Tracing()  # disabled unless --enable-trace
        # The scheduler times out inputs queued past --request-timeout; this backstop times out
        # anything still unanswered at twice that (a batch that never ends, a lost message).
        self.backstop_timeout: Optional[float] = server_args.backstop_timeout
        self.model_info = model_info
        self.worker_id = worker_id
        self.input_tokenizer = InputTokenizer(server_args, model_info, tokenizer)
        self.multimodal = MultimodalPreparer(server_args, model_info, self.input_tokenizer.tokenizer)
        self.colbert_inputs = (
            ColbertInputs(model_info.colbert, self.input_tokenizer.tokenizer)
            if model_info.colbert is not None
            else None
        )
        self.ctx = zmq.asyncio.Context()
        # The scheduler replica(s): placement, per-replica load, aborts and retries (frontend/dp_router.py).
        self.router = ReplicaRouter(server_args, port_args, self.ctx, worker_id)
        self.from_detokenizer = make_socket(self.ctx, zmq.PULL, port_args.tokenizer_output(worker_id), bind=True)
        self.states: dict[str, tuple[ReqState, int]] = {}
        self.admission_limit = admission_limit(server_args)
        self.dead_reason: Optional[str] = None
        self.closed = False
        self._result_task: Optional[asyncio.Task] = None

    # ----- lifecycle -----
    def start(self) -> None:
        """Start the result loop on the running event loop."""
        if self._result_task is None:
            self._result_task = asyncio.get_running_loop().create_task(self._result_loop())

    async def close(self) -> None:
        """Stop; requests cancelled at the graceful timeout may still be unwinding: from now on
        their aborts are not sent (the engine stops next), so nothing touches the closed sockets."""
        self.closed = True
        if self._result_task is not None:
            self._result_task.cancel()
        await asyncio.sleep(0)  # let cancelled requests unwind first
        self.multimodal.close()
        self.ctx.destroy(linger=0)

    @property
    def healthy(self) -> bool:
        return self.dead_reason is None

    def on_engine_back(self) -> None:
        """The engine was started again on the same sockets (a server with several models restarts a
        dead model's): requests are taken again. What was in flight failed at its death."""
        self.dead_reason = None

    def on_engine_dead(self, reason: str) -> None:
        """A child process died: fail everything in flight as UNAVAILABLE, and everything after it."""
        self.dead_reason = reason
        err = EmbeddingError(ErrorKind.UNAVAILABLE, f"The embedding engine is unavailable: {reason}")
        for state, _ in list(self.states.values()):
            if not state.future.done():
                state.future.set_exception(err)
        self.states.clear()
        self.router.clear()

    @property
    def num_in_flight(self) -> int:
        return len(self.states)

    def has_room(self, n_inputs: int = 1) -> bool:
        """False when the replicas' queues cannot take `n_inputs` more (see dp_policy.replica_capacities)."""
        return self.router.room() >= n_inputs

    # ----- requests -----
    async def embed(self, req: EmbeddingReqInput) -> EmbeddingResult:
        if req.items is not None:  # its images' memory is in use until it is answered
            with self.multimodal.request_in_flight():
                return await self._traced_embed(req)
        return await self._traced_embed(req)

    async def _traced_embed(self, req: EmbeddingReqInput) -> EmbeddingResult:
        if not self.tracing.enabled:
            return await self._embed(req, None)
        with request_span(self.tracing) as traceparent:
            return await self._embed(req, traceparent)

    async def _embed(self, req: EmbeddingReqInput, traceparent: Optional[str]) -> EmbeddingResult:
        if self.dead_reason is not None:
            raise EmbeddingError(ErrorKind.UNAVAILABLE, f"The embedding engine is unavailable: {self.dead_reason}")
        if not self.has_room(req.batch_size):
            # Answering here spares the tokenizer and two process hops per refusal, which under
            # overload is what slows the requests that were accepted.
            raise queue_full_error()
        t0 = time.monotonic()
        prepared = None
        key_lens: list = []
        if req.items is not None:  # {"text", "image"} items: images are loaded off the event loop
            prepared = await self.multimodal.prepare(req.items)
            tokenized = [(p.input_ids, None) for p in prepared]
        else:
            colbert = self.colbert_inputs_for(req) is not None  # ColBERT markers, lengths and query expansion
            tokenize = self._colbert_tokenize if colbert else self.input_tokenizer.tokenize
            # Megabytes of text take the tokenizer seconds, a million token ids numpy tens of
            # milliseconds: off the loop. A prompt or rerank query counts once per input
            # (frontend/shared_inputs.py).
            tokenized = await off_loop(functools.partial(tokenize, req), work_chars(req))
            if colbert:
                tokenized, key_lens = [(ids, None) for ids, _ in tokenized], [k for _, k in tokenized]
        if req.token_output is not None:  # per-token answers: refused here when too large, before any compute
            sizes = [len(ids) for ids, _ in tokenized]
            check_per_token_size(req, sizes, self.model_info, self.server_args.max_response_bytes)
        chunk_lens: list = [None] * len(tokenized)
        if prepared is None and self.input_tokenizer.chunks is not None:  # --max-embed-len (frontend/chunking.py)
            for i, (ids, types) in enumerate(tokenized):
                ids, chunk_lens[i] = self.input_tokenizer.split(ids, req)
                tokenized[i] = (ids, types)
        # Internal ids are always fresh: a client's x-request-id may repeat, and sharing state
        # keys would hand one client's vectors to another.
        base = uuid.uuid4().hex
        now = time.monotonic()
        if traceparent is not None:
            attrs = {"sglang.inputs": len(tokenized), "sglang.prompt_tokens": sum(len(ids) for ids, _ in tokenized)}
            self.tracing.record("prepare_images" if prepared is not None else "tokenize", traceparent, t0, now, attrs)
        spec = output_spec(req, self.model_info)  # every input of the request answers alike
        reqs = [
            TokenizedEmbeddingReqInput(
                rid=f"{base}-{i}",
                worker_id=self.worker_id,
                input_ids=ids,
                token_type_ids=types,
                output=spec,
                arrival_time=now,
                token_output=req.token_output,
                key_len=key_lens[i] if key_lens else None,
                chunk_lens=chunk_lens[i],
                trace_context=traceparent,
            )
            for i, (ids, types) in enumerate(tokenized)
        ]
        if prepared is not None:
            attach_images(reqs, prepared)
        n = len(reqs)
        if self.dead_reason is not None:  # it died while this request was being tokenized
            raise EmbeddingError(ErrorKind.UNAVAILABLE, f"The embedding engine is unavailable: {self.dead_reason}")
        sends = self.router.dispatch(reqs)
        if sends is None:  # the room went to other requests while this one was being tokenized
            raise queue_full_error()
        state = ReqState.for_inputs(n)
        for i, r in enumerate(reqs):
            self.states[r.rid] = (state, i)
        try:
            for sent in sends:
                await sent
            if self.backstop_timeout is None:
                await state.future
            else:
                await within(state.future, self.backstop_timeout)
        except asyncio.TimeoutError:
            self._abort([r.rid for r in reqs])
            raise EmbeddingError(
                ErrorKind.TIMEOUT,
                f"No answer from the engine within {self.backstop_timeout:g} s (twice --request-timeout).",
            ) from None
        except (asyncio.CancelledError, EmbeddingError):
            self._abort([r.rid for r in reqs])
            raise
        self.metrics.observe_request(
            inputs=n,
            prompt_tokens=sum(state.prompt_tokens),
            tokenize=now - t0,
            queue=state.queue_time,
            inference=state.inference_time,
        )
        return EmbeddingResult(
            state.payloads, state.prompt_tokens, state.queue_time, state.inference_time, now - t0, state.token_ids
        )

    def _colbert_tokenize(self, req: EmbeddingReqInput) -> list:
        """ColBERT's (ids, key_len) per text, the request's prompt joined as InputTokenizer joins it."""
        is_query = req.token_output == TOKENS_QUERY
        return self.colbert_inputs.build(self.input_tokenizer, req.text, is_query, prompt=req.prompt)

    def colbert_inputs_for(self, req: EmbeddingReqInput) -> Optional[ColbertInputs]:
        """The ColBERT input builder when this request's texts need markers / lengths, else None."""
        if req.token_output not in (TOKENS_QUERY, TOKENS_DOCUMENT) or req.text is None:
            return None
        if self.colbert_inputs is None or not self.colbert_inputs.shapes_inputs:
            return None
        return self.colbert_inputs

    def _abort(self, rids: list[str]) -> None:
        pending = [rid for rid in rids if self.states.pop(rid, None) is not None]
        if pending and self.dead_reason is None and not self.closed:
            # Fire and forget: the replicas drop whatever is still queued.
            self.router.abort(pending)

    async def _result_loop(self) -> None:
        while True:
            frames = await self.from_detokenizer.recv_multipart(copy=False)
            try:
                res = decode(frames)
                self._dispatch(res)
            except Exception:
                logger.exception("failed to handle a result message")
            # Not kept until the next message arrives: the frames (and the rows decoded from them)
            # of a per-token answer are tens of MB, alive after the answer was sent.
            frames = res = None

    def _dispatch(self, res: BatchEmbeddingResult) -> None:
        refused = [rid for rid, code in zip(res.rids, res.error_codes) if code == ErrorKind.QUEUE_FULL]
        # A replica whose queue share is full refused a part: it goes to another replica if one has room.
        retried = self.router.retry_refused(refused) if refused else ()
        for i, rid in enumerate(res.rids):
            if rid in retried:
                continue
            entry = self.states.pop(rid, None)
            self.router.answered(rid)
            if entry is None:
                continue  # aborted or already failed
            state, idx = entry
            if state.future.done():
                continue
            code = res.error_codes[i]
            if code != 0:
                state.future.set_exception(engine_error(code, res.error_messages[i] or "error"))
                continue
            state.payloads[idx] = res.payloads[i]
            if res.token_ids is not None and res.token_ids[i]:
                if state.token_ids is None:
                    state.token_ids = [None] * len(state.payloads)
                state.token_ids[idx] = res.token_ids[i]
            state.prompt_tokens[idx] = res.prompt_tokens[i]
            state.queue_time = max(state.queue_time, res.queue_times[i])
            state.inference_time = max(state.inference_time, res.inference_time)
            state.remaining -= 1
            if state.remaining == 0:
                state.future.set_result(None)


def admission_limit(server_args: ServerArgs) -> int:
    """Most inputs one tokenizer manager keeps in flight before it refuses more by itself (QUEUE_FULL).

    Each scheduler replica holds at most its share of --max-queue-size waiting and runs a batch
    taken from them, so inputs in flight beyond share + min(batch, share) per replica cannot all
    have room (dp_policy.replica_capacities). The count is this process's own, so with several
    tokenizer workers the schedulers' checks stay the global ones; results on their way back still
    count, so near the limit a refusal may come a batch early.
    """
    return sum(replica_capacities(server_args))
