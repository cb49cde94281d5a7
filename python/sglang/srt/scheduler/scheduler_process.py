"""The scheduler process: ZeroMQ in, Scheduler steps, ZeroMQ out. Blocks (0% CPU) when idle.

It also records its queue and batch metrics and keeps its heartbeat (utils/heartbeat.py): a
thread beats while the process runs, and the loop says how much work it holds and when it last
finished some, which is what the watchdog reads.
"""

from __future__ import annotations

import dataclasses
import logging
import traceback
from typing import Optional

import zmq

from sglang.srt.errors import ConfigError
from sglang.srt.metrics.scheduler_metrics import SchedulerMetrics
from sglang.srt.model_executor.replica_slots import ReplicaSlot
from sglang.srt.scheduler.scheduler import Scheduler
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.allocator import AllocatorPlan, SchedulerMemory
from sglang.srt.utils.gc_freeze import freeze_startup_objects
from sglang.srt.utils.heartbeat import Heartbeat, heartbeat_interval, stage_name
from sglang.srt.utils.logging_utils import configure_logging
from sglang.srt.utils.network import PortArgs, make_socket
from sglang.srt.utils.process import SignalWakeup, prepare_child_process, set_process_name
from sglang.srt.utils.tracing import Tracing
from sglang.srt.wire.io_struct import AbortReq, BatchTokenizedEmbeddingReqInput
from sglang.srt.wire.msgcodec import decode, send

logger = logging.getLogger(__name__)


def run_scheduler_process(
    server_args: ServerArgs,
    port_args: PortArgs,
    ready_pipe,
    parent_pid: int,
    slot: Optional[ReplicaSlot] = None,
    allocator_plan: Optional[AllocatorPlan] = None,
) -> None:
    """One scheduler replica (`slot`: its dp_rank and, on CPU, its cores; None: the only one)."""
    slot = slot or ReplicaSlot()
    on_stop: list = []
    wakeup = prepare_child_process(parent_pid, port_args.ipc_dir, on_stop)
    if slot.dp_size > 1:  # ps/top keep 15 bytes: sglang-sched-1 rather than sglang-schedule for all
        set_process_name(f"sglang-sched-{slot.dp_rank}")
    configure_logging(server_args.log_level, replica_name(slot), server_args.log_format)
    memory = SchedulerMemory(allocator_plan or AllocatorPlan(server_args.cpu_allocator, "off"), server_args.cpu_pool_mb)
    memory.log()
    try:
        from sglang.srt.model_executor.model_runner import ModelRunner

        tracing = Tracing.start(server_args.enable_trace, server_args.otlp_traces_endpoint, replica_name(slot))
        on_stop.append(tracing.shutdown)
        runner = ModelRunner(server_args, slot)
        scheduler = Scheduler(server_args, runner.run_requests, tracing=tracing, dp_rank=slot.dp_rank)
        ctx = zmq.Context()
        recv = make_socket(ctx, zmq.PULL, port_args.scheduler_input_of(slot.dp_rank), bind=True)
        send = make_socket(ctx, zmq.PUSH, port_args.detokenizer_input, bind=False)
    except ConfigError as e:
        ready_pipe.send({"status": "error", "message": str(e)})
        raise SystemExit(1)
    except Exception as e:  # unexpected: keep the traceback in the log, one line for the user
        logger.error("scheduler failed to start:\n%s", traceback.format_exc())
        ready_pipe.send({"status": "error", "message": f"{type(e).__name__}: {e}"})
        raise SystemExit(1)
    heartbeat = Heartbeat(port_args.ipc_dir, stage_name(), heartbeat_interval(server_args.watchdog_timeout)).start()
    model_info = dataclasses.replace(runner.model_info(), memory=memory.info())
    ready_pipe.send({"status": "ready", "model_info": model_info})
    ready_pipe.close()
    # one series per model and replica (--dp-size)
    metrics = SchedulerMetrics(server_args.served_model_name, {"dp_rank": slot.dp_rank})
    freeze_startup_objects()  # the model and torch's modules: a full collection stalled a batch ~0.15 s
    SchedulerLoop(scheduler, recv, send, memory, metrics, heartbeat, wakeup).run_forever()


