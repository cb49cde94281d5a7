"""CUDA graphs of the layer stack, one per token bucket, replayed for any batch that fits.

Only `model.run_layers(hidden, forward_batch)` is captured. The embedding lookup before it and the
pooling after it run eagerly on the real (unpadded) batch, so one graph serves every mix of inputs
whose padded layout fits its bucket (see graph_padding.py). All graphs share one memory pool
(captured largest first, so smaller ones reuse its blocks) and one set of static input buffers,
sized for the largest bucket: replays run one at a time, and each refills the buffers in place.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Callable, Optional, Sequence

import numpy as np
import torch
from torch import nn

from sglang.srt.layers.attention.base import AttentionBackend
from sglang.srt.model_executor.forward_batch import ForwardBatch
from sglang.srt.model_executor.graph_padding import GraphBucket, PaddingPlan, choose_bucket, graph_buckets

logger = logging.getLogger(__name__)

# fn -> (graph with .replay(), the tensor fn returned during capture, rewritten by every replay)
CaptureFn = Callable[[Callable[[], torch.Tensor]], tuple[object, torch.Tensor]]


class StaticBatches:
    """Fixed-address inputs of the captured graphs, and the ForwardBatch of each bucket over them."""

    def __init__(
        self,
        buckets: Sequence[GraphBucket],
        hidden_size: int,
        dtype: torch.dtype,
        device: torch.device,
        attn_backend: Optional[AttentionBackend],
    ) -> None:
        tokens = max(b.num_tokens for b in buckets)
        seqs = max(b.num_seqs for b in buckets)
        self.hidden = torch.zeros(tokens, hidden_size, dtype=dtype, device=device)
        self.input_ids = torch.zeros(tokens, dtype=torch.int64, device=device)
        self.positions = torch.zeros(tokens, dtype=torch.int64, device=device)
        self.seq_ids = torch.zeros(tokens, dtype=torch.int64, device=device)
        self.seq_lens = torch.zeros(seqs, dtype=torch.int32, device=device)
        self.cu_seqlens = torch.zeros(seqs + 1, dtype=torch.int32, device=device)
        self.batches: dict[int, ForwardBatch] = {}
        for b in buckets:
            t, s = b.num_tokens, b.num_seqs
            self.batches[t] = ForwardBatch(
                input_ids=self.input_ids[:t],
                positions=self.positions[:t],
                seq_lens=self.seq_lens[:s],
                cu_seqlens=self.cu_seqlens[: s + 1],
                seq_ids=self.seq_ids[:t],
                seq_lens_cpu=[t] + [0] * (s - 1),
                max_seqlen=t,
                attn_backend=attn_backend,
            )

    def hidden_for(self, bucket: GraphBucket) -> torch.Tensor:
        return self.hidden[: bucket.num_tokens]

    def set_layout(self, bucket: GraphBucket, seq_lens: list[int]) -> ForwardBatch:
        """Write the sequence layout (lengths and prefix sums) into the bucket's static batch."""
        fb = self.batches[bucket.num_tokens]
        lens = np.asarray(seq_lens, dtype=np.int32)
        cu = np.zeros(len(lens) + 1, dtype=np.int32)
        cu[1:] = np.cumsum(lens)
        fb.seq_lens.copy_(torch.from_numpy(lens))
        fb.cu_seqlens.copy_(torch.from_numpy(cu))
        fb.seq_lens_cpu = list(seq_lens)
        fb.max_seqlen = max(seq_lens)
        return fb

    def load(self, fb: ForwardBatch, hidden: torch.Tensor, plan: PaddingPlan) -> ForwardBatch:
        """Copy a real batch (and its embedded tokens) in, padding it with the dummy sequence.

        Padding tokens get zero hidden states, position 0 (inside any RoPE table) and the dummy
        sequence's id; they touch nothing real, since attention keeps to each sequence.
        """
        self.load_tokens(fb, hidden, plan)
        return self.set_layout(plan.bucket, plan.padded_seq_lens(fb.seq_lens_cpu))

    def load_tokens(self, fb: ForwardBatch, hidden: torch.Tensor, plan: PaddingPlan) -> None:
        """The per-token rows only (breakable graphs never read the static sequence layout)."""
        n, t = plan.num_real_tokens, plan.bucket.num_tokens
        self.hidden[:n].copy_(hidden)
        self.hidden[n:t].zero_()
        self.input_ids[:n].copy_(fb.input_ids)
        self.input_ids[n:t].zero_()
        self.positions[:n].copy_(fb.positions)
        self.positions[n:t].zero_()
        self.seq_ids[:n].copy_(fb.seq_ids)
        self.seq_ids[n:t].fill_(plan.num_real_seqs)


