"""Our Gemma3 encoder (EmbeddingGemma shape) against sentence-transformers and transformers.

The tiny checkpoint has a sliding layer with a window of 6 (|query - key| <= 3 both ways once
bidirectional) and a full layer; the longer test texts (~20 tokens) reach past the window.
"""

from __future__ import annotations

import numpy as np
import pytest

from test.helpers.parity import (
    MIXED_TEXTS,
    hf_decoder_embeddings,
    make_runner,
    relative_error_rows,
    tokenize_for_runner,
)
from test.helpers.tiny_task_models import build_tiny_gemma3


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory) -> str:
    return build_tiny_gemma3(str(tmp_path_factory.mktemp("gemma") / "st"))


@pytest.fixture(scope="module")
def runner(gemma_dir):
    return make_runner(gemma_dir)  # no flags: detected as an embedding model


def test_detected_as_encoder_with_mean_pooling_and_dense_modules(runner):
    mc = runner.model_config
    assert mc.architecture == "Gemma3TextModel" and mc.is_encoder
    assert (mc.pooling, mc.normalize, mc.embedding_dim) == ("mean", True, 48)
    assert [d.out_features for d in mc.st_info.dense_layers] == [96, 48]
    layers = runner.model.layers
    assert layers[0].self_attn.attn.sliding_window == 4 and layers[1].self_attn.attn.sliding_window is None
    assert not layers[0].self_attn.attn.causal


def test_matches_sentence_transformers(gemma_dir, runner):
    from sentence_transformers import SentenceTransformer

    ids = tokenize_for_runner(gemma_dir, MIXED_TEXTS)
    assert max(len(x) for x in ids) > 8  # longer than the bidirectional window
    ours = runner.embed(ids)
    ref = SentenceTransformer(gemma_dir, device="cpu").encode(MIXED_TEXTS, batch_size=8)
    assert ours.shape == ref.shape == (len(MIXED_TEXTS), 48)
    assert relative_error_rows(ours, ref).max() <= 1e-4


def test_window_and_batching(gemma_dir, runner):
    ids = tokenize_for_runner(gemma_dir, MIXED_TEXTS)
    batched = runner.embed(ids)
    single = np.concatenate([runner.embed([x]) for x in ids])
    assert np.abs(batched - single).max() <= 1e-5
    attn = runner.model.layers[0].self_attn.attn
    attn.sliding_window = None  # the window really applies: without it long inputs change
    try:
        unwindowed = runner.embed(ids)
    finally:
        attn.sliding_window = 4
    longest = int(np.argmax([len(x) for x in ids]))
    assert np.abs(unwindowed[longest] - batched[longest]).max() > 1e-3


def test_causal_gemma3_matches_transformers(tmp_path):
    # Without use_bidirectional_attention it is a causal decoder: --is-embedding, last token,
    # a causal sliding window (query - key < 6).
    d = build_tiny_gemma3(str(tmp_path / "causal"), bidirectional=False, st_modules=False, seed=1)
    from sglang.srt.errors import ConfigError

    with pytest.raises(ConfigError, match="is-embedding"):
        make_runner(d)
    runner = make_runner(d, is_embedding=True)
    assert runner.model_config.pooling == "lasttoken" and runner.model.layers[0].self_attn.attn.causal
    ours = runner.embed(tokenize_for_runner(d, MIXED_TEXTS))
    assert relative_error_rows(ours, hf_decoder_embeddings(d, MIXED_TEXTS)).max() <= 1e-4


def test_batch_past_the_mlp_row_chunk(gemma_dir, runner):
    # One forward of more tokens than ROW_CHUNK (the MLP in row chunks on CPU) gives each text's
    # vector of a short batch.
    from sglang.srt.layers.row_chunks import ROW_CHUNK

    ids = tokenize_for_runner(gemma_dir, MIXED_TEXTS)
    copies = ROW_CHUNK // sum(len(x) for x in ids) + 2
    assert sum(len(x) for x in ids) * copies > ROW_CHUNK
    long_batch = runner.embed(ids * copies).reshape(copies, len(ids), -1)
    assert np.abs(long_batch - runner.embed(ids)[None]).max() <= 1e-5
