"""Similarity of texts under an embedding model: the pure parts shared by vLLM's /score, the
cosine /v1/rerank and TEI's /similarity.

- `cosine_scores`: the cosine of each (left, right) pair of vectors, in float64;
- `check_pairing`: vLLM's rule for two sides of a score request (1:1, 1:N or N:N; N:M is refused);
- `score_sides`: which two keys of a /score body hold the sides (`queries`/`documents`,
  `queries`/`items`, `data_1`/`data_2`, `text_1`/`text_2`) and their texts as lists;
- `check_texts`: every text present and not blank, named by its side.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sglang.srt.errors import EmbeddingError, ErrorKind

# The key pairs vLLM's score request takes, in the order its request models are tried.
SCORE_KEYS: tuple[tuple[str, str], ...] = (
    ("queries", "documents"),
    ("queries", "items"),
    ("data_1", "data_2"),
    ("text_1", "text_2"),
)
# Below this norm a vector counts as zero and its cosine with anything is 0 (torch's eps).
ZERO_NORM = 1e-8


def _invalid(message: str, param: str) -> EmbeddingError:
    return EmbeddingError(ErrorKind.INVALID_REQUEST, message, param=param)


def cosine_scores(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """cos(left[i], right[i]) for each row i, accumulated in float64; a `left` of one row is
    compared with every row of `right` (1:N). A zero vector scores 0 rather than NaN."""
    a = np.asarray(left, dtype=np.float64)
    b = np.asarray(right, dtype=np.float64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"cosine of rows needs two [n, dim] arrays of one width, got {a.shape} and {b.shape}")
    if a.shape[0] == 1:
        a = np.broadcast_to(a, b.shape)
    elif a.shape[0] != b.shape[0]:
        raise ValueError(f"cosine of rows: {a.shape[0]} rows against {b.shape[0]}")
    dots = np.einsum("ij,ij->i", a, b)
    norms = np.maximum(np.linalg.norm(a, axis=1), ZERO_NORM) * np.maximum(np.linalg.norm(b, axis=1), ZERO_NORM)
    return dots / norms


def check_pairing(n_left: int, n_right: int, names: tuple[str, str]) -> None:
    """vLLM's pairing: one left text against any number of right ones, or as many left texts as
    right ones (pairwise); anything else is a 400 naming the sides."""
    first, second = names
    if n_left == 0:
        raise _invalid(f"`{first}` needs at least one text.", first)
    if n_right == 0:
        raise _invalid(f"`{second}` needs at least one text.", second)
    if n_left > 1 and n_left != n_right:
        raise _invalid(
            f"`{first}` has {n_left} texts and `{second}` {n_right}: send one `{first}` text to score against "
            f"every `{second}` text (1:N), or as many as `{second}` to score them in pairs (N:N).",
            first,
        )


def side_texts(value: Any, name: str) -> list[str]:
    """A side of a score request (a string, or a list of strings) as a list."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict) or (isinstance(value, list) and any(isinstance(v, dict) for v in value)):
        raise _invalid(f"`{name}` holds multimodal content; this route scores text only.", name)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _invalid(f"`{name}` must be a string or a list of strings.", name)
    return list(value)


def score_sides(body: dict) -> tuple[tuple[str, str], list[str], list[str]]:
    """(the two keys, left texts, right texts) of a /score body: the first of SCORE_KEYS it holds
    both keys of, as vLLM picks; a body with half a pair is told which key is missing."""
    for names in SCORE_KEYS:
        if names[0] in body and names[1] in body:
            left, right = side_texts(body[names[0]], names[0]), side_texts(body[names[1]], names[1])
            check_pairing(len(left), len(right), names)
            return names, left, right
    partners = {"queries": ("documents", "items"), "documents": ("queries",), "items": ("queries",)}
    partners.update({"data_1": ("data_2",), "data_2": ("data_1",), "text_1": ("text_2",), "text_2": ("text_1",)})
    for have, wanted in partners.items():
        if have in body:  # every full pair was taken above: this key's partner is missing
            options = " or ".join(f"`{w}`" for w in wanted)
            raise _invalid(f"`{have}` needs {options} beside it.", wanted[0])
    pairs = ", ".join(f"`{a}` + `{b}`" for a, b in SCORE_KEYS)
    raise _invalid(f"A score request holds two sides of texts: {pairs}.", "queries")


def check_texts(texts: list[str], what: str, param: str) -> None:
    """400 for an empty or blank text, named by its side (`what`: "query", "document") and index."""
    for i, t in enumerate(texts):
        if not t or not t.strip():
            where = f" at index {i}" if len(texts) > 1 else ""
            raise _invalid(f"The {what}{where} is empty or whitespace only.", param)
