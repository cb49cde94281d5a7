"""validate_dimensions: the one check behind `dimensions` on /v1/embeddings and Engine.encode."""

from __future__ import annotations

import pytest

from sglang.srt.errors import EmbeddingError, ErrorKind
from sglang.srt.wire.matryoshka import validate_dimensions
from test.helpers.model_info import make_model_info

PLAIN = make_model_info(is_matryoshka=False, matryoshka_dimensions=None, embedding_dim=64)
LISTED = make_model_info(is_matryoshka=True, matryoshka_dimensions=(16, 32, 64), embedding_dim=64)
ANY = make_model_info(is_matryoshka=True, matryoshka_dimensions=None, embedding_dim=64)


@pytest.mark.parametrize(
    "info, dims",
    [(PLAIN, None), (PLAIN, 64), (LISTED, None), (LISTED, 16), (LISTED, 64), (ANY, 1), (ANY, 17), (ANY, 64)],
)
def test_accepted(info, dims):
    # The full width is accepted everywhere: tools that always send `dimensions` must not break.
    validate_dimensions(dims, info, "m")


@pytest.mark.parametrize(
    "info, dims, message",
    [
        (
            PLAIN,
            16,
            "Model 'm' does not support matryoshka representation, "
            "changing output dimensions will lead to poor results.",
        ),
        (ANY, 0, "dimensions must be at least 1, got 0."),
        (LISTED, -1, "dimensions must be at least 1, got -1."),
        (ANY, 65, "dimensions 65 is greater than the model's embedding size 64."),
        (LISTED, 128, "dimensions 128 is greater than the model's embedding size 64."),
        (
            LISTED,
            20,
            "Model 'm' only supports matryoshka dimensions [16, 32, 64]; dimensions 20 would lead to poor results.",
        ),
        (ANY, True, "dimensions must be an integer, not True."),
        (PLAIN, 0, "dimensions must be at least 1, got 0."),
    ],
)
def test_rejected_with_400(info, dims, message):
    with pytest.raises(EmbeddingError) as err:
        validate_dimensions(dims, info, "m")
    assert (err.value.kind, err.value.param, err.value.message) == (ErrorKind.INVALID_REQUEST, "dimensions", message)