def replica_name(slot: ReplicaSlot) -> str:
    """`scheduler`, or `scheduler-<dp_rank>` with --dp-size > 1 (log lines, process names)."""
    return "scheduler" if slot.dp_size == 1 else f"scheduler-{slot.dp_rank}"


class SchedulerLoop:
    def __init__(
        self,
        scheduler: Scheduler,
        recv: zmq.Socket,
        send: zmq.Socket,
        memory: Optional[SchedulerMemory] = None,
        metrics: Optional[SchedulerMetrics] = None,
        heartbeat: Optional[Heartbeat] = None,
        wakeup: Optional[SignalWakeup] = None,
    ) -> None:
        self.scheduler = scheduler
        self.recv = recv
        self.send = send
        self.memory = memory or SchedulerMemory(AllocatorPlan("off", "off"))  # when freed memory goes back
        self.metrics = metrics
        self.heartbeat = heartbeat
        self.poller = zmq.Poller()
        self.poller.register(recv, zmq.POLLIN)
        self.wakeup = wakeup  # a signal taken by another thread must still wake the poll
        if wakeup is not None:
            self.poller.register(wakeup, zmq.POLLIN)

    def _drain(self) -> None:
        while True:
            try:
                frames = self.recv.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            try:
                msg = decode(frames)
            except Exception as e:
                logger.error("dropping an undecodable message: %s", e)
                continue
            if isinstance(msg, BatchTokenizedEmbeddingReqInput):
                try:
                    groups = msg.groups()
                except ValueError as e:
                    logger.error("dropping a malformed message: %s", e)
                    continue
                for group in groups:  # each HTTP request's inputs are accepted or refused together
                    rejected = self.scheduler.add_requests(group)
                    if rejected is not None:
                        send(self.send, rejected)
            elif isinstance(msg, AbortReq):
                self.scheduler.abort(msg.rids)
            else:
                logger.error("scheduler got an unexpected %s", type(msg).__name__)

    def run_forever(self) -> None:
        wait: float | None = None
        while True:
            wait = self.run_once(wait)

    def run_once(self, wait: Optional[float]) -> Optional[float]:
        """Wait for input (at most `wait` s; None: until some comes), step; the next wait."""
        # Idle (nothing to run, no deadline) with freed memory held: wake up to give it back.
        release_after = self.memory.idle_release_s() if wait is None else None
        timeout = wait if release_after is None else release_after
        timeout_ms = -1 if timeout is None else max(0, int(timeout * 1000))
        ready = self.poller.poll(timeout_ms)
        if self.wakeup is not None:
            self.wakeup.woke(ready)  # a signal's handler ran as the poll returned
        if not ready and release_after is not None:
            self.memory.release()
            return None
        self._drain()
        if self.heartbeat is not None:  # what it holds now, the batch about to run included
            self.heartbeat.set_pending(len(self.scheduler.waiting))
        out, wait = self.scheduler.step()
        # Metrics first: a batch is counted by the time its answer can reach a client (a scrape
        # right after a response sees it), and the memory release below cannot delay the count.
        self._observe(out)
        if out is not None:
            send(self.send, out)
            if out.batch_tokens:
                self.memory.after_batch(out.batch_tokens)
        return wait

    def _observe(self, out) -> None:
        queued = len(self.scheduler.waiting)
        if self.heartbeat is not None:
            if out is not None:
                self.heartbeat.progressed(queued)
            else:
                self.heartbeat.set_pending(queued)
        if self.metrics is not None:
            self.metrics.observe_queue(queued)  # aborts and expiries included: idle means 0
            if out is not None and out.batch_size > 0:
                self.metrics.observe_batch(out.batch_size, out.batch_tokens, out.inference_time)
