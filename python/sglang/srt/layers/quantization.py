"""`--quantization int8`: the linear layers' number format, chosen once at load time.

The model code never knows. The model runner checks the method before loading (a one-line error
where it cannot run), loads float weights as usual, runs a few sample sentences through the float
model while `observe_linear_inputs` records each linear layer's largest input per channel (what
SmoothQuant needs), then `quantize_cpu_linears` hands every `Linear` its int8 weight
(layers/linear.py, layers/int8_linear.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Iterator, Optional

import torch
from torch import nn

from sglang.srt.errors import ConfigError
from sglang.srt.layers.int8_linear import Int8Support, int8_support
from sglang.srt.layers.int8_rows_kernel import load_int8_rows_kernel
from sglang.srt.layers.linear import Linear

logger = logging.getLogger(__name__)

# Calibration text: only the per-channel maxima of the linear layers' inputs are kept, so a few
# varied sentences suffice (they find the channels that carry huge values in every input).
CALIBRATION_TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "What is the capital of France?",
    "Machine learning models map text to vectors that capture its meaning.",
    "hello",
    "In 1969, two astronauts walked on the surface of the Moon while a third orbited above.",
    "Please reset my password; I can't log in since yesterday's update.",
    "Stir the sauce over low heat until it thickens, then season with salt and pepper.",
    "def add(a, b):\n    return a + b",
    "Is coffee bad for your heart?",
    "cheap flights to Tokyo in March",
    "The committee postponed its decision until more data on the drug's side effects is available.",
    "I love this phone, but the battery barely lasts a day. 3/5 stars.",
    "Der Zug nach Berlin hat heute zwanzig Minuten Verspätung.",
    "¿Dónde está la estación de tren más cercana?",
    "今天天气很好，我们去公园散步吧。",
    "Rain is expected in the north on Thursday, with temperatures falling to around 5 °C.",
)


def check_quantization(method: Optional[str], device: torch.device) -> Optional[Int8Support]:
    """Before any weight is loaded: can `method` (ServerArgs checked the name) run here?
    Returns how int8 runs on this CPU, or raises a one-line ConfigError."""
    if method is None:
        return None
    if device.type != "cpu":
        raise ConfigError(
            "--quantization int8 runs on the CPU (oneDNN); on a GPU serve --dtype bfloat16 or float16 instead"
        )
    support = int8_support()
    if not support.available:
        raise ConfigError(f"--quantization int8 is not available here: {support.reason}")
    kernel, why = load_int8_rows_kernel()
    if kernel is None:
        logger.warning("int8 layers quantize activations with torch ops (slower for short inputs): %s", why)
    return dataclasses.replace(support, rows_kernel=kernel)


@contextlib.contextmanager
def observe_linear_inputs(model: nn.Module) -> Iterator[dict[Linear, torch.Tensor]]:
    """Within the block, every `Linear` call records max |x| per input channel into the yielded
    {layer: [in_features]} dict. Calls bypass forward hooks (`forward_gelu`, `forward_add`), so the
    layers' methods are shadowed on the instances for the duration."""
    seen: dict[Linear, torch.Tensor] = {}
    layers = [m for m in model.modules() if isinstance(m, Linear)]

    def record(layer: Linear, x: torch.Tensor) -> None:
        absmax = x.detach().reshape(-1, x.shape[-1]).abs().amax(dim=0).float()
        seen[layer] = absmax if layer not in seen else torch.maximum(seen[layer], absmax)

    def observed(layer: Linear, method):
        def call(x, *args):
            record(layer, x)
            return method(layer, x, *args)

        return call

    for layer in layers:
        for name in ("forward", "forward_gelu", "forward_add"):
            setattr(layer, name, observed(layer, getattr(Linear, name)))
    try:
        yield seen
    finally:
        for layer in layers:
            del layer.forward, layer.forward_gelu, layer.forward_add


def describe(support: Optional[Int8Support]) -> dict:
    """What /model_info says: `quantization` ("int8" or None) and the activations' bits (8 with
    VNNI/AMX, 7 without; layers/int8_linear.py says why)."""
    if support is None:
        return {"quantization": None, "int8_activation_bits": None}
    return {"quantization": "int8", "int8_activation_bits": support.act_bits}
