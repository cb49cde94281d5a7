"""Tall, thin images against a live tiny CLIP (issue 27, item 1): a valid 1 x 200,000 PNG of 1 KB
took the HTTP process from 406 MB to 2.4 GB (1 x 1,000,000: minutes, +6 GB), since CLIP's
processor resizes the short side up to the tower's size before its crop.

`server` runs with the issue's --mm-max-bytes-in-flight 4194304 and the default aspect limit;
`raised` also sets --mm-max-aspect-ratio 1000000, so the same images are decoded and preprocessed
(the direct crop) rather than refused. Each request runs while the HTTP process's RSS is sampled
and /health is polled (test/helpers/watch.py)."""

from __future__ import annotations

import numpy as np
import pytest
import requests

from test.helpers.images import blank_png, data_uri, encode_image, gradient_image
from test.helpers.server import ServerProcess
from test.helpers.tiny_image_text import build_tiny_clip, load_reference, reference_images
from test.helpers.watch import watched

pytestmark = pytest.mark.slow
BUDGET = ["--mm-max-bytes-in-flight", "4194304"]  # the server
LENGTHS = [200_000, 1_000_000]


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory) -> str:
    return build_tiny_clip(str(tmp_path_factory.mktemp("clip")))


@pytest.fixture(scope="module")
def thin_pngs() -> dict[int, str]:
    """1 x n fully transparent PNGs (about 1 KB and 5 KB) as data URLs."""
    return {n: data_uri(blank_png(1, n)) for n in LENGTHS}


def _started(*args: str) -> ServerProcess:
    server = ServerProcess(*args)
    try:
        warm = _post(server, [{"image": data_uri(encode_image(gradient_image(40, 30)))}])  # starts the pools
        assert warm.status_code == 200, warm.text
    except BaseException:
        server.stop()
        raise
    return server


@pytest.fixture(scope="module")
def server(clip_dir):
    s = _started("--model-path", clip_dir, *BUDGET)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def raised(clip_dir):
    s = _started("--model-path", clip_dir, *BUDGET, "--mm-max-aspect-ratio", "1000000")
    yield s
    s.stop()


def _post(server, items) -> requests.Response:
    return requests.post(server.base_url + "/v1/embeddings", json={"input": items}, timeout=120)


def _watched(server, items):
    w = watched(server.base_url, server.proc.pid, lambda: _post(server, items))
    return w, w.result


def _assert_bounded(w) -> None:
    assert w.peak_growth_mb < 300 and w.growth_mb < 100, w.summary()
    assert w.health_max_s < 1.0 and not w.health_failures, w.summary()


@pytest.mark.parametrize("length", LENGTHS)
def test_thin_image_is_refused_from_its_header(server, thin_pngs, length):
    w, resp = _watched(server, [{"image": thin_pngs[length]}])
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["message"] == (
        f"Item 0: could not load image: the image is 1x{length} pixels, an aspect ratio of {length}:1, "
        "over the limit of 200:1 (--mm-max-aspect-ratio)"
    )
    assert w.elapsed_s < 3, w.summary()  # before: 5 s (200,000), minutes (1,000,000)
    _assert_bounded(w)


def test_just_under_the_limit_is_served_as_transformers_embeds_it(server, clip_dir):
    """1 x 150 (aspect 150): served, made by the direct crop, and the vector is transformers'."""
    image = gradient_image(1, 150, seed=3)
    w, resp = _watched(server, [{"image": data_uri(encode_image(image))}])
    assert resp.status_code == 200, resp.text
    _assert_bounded(w)
    ours = np.asarray(resp.json()["data"][0]["embedding"], dtype=np.float32)
    expected = reference_images(load_reference(clip_dir), [image])[0]
    assert np.linalg.norm(ours - expected) / np.linalg.norm(expected) < 1e-3


@pytest.mark.parametrize("length", LENGTHS)
def test_raised_limit_serves_thin_images_with_bounded_memory(raised, thin_pngs, length):
    """The issue's images decoded and preprocessed: seconds, and no intermediate 32 x 32n image."""
    w, resp = _watched(raised, [{"image": thin_pngs[length]}])
    assert resp.status_code == 200, resp.text
    assert w.elapsed_s < 10, w.summary()
    _assert_bounded(w)
    assert requests.get(raised.base_url + "/health", timeout=5).status_code == 200
