"""The pure parts of similarity scoring (frontend/similarity.py): the cosine of rows against
sentence-transformers' util.cos_sim, vLLM's pairing rule, reading the sides of a /score body under
every key pair and shape, and the errors for the rest."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.frontend.similarity import SCORE_KEYS, check_pairing, check_texts, cosine_scores, score_sides


def _err(fn) -> EmbeddingError:
    with pytest.raises(EmbeddingError) as e:
        fn()
    assert e.value.kind == ErrorKind.INVALID_REQUEST
    return e.value


# ----- cosine -----
def test_pairwise_cosine_matches_sentence_transformers():
    from sentence_transformers import util

    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(5, 384)).astype(np.float32), rng.normal(size=(5, 384)).astype(np.float32)
    want = np.diag(util.cos_sim(torch.from_numpy(a), torch.from_numpy(b)).numpy())
    got = cosine_scores(a, b)
    assert got.dtype == np.float64 and got.shape == (5,)
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_one_left_row_is_compared_with_every_right_row():
    from sentence_transformers import util

    rng = np.random.default_rng(1)
    q, docs = rng.normal(size=(1, 64)), rng.normal(size=(7, 64))
    want = util.cos_sim(torch.from_numpy(q), torch.from_numpy(docs)).numpy()[0]
    np.testing.assert_allclose(cosine_scores(q, docs), want, atol=1e-9)


def test_cosine_ignores_scale_and_gives_zero_vectors_zero():
    v = np.array([[3.0, 4.0]])
    np.testing.assert_allclose(cosine_scores(v, np.array([[30.0, 40.0], [-3.0, -4.0], [4.0, -3.0]])), [1, -1, 0])
    out = cosine_scores(np.zeros((1, 2)), np.array([[1.0, 0.0]]))
    assert out.tolist() == [0.0]  # not NaN


def test_cosine_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match="one width"):
        cosine_scores(np.ones((2, 3)), np.ones((2, 4)))
    with pytest.raises(ValueError, match="3 rows against 2"):
        cosine_scores(np.ones((3, 4)), np.ones((2, 4)))


# ----- pairing -----
@pytest.mark.parametrize("n_left,n_right", [(1, 1), (1, 5), (4, 4)])
def test_pairing_takes_1_to_1_1_to_n_and_n_to_n(n_left, n_right):
    check_pairing(n_left, n_right, ("text_1", "text_2"))


def test_pairing_refuses_n_to_m_and_n_to_1_naming_both_sides():
    for n_left, n_right in ((2, 3), (3, 1)):
        e = _err(lambda: check_pairing(n_left, n_right, ("queries", "documents")))
        assert e.param == "queries" and f"`queries` has {n_left} texts and `documents` {n_right}" in e.message
        assert "1:N" in e.message and "N:N" in e.message


def test_pairing_refuses_an_empty_side():
    assert _err(lambda: check_pairing(0, 2, ("data_1", "data_2"))).param == "data_1"
    assert _err(lambda: check_pairing(1, 0, ("data_1", "data_2"))).param == "data_2"


# ----- the sides of a /score body -----
@pytest.mark.parametrize("keys", SCORE_KEYS)
@pytest.mark.parametrize(
    "left,right,want_left,want_right",
    [
        ("q", "d", ["q"], ["d"]),
        ("q", ["d1", "d2"], ["q"], ["d1", "d2"]),
        (["q1", "q2"], ["d1", "d2"], ["q1", "q2"], ["d1", "d2"]),
        (["q"], ["d1", "d2", "d3"], ["q"], ["d1", "d2", "d3"]),
    ],
)
def test_every_key_pair_and_shape(keys, left, right, want_left, want_right):
    names, got_left, got_right = score_sides({keys[0]: left, keys[1]: right, "model": "m"})
    assert names == keys and got_left == want_left and got_right == want_right


def test_the_first_pair_in_vllms_order_wins():
    body = {"text_1": "a", "text_2": "b", "queries": "q", "documents": ["d"], "items": ["i"]}
    assert score_sides(body) == (("queries", "documents"), ["q"], ["d"])
    assert score_sides({"queries": "q", "items": ["i"], "data_1": "x", "data_2": "y"})[0] == ("queries", "items")


@pytest.mark.parametrize(
    "body,param,fragment",
    [
        ({"text_1": "a"}, "text_2", "`text_1` needs `text_2`"),
        ({"data_2": ["a"]}, "data_1", "`data_2` needs `data_1`"),
        ({"queries": "a"}, "documents", "`queries` needs `documents` or `items`"),
        ({"items": ["a"]}, "queries", "`items` needs `queries`"),
        ({"input": "a"}, "queries", "`queries` + `documents`, `queries` + `items`"),
        ({"text_1": 5, "text_2": "b"}, "text_1", "must be a string or a list of strings"),
        ({"text_1": "a", "text_2": ["b", 3]}, "text_2", "must be a string or a list of strings"),
        ({"text_1": "a", "text_2": None}, "text_2", "must be a string or a list of strings"),
        ({"queries": "a", "documents": {"content": [{"type": "text", "text": "b"}]}}, "documents", "multimodal"),
        ({"queries": [{"content": []}], "documents": "b"}, "queries", "multimodal"),
        ({"queries": [], "documents": ["b"]}, "queries", "at least one text"),
        ({"queries": "a", "documents": []}, "documents", "at least one text"),
        ({"queries": ["a", "b"], "documents": ["c", "d", "e"]}, "queries", "1:N"),
    ],
)
def test_bad_bodies_are_400s_naming_the_field(body, param, fragment):
    e = _err(lambda: score_sides(body))
    assert e.param == param and fragment in e.message, e.message


def test_blank_texts_are_named_by_side_and_index():
    check_texts(["a", "b"], "document", "documents")
    e = _err(lambda: check_texts(["a", "  "], "document", "documents"))
    assert e.param == "documents" and e.message == "The document at index 1 is empty or whitespace only."
    assert _err(lambda: check_texts([""], "query", "query")).message == "The query is empty or whitespace only."
