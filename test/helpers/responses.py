"""Reading /v1/embeddings answers in the end-to-end tests."""

from __future__ import annotations

import base64

import numpy as np


def response_vectors(resp) -> np.ndarray:
    """The rows of a 200 /v1/embeddings answer in index order (float lists or little-endian base64)."""
    assert resp.status_code == 200, resp.text
    data = resp.json()["data"]
    assert [d["index"] for d in data] == list(range(len(data)))
    if isinstance(data[0]["embedding"], str):
        return np.stack([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in data])
    return np.asarray([d["embedding"] for d in data], dtype=np.float32)
