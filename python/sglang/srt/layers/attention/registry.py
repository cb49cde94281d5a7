"""Which attention backend runs a model: `--attention-backend` names one of BACKENDS; `auto` picks
flashinfer on CUDA in half precision when it imports, cpu_varlen on CPU in float32 or bfloat16
when the kernel builds, and torch_native otherwise.

Each entry builds its backend or raises a one-line ConfigError saying why it cannot serve this
model on this device (and what to use instead).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Union

import torch

from sglang.srt.errors import ConfigError
from sglang.srt.layers.attention.base import AttentionBackend

if TYPE_CHECKING:
    from sglang.srt.configs.model_config import ModelConfig

logger = logging.getLogger(__name__)

INSTALL_GPU_HINT = 'pip install "sglang-embed[gpu]"'

BackendFactory = Callable[[torch.device, "ModelConfig"], AttentionBackend]


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _is_half(model_config: ModelConfig) -> bool:
    return model_config.dtype in (torch.float16, torch.bfloat16)


def cpu_varlen_or_reason(model_config: ModelConfig) -> Union[AttentionBackend, str]:
    """The compiled CPU kernel's backend, or the reason it cannot serve this model."""
    from sglang.srt.layers.attention.cpu_kernel_loader import load_kernel
    from sglang.srt.layers.attention.cpu_varlen_backend import SUPPORTED_DTYPES, CpuVarlenAttnBackend

    if model_config.dtype not in SUPPORTED_DTYPES:
        return f"the CPU kernel handles float32 and bfloat16, not {_dtype_name(model_config.dtype)}"
    kernel, why = load_kernel()
    return CpuVarlenAttnBackend.for_dtype(kernel, model_config.dtype) if kernel is not None else why


def _torch_native(device: torch.device, model_config: ModelConfig) -> AttentionBackend:
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

    return TorchNativeAttnBackend()


def _cpu_varlen(device: torch.device, model_config: ModelConfig) -> AttentionBackend:
    if device.type != "cpu":
        raise ConfigError(f"--attention-backend cpu_varlen runs on the CPU; this model is on {device.type}")
    backend = cpu_varlen_or_reason(model_config)
    if not isinstance(backend, AttentionBackend):
        raise ConfigError(
            f"--attention-backend cpu_varlen is unavailable: {backend}; use --attention-backend torch_native"
        )
    return backend


def _flashinfer(device: torch.device, model_config: ModelConfig) -> AttentionBackend:
    if device.type != "cuda":
        raise ConfigError(
            "--attention-backend flashinfer needs a CUDA GPU and the flashinfer package "
            f"({INSTALL_GPU_HINT}); no CUDA device here: use --attention-backend torch_native"
        )
    if not _is_half(model_config):
        raise ConfigError(
            f"--attention-backend flashinfer needs --dtype bfloat16 or float16 (got {_dtype_name(model_config.dtype)})"
        )
    try:
        from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend
    except ImportError as e:
        raise ConfigError(f"flashinfer is not installed; install it with: {INSTALL_GPU_HINT}") from e
    return FlashInferAttnBackend(model_config, device)


BACKENDS: dict[str, BackendFactory] = {
    "torch_native": _torch_native,
    "cpu_varlen": _cpu_varlen,
    "flashinfer": _flashinfer,
}


def needs_position_bias(model_config: ModelConfig) -> bool:
    """The model adds a relative-position bias to its attention scores (MPNet)."""
    from sglang.srt.configs.model_registry import ModelRegistry

    architecture = getattr(model_config, "architecture", None)
    return architecture in ModelRegistry.supported() and ModelRegistry.spec(architecture).position_bias


def create_attention_backend(name: str, device: torch.device, model_config: ModelConfig) -> AttentionBackend:
    """The backend `name` (a BACKENDS key, or "auto") for this model on `device`."""
    if name == "auto":
        return _auto(device, model_config)
    factory = BACKENDS.get(name)
    if factory is None:
        raise ConfigError(f"unknown attention backend '{name}'")
    backend = factory(device, model_config)
    if needs_position_bias(model_config) and not backend.supports_position_bias:
        raise ConfigError(
            f"--attention-backend {name} cannot add {model_config.architecture}'s relative position bias; "
            "use --attention-backend torch_native (or cpu_varlen on CPU)"
        )
    return backend


def _auto(device: torch.device, model_config: ModelConfig) -> AttentionBackend:
    if needs_position_bias(model_config):
        # flashinfer has no additive bias; on CPU the kernel supports it but measured slower than
        # SDPA with a dense bias (benchmark/bench_position_bias.py, docs/embedding_models.md).
        logger.info("%s adds a relative position bias: torch_native attention", model_config.architecture)
        return _torch_native(device, model_config)
    if device.type == "cuda" and _is_half(model_config):
        try:
            import flashinfer  # noqa: F401
        except Exception as e:  # ImportError, or a broken install: fall back, but say why
            logger.info("flashinfer unavailable (%s); using torch_native attention on CUDA", e)
        else:
            return _flashinfer(device, model_config)
    if device.type == "cpu":
        backend = cpu_varlen_or_reason(model_config)
        if isinstance(backend, AttentionBackend):
            return backend
        # A float16 model never uses the kernel; for the others its absence costs speed: say so.
        log = logger.info if model_config.dtype == torch.float16 else logger.warning
        log("using torch_native attention on CPU: %s", backend)
    return _torch_native(device, model_config)
