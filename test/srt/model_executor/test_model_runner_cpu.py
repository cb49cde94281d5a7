"""CPU execution choices: bfloat16 stays close to float32, and thread settings are honoured."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sglang.srt.model_executor.model_runner import ModelRunner, cpu_bf16_units
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.hf_tokenizer import load_tokenizer
from test.helpers.parity import cosine_rows
from test.helpers.texts import load_texts


@pytest.fixture(scope="module")
def corpus_ids():
    args = ServerArgs()
    tok = load_tokenizer(args.tokenizer_path, False)
    ids = tok(load_texts(), truncation=True, max_length=256)["input_ids"]
    return [np.asarray(x, dtype=np.int32) for x in ids]


@pytest.mark.slow
def test_bfloat16_vectors_stay_within_0999_of_float32(corpus_ids):
    fp32 = ModelRunner(ServerArgs(device="cpu"))
    bf16 = ModelRunner(ServerArgs(device="cpu", dtype="bfloat16"))
    assert bf16.model_config.dtype == torch.bfloat16
    batches = [corpus_ids[i : i + 40] for i in range(0, len(corpus_ids), 40)]
    ref = np.concatenate([fp32.embed(b) for b in batches])
    got = np.concatenate([bf16.embed(b) for b in batches])
    assert got.dtype == np.float32 and got.shape == ref.shape
    assert cosine_rows(got, ref).min() >= 0.999
    info = bf16.model_info()
    assert info.dtype == "bfloat16" and info.cpu_bf16_units == cpu_bf16_units()


def test_cpu_threads_flag_sets_torch_threads():
    before = torch.get_num_threads()
    try:
        runner = ModelRunner(ServerArgs(device="cpu", cpu_threads=1))
        assert torch.get_num_threads() == 1 and runner.model_info().cpu_threads == 1
    finally:
        torch.set_num_threads(before)


def test_bfloat16_on_a_cpu_without_bf16_units_warns_once_and_auto_stays_float32(caplog):
    import logging

    from sglang.srt.model_executor.model_runner import SLOW_BF16_WARNING

    with caplog.at_level(logging.WARNING):
        ModelRunner(ServerArgs(device="cpu", dtype="bfloat16", cpu_threads=1))
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING and "bfloat16" in r.getMessage()]
    if cpu_bf16_units() is None:
        assert [r.getMessage() for r in warned] == [SLOW_BF16_WARNING]
    else:
        assert warned == []
    assert ModelRunner(ServerArgs(device="cpu", cpu_threads=1)).model_config.dtype == torch.float32  # auto


@pytest.mark.slow
def test_per_request_normalize_in_one_batch(corpus_ids):
    """The runner hands over raw pooled rows whatever the inputs' specs say; the renderer normalizes
    the rows whose spec asks (the checkpoint's default for all-MiniLM-L6-v2) and leaves the
    `normalize: false` one raw, in the same batch."""
    from sglang.srt.renderer.vector_render import render_vectors
    from sglang.srt.wire.io_struct import TokenizedEmbeddingReqInput
    from sglang.srt.wire.output_spec import Format, OutputSpec

    runner = ModelRunner(ServerArgs(device="cpu"))
    ids = corpus_ids[:3]
    specs = [OutputSpec(format=Format.ARRAY, normalize=f) for f in (True, False, True)]
    reqs = [TokenizedEmbeddingReqInput(f"r{i}", 0, x, output=s) for i, (x, s) in enumerate(zip(ids, specs))]
    out = runner.run_requests(reqs).embeddings
    np.testing.assert_array_equal(out, runner.run_requests([reqs[1], reqs[0], reqs[2]]).embeddings[[1, 0, 2]])
    rendered = np.stack([render_vectors(row, s) for row, s in zip(out, specs)])
    default = runner.embed(ids)  # SentenceTransformer.encode's vectors: normalized
    np.testing.assert_allclose(rendered[[0, 2]], default[[0, 2]], atol=1e-6)
    np.testing.assert_array_equal(rendered[1], out[1])
    assert abs(float(np.linalg.norm(out[1])) - 1.0) > 1e-2  # raw mean pooling is not unit length
    np.testing.assert_allclose(out[1] / np.linalg.norm(out[1]), default[1], atol=1e-6)
    from transformers import AutoModel

    model = AutoModel.from_pretrained(ServerArgs().model_path).eval()
    with torch.no_grad():
        hidden = model(input_ids=torch.from_numpy(ids[1].astype(np.int64))[None]).last_hidden_state
    np.testing.assert_allclose(out[1], hidden[0].mean(0).numpy(), atol=1e-4)  # mean pooling, not normalized
