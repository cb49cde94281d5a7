"""sglang.SentenceTransformer's similarity functions (entrypoints/st_similarity.py) against
sentence-transformers' own (util.cos_sim, dot_score, euclidean_sim, manhattan_sim and pairwise ones)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sentence_transformers import SimilarityFunction, util

from sglang.srt.entrypoints.st_similarity import check_similarity_fn_name, similarity, similarity_pairwise

MATRIX = {
    "cosine": util.cos_sim,
    "dot": util.dot_score,
    "euclidean": util.euclidean_sim,
    "manhattan": util.manhattan_sim,
}
PAIRWISE = {
    "cosine": util.pairwise_cos_sim,
    "dot": util.pairwise_dot_score,
    "euclidean": util.pairwise_euclidean_sim,
    "manhattan": util.pairwise_manhattan_sim,
}


def _rows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 24)).astype(np.float32)


@pytest.mark.parametrize("name", list(MATRIX))
def test_scores_equal_sentence_transformers(name):
    a, b = _rows(5, 0), _rows(7, 1)
    for x, y in [(a, b), (a[0], b), (torch.from_numpy(a), list(b)), (list(torch.from_numpy(a)), b[2])]:
        got, want = similarity(x, y, name), MATRIX[name](x, y)
        assert isinstance(got, torch.Tensor) and got.shape == want.shape
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(similarity_pairwise(a, b[:5], name), PAIRWISE[name](a, b[:5]), atol=1e-5, rtol=1e-5)
    half = a.astype(np.float16)  # narrower floats are scored in float32, as sentence-transformers does
    torch.testing.assert_close(similarity(half, half, name), MATRIX[name](half, half), atol=1e-4, rtol=1e-4)


def test_quantized_vectors_score_as_floats():
    q = np.random.default_rng(2).integers(-128, 128, (4, 16)).astype(np.int8)
    torch.testing.assert_close(similarity(q, q, "dot"), torch.from_numpy(q.astype(np.float32) @ q.T.astype(np.float32)))


def test_names():
    assert check_similarity_fn_name(SimilarityFunction.DOT_PRODUCT) == "dot"
    assert check_similarity_fn_name("manhattan") == "manhattan"
    with pytest.raises(ValueError, match="similarity_fn_name 'maxsim' is not supported"):
        check_similarity_fn_name("maxsim")
