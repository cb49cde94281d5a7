"""Fixtures shared by the manager tests."""

from __future__ import annotations

import pytest

from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.hf_tokenizer import load_tokenizer


@pytest.fixture(scope="session")
def hf_tokenizer():
    """The bundled model's tokenizer (modules that need another one override this fixture)."""
    return load_tokenizer(ServerArgs().tokenizer_path, False)
