"""ModelRunner: device, dtype, weights, attention backend and pooling for one model."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional, Sequence, Union

import numpy as np
import torch

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.configs.model_info import ImagePath, ModelInfo, ReplicaInfo, image_path_of
from sglang.srt.configs.model_registry import ModelRegistry
from sglang.srt.layers.attention.layer import AttentionLayer
from sglang.srt.layers.attention.registry import create_attention_backend, needs_position_bias
from sglang.srt.layers.linear import prepack_cpu_linears, quantize_cpu_linears
from sglang.srt.layers.quantization import CALIBRATION_TEXTS, check_quantization, describe, observe_linear_inputs
from sglang.srt.model_executor.forward_batch import ForwardBatch
from sglang.srt.model_executor.forward_io import ForwardInput, ForwardOutput
from sglang.srt.model_executor.image_text_batch import ImageTextRunner
from sglang.srt.model_executor.multimodal_batch import build_multimodal_batch, has_images, vision_info
from sglang.srt.model_executor.output_head import OutputHead
from sglang.srt.model_executor.placement import place_replica
from sglang.srt.model_executor.replica_slots import ReplicaSlot
from sglang.srt.model_loader.loader import load_model
from sglang.srt.models import model_class
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.hub import resolve_model_path
from sglang.srt.wire.matryoshka import shape_rows

if TYPE_CHECKING:
    from sglang.srt.model_executor.breakable_graph_runner import BreakableGraphRunner
    from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner

    GraphRunner = Union[BreakableGraphRunner, CudaGraphRunner]

logger = logging.getLogger(__name__)


def cpu_bf16_units() -> Optional[str]:
    """The CPU's native bf16 matrix support ("amx", "avx512_bf16") or None (bf16 then emulated, slow)."""
    probes = (("amx", "_is_amx_tile_supported"), ("avx512_bf16", "_is_avx512_bf16_supported"))
    for name, probe in probes:
        fn = getattr(torch.cpu, probe, None)
        if fn is not None and fn():
            return name
    return None


# One warning, at start-up, for everything bf16 costs on such a CPU (matmuls and attention alike).
SLOW_BF16_WARNING = (
    "--dtype bfloat16 will be slower than float32 here: this CPU has no bf16 instructions (AMX, avx512_bf16), "
    "so oneDNN cannot run bf16 matmuls (they fall back to torch's slow path) and the attention kernel converts "
    "every bf16 value to float32 (one run: 24 vs 78 texts/s served); --dtype auto (float32) or "
    "--quantization int8 is faster on this CPU"
)


