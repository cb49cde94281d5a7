"""--mm-max-aspect-ratio: its default (what Qwen2-VL's processor itself accepts), parsing and
validation."""

from __future__ import annotations

import pytest

from sglang.cli import build_serve_parser
from sglang.srt.errors import ConfigError
from sglang.srt.frontend.multimodal.processors import _find_smart_resize
from sglang.srt.server_args import ServerArgs


def _parse(*argv: str) -> ServerArgs:
    return ServerArgs.from_cli_args(build_serve_parser().parse_args(list(argv)))


def test_default_is_qwen2_vl_processors_limit():
    smart_resize = _find_smart_resize()  # transformers' own Qwen2-VL resize rule
    assert _parse().mm_max_aspect_ratio == 200
    smart_resize(28, 28 * 200, factor=28)  # 200:1 passes the processor
    with pytest.raises(ValueError, match="aspect ratio must be smaller than 200"):
        smart_resize(28, 28 * 201, factor=28)


def test_flag_parses_and_is_validated():
    assert _parse("--mm-max-aspect-ratio", "12.5").mm_max_aspect_ratio == 12.5
    for bad in ("0.5", "nan", "-3"):
        with pytest.raises(ConfigError, match="--mm-max-aspect-ratio must be at least 1"):
            _parse("--mm-max-aspect-ratio", bad)
