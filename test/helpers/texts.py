"""The English test corpus (test/data/texts.json): 160 texts from a few words to ~400 tokens."""

from __future__ import annotations

import json
import os

_PATH = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "texts.json")


def load_texts() -> list[str]:
    with open(_PATH, encoding="utf-8") as f:
        return json.load(f)
