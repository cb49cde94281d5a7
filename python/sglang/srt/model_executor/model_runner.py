"""ModelRunner: device, dtype, weights, attention backend and pooling for one model."""

from __future__ import annotations

import logging
import os
from typing import Optional, Sequence

import numpy as np
import torch

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.layers.attention.base import AttentionBackend
from sglang.srt.layers.pooler import Pooler
from sglang.srt.model_executor.forward_batch import ForwardBatch
from sglang.srt.model_loader.hub import resolve_model_path
from sglang.srt.model_loader.loader import load_model
from sglang.srt.server_args import ConfigError, ServerArgs

logger = logging.getLogger(__name__)


def resolve_device(requested: str) -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda was asked for, but torch sees no CUDA device")
    return torch.device(requested)


def create_attention_backend(name: str, device: torch.device, model_config: ModelConfig) -> AttentionBackend:
    if name == "auto":
        name = "torch_native"
        if device.type == "cuda":
            try:
                import flashinfer  # noqa: F401

                name = "flashinfer"
            except ImportError:
                logger.info("flashinfer is not installed; using torch_native attention on CUDA")
    if name == "torch_native":
        from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

        return TorchNativeAttnBackend()
    if name == "flashinfer":
        if device.type != "cuda":
            raise ConfigError('--attention-backend flashinfer needs a CUDA device; use torch_native on CPU')
        try:
            from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend
        except ImportError as e:
            raise ConfigError(
                'flashinfer is not installed; install it with: pip install "sglang-embed[gpu]"'
            ) from e
        return FlashInferAttnBackend(model_config, device)
    raise ConfigError(f"unknown attention backend '{name}'")


def configure_cpu_threads(requested: Optional[int]) -> int:
    """Intra-op threads: the user's number, else every core this process may run on."""
    if requested:
        threads = requested
    elif hasattr(os, "sched_getaffinity"):
        threads = len(os.sched_getaffinity(0))
    else:
        threads = os.cpu_count() or 1
    torch.set_num_threads(max(1, threads))
    return torch.get_num_threads()


class ModelRunner:
    def __init__(self, server_args: ServerArgs) -> None:
        self.server_args = server_args
        self.device = resolve_device(server_args.device)
        if self.device.type == "cpu":
            configure_cpu_threads(server_args.cpu_threads)
        model_dir = resolve_model_path(server_args.model_path, server_args.revision, server_args.download_dir)
        self.model_config = ModelConfig.from_server_args(server_args, model_dir, self.device.type)
        self.attn_backend = create_attention_backend(server_args.attention_backend, self.device, self.model_config)
        self.model = load_model(self.model_config, self.device)
        self.pooler = Pooler(self.model_config.pooling, self.model_config.normalize)
        logger.info(
            "loaded %s (%s) on %s in %s: pooling=%s normalize=%s context=%d attention=%s",
            model_dir, self.model_config.architecture, self.device, self.model_config.dtype,
            self.model_config.pooling, self.model_config.normalize, self.model_config.context_length,
            self.attn_backend.name,
        )

    def model_info(self) -> dict:
        mc = self.model_config
        return {
            "model_path": self.server_args.model_path,
            "served_model_name": self.server_args.served_model_name,
            "architecture": mc.architecture,
            "embedding_dim": mc.embedding_dim,
            "pooling": mc.pooling,
            "normalize": mc.normalize,
            "max_input_length": mc.context_length,
            "vocab_size": mc.vocab_size,
            "do_lower_case": mc.st_info.do_lower_case,
            "dtype": str(mc.dtype).replace("torch.", ""),
            "device": str(self.device),
            "attention_backend": self.attn_backend.name,
        }

    def build_batch(self, token_lists: Sequence[np.ndarray],
                    token_type_lists: Optional[Sequence[Optional[np.ndarray]]] = None) -> ForwardBatch:
        return ForwardBatch.from_token_lists(token_lists, self.device, token_type_lists, self.attn_backend)

    @torch.inference_mode()
    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        """Pooled (and, where configured, normalized) float32 vectors [B, dim] on the device."""
        hidden = self.model(fb)
        return self.pooler(hidden, fb)

    def embed(self, token_lists: Sequence[np.ndarray],
              token_type_lists: Optional[Sequence[Optional[np.ndarray]]] = None) -> np.ndarray:
        """Token lists -> float32 numpy [B, dim]; the whole path the scheduler runs per batch."""
        out = self.forward(self.build_batch(token_lists, token_type_lists))
        return out.to("cpu", torch.float32).numpy()
