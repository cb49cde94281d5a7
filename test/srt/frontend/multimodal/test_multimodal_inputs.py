"""Request items -> model inputs: chat templates, pad expansion, M-RoPE positions, the preparer's
per-item errors, and image loading that leaves the event loop free."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest
import torch

from sglang.srt.configs.chat_template import ChatTemplate, load_chat_template
from sglang.srt.configs.model_info import ModelInfo, VisionInfo
from sglang.srt.errors import ConfigError, EmbeddingError, ErrorKind
from sglang.srt.frontend.multimodal.preparer import MultimodalPreparer
from sglang.srt.frontend.multimodal.processors import (
    Qwen2VLImages,
    expand_image_tokens,
    mrope_positions,
    num_image_tokens,
)
from sglang.srt.server_args import ServerArgs
from sglang.srt.wire.io_struct import MultimodalItem
from test.helpers.images import ImageServer, data_uri, encode_image, gradient_image
from test.helpers.model_info import make_model_info

GME_SYSTEM = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
GME_END = "<|im_end|>\n<|im_start|>assistant\n<|endoftext|>"
IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"


# ----- chat templates -----
def test_gme_template_renders_the_issue_layout():
    t = load_chat_template("gme-qwen2-vl")
    assert t.render("a {cat}", False) == GME_SYSTEM + "<|im_start|>user\na {cat}" + GME_END
    assert t.render(None, True) == GME_SYSTEM + "<|im_start|>user\n" + IMAGE + GME_END
    assert t.render("red car", True) == GME_SYSTEM + "<|im_start|>user\n" + IMAGE + "red car" + GME_END


def test_template_without_image_placeholder_refuses_images():
    with pytest.raises(ValueError, match="no image placeholder"):
        ChatTemplate(name="plain", user_template="query: {content}").render("x", True)


def test_json_template_file(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(
        json.dumps(
            {
                "system_message": "Be brief.",
                "system_template": "[{system_message}]",
                "user_template": "Q: {content}\n",
                "suffix": "<end>",
                "image_placeholder": "<img>",
            }
        )
    )
    t = load_chat_template(str(path))
    assert t.name == "mine" and t.render("hi", True) == "[Be brief.]Q: <img>hi\n<end>"
    path.write_text(json.dumps({"user_tmpl": "{content}"}))
    with pytest.raises(ConfigError, match="unknown: user_tmpl"):
        load_chat_template(str(path))
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_chat_template(str(path))


QWEN_STYLE_JINJA = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% else %}{{ part['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_jinja_template_files(tmp_path):
    jinja = tmp_path / "qwen.jinja"
    jinja.write_text(QWEN_STYLE_JINJA)
    hf_json = tmp_path / "chat_template.json"  # Hugging Face's file layout
    hf_json.write_text(json.dumps({"chat_template": QWEN_STYLE_JINJA}))
    want = "<|im_start|>user\n" + IMAGE + "two dogs<|im_end|>\n<|im_start|>assistant\n"
    for path in (jinja, hf_json):
        assert load_chat_template(str(path)).render("two dogs", True) == want
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for x in %}")
    with pytest.raises(ConfigError, match="not valid Jinja"):
        load_chat_template(str(bad))


def test_unknown_template_is_a_start_up_error():
    from sglang.srt.configs.model_config import check_model

    args = ServerArgs(model_path="/tmp", chat_template="nope")  # parsing flags loads no template
    # The start-up check reads the template before the checkpoint (/tmp holds none).
    with pytest.raises(ConfigError, match="neither a known template \\(gme-qwen2-vl\\) nor a file"):
        check_model(args)


def test_server_args_multimodal_validation(tmp_path):
    with pytest.raises(ConfigError, match="is not a directory"):
        ServerArgs(model_path="/tmp", allowed_local_media_path=str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="must not be above"):
        ServerArgs(model_path="/tmp", mm_min_pixels=5000, mm_max_pixels=4000)
    with pytest.raises(ConfigError, match="--mm-image-timeout must be > 0"):
        ServerArgs(model_path="/tmp", mm_image_timeout=0)
    args = ServerArgs(model_path="/tmp", allowed_local_media_path=str(tmp_path), chat_template="gme-qwen2-vl")
    assert args.allowed_local_media_path == str(tmp_path)
    for name in ("mm_max_image_pixels", "mm_max_bytes_in_flight", "mm_fetch_concurrency"):
        with pytest.raises(ConfigError, match=f"--{name.replace('_', '-')} must be at least 1"):
            ServerArgs(model_path="/tmp", **{name: 0})
    with pytest.raises(ConfigError, match="host names or addresses, not URLs"):
        ServerArgs(model_path="/tmp", mm_allowed_url_hosts=["https://images.example.com"])
    with pytest.raises(ConfigError, match="not URLs"):
        ServerArgs(model_path="/tmp", mm_allowed_url_hosts=["images.example.com:8080"])


def test_image_url_flags_default_to_public_hosts_only():
    from sglang.cli import build_serve_parser

    def parse(*argv):
        return ServerArgs.from_cli_args(build_serve_parser().parse_args(["--model-path", "/tmp", *argv]))

    a = parse()
    assert (a.mm_allowed_url_hosts, a.mm_allow_private_urls, a.mm_disable_url_fetch) == ([], False, False)
    assert a.mm_max_image_pixels is None and a.mm_max_bytes_in_flight == 1 << 30 and a.mm_fetch_concurrency == 64
    a = parse("--mm-allowed-url-hosts", "a.example, .b.example", "--mm-allowed-url-hosts", "::1")
    assert a.mm_allowed_url_hosts == ["a.example", ".b.example", "::1"]
    a = parse("--mm-allow-private-urls", "--mm-disable-url-fetch", "--mm-max-image-pixels", "1000")
    assert a.mm_allow_private_urls and a.mm_disable_url_fetch and a.mm_max_image_pixels == 1000


# ----- token bookkeeping -----
def test_expand_image_tokens():
    ids = np.array([5, 9, 7, 9, 5], np.int32)
    np.testing.assert_array_equal(expand_image_tokens(ids, 9, [2, 3]), [5, 9, 9, 7, 9, 9, 9, 5])
    with pytest.raises(ValueError, match="2 image placeholders for 1 images"):
        expand_image_tokens(ids, 9, [4])
    assert num_image_tokens(np.array([1, 6, 8]), 2) == 12


def test_mrope_positions_match_transformers_get_rope_index():
    from transformers import Qwen2VLConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel

    config = Qwen2VLConfig(
        text_config=dict(
            vocab_size=64,
            hidden_size=16,
            intermediate_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            rope_scaling={"type": "mrope", "mrope_section": [1, 1, 2]},
        ),
        vision_config=dict(depth=1, embed_dim=8, num_heads=1, hidden_size=16),
        image_token_id=9,
    )
    model = Qwen2VLModel(config)
    grids = [np.array([1, 4, 6]), np.array([1, 8, 2])]  # 6 and 4 tokens; wide then tall
    ids = np.array([1, 2, 3] + [9] * 6 + [4, 5] + [9] * 4 + [6, 7, 8], np.int64)
    ours = mrope_positions(ids, 9, grids, 2)
    t = torch.from_numpy(ids)[None]
    ref, _ = model.get_rope_index(t, (t == 9).int(), image_grid_thw=torch.from_numpy(np.stack(grids)))
    np.testing.assert_array_equal(ours, ref[:, 0].numpy())
    assert ours[:, -1].tolist() == [ours[0, -1]] * 3 and ours[0, -1] < len(ids) - 1  # text resumes, compressed
    with pytest.raises(ValueError, match="does not match its run"):
        mrope_positions(ids, 9, [np.array([1, 4, 4]), grids[1]], 2)


# ----- the preparer -----
def _info(gme_dir, context=512, vision=True) -> ModelInfo:
    images = VisionInfo(model_dir=gme_dir, image_token_id=5, spatial_merge_size=2) if vision else None
    return make_model_info(max_input_length=context, vocab_size=360, vision=images)


def _preparer(gme_dir, info=None, **kwargs) -> MultimodalPreparer:
    from transformers import AutoTokenizer

    kwargs.setdefault("chat_template", "gme-qwen2-vl")
    args = ServerArgs(model_path=gme_dir, is_embedding=True, **kwargs)
    return MultimodalPreparer(args, info or _info(gme_dir), AutoTokenizer.from_pretrained(gme_dir))


def _prepare(prep: MultimodalPreparer, items):
    try:
        return asyncio.run(prep.prepare(items))
    finally:
        prep.close()


def _error(prep, items) -> str:
    with pytest.raises(EmbeddingError) as err:
        _prepare(prep, items)
    assert err.value.kind == ErrorKind.INVALID_REQUEST and err.value.param == "input"
    return err.value.message


PNG = data_uri(encode_image(gradient_image(100, 60)))


def test_image_processor_pixel_overrides(gme_dir):
    from PIL import Image

    img = gradient_image(200, 200)
    assert Qwen2VLImages(gme_dir).max_pixels == 28 * 28 * 16
    _, grid = Qwen2VLImages(gme_dir)(img)
    _, small = Qwen2VLImages(gme_dir, max_pixels=28 * 28 * 4)(img)
    assert grid.tolist() == [[1, 8, 8]] and small.tolist() == [[1, 4, 4]]
    pixels, grid = Qwen2VLImages(gme_dir)(Image.new("RGB", (56, 56)))
    assert pixels.dtype == np.float32 and pixels.shape == (16, 3 * 2 * 14 * 14)
    with pytest.raises(ConfigError, match="image processor"):
        Qwen2VLImages("/nonexistent-dir")


def test_prepared_items_expand_and_position(gme_dir):
    text, image, fused = _prepare(
        _preparer(gme_dir), [MultimodalItem("a cat"), MultimodalItem(image=PNG), MultimodalItem("a cat", PNG)]
    )
    assert text.pixel_values is None and text.mrope_positions is None  # text stays on the 1-D path
    for p in (image, fused):
        assert p.image_grid_thw.tolist() == [[1, 4, 8]] and p.pixel_values.shape == (32, 1176)
        assert int((p.input_ids == 5).sum()) == 8 and p.mrope_positions.shape == (3, len(p.input_ids))
    assert len(fused.input_ids) > len(image.input_ids)


@pytest.mark.parametrize(
    "items, info_kwargs, args, message",
    [
        (
            [MultimodalItem("ok"), MultimodalItem(image=PNG)],
            {},
            {"chat_template": None},
            "Item 1: image inputs need a chat template; start the server with --chat-template",
        ),
        ([MultimodalItem(image=PNG)], {"vision": False}, {}, "Item 0: this model does not take image inputs."),
        (
            [MultimodalItem("ok"), MultimodalItem("see <|image_pad|> here")],
            {},
            {},
            "Item 1: the text contains the image placeholder token.",
        ),
        ([MultimodalItem("x <|image_pad|>", PNG)], {}, {}, "Item 0: the prompt holds 2 image placeholder tokens"),
        ([MultimodalItem("  ")], {}, {}, "Item 0: needs a non-empty 'text' or an 'image'."),
        (
            [MultimodalItem("ok"), MultimodalItem("a cat", PNG)],
            {"context": 45},
            {},
            "Item 1: the input (50 tokens, 8 of them for the image) is longer than the model's context length "
            "(45 tokens).",
        ),
        (
            [MultimodalItem("a cat", PNG)],
            {},
            {"max_num_tokens": 40},
            "Item 0: the input (50 tokens, 8 of them for the image) is longer than the server's per-batch token budget",
        ),
        (
            [MultimodalItem("ok"), MultimodalItem(image="data:image/png;base64,aGk="), MultimodalItem(image=PNG)],
            {},
            {},
            "Item 1: could not load image: the data is not a PNG, JPEG, WebP or GIF image",
        ),
        (
            [MultimodalItem(image="http://example.com/cat.png")],
            {},
            {"mm_disable_url_fetch": True},
            "Item 0: image URLs are disabled on this server (--mm-disable-url-fetch)",
        ),
        (
            [MultimodalItem(image="cat.png\x00")],
            {},
            {},
            "Item 0: could not load image: the image string contains a NUL",
        ),
        (  # what the image strings alone can tell is checked for every item before any loading
            [MultimodalItem(image="data:image/png;base64,aGk="), MultimodalItem(image="nope.png")],
            {},
            {},
            "Item 1: could not load image: local file paths are disabled",
        ),
        (
            [MultimodalItem(image="/etc/hostname.png")],
            {},
            {},
            "Item 0: could not load image: local file paths are disabled (start the server with "
            "--allowed-local-media-path DIR)",
        ),
    ],
)
def test_item_errors_name_the_item(gme_dir, items, info_kwargs, args, message):
    prep = _preparer(gme_dir, _info(gme_dir, **info_kwargs), **args)
    assert _error(prep, items).startswith(message)


def test_text_only_model_without_template_embeds_text_items_as_plain_strings(gme_dir):
    from transformers import AutoTokenizer

    (p,) = _prepare(_preparer(gme_dir, _info(gme_dir, vision=False), chat_template=None), [MultimodalItem("a cat")])
    np.testing.assert_array_equal(p.input_ids, AutoTokenizer.from_pretrained(gme_dir)("a cat")["input_ids"])


@pytest.mark.slow
def test_image_loading_leaves_the_event_loop_free(gme_dir):
    """While a slow image URL loads, other coroutines keep running on the loop."""
    with ImageServer({"/slow.png": ("slow", 0.6, encode_image(gradient_image(40, 40)))}) as server:
        prep = _preparer(gme_dir, mm_allow_private_urls=True)  # the test's image host is on loopback

        async def scenario() -> tuple[int, float]:
            ticks = 0
            task = asyncio.ensure_future(prep.prepare([MultimodalItem(image=server.url("/slow.png"))]))
            start = time.monotonic()
            while not task.done():
                await asyncio.sleep(0.01)
                ticks += 1
            (item,) = task.result()
            assert item.image_grid_thw is not None
            return ticks, time.monotonic() - start

        try:
            ticks, elapsed = asyncio.run(scenario())
        finally:
            prep.close()
    assert elapsed >= 0.6 and ticks >= 20  # a blocked loop would tick once
