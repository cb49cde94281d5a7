"""A tiny GME (Qwen2-VL) served for real: text, image and fused items over HTTP with `requests`.

Two servers for the module: `server` as the docs launch it plus a media directory, tight image
limits and Matryoshka widths; `default_server` with no flags beyond the chat template (local paths
refused, as by default). Images are generated with PIL and served by a local HTTP server.
"""

from __future__ import annotations

import base64
import json
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests

from test.helpers.gme_reference import hf_gme_embedding, load_hf_gme
from test.helpers.images import ImageServer, data_uri, gradient_image, png_claiming_size
from test.helpers.responses import response_vectors as _vectors
from test.helpers.server import ServerProcess

pytestmark = pytest.mark.slow
MAX_IMAGE_BYTES = 200_000


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("media")
    (root / "allowed").mkdir()
    files = {
        "wide": root / "allowed" / "wide.png",
        "square": root / "allowed" / "square.jpg",
        "outside": root / "outside.png",
    }
    gradient_image(100, 60, seed=1).save(files["wide"])
    gradient_image(200, 200, seed=2).save(files["square"], quality=95)
    gradient_image(50, 50, seed=3).save(files["outside"])
    return {"dir": str(root / "allowed"), **{k: str(v) for k, v in files.items()}}


@pytest.fixture(scope="module")
def images(media):
    with open(media["wide"], "rb") as f:
        wide = f.read()
    with ImageServer(
        {
            "/wide.png": wide,
            "/gone.png": 404,
            "/text": b"plain text, not pixels",
            "/huge.png": ("stream", 4 * MAX_IMAGE_BYTES),
            "/slow.png": ("slow", 3.0, wide),
            "/to-file": ("redirect", "file://" + media["wide"]),
        }
    ) as s:
        yield s


@pytest.fixture(scope="module")
def server(gme_dir, media):
    with ServerProcess(
        "--model-path",
        gme_dir,
        "--is-embedding",
        "--chat-template",
        "gme-qwen2-vl",
        "--served-model-name",
        "gme-qwen2-vl",
        "--allowed-local-media-path",
        media["dir"],
        "--mm-max-image-bytes",
        str(MAX_IMAGE_BYTES),
        "--mm-image-timeout",
        "1",
        "--mm-allow-private-urls",  # the test's image host is on loopback
        "--json-model-override-args",
        json.dumps({"is_matryoshka": True}),
    ) as s:
        yield s


@pytest.fixture(scope="module")
def default_server(gme_dir):
    """No local files; image URLs opted in to loopback, where the test's image host lives."""
    args = ("--model-path", gme_dir, "--is-embedding", "--chat-template", "gme-qwen2-vl", "--mm-allow-private-urls")
    with ServerProcess(*args) as s:
        yield s


def _post(server, inp, **extra) -> requests.Response:
    return requests.post(server.base_url + "/v1/embeddings", json={"input": inp, **extra}, timeout=60)


def _file_uri(path: str) -> str:
    with open(path, "rb") as f:
        return data_uri(f.read(), "image/jpeg" if path.endswith(".jpg") else "image/png")


def test_items_in_order_match_transformers(server, gme_dir, media, images):
    items = [
        {"text": "a cat by the river"},
        {"image": _file_uri(media["wide"])},
        {"text": "the red house", "image": media["square"]},
        {"image": images.url("/wide.png")},
    ]
    r = _post(server, items, model="gme-qwen2-vl")
    ours = _vectors(r)
    hf = load_hf_gme(gme_dir)
    refs = [
        hf_gme_embedding(gme_dir, hf, text, image)
        for text, image in [
            ("a cat by the river", None),
            (None, media["wide"]),
            ("the red house", media["square"]),
            (None, media["wide"]),
        ]
    ]
    ref = np.stack([v for v, _ in refs])
    assert ours.shape == (4, 64)
    assert (np.linalg.norm(ours - ref, axis=1) / np.linalg.norm(ref, axis=1)).max() <= 1e-4
    assert r.json()["usage"]["prompt_tokens"] == sum(len(ids) for _, ids in refs)  # image tokens included


