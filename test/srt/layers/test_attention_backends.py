"""Attention backends: selection errors, and every backend against a naive per-sequence reference.

torch_native runs everywhere. The FlashInfer backend's own logic (plan grouping, head-dim padding,
window masks, lazy plans) runs on CPU against a stand-in for flashinfer; the real kernels are
checked in the GPU-marked tests at the end.
"""

from __future__ import annotations

import math
import types

import pytest
import torch

from sglang.srt.errors import ConfigError
from sglang.srt.layers.attention.cpu_kernel_loader import find_compiler
from sglang.srt.layers.attention.flashinfer_utils import (
    AttnShape,
    cu_seqlens_cpu,
    float_workspace_bytes,
    padded_head_dim,
    plan_spec,
    window_mask,
)
from sglang.srt.layers.attention.registry import create_attention_backend
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from test.helpers import fake_flashinfer
from test.helpers.attention_cases import (
    CASES,
    LENGTHS,
    check_backend,
    check_layers_with_different_masks,
    make_batch,
    make_inputs,
    make_layer,
    reference_attention,
)


# ----- backend selection -----
def _config(dtype=torch.bfloat16):
    return types.SimpleNamespace(dtype=dtype)


def _one_line(err: pytest.ExceptionInfo) -> str:
    msg = str(err.value)
    assert "\n" not in msg
    return msg


@pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler (cc, gcc or clang)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_auto_on_cpu_is_the_compiled_kernel(dtype):
    assert create_attention_backend("auto", torch.device("cpu"), _config(dtype)).name == "cpu_varlen"


def test_auto_on_cpu_in_float16_is_torch_native():
    assert create_attention_backend("auto", torch.device("cpu"), _config(torch.float16)).name == "torch_native"


def test_auto_on_cpu_without_a_compiler_is_torch_native(monkeypatch, tmp_path):
    monkeypatch.setenv("SGLANG_KERNEL_CACHE", str(tmp_path))  # nothing cached there
    monkeypatch.setattr("sglang.srt.layers.attention.cpu_kernel_loader.find_compiler", lambda: None)
    assert create_attention_backend("auto", torch.device("cpu"), _config()).name == "torch_native"


