"""--quantization: where it may run, what it says, and the calibration observer."""

from __future__ import annotations

import pytest
import torch

import sglang.srt.layers.quantization as quantization
from sglang.srt.errors import ConfigError
from sglang.srt.layers.int8_linear import Int8Support
from sglang.srt.layers.linear import Linear
from sglang.srt.server_args import ServerArgs


def test_no_quantization_is_the_default():
    assert ServerArgs().quantization is None
    assert quantization.check_quantization(None, torch.device("cpu")) is None
    assert quantization.describe(None) == {"quantization": None, "int8_activation_bits": None}


def test_unknown_method_is_a_config_error():
    with pytest.raises(ConfigError, match="--quantization must be one of int8"):
        ServerArgs(quantization="int4")


def test_cuda_is_a_one_line_error():
    with pytest.raises(ConfigError) as e:
        quantization.check_quantization("int8", torch.device("cuda"))
    assert "runs on the CPU" in str(e.value) and "\n" not in str(e.value)


def test_cpu_without_int8_support_is_a_one_line_error(monkeypatch):
    monkeypatch.setattr(quantization, "int8_support", lambda: Int8Support(False, "no oneDNN here"))
    with pytest.raises(ConfigError, match="--quantization int8 is not available here: no oneDNN here"):
        quantization.check_quantization("int8", torch.device("cpu"))


def test_without_the_row_kernel_it_warns_and_runs_on_torch_ops(monkeypatch, caplog):
    monkeypatch.setattr(quantization, "load_int8_rows_kernel", lambda: (None, "no C compiler found"))
    support = quantization.check_quantization("int8", torch.device("cpu"))
    assert support.available and support.rows_kernel is None
    assert "no C compiler found" in caplog.text


def test_observer_records_channel_maxima_through_both_entry_points_and_leaves_no_trace():
    layer, gelu_layer = Linear(4, 3), Linear(4, 3)
    for p in (*layer.parameters(), *gelu_layer.parameters()):
        torch.nn.init.normal_(p.data)
    model = torch.nn.ModuleList([layer, gelu_layer])
    x1, x2 = torch.tensor([[1.0, -5.0, 0.0, 2.0]]), torch.tensor([[-3.0, 1.0, 0.5, 0.0]])
    with quantization.observe_linear_inputs(model) as seen:
        out = layer(x1)
        layer(x2)
        gelu_layer.forward_gelu(x2)
    assert torch.equal(seen[layer], torch.tensor([3.0, 5.0, 0.5, 2.0]))
    assert torch.equal(seen[gelu_layer], x2.abs()[0])
    assert torch.equal(out, Linear.forward(layer, x1))
    assert "forward" not in vars(layer) and "forward_gelu" not in vars(gelu_layer)


def test_cli_flag_parses():
    import argparse

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    assert ServerArgs.from_cli_args(parser.parse_args(["--quantization", "int8"])).quantization == "int8"
    assert ServerArgs.from_cli_args(parser.parse_args([])).quantization is None
