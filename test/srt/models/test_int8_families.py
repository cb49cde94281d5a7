"""--quantization int8 is chosen by the model runner, not per model: every family runs it, close
to its own float32 vectors (tiny random checkpoints: BERT, XLM-R, Qwen3, Llama, Gemma3)."""

from __future__ import annotations

import numpy as np
import pytest

from sglang.srt.layers import row_chunks
from sglang.srt.layers.int8_linear import int8_support
from sglang.srt.layers.linear import Linear
from test.helpers.parity import MIXED_TEXTS, cosine_rows, make_runner, tokenize_for_runner
from test.helpers.tiny_models import build_tiny_bert, build_tiny_llama, build_tiny_qwen3
from test.helpers.tiny_task_models import build_tiny_gemma3, build_tiny_xlm_roberta

BUILDERS = {
    "bert": lambda d: build_tiny_bert(d, st_pooling="mean"),
    "xlm-roberta": lambda d: build_tiny_xlm_roberta(d, st_pooling="mean"),
    "qwen3": lambda d: build_tiny_qwen3(d, st_pooling="lasttoken"),
    "llama": lambda d: build_tiny_llama(d, st_pooling="lasttoken"),
    "gemma3": build_tiny_gemma3,
}


@pytest.mark.skipif(not int8_support().available, reason="no int8 on this CPU/build")
@pytest.mark.parametrize("family", list(BUILDERS))
def test_family_runs_in_int8_close_to_float32(tmp_path, family):
    model_dir = BUILDERS[family](str(tmp_path / family))
    ids = tokenize_for_runner(model_dir, MIXED_TEXTS)
    ref = make_runner(model_dir).embed(ids)
    runner = make_runner(model_dir, quantization="int8")
    linears = [m for m in runner.model.modules() if isinstance(m, Linear)]
    assert linears and all(m.int8_weight is not None for m in linears)
    assert all(m.int8_weight.smoothed for m in linears)  # calibration reached every layer
    assert cosine_rows(runner.embed(ids), ref).min() >= 0.99


@pytest.mark.skipif(not int8_support().available, reason="no int8 on this CPU/build")
def test_bert_layers_take_prequantized_rows_with_the_same_vectors(tmp_path, monkeypatch):
    """In int8 BERT's dequantize passes quantize each row for the next matmul (QuantizedRows, also
    when the feed-forward half runs in row chunks): bit for bit the vectors of every layer
    quantizing its own input."""
    model_dir = build_tiny_bert(str(tmp_path / "bert"), st_pooling="mean")
    ids = tokenize_for_runner(model_dir, MIXED_TEXTS)
    runner = make_runner(model_dir, quantization="int8")
    kernel = runner.int8.rows_kernel
    assert kernel is not None  # the test machines have a C compiler
    calls = []
    fused_pass = kernel.dequant_quantize_rows
    monkeypatch.setattr(kernel, "dequant_quantize_rows", lambda *a, **k: (calls.append(1), fused_pass(*a, **k))[1])
    fused = runner.embed(ids)
    assert calls
    monkeypatch.setattr(row_chunks, "ROW_CHUNK", 5)
    chunked = runner.embed(ids)
    for layer in runner.model.modules():
        if isinstance(layer, Linear):
            monkeypatch.setattr(layer, "_feeds", lambda x, then: None)
    calls.clear()
    own = runner.embed(ids)
    assert not calls
    assert np.array_equal(fused, own) and np.array_equal(chunked, own)
