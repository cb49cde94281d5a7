"""ModelInfo: the typed contract from the scheduler to the HTTP side, and its /model_info rendering."""

from __future__ import annotations

import dataclasses
import pickle

import orjson
import pytest

from sglang.srt.configs.colbert_config import ColbertConfig
from sglang.srt.configs.model_info import (
    Capability,
    ImagePath,
    ModelInfo,
    OutputKind,
    ReplicaInfo,
    VisionInfo,
    image_path_of,
)
from sglang.srt.configs.model_registry import ModelRegistry
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
    "capabilities",
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
    colbert = make_model_info(colbert=ColbertConfig("checkpoint", dim=8, skiplist_words=(".",))).to_dict()
    assert colbert["colbert"]["dim"] == 8 and orjson.loads(orjson.dumps(colbert)) == colbert
    from sglang.srt.configs.llm_reranker import QWEN3_RERANKER

    assert make_model_info(rerank_prompt=QWEN3_RERANKER).to_dict()["rerank_prompt"] == "qwen3-reranker"
    plain = make_model_info().to_dict()
    assert plain["rerank_prompt"] is None
    assert plain["vision"] is None and plain["labels"] is None and plain["embeddings_output"] == "dense"
    assert plain["capabilities"] == ["embed", "token_embed"]


def test_it_crosses_the_ready_pipe_and_stays_frozen():
    info = make_model_info(matryoshka_dimensions=(8,), embeddings_output=OutputKind.SPARSE, sparse_head="splade")
    back = pickle.loads(pickle.dumps(info))
    assert back == info and back.embeddings_output is OutputKind.SPARSE and not back.is_classifier
    with pytest.raises(dataclasses.FrozenInstanceError):
        back.embedding_dim = 1  # type: ignore[misc]
    assert isinstance(back, ModelInfo)


C = Capability
TOWER = VisionInfo(model_dir="/m", kind=ImagePath.TOWER, patch_size=16)
GME = VisionInfo(model_dir="/m", image_token_id=5, spatial_merge_size=2)
COLBERT = ColbertConfig("checkpoint", dim=8)


@pytest.mark.parametrize(
    "fields, expected",
    [
        ({}, {C.EMBED, C.TOKEN_EMBED}),  # MiniLM
        ({"embeddings_output": OutputKind.LOGITS, "labels": ("score",)}, {C.CLASSIFY, C.RERANK}),
        ({"embeddings_output": OutputKind.LOGITS, "labels": ("neg", "pos")}, {C.CLASSIFY}),
        ({"embeddings_output": OutputKind.SPARSE, "sparse_head": "splade"}, {C.SPARSE, C.TOKEN_EMBED}),
        ({"embeddings_output": OutputKind.SPARSE, "sparse_head": "linear"}, {C.SPARSE, C.TOKEN_EMBED}),
        ({"sparse_head": "linear", "colbert": COLBERT}, {C.EMBED, C.SPARSE, C.MULTI_VECTOR, C.TOKEN_EMBED}),  # bge-m3
        ({"embeddings_output": OutputKind.MULTI_VECTOR, "colbert": COLBERT}, {C.MULTI_VECTOR, C.TOKEN_EMBED}),
        ({"vision": TOWER}, {C.EMBED, C.IMAGE}),  # CLIP / SigLIP: one vector per item
        ({"vision": GME}, {C.EMBED, C.TOKEN_EMBED, C.IMAGE}),  # Qwen2-VL / GME
    ],
)
def test_capabilities_are_derived_once_from_the_fields(fields, expected):
    info = make_model_info(**fields)
    assert info.capabilities == frozenset(expected)
    assert info.is_classifier is (C.CLASSIFY in expected)
    assert info.to_dict()["capabilities"] == sorted(c.value for c in expected)


def test_capabilities_follow_a_replace_and_cannot_be_passed():
    sparse = make_model_info(embeddings_output=OutputKind.SPARSE, sparse_head="splade")
    assert C.EMBED not in sparse.capabilities
    assert C.EMBED in dataclasses.replace(sparse, embeddings_output=OutputKind.DENSE).capabilities
    with pytest.raises(TypeError):
        make_model_info(capabilities=frozenset({C.RERANK}))


def test_one_image_path_per_architecture():
    assert image_path_of(ModelRegistry.spec("CLIPModel")) is ImagePath.TOWER
    assert image_path_of(ModelRegistry.spec("Qwen2VLForConditionalGeneration")) is ImagePath.LM_TOKENS
    assert image_path_of(ModelRegistry.spec("BertModel")) is None
    assert make_model_info(vision=TOWER).image_path is ImagePath.TOWER
    assert make_model_info(vision=GME).image_path is ImagePath.LM_TOKENS and make_model_info().image_path is None
    assert make_model_info(vision=TOWER).to_dict()["vision"]["kind"] == "image_text"
    assert VisionInfo(model_dir="/m", kind="image_text").kind is ImagePath.TOWER  # a plain value is made the enum