def test_one_image_three_ways_one_vector(server, media, images):
    """A data URI, a URL served by a local HTTP server, and a path under the allowed directory."""
    with open(media["wide"], "rb") as f:
        bare = base64.b64encode(f.read()).decode()
    forms = [_file_uri(media["wide"]), bare, images.url("/wide.png"), media["wide"], "wide.png"]
    v = _vectors(_post(server, [{"text": "x", "image": f} for f in forms]))
    assert np.abs(v - v[0]).max() <= 1e-6


def test_plain_strings_keep_working(server):
    texts = ["a cat by the river", "three blue books"]
    plain = _vectors(_post(server, texts))
    templated = _vectors(_post(server, [{"text": t} for t in texts]))
    assert plain.shape == templated.shape == (2, 64)
    # Strings are embedded as they are; {"text": ...} goes through the chat template.
    assert np.abs(plain - templated).max() > 1e-3
    assert _vectors(_post(server, texts[0])).shape == (1, 64)


def test_chat_messages_give_the_item_vector(server, gme_dir, media):
    """vLLM's chat form (#30 item 3): a user message's image_url and text parts are the fused
    {"text", "image"} item (same template, same vector, transformers' GME vector)."""
    uri = _file_uri(media["square"])
    parts = [{"type": "image_url", "image_url": {"url": uri}}, {"type": "text", "text": "the red house"}]
    chat = requests.post(
        server.base_url + "/v1/embeddings", json={"messages": [{"role": "user", "content": parts}]}, timeout=60
    )
    item = _post(server, [{"text": "the red house", "image": uri}])
    text_only = requests.post(
        server.base_url + "/v1/embeddings",
        json={"messages": [{"role": "user", "content": "a cat by the river"}]},
        timeout=60,
    )
    np.testing.assert_allclose(_vectors(chat), _vectors(item), atol=1e-6)
    assert chat.json()["usage"] == item.json()["usage"]
    np.testing.assert_allclose(
        _vectors(text_only), _vectors(_post(server, [{"text": "a cat by the river"}])), atol=1e-6
    )
    ref, _ = hf_gme_embedding(gme_dir, load_hf_gme(gme_dir), "the red house", media["square"])
    assert np.linalg.norm(_vectors(chat)[0] - ref) / np.linalg.norm(ref) <= 1e-4
    two_turns = [{"role": "system", "content": "x"}, {"role": "user", "content": parts}]
    r = requests.post(server.base_url + "/v1/embeddings", json={"messages": two_turns}, timeout=60)
    assert r.status_code == 400 and "one user message" in r.json()["error"]["message"]


@pytest.mark.parametrize("fmt", ["float", "base64"])
def test_matryoshka_dimensions_on_images(server, media, fmt):
    items = [{"image": _file_uri(media["wide"])}, {"text": "a cat", "image": media["square"]}]
    full = _vectors(_post(server, items))
    short = _vectors(_post(server, items, dimensions=16, encoding_format=fmt))
    head = full[:, :16] / np.linalg.norm(full[:, :16], axis=1, keepdims=True)
    assert short.shape == (2, 16) and np.abs(short - head).max() <= 1e-6


def _bad_cases(media, images) -> dict[str, tuple[str, str]]:
    # Every failing URL gets the same message (the reason is in the server log).
    url_failed = "could not load the image URL (the server log has the reason)"
    return {
        "unreachable": ("http://127.0.0.1:1/cat.png", url_failed),
        "http_404": (images.url("/gone.png"), url_failed),
        "not_an_image_url": (images.url("/text"), url_failed),
        "not_an_image_data": (data_uri(b"GIF89a but not really"), "not a PNG, JPEG, WebP or GIF image"),
        "too_many_bytes_url": (images.url("/huge.png"), url_failed),
        "too_many_bytes_data": (data_uri(b"\0" * (2 * MAX_IMAGE_BYTES)), f"over the limit of {MAX_IMAGE_BYTES} bytes"),
        "too_many_pixels": (data_uri(png_claiming_size(9000, 9000)), "9000x9000 pixels, over the limit"),
        "timeout": (images.url("/slow.png"), url_failed),
        "redirect_to_file": (images.url("/to-file"), url_failed),
        "outside_allowed_dir": (media["outside"], "the path is outside --allowed-local-media-path"),
        "bad_base64": ("data:image/png;base64,!!!!", "invalid base64"),
    }


