"""The pieces behind /v1/classify and /v1/rerank (probabilities, labels, ranking), and the
scheduler carrying a forward's sparse rows into its output message."""

from __future__ import annotations

import time

import numpy as np

from sglang.srt.frontend.openai.serving_classify import classify_items, probabilities
from sglang.srt.frontend.openai.serving_rerank import rank
from sglang.srt.model_executor.forward_io import ForwardOutput
from sglang.srt.scheduler.scheduler import Scheduler
from sglang.srt.server_args import ServerArgs
from sglang.srt.wire.io_struct import TokenizedEmbeddingReqInput
from sglang.srt.wire.output_spec import Format, OutputSpec, Task


def test_probabilities_follow_the_text_classification_pipeline():
    logits = np.array([1.0, 3.0, 0.0])
    np.testing.assert_allclose(probabilities(logits, None), np.exp(logits) / np.exp(logits).sum())
    np.testing.assert_allclose(probabilities(logits, "multi_label_classification"), 1 / (1 + np.exp(-logits)))
    np.testing.assert_allclose(probabilities(np.array([0.0]), None), [0.5])  # one label: sigmoid
    np.testing.assert_array_equal(probabilities(logits, "regression"), logits)
    big = probabilities(np.array([1000.0, 0.0]), None)  # no overflow
    assert np.isfinite(big).all() and big[0] == 1.0


def test_classify_items_pick_the_label_of_the_most_probable_class():
    rows = [np.array([0.1, 2.0, -1.0], np.float32), np.array([3.0, 0.0, 0.5], np.float32)]
    items = classify_items(rows, ["negative", "positive", "neutral"], None)
    assert [i["label"] for i in items] == ["positive", "negative"]
    assert [i["index"] for i in items] == [0, 1] and items[0]["num_classes"] == 3
    assert abs(sum(items[0]["probs"]) - 1.0) < 1e-9
    np.testing.assert_allclose(items[1]["logits"], [3.0, 0.0, 0.5])


def test_rank_orders_by_logit_and_trims():
    docs = ["a", "b", "c", "d"]
    logits = np.array([0.5, 40.0, -2.0, 39.0])  # sigmoid rounds 40 and 39 to 1.0: the logits order them
    results = rank(logits, docs, None, True)
    assert [r["index"] for r in results] == [1, 3, 0, 2]
    assert results[0]["document"] == {"text": "b"} and 0 < results[-1]["relevance_score"] < 0.5
    top = rank(logits, docs, 2, False)
    assert [r["index"] for r in top] == [1, 3] and "document" not in top[0]
    tied = rank(np.array([1.0, 1.0, 2.0]), ["x", "y", "z"], None, False)
    assert [r["index"] for r in tied] == [2, 0, 1]  # ties keep request order


def test_scheduler_copies_sparse_rows_into_its_output():
    def forward(reqs):
        return ForwardOutput(
            np.zeros((len(reqs), 0), np.float32),
            np.array([3, 9], np.int32),
            np.array([0.5, 1.5], np.float32),
            np.array([0, 2, 2], np.int64),
        )

    s = Scheduler(ServerArgs(), forward)
    reqs = [
        TokenizedEmbeddingReqInput(
            rid=r,
            worker_id=0,
            input_ids=np.arange(3, dtype=np.int32),
            output=OutputSpec(Task.SPARSE, Format.SPARSE_TEI),
            arrival_time=time.monotonic(),
        )
        for r in ("a", "b")
    ]
    s.add_requests(reqs)
    out, _ = s.step()
    assert out.error_codes == [0, 0] and out.embeddings.shape == (2, 0)
    assert out.sparse_indices.tolist() == [3, 9] and out.sparse_offsets.tolist() == [0, 2, 2]
