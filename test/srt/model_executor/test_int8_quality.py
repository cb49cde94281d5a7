"""--quantization int8 on the bundled all-MiniLM-L6-v2: the quality gate against float32.

Per text cosine to float32 >= 0.99 over the test corpus, top-10 retrieval overlap >= 0.9 on a
query/document split of it, and each text's vector independent of its batch (per-token scales).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from sglang.srt.layers.int8_linear import int8_support
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.hf_tokenizer import load_tokenizer
from test.helpers.parity import cosine_rows
from test.helpers.texts import load_texts


@pytest.fixture(scope="module")
def corpus():
    texts = load_texts()
    tok = load_tokenizer(ServerArgs().tokenizer_path, False)
    ids = [np.asarray(x, dtype=np.int32) for x in tok(texts, truncation=True, max_length=256)["input_ids"]]
    return texts, ids


@pytest.fixture(scope="module")
def runners():
    return ModelRunner(ServerArgs(device="cpu")), ModelRunner(ServerArgs(device="cpu", quantization="int8"))


def _embed(runner, ids):
    return np.concatenate([runner.embed(ids[i : i + 40]) for i in range(0, len(ids), 40)])


def test_int8_runs_on_this_cpu():
    support = int8_support()
    assert support.available, support.reason  # every x86-64 build of torch with oneDNN
    assert support.act_bits in (7, 8)


def test_int8_vectors_stay_within_099_of_float32_per_text(corpus, runners):
    _, ids = corpus
    fp32, int8 = runners
    ref, got = _embed(fp32, ids), _embed(int8, ids)
    cos = cosine_rows(got, ref)
    assert cos.min() >= 0.99, f"lowest cosine {cos.min():.4f} (mean {cos.mean():.4f})"


def test_int8_top10_retrieval_overlap(corpus, runners):
    """Queries: the corpus's short texts; documents: the rest. Same top 10 in float and int8."""
    texts, ids = corpus
    queries = [i for i, t in enumerate(texts) if len(t.split()) <= 12]
    docs = [i for i in range(len(texts)) if i not in set(queries)]
    assert len(queries) >= 20 and len(docs) >= 50
    overlaps = []
    fp32, int8 = runners
    for runner in (fp32, int8):
        q = _embed(runner, [ids[i] for i in queries])
        d = _embed(runner, [ids[i] for i in docs])
        overlaps.append(np.argsort(-(q @ d.T), axis=1)[:, :10])
    shared = [len(set(a) & set(b)) / 10 for a, b in zip(*overlaps)]
    assert np.mean(shared) >= 0.9, f"mean top-10 overlap {np.mean(shared):.3f}"


def test_int8_vector_does_not_depend_on_its_batch(corpus, runners):
    _, ids = corpus
    int8 = runners[1]
    batched = int8.embed(ids[:24])
    alone = np.concatenate([int8.embed([x]) for x in ids[:24]])
    assert cosine_rows(batched, alone).min() >= 0.99999


def test_model_info_and_log_name_the_quantization(runners, caplog):
    fp32, int8 = runners
    info = int8.model_info().to_dict()
    assert info["quantization"] == "int8" and info["int8_activation_bits"] == int8_support().act_bits
    assert info["dtype"] == "float32"  # attention, LayerNorm and pooling keep --dtype
    assert fp32.model_info().quantization is None
    with caplog.at_level(logging.INFO, logger="sglang.srt.model_executor.model_runner"):
        ModelRunner(ServerArgs(device="cpu", quantization="int8", cpu_threads=1))
    assert any("quantization=int8 (w8a" in r.getMessage() for r in caplog.records)