def test_cpu_varlen_errors_are_one_line(monkeypatch, tmp_path):
    with pytest.raises(ConfigError) as err:
        create_attention_backend("cpu_varlen", torch.device("cuda"), _config())
    assert "CPU" in _one_line(err)
    with pytest.raises(ConfigError) as err:
        create_attention_backend("cpu_varlen", torch.device("cpu"), _config(torch.float16))
    assert "float16" in _one_line(err) and "torch_native" in _one_line(err)
    monkeypatch.setenv("SGLANG_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr("sglang.srt.layers.attention.cpu_kernel_loader.find_compiler", lambda: None)
    with pytest.raises(ConfigError) as err:
        create_attention_backend("cpu_varlen", torch.device("cpu"), _config())
    assert "no C compiler" in _one_line(err) and "torch_native" in _one_line(err)


def test_flashinfer_without_cuda_is_a_one_line_error():
    with pytest.raises(ConfigError) as err:
        create_attention_backend("flashinfer", torch.device("cpu"), _config())
    msg = _one_line(err)
    assert "CUDA" in msg and 'pip install "sglang-embed[gpu]"' in msg and "torch_native" in msg


def test_flashinfer_not_installed_is_a_one_line_error(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "flashinfer", None)  # `import flashinfer` now fails
    monkeypatch.delitem(__import__("sys").modules, "sglang.srt.layers.attention.flashinfer_backend", raising=False)
    with pytest.raises(ConfigError) as err:
        create_attention_backend("flashinfer", torch.device("cuda"), _config())
    assert _one_line(err) == 'flashinfer is not installed; install it with: pip install "sglang-embed[gpu]"'


def test_flashinfer_in_float32_is_an_error(monkeypatch):
    fake_flashinfer.install(monkeypatch)
    with pytest.raises(ConfigError) as err:
        create_attention_backend("flashinfer", torch.device("cuda"), _config(torch.float32))
    assert "bfloat16" in _one_line(err)


def test_auto_on_cuda_falls_back_without_flashinfer_or_in_float32(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "flashinfer", None)
    assert create_attention_backend("auto", torch.device("cuda"), _config()).name == "torch_native"
    fake_flashinfer.install(monkeypatch)
    assert create_attention_backend("auto", torch.device("cuda"), _config(torch.float32)).name == "torch_native"


def test_unknown_backend_is_an_error():
    with pytest.raises(ConfigError):
        create_attention_backend("triton", torch.device("cpu"), _config())


def test_every_backend_flag_value_is_registered():
    from sglang.srt.layers.attention.registry import BACKENDS
    from sglang.srt.server_args import CHOICES

    assert set(CHOICES["attention_backend"]) == {"auto", *BACKENDS}


# ----- torch_native -----
@pytest.mark.parametrize("lengths", sorted(LENGTHS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_torch_native_matches_reference(case, lengths):
    check_backend(TorchNativeAttnBackend(), case, lengths)


def test_torch_native_custom_scaling_and_long_window():
    backend = TorchNativeAttnBackend()
    check_backend(backend, "bidirectional", "mixed", scaling=0.05)
    # A window longer than every sequence is no window at all.
    heads, kv_heads, d = 4, 4, 16
    q, k, v = make_inputs([5, 7], heads, kv_heads, d)
    windowed = make_layer(heads, kv_heads, d, False, 50)(q, k, v, make_batch([5, 7], backend))
    full = make_layer(heads, kv_heads, d, False, None)(q, k, v, make_batch([5, 7], backend))
    assert torch.allclose(windowed, full, atol=1e-6)


def test_torch_native_layers_with_different_masks_share_a_batch():
    check_layers_with_different_masks(TorchNativeAttnBackend())


# ----- FlashInfer backend logic, on the CPU stand-in -----
def _fake_backend(monkeypatch, layers=()):
    fake_flashinfer.install(monkeypatch)
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend

    backend = FlashInferAttnBackend(_config(torch.float32), torch.device("cpu"))
    backend.bind_layers(list(layers))
    return backend


@pytest.mark.parametrize("lengths", ["mixed", "single"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_flashinfer_backend_logic_matches_reference(monkeypatch, case, lengths):
    heads, kv_heads, d, causal, window = CASES[case]
    backend = _fake_backend(monkeypatch, [make_layer(heads, kv_heads, d, causal, window)])
    check_backend(backend, case, lengths)


def test_flashinfer_backend_pads_small_head_dims(monkeypatch):
    """MiniLM's head_dim 32 is padded to 64 for the kernel (which rejects 32) and unpadded after."""
    layer = make_layer(12, 12, 32, False, None)
    backend = _fake_backend(monkeypatch, [layer])
    seq_lens = [7, 3]
    q, k, v = make_inputs(seq_lens, 12, 12, 32)
    ref = reference_attention(q, k, v, seq_lens, 12, 12, 32, False, None, layer.scaling)
    assert torch.allclose(layer(q, k, v, make_batch(seq_lens, backend)).double(), ref, atol=1e-5)


def test_flashinfer_backend_plans_once_per_spec_and_batch(monkeypatch):
    layers = [make_layer(4, 2, 16, True, None) for _ in range(3)] + [make_layer(4, 2, 16, True, 4)]
    backend = _fake_backend(monkeypatch, layers)
    fb = make_batch([3, 5], backend)
    meta = fb.attn_metadata
    assert len(meta.by_spec) == 2  # three identical layers share one wrapper; the windowed one has its own
    assert meta.wrappers[AttnShape.of(layers[0])] is meta.wrappers[AttnShape.of(layers[2])]
    q, k, v = make_inputs([3, 5], 4, 2, 16)
    for layer in layers:
        layer(q, k, v, fb)
    assert sum(w.plan_calls for w in meta.by_spec.values()) == 2
    make_batch([4], backend)  # the next batch re-plans the same two wrappers
    assert sorted(w.plan_calls for w in meta.by_spec.values()) == [2, 2]


def test_flashinfer_backend_window_mask_only_when_needed(monkeypatch):
    """A bidirectional window uses a custom mask only when some sequence is longer than it, and a
    later short batch must not inherit that mask."""
    layer = make_layer(4, 4, 16, False, 3)
    backend = _fake_backend(monkeypatch, [layer])
    for seq_lens in ([9, 2], [3, 2, 1], [10]):
        fb = make_batch(seq_lens, backend)
        spec = next(iter(fb.attn_metadata.by_spec))
        assert spec.mask_window == (3 if max(seq_lens) > 3 else 0)
        q, k, v = make_inputs(seq_lens, 4, 4, 16, seed=len(seq_lens))
        ref = reference_attention(q, k, v, seq_lens, 4, 4, 16, False, 3, layer.scaling)
        assert torch.allclose(layer(q, k, v, fb).double(), ref, atol=1e-5), seq_lens


def test_flashinfer_backend_plans_unbound_layers_lazily(monkeypatch):
    backend = _fake_backend(monkeypatch, [])
    check_backend(backend, "gqa_causal", "mixed")


# ----- pure helpers -----
def test_padded_head_dim():
    assert [padded_head_dim(d) for d in (8, 32, 64, 80, 128, 256)] == [64, 64, 64, 128, 128, 256]


def test_plan_spec_windows():
    causal = AttnShape(4, 2, 32, True, 8, 0.1)
    assert plan_spec(causal, 3).window_left == 7 and plan_spec(causal, None).window_left == 7
    bidir = AttnShape(4, 2, 32, False, 8, 0.1)
    assert plan_spec(bidir, 8).mask_window == 0 and plan_spec(bidir, 9).mask_window == 8
    assert plan_spec(bidir, None).mask_window == 8 and plan_spec(bidir, 9).window_left == -1
    full = plan_spec(AttnShape(4, 2, 32, False, None, 0.1), None)
    assert (full.window_left, full.mask_window, full.head_dim) == (-1, 0, 64)


def test_window_mask_layout():
    mask = window_mask([3, 0, 2], 2, "cpu")
    first = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 1, 1]], dtype=torch.bool).reshape(-1)
    assert torch.equal(mask, torch.cat([first, torch.ones(4, dtype=torch.bool)]))
    assert window_mask([], 2, "cpu").numel() == 0


def test_cu_seqlens_cpu():
    cu = cu_seqlens_cpu([3, 0, 5])
    assert cu.dtype == torch.int32 and cu.tolist() == [0, 3, 3, 8]
    assert cu_seqlens_cpu([]).tolist() == [0]


def test_float_workspace_grows_with_graph_buckets():
    spec = plan_spec(AttnShape(16, 8, 128, True, None, 0.088), None)
    small = float_workspace_bytes([spec], [(256, 33)], num_sms=132)
    big = float_workspace_bytes([spec], [(4096, 129)], num_sms=132)
    assert 128 * 2**20 <= small < big
    # FA2's graph-mode split-KV scratch: heads * tiles * tile * (head_dim + 1) floats.
    tiles = math.ceil(4096 * 2 / 128) + 128
    assert big >= 16 * tiles * 128 * 129 * 4


# ----- real FlashInfer kernels -----
@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(CASES) + ["minilm_head_dim", "qwen3_shape"])
def test_flashinfer_kernels_match_torch_native(case):
    from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend

    shapes = {"minilm_head_dim": (12, 12, 32, False, None), "qwen3_shape": (16, 8, 128, True, None)}
    heads, kv_heads, d, causal, window = shapes.get(case) or CASES[case]
    if window is not None:
        window = 5  # long enough to matter, shorter than most sequences below
    seq_lens = [37, 1, 130, 9, 64]
    layer = make_layer(heads, kv_heads, d, causal, window)
    device = torch.device("cuda")
    backend = FlashInferAttnBackend(_config(torch.bfloat16), device)
    backend.bind_layers([layer])
    q, k, v = make_inputs(seq_lens, heads, kv_heads, d, device=device, dtype=torch.bfloat16)
    ours = layer(q, k, v, make_batch(seq_lens, backend, device)).float()
    ref = layer(q.float(), k.float(), v.float(), make_batch(seq_lens, TorchNativeAttnBackend(), device))
    assert torch.allclose(ours, ref, atol=3e-2, rtol=3e-2), (ours - ref).abs().max()
    cos = torch.nn.functional.cosine_similarity(ours, ref, dim=-1)
    assert cos.min() >= 0.999
