"""Breakable CUDA graphs: per token bucket, the layer stack captured in pieces between attention calls.

`run_layers(hidden, fb)` is captured once per bucket as a chain of segments. Every attention call
"breaks" the capture: the segment before it ends by copying q, k and v into fixed buffers, and the
next segment starts from a fixed output buffer. At replay each segment's graph runs, and between
them attention runs eagerly on those buffers with the *real* batch's ragged metadata: only the
first (real) rows, planned exactly as an eager batch, so padding rows belong to no sequence and are
never attended (no dummy sequence, no graph-mode plan, no forced split-KV). Everything else in a
layer works row by row, so padding rows never reach real ones.

The capture is injected (`SegmentCapture`) so that CPU tests run this same code with a stand-in
that records ops at capture and re-runs them at replay.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Optional, Protocol, Sequence

import torch
from torch import nn

from sglang.srt.layers.attention.base import AttentionBackend
from sglang.srt.layers.attention.layer import AttentionLayer
from sglang.srt.model_executor.cuda_graph_runner import StaticBatches
from sglang.srt.model_executor.forward_batch import ForwardBatch
from sglang.srt.model_executor.graph_padding import GraphBucket, PaddingPlan, choose_bucket, graph_buckets

logger = logging.getLogger(__name__)


class SegmentCapture(Protocol):
    """Captures one bucket's forward as a chain of graphs; `begin`/`end` bracket each segment."""

    def warmup(self, fn) -> None:
        """Run `fn` eagerly once before capture (JIT kernels, library workspaces)."""

    def begin(self) -> None: ...

    def end(self) -> object:
        """Finish the open segment; returns its graph (anything with `.replay()`)."""


class CudaSegmentCapture:
    """Real CUDA graphs: every segment captured on one side stream into one shared memory pool."""

    def __init__(self, device: torch.device) -> None:
        self.pool = torch.cuda.graph_pool_handle()
        self.stream = torch.cuda.Stream(device)
        self._graph: Optional[torch.cuda.CUDAGraph] = None
        self._caller_stream: Optional[torch.cuda.Stream] = None

    def warmup(self, fn) -> None:
        self.stream.wait_stream(torch.cuda.current_stream())  # the static buffers' copies
        with torch.cuda.stream(self.stream):
            fn()
        torch.cuda.synchronize()

    def begin(self) -> None:
        self._graph = torch.cuda.CUDAGraph()
        self._caller_stream = torch.cuda.current_stream()
        self.stream.wait_stream(self._caller_stream)
        torch.cuda.set_stream(self.stream)  # capture needs a side stream
        self._graph.capture_begin(pool=self.pool)

    def end(self) -> object:
        graph, self._graph = self._graph, None
        graph.capture_end()
        torch.cuda.set_stream(self._caller_stream)
        return graph


@dataclass
class Break:
    """One attention call between two segments: its layer and the fixed buffers it reads and writes."""

    layer: AttentionLayer
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    out: torch.Tensor


@dataclass
class BucketGraphs:
    segments: list[object]  # len(breaks) + 1 graphs
    breaks: list[Break]
    output: torch.Tensor  # what run_layers returned during capture; rewritten by the last segment


