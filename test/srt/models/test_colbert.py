"""ColBERT multi-vector heads against an independent reference (test/helpers/colbert_reference.py),
per token: Stanford (HF_ColBERT + artifact.metadata) and PyLate (Dense module + prefixes) checkpoints
with markers, lengths, query expansion (expansion tokens are queries, not keys) and the document
skiplist; bge-m3's colbert_linear.pt; and /embed_all's hidden states. Both CPU backends."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from sglang.srt.configs.model_info import OutputKind
from sglang.srt.frontend.colbert_inputs import ColbertInputs
from sglang.srt.frontend.tokenization import InputTokenizer
from sglang.srt.wire.token_kinds import TOKENS_DOCUMENT, TOKENS_HIDDEN, TOKENS_QUERY
from test.helpers.colbert_reference import bge_m3_colbert_reference, colbert_reference
from test.helpers.parity import make_runner, tokenize_for_runner
from test.helpers.tiny_encoders import (
    COLBERT_DIM,
    build_tiny_pylate,
    build_tiny_stanford_colbert,
    write_colbert_linear,
)
from test.helpers.tiny_task_models import build_tiny_xlm_roberta

QUERIES = ["the cat", "a fast embedding server returns one vector for every query and document", "river?"]
DOCS = [
    "the dog, the cat and the house.",
    "the dog and the cat in the house by the river with a green tree and red light",
    "three blue books!",
]


def _reqs(items, kind):
    return [
        SimpleNamespace(
            rid=str(i),
            input_ids=ids,
            token_type_ids=None,
            pixel_values=None,
            image_grid_thw=None,
            mrope_positions=None,
            token_output=kind,
            key_len=key_len,
            is_sparse=False,
            num_tokens=len(ids),
        )
        for i, (ids, key_len) in enumerate(items)
    ]


def _rows(out, n):
    rows = []
    for i in range(n):
        lo, hi = out.token_offsets[i], out.token_offsets[i + 1]
        vlo, vhi = out.token_value_offsets[i], out.token_value_offsets[i + 1]
        values = out.token_values[vlo:vhi]
        rows.append((values.reshape(hi - lo, -1) if hi > lo else values, out.token_ids[lo:hi].tolist()))
    return rows


def _check(ours, ref):
    for (vecs, ids), (ref_vecs, ref_ids) in zip(ours, ref):
        assert ids == ref_ids
        assert vecs.shape == ref_vecs.shape
        err = np.linalg.norm(vecs - ref_vecs, axis=1) / np.linalg.norm(ref_vecs, axis=1)
        assert err.max() <= 1e-4


def _colbert(model_dir: str, backend: str):
    runner = make_runner(model_dir, attention_backend=backend)
    info = runner.model_info()
    tokenizer = InputTokenizer(runner.server_args, info)
    return runner, info, tokenizer, ColbertInputs(info.colbert, tokenizer.tokenizer)


@pytest.fixture(scope="module", params=["stanford", "pylate"])
def colbert_dir(request, tmp_path_factory) -> str:
    build = build_tiny_stanford_colbert if request.param == "stanford" else build_tiny_pylate
    return build(str(tmp_path_factory.mktemp(request.param) / "colbert"))


@pytest.mark.parametrize("backend", ["cpu_varlen", "torch_native"])
def test_colbert_matches_reference_per_token(colbert_dir, backend):
    runner, info, tokenizer, inputs = _colbert(colbert_dir, backend)
    assert info.embeddings_output is OutputKind.MULTI_VECTOR  # detected without flags
    assert info.multi_vector_dim == info.embedding_dim == COLBERT_DIM
    queries = inputs.build(tokenizer, QUERIES, is_query=True)
    assert all(len(ids) == 12 for ids, _ in queries) and queries[0][1] < 12  # expansion, fewer keys
    docs = inputs.build(tokenizer, DOCS, is_query=False)
    assert max(len(ids) for ids, _ in docs) == 16  # cut to document_length
    # Queries and documents in one batch, as the scheduler may form it.
    out = runner.run_requests(_reqs(queries, TOKENS_QUERY) + _reqs(docs, TOKENS_DOCUMENT))
    rows = _rows(out, len(QUERIES) + len(DOCS))
    _check(rows[: len(QUERIES)], colbert_reference(colbert_dir, QUERIES, is_query=True))
    _check(rows[len(QUERIES) :], colbert_reference(colbert_dir, DOCS, is_query=False))
    single = _rows(runner.run_requests(_reqs(queries[1:2], TOKENS_QUERY)), 1)[0]
    assert np.abs(single[0] - rows[1][0]).max() <= 1e-5


def test_expansion_tokens_are_not_keys(colbert_dir):
    """The real tokens of a query do not change with how many [MASK] tokens follow them."""
    runner, _, tokenizer, inputs = _colbert(colbert_dir, "cpu_varlen")
    ((ids, key_len),) = inputs.build(tokenizer, ["the cat"], is_query=True)
    full = _rows(runner.run_requests(_reqs([(ids, key_len)], TOKENS_QUERY)), 1)[0][0]
    short = _rows(runner.run_requests(_reqs([(ids[: key_len + 1], key_len)], TOKENS_QUERY)), 1)[0][0]
    assert np.abs(full[:key_len] - short[:key_len]).max() <= 1e-5
    attended = _rows(runner.run_requests(_reqs([(ids, None)], TOKENS_QUERY)), 1)[0][0]
    assert np.abs(full[:key_len] - attended[:key_len]).max() > 1e-4


def test_pylate_attending_to_expansion(tmp_path):
    d = build_tiny_pylate(str(tmp_path / "attend"), seed=3, attend_to_expansion=True)
    runner, _, tokenizer, inputs = _colbert(d, "cpu_varlen")
    queries = inputs.build(tokenizer, QUERIES, is_query=True)
    assert all(k is None for _, k in queries)
    rows = _rows(runner.run_requests(_reqs(queries, TOKENS_QUERY)), len(QUERIES))
    _check(rows, colbert_reference(d, QUERIES, is_query=True))


@pytest.fixture(scope="module")
def bge_m3_dir(tmp_path_factory) -> str:
    d = build_tiny_xlm_roberta(str(tmp_path_factory.mktemp("m3") / "m3"), st_pooling="cls")
    write_colbert_linear(d, 32)
    return d


@pytest.mark.parametrize("backend", ["cpu_varlen", "torch_native"])
def test_bge_m3_colbert_vectors(bge_m3_dir, backend):
    runner = make_runner(bge_m3_dir, attention_backend=backend)
    info = runner.model_info()
    assert info.embeddings_output is OutputKind.DENSE and info.colbert.maxsim == "mean"
    ids = tokenize_for_runner(bge_m3_dir, DOCS)
    out = runner.run_requests(_reqs([(x, None) for x in ids], TOKENS_DOCUMENT))
    assert out.embeddings.shape == (len(DOCS), 32)  # the dense vectors come along
    _check(_rows(out, len(DOCS)), bge_m3_colbert_reference(bge_m3_dir, DOCS))


def test_hidden_states_for_embed_all(bge_m3_dir):
    """/embed_all's rows: every token's last hidden state, as transformers computes it."""
    from transformers import AutoModel

    runner = make_runner(bge_m3_dir)
    ids = tokenize_for_runner(bge_m3_dir, DOCS)
    mixed = _reqs([(x, None) for x in ids], TOKENS_HIDDEN)
    mixed[1].token_output = None  # a pooled row in the same batch gets no token rows
    out = runner.run_requests(mixed)
    rows = _rows(out, len(DOCS))
    assert rows[1][0].size == 0
    model = AutoModel.from_pretrained(bge_m3_dir, attn_implementation="eager").eval()
    for i in (0, 2):
        with torch.no_grad():
            ref = model(input_ids=torch.from_numpy(ids[i]).long()[None]).last_hidden_state[0].numpy()
        assert rows[i][1] == ids[i].tolist()
        assert (np.linalg.norm(rows[i][0] - ref, axis=1) / np.linalg.norm(ref, axis=1)).max() <= 1e-4
