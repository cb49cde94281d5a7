"""ModelInfo: the typed contract from the scheduler to the HTTP side, and its /model_info rendering."""

from __future__ import annotations

import dataclasses
import pickle

import orjson
import pytest

from sglang.srt.configs.model_info import ModelInfo, OutputKind, ReplicaInfo, VisionInfo
from test.helpers.model_info import make_model_info

# The keys /model_info (and Engine.get_model_info) have always shown, less the three the route adds.
MODEL_INFO_KEYS = {
    "model_path",
    "served_model_name",
    "architecture",
    "embedding_dim",
    "is_matryoshka",
    "matryoshka_dimensions",
    "pooling",
    "normalize",
    "max_input_length",
    "vocab_size",
    "do_lower_case",
    "dtype",
    "quantization",
    "int8_activation_bits",
    "device",
    "attention_backend",
    "cuda_graph",
    "cpu_threads",
    "cpu_bf16_units",
    "vision",
    "embeddings_output",
    "sparse_head",
    "labels",
    "problem_type",
    "pair_token_types",
    "colbert",
    "multi_vector_dim",
    "hidden_size",
    "prompts",
    "default_prompt",
    "prompt_in_pooling",
    "dp_size",
    "replicas",
    "memory",
    "rerank_prompt",
}


def test_to_dict_keeps_the_model_info_keys_as_plain_json_values():
    info = make_model_info(
        is_matryoshka=True,
        matryoshka_dimensions=(8, 16),
        labels=("a", "b"),
        embeddings_output=OutputKind.LOGITS,
        vision=VisionInfo(model_dir="/m", image_token_id=5, spatial_merge_size=2),
        dp_size=2,
        replicas=(
            ReplicaInfo(dp_rank=0, device="cpu", cpu_cores=(0, 1), cpu_threads=2),
            ReplicaInfo(dp_rank=1, device="cuda:1"),
        ),
    )
    out = info.to_dict()
    assert set(out) == MODEL_INFO_KEYS
    assert out["matryoshka_dimensions"] == [8, 16] and out["labels"] == ["a", "b"]
    assert out["vision"] == {
        "model_dir": "/m",
        "image_token_id": 5,
        "spatial_merge_size": 2,
        "kind": "qwen2_vl",
        "patch_size": None,
        "class_token": False,
        "image_tokens": None,
    }
    assert type(out["embeddings_output"]) is str and out["embeddings_output"] == "logits"
    assert out["dp_size"] == 2 and out["replicas"] == [
        {"dp_rank": 0, "device": "cpu", "cpu_cores": [0, 1], "cpu_threads": 2},
        {"dp_rank": 1, "device": "cuda:1", "cpu_cores": None, "cpu_threads": None},
    ]
    assert orjson.loads(orjson.dumps(out)) == out
    from sglang.srt.configs.colbert_config import ColbertConfig

    colbert = make_model_info(colbert=ColbertConfig("checkpoint", dim=8, skiplist_words=(".",))).to_dict()
    assert colbert["colbert"]["dim"] == 8 and orjson.loads(orjson.dumps(colbert)) == colbert
    from sglang.srt.configs.llm_reranker import QWEN3_RERANKER

    assert make_model_info(rerank_prompt=QWEN3_RERANKER).to_dict()["rerank_prompt"] == "qwen3-reranker"
    plain = make_model_info().to_dict()
    assert plain["rerank_prompt"] is None
    assert plain["vision"] is None and plain["labels"] is None and plain["embeddings_output"] == "dense"


def test_it_crosses_the_ready_pipe_and_stays_frozen():
    info = make_model_info(matryoshka_dimensions=(8,), embeddings_output=OutputKind.SPARSE, sparse_head="splade")
    back = pickle.loads(pickle.dumps(info))
    assert back == info and back.embeddings_output is OutputKind.SPARSE and not back.is_classifier
    with pytest.raises(dataclasses.FrozenInstanceError):
        back.embedding_dim = 1  # type: ignore[misc]
    assert isinstance(back, ModelInfo)