def test_each_bad_image_is_a_400_naming_the_item(server, media, images):
    good = {"text": "fine"}
    for name, (source, message) in _bad_cases(media, images).items():
        r = _post(server, [good, good, {"text": "x", "image": source}])
        assert r.status_code == 400, (name, r.text)
        err = r.json()["error"]
        assert err["message"].startswith("Item 2: could not load image: ") and message in err["message"], name
        assert err["type"] == "invalid_request_error" and err["param"] == "input"


def test_bad_images_leave_concurrent_requests_alone(server, media, images):
    good = [{"text": "a cat", "image": _file_uri(media["wide"])}, {"text": "dogs"}]
    want = _vectors(_post(server, good))
    bad = [[{"image": src}] for src, _ in _bad_cases(media, images).values()]
    with ThreadPoolExecutor(8) as pool:
        goods = [pool.submit(_post, server, good) for _ in range(6)]
        bads = [pool.submit(_post, server, b) for b in bad]
        for f in goods:
            assert np.abs(_vectors(f.result()) - want).max() <= 1e-5
        assert all(f.result().status_code == 400 for f in bads)


def test_malformed_items_are_400(server):
    r = _post(server, [{"text": "a"}, {"caption": "b"}])
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "Item 1: unknown field(s) caption; use 'text' and 'image'."
    r = _post(server, [{"text": "see <|image_pad|>"}])
    assert r.status_code == 400 and "Item 0: the text contains the image placeholder token" in r.text


def test_local_paths_are_refused_by_default(default_server, media):
    r = _post(default_server, [{"image": media["wide"]}])
    assert r.status_code == 400
    assert r.json()["error"]["message"] == (
        "Item 0: could not load image: local file paths are disabled "
        "(start the server with --allowed-local-media-path DIR)"
    )
    assert _vectors(_post(default_server, [{"image": _file_uri(media["wide"])}])).shape == (1, 64)


def test_model_info_reports_image_inputs(server):
    info = requests.get(server.base_url + "/model_info", timeout=10).json()
    assert info["architecture"] == "Qwen2VLForConditionalGeneration" and info["vision"]["spatial_merge_size"] == 2
    # The image processor's directory is a path on the server's disk: hidden without --expose-model-path.
    assert info["vision"]["model_dir"] == info["model_path"] and not os.path.isabs(info["vision"]["model_dir"])


def test_sglang_gme_example_as_written(default_server, gme_dir, media, images):
    """SGLang's documented GME request, verbatim but for the image URL (no internet here): its
    `model` is the chat-template name, which this server (served as its path) serves anyway."""
    payload = {
        "model": "gme-qwen2-vl",
        "input": [
            {"text": "Represent this image in embedding space."},
            {"image": images.url("/wide.png")},
        ],
    }
    response = requests.post(default_server.base_url + "/v1/embeddings", json=payload, timeout=60).json()
    embeddings = [x.get("embedding") for x in response.get("data", [])]
    assert len(embeddings) == 2 and all(len(e) == 64 for e in embeddings)
    assert response["model"] == gme_dir.rstrip("/")
    hf = load_hf_gme(gme_dir)
    ref, _ = hf_gme_embedding(gme_dir, hf, None, media["wide"])
    assert np.linalg.norm(np.asarray(embeddings[1]) - ref) / np.linalg.norm(ref) <= 1e-4