class AttentionBuffers:
    """Fixed q/k/v/output buffers shared by every break of every bucket: one attention runs at a
    time, and a layer's attention result is consumed (o_proj, residual) before the next attention
    call overwrites it, as in every model here; the CPU tests would see a model that did not."""

    def __init__(self, layers: Sequence[AttentionLayer], max_tokens: int, dtype: torch.dtype, device) -> None:
        q_width = max(layer.num_heads * layer.head_dim for layer in layers)
        kv_width = max(layer.num_kv_heads * layer.head_dim for layer in layers)
        self.q = torch.zeros(max_tokens * q_width, dtype=dtype, device=device)
        self.k = torch.zeros(max_tokens * kv_width, dtype=dtype, device=device)
        self.v = torch.zeros(max_tokens * kv_width, dtype=dtype, device=device)
        self.out = torch.zeros(max_tokens * q_width, dtype=dtype, device=device)

    @staticmethod
    def take(buf: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        if like.dtype != buf.dtype or like.numel() > buf.numel():
            raise RuntimeError(f"attention input {tuple(like.shape)} {like.dtype} does not fit the graph buffers")
        return buf[: like.numel()].view(like.shape)


class _BreakPoints(AttentionBackend):
    """The backend a bucket's static batch carries during capture: each call ends a segment."""

    name = "breakable_graph_capture"

    def __init__(self, capture: SegmentCapture, buffers: AttentionBuffers) -> None:
        self.capture = capture
        self.buffers = buffers
        self.segments: list[object] = []
        self.breaks: list[Break] = []

    def init_forward_metadata(self, forward_batch: ForwardBatch) -> None:
        forward_batch.attn_metadata = None

    def forward(self, q, k, v, layer, forward_batch, position_bias=None) -> torch.Tensor:
        if position_bias is not None:
            raise RuntimeError("breakable CUDA graphs cannot capture an attention score bias (built per batch)")
        bufs = self.buffers
        qs, ks, vs = bufs.take(bufs.q, q), bufs.take(bufs.k, k), bufs.take(bufs.v, v)
        qs.copy_(q)  # the last ops of this segment
        ks.copy_(k)
        vs.copy_(v)
        out = bufs.out[: q.shape[0] * layer.num_heads * layer.head_dim].view(q.shape[0], -1)
        self.segments.append(self.capture.end())
        self.breaks.append(Break(layer, qs, ks, vs, out))
        self.capture.begin()
        return out  # the next segment reads attention's result from here


class BreakableGraphRunner:
    """Same interface as CudaGraphRunner (`plan`, `replay`), any attention backend at the breaks."""

    mode = "breakable"

    def __init__(
        self,
        model: nn.Module,
        hidden_size: int,
        dtype: torch.dtype,
        device: torch.device,
        max_tokens: int,
        max_seqs: int,
        warm_backend: Optional[AttentionBackend] = None,
        capture: Optional[SegmentCapture] = None,
        show_progress: bool = True,
    ) -> None:
        self.model = model
        self.buckets = graph_buckets(max_tokens, max_seqs)
        layers = [m for m in model.modules() if isinstance(m, AttentionLayer)]
        if not layers:
            raise RuntimeError("breakable CUDA graphs need a model with attention layers")
        self.static = StaticBatches(self.buckets, hidden_size, dtype, device, warm_backend)
        self.buffers = AttentionBuffers(layers, self.buckets[-1].num_tokens, dtype, device)
        self.graphs: dict[int, BucketGraphs] = {}
        self._capture_all(capture or CudaSegmentCapture(device), warm_backend, show_progress)

    @torch.inference_mode()
    def _capture_all(
        self, capture: SegmentCapture, warm_backend: Optional[AttentionBackend], show_progress: bool
    ) -> None:
        start = time.perf_counter()
        order = sorted(self.buckets, key=lambda b: b.num_tokens, reverse=True)  # small ones reuse the pool
        try:
            from tqdm import tqdm

            order = tqdm(order, desc="Capturing breakable CUDA graphs", unit="graph", disable=not show_progress)
        except ImportError:  # pragma: no cover - tqdm comes with huggingface_hub
            pass
        for bucket in order:
            self.graphs[bucket.num_tokens] = self._capture(bucket, capture, warm_backend)
        device = self.static.hidden.device
        reserved = torch.cuda.memory_reserved(device) / 2**30 if device.type == "cuda" else 0.0
        logger.info(
            "captured %d breakable CUDA graphs (up to %d tokens, %d segments each) in %.1fs; %.2f GiB reserved",
            len(self.buckets),
            self.buckets[-1].num_tokens,
            len(next(iter(self.graphs.values())).segments),
            time.perf_counter() - start,
            reserved,
        )

    def _capture(
        self, bucket: GraphBucket, capture: SegmentCapture, warm_backend: Optional[AttentionBackend]
    ) -> BucketGraphs:
        fb = self.static.set_layout(bucket, [bucket.num_tokens] + [0] * (bucket.num_seqs - 1))
        hidden = self.static.hidden_for(bucket)
        if warm_backend is not None:  # one eager pass over the bucket as a single sequence
            t = bucket.num_tokens
            warm = dataclasses.replace(
                fb, seq_lens=fb.seq_lens[:1], cu_seqlens=fb.cu_seqlens[:2], seq_lens_cpu=[t], attn_backend=warm_backend
            )
            warm_backend.init_forward_metadata(warm)
            capture.warmup(lambda: self.model.run_layers(hidden, warm))
        points = _BreakPoints(capture, self.buffers)
        fb.attn_backend, fb.attn_metadata = points, None
        capture.begin()
        try:
            output = self.model.run_layers(hidden, fb)
        finally:
            last = capture.end()
            fb.attn_backend = warm_backend
        return BucketGraphs(points.segments + [last], points.breaks, output)

    def plan(self, fb: ForwardBatch) -> Optional[PaddingPlan]:
        """How to replay this batch, or None to run it eagerly."""
        if fb.positions.dim() != 1 or fb.attn_backend is None:  # e.g. M-RoPE positions: not captured
            return None
        return choose_bucket(fb.seq_lens_cpu, self.buckets)

    def replay(self, fb: ForwardBatch, hidden: torch.Tensor, plan: PaddingPlan) -> torch.Tensor:
        """run_layers(hidden, fb) through the bucket's segments: [real tokens, hidden] on the device.

        Attention runs on fb's own backend and metadata (planned here if not yet), over the real
        rows only. The result is a view of the last segment's output, valid until the next replay.
        """
        self.static.load_tokens(fb, hidden, plan)
        backend = fb.attn_backend
        if fb.attn_metadata is None:
            backend.init_forward_metadata(fb)
        graphs = self.graphs[plan.bucket.num_tokens]
        n = plan.num_real_tokens
        for segment, brk in zip(graphs.segments, graphs.breaks):
            segment.replay()
            brk.out[:n].copy_(backend.forward(brk.q[:n], brk.k[:n], brk.v[:n], brk.layer, fb))
            brk.out[n:].zero_()  # padding rows: deterministic, whatever an earlier batch left
        graphs.segments[-1].replay()
        return graphs.output[:n]