class ModelRunner:
    def __init__(self, server_args: ServerArgs, slot: Optional[ReplicaSlot] = None) -> None:
        self.server_args = server_args
        self.slot = slot or ReplicaSlot()
        # This replica's GPU (with a hard cap on its PyTorch allocations: weights, activations,
        # graphs) or its CPU cores and threads, before anything is allocated.
        self.placement = place_replica(
            self.slot,
            server_args.device,
            server_args.base_gpu_id,
            server_args.cpu_threads,
            server_args.mem_fraction_static,
        )
        self.device = self.placement.device
        self.int8 = check_quantization(server_args.quantization, self.device)  # fail before loading
        model_dir = resolve_model_path(server_args.model_path, server_args.revision, server_args.download_dir)
        self.model_config = ModelConfig.from_server_args(server_args, model_dir, self.device.type)
        self.attn_backend = create_attention_backend(server_args.attention_backend, self.device, self.model_config)
        self._key_lens_backend = None
        self.model = load_model(self.model_config, self.device, model_class(self.model_config.architecture))
        self.attn_backend.bind_layers([m for m in self.model.modules() if isinstance(m, AttentionLayer)])
        if self.int8 is not None:
            quantize_cpu_linears(self.model, self.int8, self._calibrate())
        if self.device.type == "cpu":
            prepack_cpu_linears(self.model)
        self.output_head = OutputHead.build(self.model_config, self.model, self.device, server_args)
        # How this model takes images, decided once here; ModelInfo.vision carries it to the HTTP side.
        self.image_path = image_path_of(ModelRegistry.spec(self.model_config.architecture))
        self.image_text = ImageTextRunner(self) if self.image_path is ImagePath.TOWER else None
        if self.device.type == "cpu" and self.model_config.dtype == torch.bfloat16 and cpu_bf16_units() is None:
            logger.warning(SLOW_BF16_WARNING)
        self.graph_runner = self._capture_cuda_graphs()
        if self.device.type == "cuda":  # compile JIT kernels now rather than in the first request
            self.embed([np.zeros(2, dtype=np.int64)])
        logger.info(
            "loaded %s (%s) on %s in %s: pooling=%s normalize=%s context=%d attention=%s quantization=%s",
            model_dir,
            self.model_config.architecture,
            self.device,
            self.model_config.dtype,
            self.model_config.pooling,
            self.model_config.normalize,
            self.model_config.context_length,
            self.attn_backend.name,
            f"int8 (w8a{self.int8.act_bits})" if self.int8 else "none",
        )

    @torch.inference_mode()
    def _calibrate(self) -> dict:
        """Each linear layer's largest input per channel over CALIBRATION_TEXTS, in float."""
        from sglang.srt.utils.hf_tokenizer import load_tokenizer

        tokenizer = load_tokenizer(self.server_args.tokenizer_path, self.server_args.trust_remote_code)
        limit, vocab = self.model_config.context_length, self.model_config.vocab_size
        tokens = [np.asarray(tokenizer(t)["input_ids"][:limit], dtype=np.int64) for t in CALIBRATION_TEXTS]
        tokens = [t[t < vocab] for t in tokens if (t < vocab).any()]
        fb = self.build_batch(tokens)
        self.attn_backend.init_forward_metadata(fb)
        with observe_linear_inputs(self.model) as seen:
            self.model(fb)
        return seen

    def _capture_cuda_graphs(self) -> Optional[GraphRunner]:
        sa = self.server_args
        if self.device.type != "cuda" or sa.cuda_graph_mode == "off":
            return None
        if not (hasattr(self.model, "embed") and hasattr(self.model, "run_layers")):
            logger.info("%s has no embed/run_layers split; running eagerly", self.model_config.architecture)
            return None
        limits = dict(
            max_tokens=min(sa.cuda_graph_max_tokens, sa.max_num_tokens),
            max_seqs=min(sa.cuda_graph_max_seqs, sa.max_batch_size),
        )
        mc = self.model_config
        if sa.cuda_graph_mode == "breakable":
            if needs_position_bias(mc):  # its score bias is built per batch inside run_layers
                logger.info("%s adds a per-batch attention bias; running eagerly", mc.architecture)
                return None
            from sglang.srt.model_executor.breakable_graph_runner import BreakableGraphRunner

            return BreakableGraphRunner(
                self.model, mc.hidden_size, mc.dtype, self.device, warm_backend=self.attn_backend, **limits
            )
        if not self.attn_backend.supports_cuda_graph:
            logger.info("--cuda-graph-mode full needs the flashinfer attention backend; running eagerly")
            return None
        from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner

        return CudaGraphRunner(self.model, self.attn_backend, mc.hidden_size, mc.dtype, self.device, **limits)

    def model_info(self) -> ModelInfo:
        mc = self.model_config
        multi_vector_only = self.output_head.tokens.head is not None and not mc.output.has_dense
        return ModelInfo(
            model_path=self.server_args.model_path,
            served_model_name=self.server_args.served_model_name,
            architecture=mc.architecture,
            embedding_dim=self.output_head.tokens.head.dim if multi_vector_only else mc.embedding_dim,
            is_matryoshka=mc.is_matryoshka,
            matryoshka_dimensions=None if mc.matryoshka_dimensions is None else tuple(mc.matryoshka_dimensions),
            pooling=mc.pooling,
            normalize=mc.normalize,
            max_input_length=mc.context_length,
            vocab_size=mc.vocab_size,
            do_lower_case=mc.st_info.do_lower_case,
            dtype=str(mc.dtype).replace("torch.", ""),
            **describe(self.int8),  # quantization: None or "int8"; int8_activation_bits
            device=str(self.device),
            attention_backend=self.attn_backend.name,
            cuda_graph=self.graph_runner is not None,
            cpu_threads=torch.get_num_threads() if self.device.type == "cpu" else None,
            cpu_bf16_units=cpu_bf16_units() if self.device.type == "cpu" else None,
            vision=vision_info(mc, self.image_path),  # None, or what the tokenizer side needs for image inputs
            prompts=mc.prompts,
            default_prompt=mc.default_prompt,
            prompt_in_pooling=mc.st_info.include_prompt,
            **mc.output.info(),  # embeddings_output (dense / sparse / logits / multi_vector), heads, labels
            multi_vector_dim=self.output_head.tokens.head.dim if self.output_head.tokens.head is not None else None,
            hidden_size=mc.hidden_size,
            dp_size=self.slot.dp_size,
            replicas=(self.replica_info(),),  # the server process gathers every replica's
        )

    def replica_info(self) -> ReplicaInfo:
        cpu = self.device.type == "cpu"
        return ReplicaInfo(
            dp_rank=self.slot.dp_rank,
            device=str(self.device),
            cpu_cores=self.placement.cpu_cores,
            cpu_threads=torch.get_num_threads() if cpu else None,
        )

    def build_batch(
        self,
        token_lists: Sequence[np.ndarray],
        token_type_lists: Optional[Sequence[Optional[np.ndarray]]] = None,
        key_lens: Optional[Sequence[Optional[int]]] = None,
    ) -> ForwardBatch:
        fb = ForwardBatch.from_token_lists(token_lists, self.device, token_type_lists, key_lens=key_lens)
        fb.attn_backend = self.attn_backend  # metadata is built in forward(), eager batches only
        if fb.key_lens is not None and not self.attn_backend.supports_key_lens:
            fb.attn_backend = self.key_lens_backend()  # e.g. flashinfer: such a batch runs on SDPA
        return fb

    def key_lens_backend(self):
        """torch_native attention for the rare batch the main backend cannot run (ColBERT query
        expansion on flashinfer), made on first use."""
        if self._key_lens_backend is None:
            from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

            self._key_lens_backend = TorchNativeAttnBackend()
        return self._key_lens_backend

    @torch.inference_mode()
    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        """Pooled float32 vectors [B, dim] on the device, not normalized (the renderer normalizes
        them as each input's OutputSpec says), or a classifier's logits [B, num_labels]."""
        return self.output_head.dense(self.hidden_states(fb), fb)

    def hidden_states(self, fb: ForwardBatch) -> torch.Tensor:
        """The backbone's final per-token hidden states [T, hidden].

        A batch that fits a captured bucket replays its CUDA graph (embedding runs eagerly before
        it, the output head after it); any other batch runs the whole model eagerly. Breakable
        graphs run attention eagerly on the batch's own backend, so any batch of 1-D positions
        can use them; a full graph only a batch on the backend it captured.
        """
        graphs = self.graph_runner is not None and (
            fb.attn_backend is self.attn_backend or self.graph_runner.mode == "breakable"
        )
        plan = self.graph_runner.plan(fb) if graphs else None
        if plan is not None:
            hidden = self.graph_runner.replay(fb, self.model.embed(fb), plan)
        else:
            if fb.attn_metadata is None:
                (fb.attn_backend or self.attn_backend).init_forward_metadata(fb)
            hidden = self.model(fb)
        return hidden

    def run_requests(self, reqs: Sequence[ForwardInput]) -> ForwardOutput:
        """What the scheduler calls per batch (its ForwardFn): requests in, their rows out: pooled
        float32 [B, dim], plus sparse and per-token rows when some input asked for them."""
        if self.image_text is not None:  # CLIP / SigLIP: each input is a text or an image
            return ForwardOutput(self.image_text.run(reqs))
        # Qwen2-VL: a batch with images runs one vision forward for all of them, one LM forward for all tokens.
        if self.image_path is ImagePath.LM_TOKENS and has_images(reqs):
            return self.run_multimodal(reqs)
        token_rows = [r.token_output for r in reqs]
        if any(r.is_sparse for r in reqs) or any(k is not None for k in token_rows):
            return self.run_with_heads(reqs, token_rows)
        fb = self.build_batch([r.input_ids for r in reqs], [r.token_type_ids for r in reqs])
        return ForwardOutput(self.forward(fb).to("cpu", torch.float32).numpy())

    @torch.inference_mode()
    def run_with_heads(self, reqs: Sequence[ForwardInput], token_rows: Sequence[Optional[str]]) -> ForwardOutput:
        """A batch where some input asked for {token_id: weight} or per-token vectors: those heads
        read the hidden states. ColBERT queries with expansion tokens limit their keys (key_len)."""
        key_lens = [r.key_len for r in reqs]
        fb = self.build_batch([r.input_ids for r in reqs], [r.token_type_ids for r in reqs], key_lens)
        return self.output_head.run(self.hidden_states(fb), fb, [r.is_sparse for r in reqs], token_rows)

    def run_multimodal(self, reqs: Sequence[ForwardInput]) -> ForwardOutput:
        """A batch with images (Qwen2-VL): M-RoPE positions keep it off the CUDA graphs."""
        fb = build_multimodal_batch(reqs, self.device, self.model.image_token_id, self.model_config.dtype)
        fb.attn_backend = self.attn_backend
        return ForwardOutput(self.forward(fb).to("cpu", torch.float32).numpy())

    def embed(
        self, token_lists: Sequence[np.ndarray], token_type_lists: Optional[Sequence[Optional[np.ndarray]]] = None
    ) -> np.ndarray:
        """Token lists -> float32 numpy [B, dim] through the dense head alone, normalized as the
        checkpoint says (what SentenceTransformer.encode returns), for tests and benchmarks (the
        scheduler calls run_requests, which also routes images, sparse and per-token rows, and
        leaves normalization to the renderer)."""
        out = self.forward(self.build_batch(token_lists, token_type_lists))
        return shape_rows(out.to("cpu", torch.float32).numpy(), None, self.model_config.normalize)
