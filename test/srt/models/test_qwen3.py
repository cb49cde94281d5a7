"""Our Qwen3 decoder against transformers' Qwen3Model on tiny random checkpoints (float32).

Also covers what every decoder checkpoint goes through: sharded safetensors, hub ids (from a local
hub cache, offline), the skipped LM head, and a context length beyond max_position_embeddings.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sglang.srt.model_loader.weight_utils import iterate_weights
from test.helpers.parity import (
    MIXED_TEXTS,
    hf_decoder_embeddings,
    make_runner,
    relative_error_rows,
    tokenize_for_runner,
)
from test.helpers.tiny_models import build_tiny_qwen3

TEXTS = MIXED_TEXTS  # mixed lengths


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory) -> str:
    # sentence-transformers files declaring last-token pooling: detected without --is-embedding.
    return build_tiny_qwen3(str(tmp_path_factory.mktemp("qwen3")), st_pooling="lasttoken")


@pytest.fixture(scope="module")
def runner(qwen3_dir):
    return make_runner(qwen3_dir)


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_qwen3_matches_transformers(qwen3_dir, runner, padding_side):
    assert runner.model_config.pooling == "lasttoken" and runner.model_config.normalize
    ours = runner.embed(tokenize_for_runner(qwen3_dir, TEXTS))
    ref = hf_decoder_embeddings(qwen3_dir, TEXTS, padding_side)
    assert ours.shape == ref.shape == (len(TEXTS), 48)
    assert relative_error_rows(ours, ref).max() <= 1e-4


def test_batch_equals_one_at_a_time(qwen3_dir, runner):
    ids = tokenize_for_runner(qwen3_dir, TEXTS)
    batched = runner.embed(ids)
    single = np.concatenate([runner.embed([x]) for x in ids])
    reordered = runner.embed(ids[::-1])[::-1]
    assert np.abs(batched - single).max() <= 1e-5
    assert np.abs(batched - reordered).max() <= 1e-5


def test_lm_head_is_neither_built_nor_read(qwen3_dir, runner):
    names = [n for n, _ in runner.model.named_parameters()]
    assert not any("lm_head" in n for n in names)
    assert any(n == "lm_head.weight" for n, _ in iterate_weights(qwen3_dir))  # the checkpoint has one
    assert not any(n.startswith("lm_head.") for n, _ in iterate_weights(qwen3_dir, ("lm_head.",)))


def _fake_hub_cache(cache_dir: str, repo_id: str, src: str) -> None:
    """Lay `src` out as huggingface_hub's cache holds a downloaded snapshot of `repo_id`."""
    repo = os.path.join(cache_dir, "models--" + repo_id.replace("/", "--"))
    commit = "0123456789abcdef0123456789abcdef01234567"
    os.makedirs(os.path.join(repo, "refs"))
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(commit)
    shutil.copytree(src, os.path.join(repo, "snapshots", commit))


def test_sharded_checkpoint_from_hub_id(tmp_path, monkeypatch):
    d = build_tiny_qwen3(str(tmp_path / "sharded"), st_pooling="lasttoken", max_shard_size="20KB", seed=1)
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        shards = set(json.load(f)["weight_map"].values())
    assert len(shards) > 1 and not os.path.exists(os.path.join(d, "model.safetensors"))

    cache = str(tmp_path / "hub")
    _fake_hub_cache(cache, "tiny-org/tiny-qwen3", d)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    runner = make_runner("tiny-org/tiny-qwen3", download_dir=cache)
    assert runner.model_config.model_path.startswith(cache)
    ours = runner.embed(tokenize_for_runner(d, TEXTS))
    assert relative_error_rows(ours, hf_decoder_embeddings(d, TEXTS)).max() <= 1e-4


def test_tied_embeddings_checkpoint_without_lm_head(tmp_path):
    # Qwen3-Embedding-0.6B ties the LM head to the embeddings, so its file has no lm_head at all.
    d = build_tiny_qwen3(str(tmp_path / "tied"), tie_word_embeddings=True, seed=2)
    assert not any(n.startswith("lm_head") for n, _ in iterate_weights(d))
    runner = make_runner(d, is_embedding=True)
    ours = runner.embed(tokenize_for_runner(d, TEXTS))
    assert relative_error_rows(ours, hf_decoder_embeddings(d, TEXTS)).max() <= 1e-4


def test_context_length_beyond_position_embeddings(qwen3_dir):
    # RoPE has no position table to run out of: --context-length may exceed max_position_embeddings
    # (256 here); the cos/sin cache is sized to the served context.
    runner = make_runner(qwen3_dir, context_length=300)
    assert runner.model_config.context_length == 300
    assert runner.model.rotary_emb.cos_sin_cache.shape[0] == 300
    ids = np.random.default_rng(0).integers(1, 300, size=290).astype(np.int32)
    ours = runner.embed([ids])

    from transformers import AutoModel

    model = AutoModel.from_pretrained(qwen3_dir, attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
        hidden = model(input_ids=torch.from_numpy(ids).long()[None]).last_hidden_state
    ref = F.normalize(hidden[:, -1], dim=-1).numpy()
    assert relative_error_rows(ours, ref).max() <= 1e-4


def test_batch_past_the_mlp_row_chunk_matches_transformers(qwen3_dir, runner):
    # One forward of more tokens than ROW_CHUNK: the MLP runs in row chunks on CPU.
    from sglang.srt.layers.row_chunks import ROW_CHUNK

    ids = tokenize_for_runner(qwen3_dir, TEXTS)
    copies = ROW_CHUNK // sum(len(x) for x in ids) + 2
    ours = runner.embed(ids * copies).reshape(copies, len(TEXTS), -1)
    assert sum(len(x) for x in ids) * copies > ROW_CHUNK
    ref = hf_decoder_embeddings(qwen3_dir, TEXTS)
    for copy in ours:
        assert relative_error_rows(copy, ref).max() <= 1e-4
