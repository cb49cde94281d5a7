"""Sparse heads: bge-m3's sparse_linear.pt against a hand computation, SPLADE against
sentence-transformers' SparseEncoder; detection and --sparse-head."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sglang.srt.configs.model_info import OutputKind
from sglang.srt.errors import ConfigError
from sglang.srt.model_executor.forward_io import ForwardOutput
from sglang.srt.wire.io_struct import (
    FORMAT_FLOAT,
    FORMAT_SPARSE_DICT,
    FORMAT_SPARSE_TEI,
    TokenizedEmbeddingReqInput,
)
from sglang.srt.wire.matryoshka import shape_rows
from sglang.srt.wire.output_spec import Format, OutputSpec, Task
from test.helpers.parity import MIXED_TEXTS, make_runner, tokenize_for_runner
from test.helpers.tiny_task_models import build_tiny_splade, build_tiny_xlm_roberta, write_sparse_linear


def _spec(fmt: str) -> OutputSpec:
    """The spec the front end builds for an input asking for `fmt` (sparse formats run the sparse head)."""
    return OutputSpec(Task.SPARSE, Format(fmt)) if fmt != FORMAT_FLOAT else OutputSpec()


def _requests(ids: list[np.ndarray], formats: list[str]) -> list[TokenizedEmbeddingReqInput]:
    return [
        TokenizedEmbeddingReqInput(rid=str(i), worker_id=0, input_ids=x, output=_spec(f))
        for i, (x, f) in enumerate(zip(ids, formats))
    ]


def _rows(out: ForwardOutput) -> list[dict[int, float]]:
    o = out.sparse_offsets
    return [
        dict(zip(out.sparse_indices[o[i] : o[i + 1]].tolist(), out.sparse_values[o[i] : o[i + 1]].tolist()))
        for i in range(len(o) - 1)
    ]


def _bge_m3_reference(model_dir: str, ids: list[np.ndarray]) -> list[dict[int, float]]:
    """FlagEmbedding's BGE-M3: relu(sparse_linear(last_hidden_state)) per token, the max per token
    id, special tokens and zero weights left out."""
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    linear = torch.nn.Linear(model.config.hidden_size, 1)
    linear.load_state_dict(torch.load(f"{model_dir}/sparse_linear.pt"))
    special = set(AutoTokenizer.from_pretrained(model_dir).all_special_ids)
    out = []
    for x in ids:
        with torch.no_grad():
            hidden = model(input_ids=torch.from_numpy(x).long()[None]).last_hidden_state[0]
            weights = torch.relu(linear(hidden)).squeeze(-1).tolist()
        row: dict[int, float] = {}
        for token, w in zip(x.tolist(), weights):
            if token not in special and w > 0:
                row[token] = max(row.get(token, 0.0), w)
        out.append(row)
    return out


@pytest.fixture(scope="module")
def bge_m3_dir(tmp_path_factory) -> str:
    return build_tiny_xlm_roberta(str(tmp_path_factory.mktemp("bge-m3")), st_pooling="cls", sparse_linear=True)


def test_bge_m3_sparse_matches_reference_and_dense_stays_default(bge_m3_dir):
    runner = make_runner(bge_m3_dir)  # sparse_linear.pt detected; /v1/embeddings stays dense
    info = runner.model_info()
    assert info.embeddings_output is OutputKind.DENSE and info.sparse_head == "linear"
    ids = tokenize_for_runner(bge_m3_dir, MIXED_TEXTS)
    # A mixed batch: odd inputs ask for sparse rows, even ones for dense vectors.
    formats = [FORMAT_SPARSE_TEI if i % 2 else FORMAT_FLOAT for i in range(len(ids))]
    out = runner.run_requests(_requests(ids, formats))
    assert isinstance(out, ForwardOutput)
    # Pooled rows as the dense head makes them; normalized they are runner.embed's (the renderer's step).
    np.testing.assert_allclose(shape_rows(out.embeddings, None, True), runner.embed(ids), atol=1e-6)
    ours, ref = _rows(out), _bge_m3_reference(bge_m3_dir, ids)
    for i in range(1, len(ids), 2):
        assert ours[i].keys() == ref[i].keys() and ref[i]
        assert max(abs(ours[i][k] - ref[i][k]) for k in ref[i]) <= 1e-5
    assert 0 not in ours[1] and 2 not in ours[1]  # <s>, </s>
    assert list(ours[3]) == sorted(ours[3])  # ascending token ids
    dense_only = runner.run_requests(_requests(ids, [FORMAT_FLOAT] * len(ids)))
    assert dense_only.sparse_offsets is None  # no input asked: the sparse head did not run
    np.testing.assert_allclose(dense_only.embeddings, out.embeddings, atol=1e-6)


def test_explicit_sparse_head_path_makes_embeddings_sparse(bge_m3_dir, tmp_path):
    other = write_sparse_linear(str(tmp_path), 32, seed=7)
    runner = make_runner(bge_m3_dir, sparse_head=other)
    assert runner.model_info().embeddings_output is OutputKind.SPARSE
    assert runner.model_config.embedding_dim == runner.model_config.vocab_size
    with pytest.raises(ConfigError, match="no such file"):
        make_runner(bge_m3_dir, sparse_head="missing.pt")


@pytest.mark.parametrize("pooling_strategy", ["max", "sum"])
def test_splade_matches_sentence_transformers(tmp_path, pooling_strategy):
    from sentence_transformers import SparseEncoder
    from transformers import AutoTokenizer

    d = build_tiny_splade(str(tmp_path / "splade"), pooling_strategy=pooling_strategy)
    runner = make_runner(d)  # SpladePooling in modules.json: a sparse-only model
    info = runner.model_info()
    assert info.embeddings_output is OutputKind.SPARSE and info.sparse_head == "splade"
    ids = tokenize_for_runner(d, MIXED_TEXTS)
    out = runner.run_requests(_requests(ids, [FORMAT_SPARSE_DICT] * len(ids)))
    assert out.embeddings.shape == (len(ids), 0)
    ref = SparseEncoder(d, device="cpu").encode(MIXED_TEXTS).to_dense().numpy()
    ref[:, AutoTokenizer.from_pretrained(d).all_special_ids] = 0.0  # never in our output
    for row, expected in zip(_rows(out), ref):
        nonzero = np.flatnonzero(expected)
        assert sorted(row) == nonzero.tolist() and len(nonzero) > 0
        np.testing.assert_allclose([row[k] for k in nonzero], expected[nonzero], rtol=1e-4, atol=1e-5)


def test_splade_flag_on_a_masked_lm_checkpoint_and_refusals(tmp_path):
    d = build_tiny_splade(str(tmp_path / "splade"))
    hf_dir = d + "-hf"  # the bare BertForMaskedLM: dense unless asked for SPLADE
    assert make_runner(hf_dir).model_info().embeddings_output is OutputKind.DENSE
    runner = make_runner(hf_dir, sparse_head="splade")
    ids = tokenize_for_runner(hf_dir, MIXED_TEXTS[:2])
    via_flag = _rows(runner.run_requests(_requests(ids, [FORMAT_SPARSE_TEI] * 2)))
    via_st = _rows(make_runner(d).run_requests(_requests(ids, [FORMAT_SPARSE_TEI] * 2)))
    assert via_flag[0].keys() == via_st[0].keys()
    from test.helpers.tiny_models import build_tiny_qwen3

    q = build_tiny_qwen3(str(tmp_path / "qwen3"), st_pooling="lasttoken")
    with pytest.raises(ConfigError, match="SPLADE needs a masked-LM head"):
        make_runner(q, sparse_head="splade")


def test_splade_on_xlm_roberta_masked_lm(tmp_path):
    # RoBERTa names its MLM head lm_head.* (dense, gelu, layer_norm, decoder tied to the embeddings).
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    d = build_tiny_xlm_roberta(str(tmp_path / "xlmr-mlm"), task="mlm")
    runner = make_runner(d, sparse_head="splade")
    ids = tokenize_for_runner(d, MIXED_TEXTS[:3])
    ours = _rows(runner.run_requests(_requests(ids, [FORMAT_SPARSE_TEI] * len(ids))))
    model = AutoModelForMaskedLM.from_pretrained(d, attn_implementation="eager").eval()
    special = AutoTokenizer.from_pretrained(d).all_special_ids
    for x, row in zip(ids, ours):
        with torch.no_grad():
            logits = model(input_ids=torch.from_numpy(x).long()[None]).logits[0]
        expected = torch.log1p(torch.relu(logits)).amax(0)
        expected[special] = 0.0
        nonzero = torch.nonzero(expected).squeeze(1).tolist()
        assert sorted(row) == nonzero and nonzero
        np.testing.assert_allclose([row[k] for k in nonzero], expected[nonzero].numpy(), rtol=1e-4, atol=1e-5)
