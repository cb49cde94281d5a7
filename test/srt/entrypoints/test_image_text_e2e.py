"""A tiny CLIP served for real, started without flags: {"text"} and {"image"} items over HTTP,
text-image ranking as transformers ranks, errors, and Engine.encode for both kinds of item."""

from __future__ import annotations

import numpy as np
import pytest
import requests
from PIL import Image

from test.helpers.images import data_uri, encode_image, gradient_image
from test.helpers.responses import response_vectors as _vectors
from test.helpers.server import ServerProcess
from test.helpers.tiny_image_text import build_tiny_clip, load_reference, reference_images, reference_text

pytestmark = pytest.mark.slow
CAPTIONS = ["a red house by the river", "the dog", "music and light", "three green trees in the city", "a cat"]


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory) -> str:
    return build_tiny_clip(str(tmp_path_factory.mktemp("clip")))


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("media")
    out = {"dir": str(root)}
    for name, (w, h, seed) in {"wide": (100, 60, 1), "square": (64, 64, 2)}.items():
        out[name] = str(root / f"{name}.png")
        gradient_image(w, h, seed).save(out[name])
    return out


@pytest.fixture(scope="module")
def server(clip_dir, media):
    with ServerProcess("--model-path", clip_dir, "--allowed-local-media-path", media["dir"]) as s:
        yield s


@pytest.fixture(scope="module")
def reference(clip_dir):
    return load_reference(clip_dir)


def _post(server, inp, path: str = "/v1/embeddings", **extra) -> requests.Response:
    return requests.post(server.base_url + path, json={"input": inp, **extra}, timeout=60)


def _image_ref(reference, path: str) -> np.ndarray:
    return reference_images(reference, [Image.open(path).convert("RGB")])[0]


def _file_uri(path: str) -> str:
    with open(path, "rb") as f:
        return data_uri(f.read())


def test_text_and_image_items_match_transformers(server, media, reference):
    info = requests.get(server.base_url + "/model_info", timeout=10).json()
    assert info["architecture"] == "CLIPModel" and info["embedding_dim"] == 24 and info["pooling"] == "model"
    assert info["vision"]["kind"] == "image_text"
    items = [{"text": CAPTIONS[0]}, {"image": _file_uri(media["wide"])}, {"image": "square.png"}, {"text": "a cat"}]
    r = _post(server, items)
    ours = _vectors(r)
    expected = np.stack(
        [
            reference_text(reference, [CAPTIONS[0]])[0],
            _image_ref(reference, media["wide"]),
            _image_ref(reference, media["square"]),
            reference_text(reference, ["a cat"])[0],
        ]
    )
    assert (np.linalg.norm(ours - expected, axis=1) / np.linalg.norm(expected, axis=1)).max() <= 1e-4
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    tok = reference[1]
    text_tokens = len(tok(CAPTIONS[0])["input_ids"]) + len(tok("a cat")["input_ids"])
    assert r.json()["usage"]["prompt_tokens"] == text_tokens + 2 * 17  # an image: class token + 16 patches


def test_text_image_cosine_ranks_captions_as_the_reference(server, media, reference):
    """The caption transformers ranks first for the image (and the whole order) comes first here too."""
    r = _post(server, [{"image": media["square"]}] + [{"text": c} for c in CAPTIONS], encoding_format="base64")
    vecs = _vectors(r)
    ours = vecs[1:] @ vecs[0]
    ref = reference_text(reference, CAPTIONS) @ _image_ref(reference, media["square"])
    assert np.diff(np.sort(ref)).min() > 1e-3  # a well-separated reference order
    assert int(np.argmax(ours)) == int(np.argmax(ref))
    assert np.argsort(-ours).tolist() == np.argsort(-ref).tolist()


def test_plain_strings_are_text_inputs(server):
    plain = _vectors(_post(server, CAPTIONS[:2]))
    items = _vectors(_post(server, [{"text": c} for c in CAPTIONS[:2]]))
    np.testing.assert_allclose(plain, items, atol=1e-6)


def test_chat_messages_give_the_item_vectors(server, media):
    """vLLM's chat form (#30 item 3): an image_url part is the {"image"} item, a text the {"text"} item."""
    uri = _file_uri(media["wide"])
    for content, item in [
        ([{"type": "image_url", "image_url": {"url": uri}}], {"image": uri}),
        ([{"type": "text", "text": CAPTIONS[0]}], {"text": CAPTIONS[0]}),
        (CAPTIONS[1], {"text": CAPTIONS[1]}),
    ]:
        chat = _post(server, None, messages=[{"role": "user", "content": content}])
        np.testing.assert_allclose(_vectors(chat), _vectors(_post(server, [item])), atol=1e-6)
    both = [{"type": "image_url", "image_url": {"url": uri}}, {"type": "text", "text": "a cat"}]
    r = _post(server, None, messages=[{"role": "user", "content": both}])
    assert r.status_code == 400 and "a text or an image per item" in r.json()["error"]["message"]


def test_bad_requests_are_clear_400s(server, media):
    both = _post(server, [{"text": "a cat", "image": media["square"]}])
    assert both.status_code == 400
    assert "Item 0: this model embeds a text or an image per item, not both" in both.json()["error"]["message"]
    bad = _post(server, [{"text": "a cat"}, {"image": "data:image/png;base64,bm90IGFuIGltYWdl"}])
    assert bad.status_code == 400 and bad.json()["error"]["message"].startswith("Item 1: could not load image")
    too_long = _post(server, [{"text": " ".join(["river"] * 80)}])
    assert too_long.status_code == 400 and "context length (32 tokens)" in too_long.json()["error"]["message"]
    per_token = requests.post(server.base_url + "/embed_all", json={"inputs": "a cat"}, timeout=30)
    assert per_token.status_code == 424 and "text-image model" in per_token.json()["error"]  # TEI's Backend
    # vLLM's /pooling: no per-token output here, so no `task` means `embed` (vLLM's first supported task)
    pooled = requests.post(server.base_url + "/pooling", json={"input": "a cat"}, timeout=30).json()
    assert isinstance(pooled["data"][0]["data"][0], float)
    body = {"input": "a cat", "task": "token_embed"}
    token_embed = requests.post(server.base_url + "/pooling", json=body, timeout=30)
    assert token_embed.status_code == 400 and "text-image model" in token_embed.json()["error"]["message"]
    assert _post(server, ["still serving"]).status_code == 200


def test_engine_encodes_text_and_image_items(clip_dir, reference):
    import sglang

    image = gradient_image(48, 40, seed=4)
    with sglang.Engine(model_path=clip_dir, cpu_threads=1) as engine:
        one = engine.encode({"image": data_uri(encode_image(image))})
        many = engine.encode([{"text": "a cat"}, {"text": "the dog"}, {"image": data_uri(encode_image(image))}])
    assert isinstance(one, dict) and len(many) == 3
    np.testing.assert_allclose(one["embedding"], many[2]["embedding"], atol=1e-5)
    expected = np.stack([*reference_text(reference, ["a cat", "the dog"]), *reference_images(reference, [image])])
    got = np.asarray([m["embedding"] for m in many], dtype=np.float32)
    assert (np.linalg.norm(got - expected, axis=1) / np.linalg.norm(expected, axis=1)).max() <= 1e-4
    assert one["meta_info"]["prompt_tokens"] == 17
