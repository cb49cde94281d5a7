"""TokenizerManager: validates and tokenizes requests, ships them to the scheduler, awaits results.

Lives in the HTTP process (and in the caller's process for the offline Engine). Keeps
`rid -> state` and resolves each request's future when all of its inputs are back.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import zmq
import zmq.asyncio

from sglang.srt.managers.errors import EmbeddingError
from sglang.srt.managers.io_struct import (
    AbortReq,
    BatchEmbeddingResult,
    BatchTokenizedEmbeddingReqInput,
    EmbeddingReqInput,
    TokenizedEmbeddingReqInput,
)
from sglang.srt.managers.tokenization import InputTokenizer
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.msgcodec import decode, encode
from sglang.srt.utils.network import PortArgs, make_socket

logger = logging.getLogger(__name__)


@dataclass
class EmbeddingResult:
    """What one request comes back as: rendered payloads in input order, plus accounting."""

    payloads: list[bytes]
    prompt_tokens: list[int]
    queue_time: float = 0.0
    inference_time: float = 0.0
    tokenize_time: float = 0.0


@dataclass
class ReqState:
    n: int
    future: asyncio.Future
    payloads: list = field(default_factory=list)
    prompt_tokens: list = field(default_factory=list)
    remaining: int = 0
    queue_time: float = 0.0
    inference_time: float = 0.0


class TokenizerManager:
    def __init__(self, server_args: ServerArgs, port_args: PortArgs, model_info: dict, worker_id: int = 0,
                 tokenizer=None) -> None:
        self.server_args = server_args
        self.model_info = model_info
        self.worker_id = worker_id
        self.input_tokenizer = InputTokenizer(server_args, model_info, tokenizer)
        self.ctx = zmq.asyncio.Context()
        self.to_scheduler = make_socket(self.ctx, zmq.PUSH, port_args.scheduler_input, bind=False)
        self.from_detokenizer = make_socket(self.ctx, zmq.PULL, port_args.tokenizer_output(worker_id), bind=True)
        self.states: dict[str, tuple[ReqState, int]] = {}
        self.dead_reason: Optional[str] = None
        self._result_task: Optional[asyncio.Task] = None

    # ----- lifecycle -----
    def start(self) -> None:
        """Start the result loop on the running event loop."""
        if self._result_task is None:
            self._result_task = asyncio.get_running_loop().create_task(self._result_loop())

    async def close(self) -> None:
        if self._result_task is not None:
            self._result_task.cancel()
        self.ctx.destroy(linger=0)

    @property
    def healthy(self) -> bool:
        return self.dead_reason is None

    def on_engine_dead(self, reason: str) -> None:
        """A child process died: fail everything in flight with 503, and everything after it."""
        self.dead_reason = reason
        err = EmbeddingError(503, f"The embedding engine is unavailable: {reason}")
        for state, _ in list(self.states.values()):
            if not state.future.done():
                state.future.set_exception(err)
        self.states.clear()

    @property
    def num_in_flight(self) -> int:
        return len(self.states)

    # ----- requests -----
    async def embed(self, req: EmbeddingReqInput) -> EmbeddingResult:
        if self.dead_reason is not None:
            raise EmbeddingError(503, f"The embedding engine is unavailable: {self.dead_reason}")
        t0 = time.monotonic()
        tokenized = self.input_tokenizer.tokenize(req)
        base = req.rid or uuid.uuid4().hex
        now = time.monotonic()
        reqs = [
            TokenizedEmbeddingReqInput(
                rid=f"{base}-{i}", worker_id=self.worker_id, input_ids=ids, token_type_ids=types,
                dimensions=req.dimensions, encoding_format=req.encoding_format, arrival_time=now,
            )
            for i, (ids, types) in enumerate(tokenized)
        ]
        n = len(reqs)
        state = ReqState(n=n, future=asyncio.get_running_loop().create_future(),
                         payloads=[None] * n, prompt_tokens=[0] * n, remaining=n)
        for i, r in enumerate(reqs):
            self.states[r.rid] = (state, i)
        await self.to_scheduler.send_multipart(encode(BatchTokenizedEmbeddingReqInput(reqs)), copy=False)
        try:
            await state.future
        except asyncio.CancelledError:
            self._abort([r.rid for r in reqs])
            raise
        except EmbeddingError:
            self._abort([r.rid for r in reqs])
            raise
        return EmbeddingResult(state.payloads, state.prompt_tokens, state.queue_time,
                               state.inference_time, now - t0)

    def _abort(self, rids: list[str]) -> None:
        pending = [rid for rid in rids if self.states.pop(rid, None) is not None]
        if pending and self.dead_reason is None:
            # Fire and forget: the scheduler drops whatever is still queued.
            self.to_scheduler.send_multipart(encode(AbortReq(pending)), copy=False)

    async def _result_loop(self) -> None:
        while True:
            frames = await self.from_detokenizer.recv_multipart(copy=False)
            try:
                res = decode(frames)
                self._dispatch(res)
            except Exception:
                logger.exception("failed to handle a result message")

    def _dispatch(self, res: BatchEmbeddingResult) -> None:
        for i, rid in enumerate(res.rids):
            entry = self.states.pop(rid, None)
            if entry is None:
                continue  # aborted or already failed
            state, idx = entry
            if state.future.done():
                continue
            code = res.error_codes[i]
            if code != 0:
                headers = {"Retry-After": "1"} if code == 429 else None
                state.future.set_exception(EmbeddingError(code, res.error_messages[i] or "error", headers=headers))
                continue
            state.payloads[idx] = res.payloads[i]
            state.prompt_tokens[idx] = res.prompt_tokens[i]
            state.queue_time = max(state.queue_time, res.queue_times[i])
            state.inference_time = max(state.inference_time, res.inference_time)
            state.remaining -= 1
            if state.remaining == 0:
                state.future.set_result(None)


def payload_to_array(payload: bytes) -> np.ndarray:
    """A FORMAT_RAW payload back into float32 (used by the in-process Engine)."""
    return np.frombuffer(payload, dtype="<f4")
