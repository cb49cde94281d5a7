"""Shared pytest set-up: keep hub access off and torch threads modest in the test process."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def gme_dir(tmp_path_factory) -> str:
    """One tiny random GME (Qwen2-VL) checkpoint shared by every module that only reads it:
    building one takes seconds."""
    from test.helpers.tiny_models import build_tiny_gme

    return build_tiny_gme(str(tmp_path_factory.mktemp("gme")))
