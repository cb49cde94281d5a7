"""The one /v1/rerank answer every scorer shares (frontend/openai/rerank_results.py)."""

from __future__ import annotations

import orjson

from sglang.srt.frontend.openai.rerank_results import rank_results, rerank_body


def test_best_first_ties_in_request_order_trimmed_to_top_n():
    scores = [0.2, 0.9, 0.2, -0.5]
    assert [r["index"] for r in rank_results(scores, list("abcd"), None, False)] == [1, 0, 2, 3]
    assert rank_results(scores, list("abcd"), 0, False) == rank_results(scores, list("abcd"), None, False)  # vLLM's 0
    top = rank_results(scores, list("abcd"), 2, True)
    assert top == [
        {"index": 1, "relevance_score": 0.9, "document": {"text": "b"}},
        {"index": 0, "relevance_score": 0.2, "document": {"text": "a"}},
    ]


def test_order_by_sorts_scores_that_round_to_the_same_value():
    # sigmoid(40) and sigmoid(39) are both 1.0 in float64: the logits decide
    results = rank_results([1.0, 1.0, 0.5], list("xyz"), None, False, order_by=[39.0, 40.0, 0.0])
    assert [r["index"] for r in results] == [1, 0, 2] and results[0]["relevance_score"] == 1.0


def test_body_names_the_request_and_counts_tokens():
    body = orjson.loads(rerank_body("req-1", "m", [{"index": 0, "relevance_score": 0.5}], 7))
    assert body["id"] == "rerank-req-1" and body["model"] == "m"
    assert body["usage"] == {"prompt_tokens": 7, "total_tokens": 7}
    assert orjson.loads(rerank_body(None, "m", [], 0))["id"].startswith("rerank-")