def cuda_capture(pool, stream: torch.cuda.Stream) -> CaptureFn:
    def capture(fn: Callable[[], torch.Tensor]) -> tuple[object, torch.Tensor]:
        stream.wait_stream(torch.cuda.current_stream())  # the plan's copies were queued there
        with torch.cuda.stream(stream):
            for _ in range(2):  # JIT kernels, cuBLAS workspaces and allocator blocks, before capture
                fn()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, stream=stream):
            out = fn()
        return graph, out

    return capture


class CudaGraphRunner:
    """`--cuda-graph-mode full`: the whole layer stack, FlashInfer included, as one graph per bucket."""

    mode = "full"

    def __init__(
        self,
        model: nn.Module,
        attn_backend: AttentionBackend,
        hidden_size: int,
        dtype: torch.dtype,
        device: torch.device,
        max_tokens: int,
        max_seqs: int,
        capture_fn: Optional[CaptureFn] = None,
        show_progress: bool = True,
    ) -> None:
        self.model = model
        self.attn_backend = attn_backend
        self.buckets = graph_buckets(max_tokens, max_seqs)
        self.static = StaticBatches(self.buckets, hidden_size, dtype, device, attn_backend)
        self.graphs: dict[int, object] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        if capture_fn is None:
            capture_fn = cuda_capture(torch.cuda.graph_pool_handle(), torch.cuda.Stream(device))
        self._capture_all(capture_fn, show_progress)

    @torch.inference_mode()
    def _capture_all(self, capture_fn: CaptureFn, show_progress: bool) -> None:
        start = time.perf_counter()
        self.attn_backend.init_cuda_graph_state([(b.num_tokens, b.num_seqs) for b in self.buckets])
        order = sorted(self.buckets, key=lambda b: b.num_tokens, reverse=True)
        try:
            from tqdm import tqdm

            order = tqdm(order, desc="Capturing CUDA graphs", unit="graph", disable=not show_progress)
        except ImportError:  # pragma: no cover - tqdm comes with huggingface_hub
            pass
        for bucket in order:
            fb = self.static.set_layout(bucket, [bucket.num_tokens] + [0] * (bucket.num_seqs - 1))
            self.attn_backend.init_forward_metadata_capture_cuda_graph(fb)
            hidden = self.static.hidden_for(bucket)
            graph, out = capture_fn(functools.partial(self.model.run_layers, hidden, fb))
            self.graphs[bucket.num_tokens], self.outputs[bucket.num_tokens] = graph, out
        device = self.static.hidden.device
        reserved = torch.cuda.memory_reserved(device) / 2**30 if device.type == "cuda" else 0.0
        logger.info(
            "captured %d CUDA graphs (up to %d tokens, %d inputs) in %.1fs; %.2f GiB reserved",
            len(self.buckets),
            self.buckets[-1].num_tokens,
            self.buckets[-1].max_real_seqs,
            time.perf_counter() - start,
            reserved,
        )

    def plan(self, fb: ForwardBatch) -> Optional[PaddingPlan]:
        """How to replay this batch, or None to run it eagerly."""
        if fb.positions.dim() != 1:  # e.g. multimodal rotary positions: not captured
            return None
        return choose_bucket(fb.seq_lens_cpu, self.buckets)

    def replay(self, fb: ForwardBatch, hidden: torch.Tensor, plan: PaddingPlan) -> torch.Tensor:
        """run_layers(hidden, fb) through the bucket's graph: [real tokens, hidden] on the device.

        The result is a view of the graph's output buffer, valid until the next replay.
        """
        static_fb = self.static.load(fb, hidden, plan)
        self.attn_backend.init_forward_metadata_replay_cuda_graph(static_fb)
        self.graphs[plan.bucket.num_tokens].replay()
        return self.outputs[plan.bucket.num_tokens][: plan.num_real_tokens]
