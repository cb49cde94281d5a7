"""MPNet (all-mpnet-base-v2's architecture) against sentence-transformers and transformers, on
both CPU attention backends: relative position buckets, positions from 2, mean pooling."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sglang.srt.models.mpnet import relative_position_bucket
from test.helpers.parity import MIXED_TEXTS, make_runner, relative_error_rows, tokenize_for_runner
from test.helpers.tiny_encoders import build_tiny_mpnet

# Long enough to reach buckets past the exact range (offsets > 8) and near the log cap.
LONG_TEXT = " ".join(["the cat and the dog in the house by the river"] * 14)


@pytest.fixture(scope="module")
def mpnet_dir(tmp_path_factory) -> str:
    return build_tiny_mpnet(str(tmp_path_factory.mktemp("mpnet") / "st"))


def test_buckets_match_transformers():
    from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

    offsets = torch.arange(-300, 301)
    assert torch.equal(relative_position_bucket(offsets), MPNetEncoder.relative_position_bucket(offsets))


@pytest.mark.parametrize("backend", ["cpu_varlen", "torch_native"])
def test_matches_sentence_transformers(mpnet_dir, backend):
    from sentence_transformers import SentenceTransformer

    runner = make_runner(mpnet_dir, attention_backend=backend)  # no flags: detected from config.json
    mc = runner.model_config
    assert (mc.architecture, mc.pooling, mc.normalize, mc.is_encoder) == ("MPNetModel", "mean", True, True)
    assert runner.model.embeddings.position_offset == 2 and mc.context_length == 512
    texts = MIXED_TEXTS + [LONG_TEXT]
    ids = tokenize_for_runner(mpnet_dir, texts)
    assert max(len(x) for x in ids) > 130  # past MAX_DISTANCE: the capped buckets take part
    ours = runner.embed(ids)
    ref = SentenceTransformer(mpnet_dir, device="cpu").encode(texts, batch_size=8)
    assert relative_error_rows(ours, ref).max() <= 1e-4
    single = np.concatenate([runner.embed([x]) for x in ids])
    assert np.abs(ours - single).max() <= 1e-5


def test_bias_really_applies(mpnet_dir):
    """Zeroing the bias table changes the vectors: the kernel does add it. (auto picks
    torch_native for MPNet: SDPA with the dense bias measured faster.)"""
    assert make_runner(mpnet_dir).attn_backend.name == "torch_native"
    runner = make_runner(mpnet_dir, attention_backend="cpu_varlen")
    ids = tokenize_for_runner(mpnet_dir, MIXED_TEXTS)
    before = runner.embed(ids)
    runner.model.encoder.relative_attention_bias.weight.zero_()
    assert np.abs(runner.embed(ids) - before).max() > 1e-3


def test_masked_lm_checkpoint_and_hidden_states(tmp_path):
    """An MPNetForMaskedLM checkpoint (mpnet. prefix, lm_head) serves its encoder's hidden states."""
    from transformers import AutoModel, MPNetForMaskedLM

    d = build_tiny_mpnet(str(tmp_path / "mpnet"), st_pooling=None, seed=2)
    lm = MPNetForMaskedLM.from_pretrained(d)
    lm.save_pretrained(d)
    runner = make_runner(d)
    assert runner.model_config.architecture == "MPNetForMaskedLM" and runner.model_config.pooling == "mean"
    ids = tokenize_for_runner(d, MIXED_TEXTS)
    from sglang.srt.model_executor.forward_batch import ForwardBatch

    fb = runner.build_batch(ids)
    assert isinstance(fb, ForwardBatch)
    with torch.inference_mode():
        hidden = runner.hidden_states(fb).float()
    ref_model = AutoModel.from_pretrained(d).eval()
    for i, x in enumerate(ids):
        with torch.no_grad():
            ref = ref_model(input_ids=torch.from_numpy(x).long()[None]).last_hidden_state[0]
        got = hidden[fb.cu_seqlens[i] : fb.cu_seqlens[i + 1]]
        assert ((got - ref).norm(dim=-1) / ref.norm(dim=-1)).max() <= 1e-4
