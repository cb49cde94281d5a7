"""The scheduler: queues tokenized inputs, forms batches, runs them, and turns the results into
output messages.

`Scheduler` is the engine core and can be stepped in-process without sockets (tests drive it
directly). It runs a batch through the forward function it is given (ModelRunner.run_requests,
which scheduler_process.py builds and wraps in the ZeroMQ loop of the scheduler process; a fake in
tests), so it never touches the model itself.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections import OrderedDict
from typing import Callable, Optional

from sglang.srt.errors import QUEUE_FULL_MESSAGE, REQUEST_TIMEOUT_MESSAGE, ErrorKind
from sglang.srt.model_executor.forward_io import ForwardFn
from sglang.srt.scheduler.chunk_merge import ChunkMerger
from sglang.srt.scheduler.schedule_policy import BatchBudget, next_batch
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.tracing import Tracing
from sglang.srt.wire.io_struct import BatchEmbeddingOutput, TokenizedEmbeddingReqInput
from sglang.srt.wire.request_tracing import log_fields, new_batch_id, trace_batch, trace_contexts, trace_refused

logger = logging.getLogger(__name__)


class Scheduler:
    def __init__(
        self,
        server_args: ServerArgs,
        forward_fn: ForwardFn,
        clock: Callable[[], float] = time.monotonic,
        tracing: Optional[Tracing] = None,
        dp_rank: int = 0,
    ) -> None:
        self.budget = BatchBudget(
            max_batch_size=server_args.max_batch_size,
            max_num_tokens=server_args.max_num_tokens,
            max_queue_delay=server_args.max_queue_delay,
        )
        # With --dp-size N this replica owns its share of the server-wide --max-queue-size.
        self.dp_rank = dp_rank
        self.max_queue_size = server_args.replica_queue_sizes[dp_rank]
        # Inputs still queued this long after they were tokenized fail with TIMEOUT (None: never).
        self.request_timeout = server_args.queue_timeout
        self.forward_fn = forward_fn
        self.clock = clock
        self.waiting: "OrderedDict[str, TokenizedEmbeddingReqInput]" = OrderedDict()
        self.last_batch_size = 0  # the hold window waits for about this many inputs (schedule_policy)
        self.tracing = tracing or Tracing()  # disabled unless --enable-trace
        self.chunks = ChunkMerger()  # long inputs queued as their chunks (--max-embed-len)

    # ----- input -----
    def add_requests(self, reqs: list[TokenizedEmbeddingReqInput]) -> Optional[BatchEmbeddingOutput]:
        """Queue requests; those beyond --max-queue-size are refused at once (QUEUE_FULL, returned)."""
        room = self.max_queue_size - len(self.waiting)
        queued = self.chunks.expand(reqs)  # a chunked input takes a place per chunk
        accepted = queued if room >= len(queued) else []
        # All inputs of one HTTP request share its fate: a partial refusal would be useless to the client.
        for req in accepted:
            self.waiting[req.rid] = req
        rejected = reqs if not accepted else []
        if rejected:
            self.chunks.forget(rejected)
            if self.tracing.enabled:
                trace_refused(self.tracing, rejected, self.clock(), "queue full")
            logger.debug(
                "refused %d inputs: the queue is full (%d waiting)",
                len(rejected),
                len(self.waiting),
                extra=self._log_extra(rejected),
            )
            return BatchEmbeddingOutput.failure(rejected, ErrorKind.QUEUE_FULL, QUEUE_FULL_MESSAGE)
        return None

    def abort(self, rids: list[str]) -> int:
        rids = self.chunks.with_chunks(rids)
        removed = [req for req in (self.waiting.pop(rid, None) for rid in rids) if req is not None]
        if removed:
            logger.debug("aborted %d queued inputs", len(removed), extra=self._log_extra(removed))
        return len(removed)

    def _log_extra(self, reqs: list[TokenizedEmbeddingReqInput], batch_id: Optional[str] = None) -> Optional[dict]:
        """The trace ids of a log line about `reqs` (request_tracing.log_fields); None when off."""
        if not self.tracing.enabled:
            return None
        return log_fields([r.trace_context for r in reqs], batch_id)

    # ----- stepping -----
    def step(self) -> tuple[Optional[BatchEmbeddingOutput], Optional[float]]:
        """Run at most one batch. Returns (output or None, seconds until a batch may be due)."""
        if not self.waiting:
            return None, None
        now = self.clock()
        expired = self._pop_expired(now)
        if expired:
            if self.tracing.enabled:
                trace_refused(self.tracing, expired, now, "timed out in the queue (--request-timeout)")
            logger.debug(
                "%d inputs waited past --request-timeout %g s; failing them",
                len(expired),
                self.request_timeout,
                extra=self._log_extra(expired),
            )
            out = BatchEmbeddingOutput.failure(
                expired,
                ErrorKind.TIMEOUT,
                REQUEST_TIMEOUT_MESSAGE,
            )
            out.queue_times = [max(0.0, now - r.arrival_time) for r in expired]
            out = self.chunks.finish(out, self.waiting)
            return out, (0.0 if self.waiting else None)
        decision = next_batch(self.waiting.values(), self.budget, now, self.last_batch_size)
        if decision.take == 0:
            wait = decision.wait
            if self.request_timeout is not None and wait is not None:
                head = next(iter(self.waiting.values()))
                wait = min(wait, max(0.0, head.arrival_time + self.request_timeout - now))
            return None, wait
        batch = [self.waiting.popitem(last=False)[1] for _ in range(decision.take)]
        self.last_batch_size = len(batch)
        out = self.chunks.finish(self.run_batch(batch), self.waiting)  # chunk rows -> their input's row
        return out, (0.0 if self.waiting else None)

    def _pop_expired(self, now: float) -> list[TokenizedEmbeddingReqInput]:
        """Drop inputs queued past --request-timeout from the head of the queue.

        The queue is FIFO by arrival, so expired inputs sit at its head; with several tokenizer
        workers arrival order is only nearly FIFO, and an input behind a younger one is caught on
        a later step, once the ones ahead of it have left.
        """
        if self.request_timeout is None:
            return []
        cutoff = now - self.request_timeout
        expired = []
        while self.waiting:
            rid, head = next(iter(self.waiting.items()))
            if head.arrival_time > cutoff:
                break
            expired.append(self.waiting.pop(rid))
        return expired

    def run_batch(self, reqs: list[TokenizedEmbeddingReqInput]) -> BatchEmbeddingOutput:
        batch_id = new_batch_id() if self.tracing.enabled else None
        start = self.clock()
        try:
            rows = self.forward_fn(reqs)
        except Exception as e:  # a failing forward fails only its own requests
            logger.error(
                "forward pass failed for %d requests: %s\n%s",
                len(reqs),
                e,
                traceback.format_exc(),
                extra=self._log_extra(reqs, batch_id),
            )
            if self.tracing.enabled:
                trace_batch(self.tracing, reqs, start, self.clock(), f"{type(e).__name__}: {e}", batch_id)
            return BatchEmbeddingOutput.failure(
                reqs,
                ErrorKind.INTERNAL,
                f"Internal error during the forward pass: {e}",
            )
        elapsed = self.clock() - start
        if self.tracing.enabled:
            trace_batch(self.tracing, reqs, start, start + elapsed, batch_id=batch_id)
        n = len(reqs)
        tokens = sum(r.num_tokens for r in reqs)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "batch of %d inputs, %d tokens: forward %.1f ms, %d still queued",
                n,
                tokens,
                elapsed * 1000,
                len(self.waiting),
                extra=self._log_extra(reqs, batch_id),
            )
        return BatchEmbeddingOutput(
            **rows.columns(),  # the runner's rows as they are; the scheduler adds its own columns
            rids=[r.rid for r in reqs],
            worker_ids=[r.worker_id for r in reqs],
            prompt_tokens=[r.num_tokens for r in reqs],
            outputs=[r.output for r in reqs],
            error_codes=[0] * n,
            error_messages=[None] * n,
            queue_times=[max(0.0, start - r.arrival_time) for r in reqs],
            inference_time=elapsed,
            batch_size=n,
            batch_tokens=tokens,
            trace_contexts=trace_contexts(reqs) if self.tracing.enabled else None,
            batch_id=batch_id,
        )
