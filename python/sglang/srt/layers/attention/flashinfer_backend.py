"""FlashInfer attention on CUDA: ragged prefill over packed q/k/v, indptr = cu_seqlens.

One `BatchPrefillWithRaggedKVCacheWrapper` per distinct plan (heads, head dim, causal, window):
`plan()` runs once per batch on host copies of the indptrs, then every layer of that shape calls
`run()`. All wrappers share one float workspace, allocated at start-up and sized for the largest
plan. For CUDA graphs each bucket gets its own wrappers in FlashInfer's CUDA-graph mode, planned
into fixed-size index buffers before capture and again before every replay.

We always pick FlashInfer's FA2 kernels: they take custom masks (bidirectional windows), support
CUDA-graph planning, and are one JIT module per (dtype, head dim, window) instead of two.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Sequence

import flashinfer  # an ImportError here tells create_attention_backend the package is missing
import torch
import torch.nn.functional as F

from sglang.srt.layers.attention.base import AttentionBackend
from sglang.srt.layers.attention.flashinfer_utils import (
    DEFAULT_FLOAT_WORKSPACE_BYTES,
    INT_WORKSPACE_BYTES,
    AttnShape,
    PlanSpec,
    cu_seqlens_cpu,
    float_workspace_bytes,
    padded_head_dim,
    plan_spec,
    window_mask,
)

if TYPE_CHECKING:
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.layers.attention.layer import AttentionLayer
    from sglang.srt.model_executor.forward_batch import ForwardBatch

KERNEL_BACKEND = "fa2"


@dataclass
class FlashInferMetadata:
    """The planned wrapper of each attention shape in one batch.

    Eager batches may meet a shape `bind_layers` did not announce and plan it on first use; a
    graph's batch may not (planning cannot happen inside a capture).
    """

    wrappers: dict[AttnShape, Any]
    by_spec: dict[PlanSpec, Any] = field(default_factory=dict)
    cu_cpu: Optional[torch.Tensor] = None
    lazy: bool = True


@dataclass
class _GraphBucket:
    num_seqs: int
    wrappers: dict[PlanSpec, Any]


class FlashInferAttnBackend(AttentionBackend):
    name = "flashinfer"
    supports_cuda_graph = True

    def __init__(self, model_config: "ModelConfig", device: torch.device) -> None:
        self.device = device
        self.dtype = model_config.dtype
        self.num_sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 132
        self.float_workspace = torch.empty(DEFAULT_FLOAT_WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        self.shapes: list[AttnShape] = []
        self._eager: dict[PlanSpec, Any] = {}
        self._graphs: dict[int, _GraphBucket] = {}

    # ----- set-up -----
    def bind_layers(self, layers: Sequence["AttentionLayer"]) -> None:
        self.shapes = list(dict.fromkeys(AttnShape.of(layer) for layer in layers))
        specs = [plan_spec(s, None) for s in self.shapes]
        self._ensure_workspace(float_workspace_bytes(specs, [], self.num_sms))

    def _ensure_workspace(self, nbytes: int) -> None:
        if nbytes <= self.float_workspace.numel():
            return
        self.float_workspace = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        self._eager.clear()  # wrappers hold the old buffer; new ones are made on demand

    # ----- eager batches -----
    def init_forward_metadata(self, forward_batch: "ForwardBatch") -> None:
        meta = FlashInferMetadata(wrappers={}, cu_cpu=cu_seqlens_cpu(forward_batch.seq_lens_cpu))
        forward_batch.attn_metadata = meta
        for shape in self.shapes:
            self._plan_eager(meta, shape, forward_batch)

    def _plan_eager(self, meta: FlashInferMetadata, shape: AttnShape, fb: "ForwardBatch"):
        spec = plan_spec(shape, fb.max_seqlen)
        wrapper = meta.by_spec.get(spec)
        if wrapper is None:
            wrapper = self._eager.get(spec)
            if wrapper is None:
                wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(
                    self.float_workspace, "NHD", backend=KERNEL_BACKEND
                )
                self._eager[spec] = wrapper
            self._plan(wrapper, spec, fb, meta.cu_cpu)
            meta.by_spec[spec] = wrapper
        meta.wrappers[shape] = wrapper
        return wrapper

    def _plan(self, wrapper, spec: PlanSpec, fb: "ForwardBatch", cu_cpu: torch.Tensor) -> None:
        common = dict(
            causal=spec.causal,
            window_left=spec.window_left,
            sm_scale=spec.sm_scale,
            q_data_type=self.dtype,
            kv_data_type=self.dtype,
        )
        heads = (spec.num_qo_heads, spec.num_kv_heads, spec.head_dim)
        if spec.mask_window:
            # FlashInfer bit-packs a custom mask on the GPU with a kernel that reads the indptr, so
            # this plan takes device indptrs (and pays one host sync inside plan()).
            mask = window_mask(fb.seq_lens_cpu, spec.mask_window, self.device)
            wrapper.plan(fb.cu_seqlens, fb.cu_seqlens, *heads, custom_mask=mask, **common)
        else:
            wrapper.plan(cu_cpu, cu_cpu, *heads, **common)

    # ----- per layer -----
    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: "AttentionLayer", forward_batch: "ForwardBatch"
    ) -> torch.Tensor:
        meta: FlashInferMetadata = forward_batch.attn_metadata
        shape = AttnShape.of(layer)
        wrapper = meta.wrappers.get(shape)
        if wrapper is None:
            if not meta.lazy:
                raise RuntimeError(f"attention shape {shape} was not bound before CUDA-graph capture")
            wrapper = self._plan_eager(meta, shape, forward_batch)
        t, d = q.shape[0], layer.head_dim
        q3 = q.reshape(t, layer.num_heads, d)
        k3 = k.reshape(t, layer.num_kv_heads, d)
        v3 = v.reshape(t, layer.num_kv_heads, d)
        pad = padded_head_dim(d) - d
        if pad:
            q3, k3, v3 = (F.pad(x, (0, pad)) for x in (q3, k3, v3))
        out = wrapper.run(q3, k3, v3)
        if pad:
            out = out[..., :d]
        return out.reshape(t, layer.num_heads * d)

    # ----- CUDA graphs -----
    def init_cuda_graph_state(self, buckets: Sequence[tuple[int, int]]) -> None:
        if not self.shapes:
            raise RuntimeError("bind_layers() must run before CUDA-graph capture")
        specs = list(dict.fromkeys(plan_spec(s, None) for s in self.shapes))
        self._ensure_workspace(float_workspace_bytes(specs, buckets, self.num_sms))
        # Plans are rewritten before every replay, so the buckets of one spec can share the
        # integer workspace (and the mask buffer); different specs of one batch cannot.
        int_ws = {s: torch.empty(INT_WORKSPACE_BYTES, dtype=torch.uint8, device=self.device) for s in specs}
        max_tokens = max(t for t, _ in buckets)
        max_seqs = max(n for _, n in buckets)
        mask_bytes = (max_tokens * max_tokens + 7) // 8 + max_seqs
        mask_bufs = {s: torch.empty(mask_bytes, dtype=torch.uint8, device=self.device) for s in specs if s.mask_window}
        self._graphs.clear()
        for tokens, seqs in buckets:
            qo_indptr = torch.zeros(seqs + 1, dtype=torch.int32, device=self.device)
            kv_indptr = torch.zeros(seqs + 1, dtype=torch.int32, device=self.device)
            mask_indptr = torch.zeros(seqs + 1, dtype=torch.int32, device=self.device)
            wrappers = {}
            for spec in specs:
                wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(
                    self.float_workspace,
                    "NHD",
                    use_cuda_graph=True,
                    qo_indptr_buf=qo_indptr,
                    kv_indptr_buf=kv_indptr,
                    custom_mask_buf=mask_bufs.get(spec),
                    mask_indptr_buf=mask_indptr if spec.mask_window else None,
                    backend=KERNEL_BACKEND,
                )
                wrapper.reset_workspace_buffer(self.float_workspace, int_ws[spec])
                wrappers[spec] = wrapper
            self._graphs[tokens] = _GraphBucket(seqs, wrappers)

    def init_forward_metadata_capture_cuda_graph(self, forward_batch: "ForwardBatch") -> None:
        bucket = self._graph_bucket(forward_batch)
        forward_batch.attn_metadata = FlashInferMetadata(
            wrappers={s: bucket.wrappers[plan_spec(s, None)] for s in self.shapes}, lazy=False
        )
        self._plan_graph(bucket, forward_batch)

    def init_forward_metadata_replay_cuda_graph(self, forward_batch: "ForwardBatch") -> None:
        self._plan_graph(self._graph_bucket(forward_batch), forward_batch)

    def _graph_bucket(self, fb: "ForwardBatch") -> _GraphBucket:
        bucket = self._graphs.get(fb.num_tokens)
        if bucket is None or bucket.num_seqs != fb.batch_size:
            raise RuntimeError(f"no CUDA-graph state for {fb.num_tokens} tokens in {fb.batch_size} sequences")
        return bucket

    def _plan_graph(self, bucket: _GraphBucket, fb: "ForwardBatch") -> None:
        cu_cpu = cu_seqlens_cpu(fb.seq_lens_cpu)
        for spec, wrapper in bucket.wrappers.items():
            self._plan(wrapper, spec, fb, cu_cpu)
